"""Private splits: chains the operator keeps from the public, scored only where submitted code never runs.

A public test set can be memorised: a submission may hard-code the published chains' answers. A private split
is a dataset folder in the published shape (``version.json`` with its content hash, ``aliases.json``,
``data/{chains,edits,facts}-test.jsonl``, a card), whose chains are never published, mounted into the
runner's score stage only. Its edit requests must be edit requests of the public version (all of them or
some): the untrusted edit stage only ever sees those, so the private chains test the very same edits through
chains the submission could not read.

    knowgic dataset holdout --out DIR [--version X.Y.Z] [--fraction 0.2] [--seed 0]
        published chains held out per edit -> DIR           (tests and drills: a real private split holds
                                                             chains that were never published)
    read_private_split(DIR) -> PrivateSplit                  (card, schemas, content hash: knowgic validate)
    PrivateSplit.check_edits(public cases)                   (each private edit is a public edit request)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from knowgic.dataset.io import alias_lists, clean_aliases, read_json, read_rows
from knowgic.dataset.loading import DatasetRef, load_rows
from knowgic.dataset.versions import ALIASES_FILE, VERSION_FILE, config_path, resolve_version
from knowgic.errors import KnowgicError
from knowgic.records import AliasMap, Case

PRIVATE_NAME = "knowgic-private"
DEFAULT_FRACTION = 0.2


@dataclass(frozen=True)
class PrivateSplit:
    """A private split read from ``folder``: its chains (``case_id`` order), aliases and reference."""

    folder: Path
    cases: list[Case]
    aliases: AliasMap
    ref: DatasetRef

    def check_edits(self, public: Sequence[Case], public_version: str) -> None:
        """Refuse a private chain whose edit request is not one of the public version's."""
        known = {case.request for case in public}
        for case in self.cases:
            if case.request not in known:
                request = case.request
                raise KnowgicError(
                    f"private split {self.folder}: chain {case.case_id} edits {request.rewrite_text!r} -> "
                    f"{request.target_new!r} (edit {request.edit_id}), which is not an edit request of the "
                    f"public dataset {public_version}; the edit stage applies only the public edit requests"
                )


def read_private_split(folder: str | Path) -> PrivateSplit:
    """Read and check a private split folder; one line naming the first problem (``knowgic validate``
    lists them all)."""
    from knowgic.dataset.validate import validate_folder

    folder = Path(folder)
    if not folder.is_dir():
        raise KnowgicError(f"private split {folder} is not a folder")
    report = validate_folder(folder)
    if report.errors:
        more = (
            f" (and {len(report.errors) - 1} more: knowgic validate {folder})"
            if len(report.errors) > 1
            else ""
        )
        raise KnowgicError(f"private split {folder}: {report.errors[0].render()}{more}")
    info = read_json(folder / VERSION_FILE)
    cases = sorted(
        (Case.from_row(dict(row)) for row in read_rows(config_path(folder, info, "chains"))),
        key=lambda c: c.case_id,
    )
    if not cases:
        raise KnowgicError(f"private split {folder} holds no chain")
    raw = read_json(folder / ALIASES_FILE)
    if not isinstance(raw, dict):
        raise KnowgicError(f"{folder / ALIASES_FILE}: expected a JSON object")
    ref = DatasetRef(
        name=str(info.get("name") or PRIVATE_NAME),
        version=str(info.get("version") or "unversioned"),
        config="chains",
        sha256=str(info["sha256"]),  # validate_folder recomputed it
    )
    return PrivateSplit(folder=folder, cases=cases, aliases=clean_aliases(alias_lists(raw)), ref=ref)


def _rank(seed: int, case_id: int) -> str:
    return hashlib.sha256(f"{seed}\x1f{case_id}".encode()).hexdigest()


def held_out_rows(rows: Sequence[dict], fraction: float, seed: int) -> list[dict]:
    """Per edit request, ``round(fraction * n)`` of its n chains (at least one, and one fewer than n when
    it has two or more, so the edit keeps public chains), chosen by a seeded hash; in ``case_id`` order."""
    by_edit: dict[str, list[dict]] = {}
    for row in rows:
        by_edit.setdefault(Case.from_row(dict(row)).request.edit_id, []).append(row)
    kept: list[dict] = []
    for group in by_edit.values():
        count = max(1, round(fraction * len(group)))
        if len(group) > 1:
            count = min(count, len(group) - 1)
        kept.extend(sorted(group, key=lambda r: _rank(seed, int(r["case_id"])))[:count])
    return sorted(kept, key=lambda r: int(r["case_id"]))


def write_holdout(
    out: str | Path, version: str | None = None, fraction: float = DEFAULT_FRACTION, seed: int = 0
) -> Path:
    """Write a private split of the published ``version``'s chains held out per edit into ``out`` (which
    must not exist or be empty); returns ``out``."""
    from knowgic.dataset.loading import load_aliases

    if not 0.0 < fraction < 1.0:
        raise KnowgicError(f"--fraction must be between 0 and 1 (exclusive), got {fraction:g}")
    base = resolve_version(version)
    rows = held_out_rows(load_rows("chains", base), fraction, seed)
    summary = (
        f"A private split for the runner's score stage: {len(rows)} chains of KnowGIC {base} held out per "
        f"edit (fraction {fraction:g}, seed {seed}). Keep it where submitted code never runs."
    )
    aliases = {name: list(names) for name, names in load_aliases(base).items()}
    return write_split(out, rows, aliases, base, summary, {"holdout": {"fraction": fraction, "seed": seed}})


def write_split(
    out: str | Path,
    rows: Sequence[dict],
    aliases: dict[str, list[str]],
    base: str,
    summary: str,
    record: dict | None = None,
) -> Path:
    """Write ``rows`` (chains) as a private split folder in the published shape: the derived configs, the
    aliases, a card and ``version.json`` with the content hash, named ``knowgic-private`` and versioned as
    the public version ``base`` its edits come from (``record`` adds fields to version.json)."""
    from knowgic.dataset.build import BuiltVersion, version_files, write_version

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise KnowgicError(f"{out} already exists and is not an empty folder: choose a new one")
    built = BuiltVersion(version=base, summary=summary, chains=list(rows), aliases=aliases, changes=[])
    files = version_files(built, [built])
    info = json.loads(files[VERSION_FILE])
    info.update({"name": PRIVATE_NAME, "based_on": base, **(record or {})})
    files[VERSION_FILE] = json.dumps(info, indent=2, ensure_ascii=False) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    write_version(out, files)
    return out
