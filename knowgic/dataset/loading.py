"""Typed access to a dataset version for the other stages: cases, aliases, and a reference to record.

These read the version's files directly (fast, exact); ``knowgic.load_dataset`` gives the same rows as a
``datasets.Dataset``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knowgic.dataset.io import alias_lists, clean_aliases, read_json, read_rows
from knowgic.dataset.schemas import ROW_SCHEMAS
from knowgic.dataset.versions import (
    ALIASES_FILE,
    CONFIGS,
    config_path,
    resolve_version,
    version_dir,
    version_info,
)
from knowgic.errors import KnowgicError
from knowgic.records import AliasMap, Case

DATASET_NAME = "knowgic"
BENCHMARK_LABEL = "KnowGIC"
"""How tables and plots name the benchmark's own data (the published versions and their tracks)."""


def dataset_label(dataset: Mapping[str, Any]) -> str:
    """How a table names the data a results document records (its ``dataset``): ``KnowGIC 1.1.0`` for the
    benchmark's own versions, ``dataset knowgic-build 0.1.0`` for another (a ``knowgic build`` output), so
    that a build's version never reads as the benchmark's."""
    name, version = str(dataset.get("name") or DATASET_NAME), str(dataset.get("version"))
    return f"{BENCHMARK_LABEL} {version}" if name == DATASET_NAME else f"dataset {name} {version}"


@dataclass(frozen=True)
class DatasetRef:
    """What a result records about the data it was computed on."""

    name: str
    version: str
    config: str
    sha256: str


def dataset_ref(version: str | None = None, config: str = "chains") -> DatasetRef:
    """The reference of ``config`` in ``version`` (latest by default); ``sha256`` is the version's content hash."""
    if config not in CONFIGS:
        raise KnowgicError(f"unknown config {config!r}; known: {', '.join(CONFIGS)}")
    name = resolve_version(version)
    return DatasetRef(
        name=DATASET_NAME, version=name, config=config, sha256=str(version_info(name)["sha256"])
    )


def load_rows(config: str = "chains", version: str | None = None) -> list[dict]:
    """The raw rows of a config of a version, as stored (``ripple`` too, where the version has it)."""
    if config not in ROW_SCHEMAS:
        raise KnowgicError(f"unknown config {config!r}; known: {', '.join(ROW_SCHEMAS)}")
    folder = version_dir(version)
    rows = read_rows(config_path(folder, version_info(version), config))
    return [dict(r) for r in rows]


def load_cases(version: str | None = None) -> list[Case]:
    """The rows of the ``chains`` config as :class:`~knowgic.records.Case` records, in ``case_id`` order.

    Fields a version adds beyond the upstream shape (1.1.0: ``edit_id``, ``flags``) are in ``Case.extra``.
    """
    cases = [Case.from_row(row) for row in load_rows("chains", version)]
    return sorted(cases, key=lambda c: c.case_id)


def load_aliases(version: str | None = None) -> AliasMap:
    """Entity -> its distinct aliases, the entity itself not included."""
    raw = read_json(version_dir(version) / ALIASES_FILE)
    if not isinstance(raw, dict):
        raise KnowgicError(f"{version_dir(version) / ALIASES_FILE}: expected a JSON object")
    return clean_aliases(alias_lists(raw))
