"""The evaluation sections of ``spec/benchmark.yaml``: default protocol and mode, the modes, the metrics.

The spec is the one place these are declared: the command line takes its defaults from it, a run accepts
only the modes it lists, the printed table takes each metric's label and direction ("lower" or "higher"
is better) from it, and every results file records the version of each metric's definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.scoring.spec import read_benchmark_spec

DIRECTIONS = ("lower", "higher")


@dataclass(frozen=True)
class MetricSpec:
    """One metric's declaration: ``direction`` says whether lower or higher values are better."""

    name: str
    label: str
    direction: str
    version: int
    description: str


@dataclass(frozen=True)
class EvaluationSpec:
    default_protocol: str
    default_mode: str
    modes: dict[str, str]  # name -> description, in spec order
    metrics: dict[str, MetricSpec]  # in spec order

    def metric_versions(self) -> dict[str, int]:
        return {name: m.version for name, m in self.metrics.items()}


def _metric(path: Path, name: Any, entry: Any) -> MetricSpec:
    where = f"{path}: metrics.{name}"
    if not isinstance(entry, dict):
        raise KnowgicError(f"{where} must be a mapping with label, direction and version")
    direction = entry.get("direction")
    if direction not in DIRECTIONS:
        raise KnowgicError(f"{where}.direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    version = entry.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise KnowgicError(f"{where}.version must be a positive integer, got {version!r}")
    label = entry.get("label")
    if not isinstance(label, str) or not label.strip():
        raise KnowgicError(f"{where}.label must be a non-empty string, got {label!r}")
    return MetricSpec(
        name=str(name),
        label=label,
        direction=direction,
        version=version,
        description=str(entry.get("description", "")).strip(),
    )


def load_evaluation_spec(path: Path | None = None) -> EvaluationSpec:
    """Read and check the evaluation sections (``path`` defaults to ``spec/benchmark.yaml``)."""
    data, path = read_benchmark_spec(path)
    modes = data.get("modes")
    if not isinstance(modes, dict) or not modes:
        raise KnowgicError(f"{path}: 'modes' must be a non-empty mapping of mode names to descriptions")
    default_mode = data.get("default_mode")
    if default_mode not in modes:
        raise KnowgicError(
            f"{path}: default_mode {default_mode!r} is not one of the modes {', '.join(modes)}"
        )
    protocols = data.get("protocols")
    default_protocol = data.get("default_protocol")
    if not isinstance(protocols, dict) or default_protocol not in protocols:
        raise KnowgicError(
            f"{path}: default_protocol {default_protocol!r} is not one of the declared protocols"
        )
    metrics = data.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise KnowgicError(f"{path}: 'metrics' must be a non-empty mapping")
    return EvaluationSpec(
        default_protocol=str(default_protocol),
        default_mode=str(default_mode),
        modes={str(k): str(v).strip() for k, v in modes.items()},
        metrics={str(name): _metric(path, name, entry) for name, entry in metrics.items()},
    )
