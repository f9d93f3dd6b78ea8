"""The ``protocols:`` section of ``spec/benchmark.yaml``: default parameters and known-thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir
from knowgic.yamlfile import read_yaml


@dataclass(frozen=True)
class ProtocolSpec:
    name: str
    params: dict[str, Any]
    known_threshold: float | None
    deterministic: bool


def read_benchmark_spec(path: Path | None = None) -> tuple[dict[str, Any], Path]:
    """The parsed benchmark spec (``path`` defaults to ``spec/benchmark.yaml``) and the path it came from."""
    path = path or spec_dir() / "benchmark.yaml"
    data = read_yaml(path, "the benchmark spec")
    if data is not None and not isinstance(data, dict):
        raise KnowgicError(f"{path}: the benchmark spec must be a mapping")
    return data or {}, path


def load_protocols(path: Path | None = None) -> dict[str, ProtocolSpec]:
    """Every protocol declared in the benchmark spec (``path`` defaults to ``spec/benchmark.yaml``)."""
    data, path = read_benchmark_spec(path)
    protocols = data.get("protocols")
    if not isinstance(protocols, dict) or not protocols:
        raise KnowgicError(f"{path}: no 'protocols' section")
    out = {}
    for name, entry in protocols.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("params", {}), dict):
            raise KnowgicError(f"{path}: protocols.{name} must be a mapping with a 'params' mapping")
        threshold = entry.get("known_threshold")
        out[name] = ProtocolSpec(
            name=name,
            params=dict(entry.get("params") or {}),
            known_threshold=None if threshold is None else float(threshold),
            deterministic=bool(entry.get("deterministic", False)),
        )
    return out


def protocol_spec(name: str) -> ProtocolSpec:
    protocols = load_protocols()
    if name not in protocols:
        raise KnowgicError(f"unknown scoring protocol {name!r}; known: {', '.join(sorted(protocols))}")
    return protocols[name]
