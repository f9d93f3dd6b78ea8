"""The dataset versions shipped in the package: where they are, their recorded hashes, loading them.

The versions are declared in ``spec/benchmark.yaml`` (``dataset.versions``, written by
``python -m knowgic.dataset.build`` and ``knowgic dataset track``); each lives in
``knowgic/dataset/hub/<version>/``, a Hugging Face dataset folder whose ``version.json`` records the sha256
of its canonical content:

    sha256( canonical_json({"aliases": <aliases.json>, "chains": [rows], "edits": [rows], "facts": [rows]}) )

where ``canonical_json`` is JSON with sorted keys, no whitespace and UTF-8 characters kept, and the rows
are those of each config's data file in file order.

A version key names a track and a semantic version. The main track, the paper's edits, has plain keys
(``1.0.0``, ``1.1.0``); another track's keys carry its name (``growth-1.0.0``: the graph ``knowgic build``
grew for ``knowgic-tiny``, :mod:`knowgic.dataset.tracks`). Tracks hold different edits, so their values are
never compared or ranked together. Left out, a version is the main track's latest; a track's name alone
(``growth``) is that track's latest.

    "growth-1.0.0" --parse_version_key--> ("growth", (1, 0, 0))      "1.1.0" --> ("knowgic", (1, 1, 0))
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.dataset.io import canonical_json, path_inside, read_json, read_rows, sha256_text
from knowgic.dataset.schemas import CONFIG_SCHEMAS, ROW_SCHEMAS
from knowgic.errors import KnowgicError
from knowgic.paths import PACKAGE_DIR
from knowgic.spec import benchmark_spec

if TYPE_CHECKING:
    import datasets

HUB_DIR = PACKAGE_DIR / "dataset" / "hub"
VERSION_FILE = "version.json"
ALIASES_FILE = "aliases.json"
SUBJECT_ALIASES_FILE = "subject_aliases.json"
"""A builder output's subject -> the other names its model knows it by (validated), for Subject Aliasing;
outside the content hash, like the ``ripple`` config it feeds."""
CONFIGS = tuple(CONFIG_SCHEMAS)
"""The configs of the content hash (a version may hold derived configs beyond them: ``ROW_SCHEMAS``)."""
SPLIT = "test"
MAIN_TRACK = "knowgic"
"""The track of the paper's edits, whose version keys are plain ``X.Y.Z``."""
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
_TRACK_KEY = re.compile(
    r"^([a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*)-((?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*))$"
)


def parse_semver(version: str) -> tuple[int, int, int]:
    match = _SEMVER.match(version)
    if not match:
        raise KnowgicError(f"{version!r} is not a version of the form X.Y.Z")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def parse_version_key(key: str) -> tuple[str, tuple[int, int, int]]:
    """``"growth-1.0.0"`` -> ``("growth", (1, 0, 0))``; ``"1.1.0"`` -> ``(MAIN_TRACK, (1, 1, 0))``."""
    if _SEMVER.match(key):
        return MAIN_TRACK, parse_semver(key)
    match = _TRACK_KEY.match(key)
    if not match or match.group(1) == MAIN_TRACK:
        raise KnowgicError(
            f"{key!r} is not a dataset version key: X.Y.Z (the main track) or TRACK-X.Y.Z (TRACK in "
            "lower-case letters, digits and dashes, e.g. growth-1.0.0)"
        )
    return match.group(1), parse_semver(match.group(2))


def version_key(track: str, semver: str) -> str:
    """The key of ``semver`` on ``track`` (checked): ``X.Y.Z`` on the main track, else ``TRACK-X.Y.Z``."""
    key = semver if track == MAIN_TRACK else f"{track}-{semver}"
    if parse_version_key(key) != (track, parse_semver(semver)):
        raise KnowgicError(f"track {track!r} and version {semver!r} do not make a version key")
    return key


def version_sort_key(key: str) -> tuple[bool, str, tuple[int, int, int]]:
    """The main track first, then the other tracks by name; semver order within a track."""
    track, semver = parse_version_key(key)
    return track != MAIN_TRACK, track, semver


def version_tag(key: str) -> str:
    """The hub tag a version is published under: ``v1.1.0``, ``growth-v1.0.0``."""
    track, _ = parse_version_key(key)
    return f"v{key}" if track == MAIN_TRACK else f"{track}-v{key.removeprefix(track + '-')}"


def available_versions() -> list[str]:
    """Every dataset version the benchmark spec declares, every track's: the main track's first, oldest
    first, then the other tracks' (see :func:`version_sort_key`)."""
    return sorted(benchmark_spec().versions, key=version_sort_key)


def track_versions(track: str = MAIN_TRACK) -> list[str]:
    """The versions of one track, oldest first (the main track's by default: what ``knowgic-tiny`` is
    trained on, and what a run without ``--dataset-version`` uses the latest of)."""
    return [v for v in available_versions() if parse_version_key(v)[0] == track]


def tracks() -> list[str]:
    """Every track with a declared version, the main track first."""
    return list(dict.fromkeys(parse_version_key(v)[0] for v in available_versions()))


def latest_version(track: str = MAIN_TRACK) -> str:
    """The newest version of ``track`` (the main track by default)."""
    versions = track_versions(track)
    if not versions:
        if track != MAIN_TRACK:
            raise KnowgicError(f"unknown dataset track {track!r}; known tracks: {', '.join(tracks())}")
        raise KnowgicError(
            "the benchmark spec declares no dataset versions (run python -m knowgic.dataset.build)"
        )
    return versions[-1]


def resolve_version(version: str | None) -> str:
    """``version`` itself when declared (a leading ``v`` is accepted on a main-track key), a track's latest
    version for the track's name (``growth``), the main track's latest for None; else one line naming the
    known versions, with the closest one when the name looks like a typo."""
    if version is None:
        return latest_version()
    name = version[1:] if version.startswith("v") and _SEMVER.match(version[1:]) else version
    known = available_versions()
    if name in known:
        return name
    if name != MAIN_TRACK and name in tracks():
        return latest_version(name)
    hint = ""
    try:
        well_formed = parse_version_key(name)[0] in tracks()
    except KnowgicError:
        well_formed = False
    if not well_formed:  # a declared track's undeclared version needs no guess: the list says it
        close = difflib.get_close_matches(name, [*known, *tracks()[1:]], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
    raise KnowgicError(
        f"unknown dataset version {version!r}; {hint}known versions: {', '.join(known) or 'none'}"
    )


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
    if config not in ROW_SCHEMAS:
        raise KnowgicError(f"unknown config {config!r}; known: {', '.join(ROW_SCHEMAS)}")
    if split != SPLIT:
        raise KnowgicError(f"unknown split {split!r}; KnowGIC has one split, {SPLIT!r}")
    folder = version_dir(version)
    import datasets

    return datasets.load_dataset(str(folder), config, split=split)
