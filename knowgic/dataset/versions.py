"""The dataset versions shipped in the package: where they are, their recorded hashes, loading them.

The versions are declared in ``spec/benchmark.yaml`` (``dataset.versions``, written by
``python -m knowgic.dataset.build``); each lives in ``knowgic/dataset/hub/<version>/``, a Hugging Face
dataset folder whose ``version.json`` records the sha256 of its canonical content:

    sha256( canonical_json({"aliases": <aliases.json>, "chains": [rows], "edits": [rows], "facts": [rows]}) )

where ``canonical_json`` is JSON with sorted keys, no whitespace and UTF-8 characters kept, and the rows
are those of each config's data file in file order.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.dataset.io import canonical_json, path_inside, read_json, read_rows, sha256_text
from knowgic.dataset.schemas import CONFIG_SCHEMAS
from knowgic.errors import KnowgicError
from knowgic.paths import PACKAGE_DIR
from knowgic.spec import benchmark_spec

if TYPE_CHECKING:
    import datasets

HUB_DIR = PACKAGE_DIR / "dataset" / "hub"
VERSION_FILE = "version.json"
ALIASES_FILE = "aliases.json"
CONFIGS = tuple(CONFIG_SCHEMAS)
SPLIT = "test"
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def parse_semver(version: str) -> tuple[int, int, int]:
    match = _SEMVER.match(version)
    if not match:
        raise KnowgicError(f"{version!r} is not a version of the form X.Y.Z")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def available_versions() -> list[str]:
    """Every dataset version the benchmark spec declares, oldest first (semver order)."""
    return sorted(benchmark_spec().versions, key=parse_semver)


def latest_version() -> str:
    versions = available_versions()
    if not versions:
        raise KnowgicError(
            "the benchmark spec declares no dataset versions (run python -m knowgic.dataset.build)"
        )
    return versions[-1]


def resolve_version(version: str | None) -> str:
    """``version`` itself when known (a leading ``v`` is accepted), the latest one for None."""
    if version is None:
        return latest_version()
    name = version[1:] if version.startswith("v") else version
    known = available_versions()
    if name not in known:
        raise KnowgicError(
            f"unknown dataset version {version!r}; known versions: {', '.join(known) or 'none'}"
        )
    return name


def dataset_installed() -> bool:
    """Whether this install holds the dataset's files (the runner's edit image is built without them)."""
    return any((HUB_DIR / name / VERSION_FILE).is_file() for name in available_versions())


def version_dir(version: str | None = None) -> Path:
    """The Hugging Face dataset folder of ``version`` (latest by default)."""
    name = resolve_version(version)
    folder = HUB_DIR / name
    if not (folder / VERSION_FILE).is_file():
        raise KnowgicError(
            f"dataset version {name} is declared but its folder {folder} is missing or incomplete"
        )
    return folder


def version_info(version: str | None = None) -> dict[str, Any]:
    """The parsed ``version.json`` of a version."""
    data = read_json(version_dir(version) / VERSION_FILE)
    if not isinstance(data, dict) or "sha256" not in data:
        raise KnowgicError(f"{version_dir(version) / VERSION_FILE}: not a KnowGIC version file")
    return data


def version_sha256(version: str | None = None) -> str:
    """The recorded sha256 of the version's canonical content."""
    return str(version_info(version)["sha256"])


def config_path(folder: Path, info: dict[str, Any], config: str) -> Path:
    try:
        path = info["configs"][config]["path"]
    except (KeyError, TypeError):
        path = None
    if not isinstance(path, str) or not path:
        raise KnowgicError(f"{folder / VERSION_FILE} names no data file for config {config!r}")
    inside = path_inside(folder, path)
    if inside is None:
        raise KnowgicError(
            f"{folder / VERSION_FILE} names data file {path!r} for config {config!r}, which is outside "
            "the folder"
        )
    return inside


def content_sha256(folder: Path) -> str:
    """Recompute the canonical content hash of a version folder (see the module docstring)."""
    info = read_json(folder / VERSION_FILE)
    if not isinstance(info, dict):
        raise KnowgicError(f"{folder / VERSION_FILE}: not a KnowGIC version file")
    content: dict[str, Any] = {"aliases": read_json(folder / ALIASES_FILE)}
    for config in CONFIGS:
        content[config] = read_rows(config_path(folder, info, config))
    return sha256_text(canonical_json(content))


def load_version_dataset(
    config: str = "chains", version: str | None = None, split: str = "test"
) -> datasets.Dataset:
    """``datasets.load_dataset`` on the version's folder: works offline, nothing is downloaded."""
    if config not in CONFIGS:
        raise KnowgicError(f"unknown config {config!r}; known: {', '.join(CONFIGS)}")
    if split != SPLIT:
        raise KnowgicError(f"unknown split {split!r}; KnowGIC has one split, {SPLIT!r}")
    folder = version_dir(version)
    import datasets

    return datasets.load_dataset(str(folder), config, split=split)
