"""Private splits: chains the operator keeps from the public, scored only where submitted code never runs.

A public test set can be memorised: a submission may carry the published chains (compressed, encoded) and
unlearn their facts after its edit. Chains of the *published edits* do not protect against that (they walk
the same graphs, so a method that learned the published chains carries over to them). A private split that
protects a ranking holds **new edit requests whose chains, broader context and edited facts share no fact
(no subject, relation and object) with any published version, and no edit subject with any published
entity**. The split is mounted into the trusted stages only: the prepare stage hands its edit requests to the
untrusted edit stage as a second group (requests only, like the public ones), the score stage its chains.

    knowgic build --model M --seeds PRIVATE_SEEDS ... --out BUILD    (facts the model knows)
    knowgic dataset holdout --from BUILD --out DIR [--max-edits N]
        BUILD's chains rows ──drop every row sharing a fact or an edit subject with a shipped version──>
        at least MIN_PRIVATE_EDITS edits left, else one line saying no private split can be drawn
        ──> DIR (kind "disjoint", the model it was built for, the versions it was checked against)

    knowgic dataset holdout --drill --version X.Y.Z --out DIR
        published chains held out per edit ──> DIR (kind "drill": exercises the machinery, never ranks)

    read_private_split(DIR) -> PrivateSplit        (card, schemas, content hash: knowgic validate; a
                                                    disjoint split is checked again against every shipped
                                                    version, so a later release that overlaps it is caught)
    PrivateSplit.problem_for(model, version)       (why the split does not apply to a job, or None)

For ``knowgic-tiny`` no disjoint split exists: it is trained on the main track's facts, and every fact of
1.1.0 lies on a published chain.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from knowgic.dataset.io import alias_lists, clean_aliases, read_json, read_rows
from knowgic.dataset.loading import DatasetRef, load_rows
from knowgic.dataset.versions import (
    ALIASES_FILE,
    VERSION_FILE,
    available_versions,
    config_path,
    resolve_version,
)
from knowgic.errors import KnowgicError
from knowgic.records import AliasMap, Case

PRIVATE_NAME = "knowgic-private"
DEFAULT_FRACTION = 0.2
DISJOINT = "disjoint"
DRILL = "drill"
PRIVATE_KINDS = (DISJOINT, DRILL)
# Below this many edits a private split cannot rank: the per-edit intervals and the public-private check
# rest on edits (docs/metrics.md: the interval methods need about ten).
MIN_PRIVATE_EDITS = 10

FactKey = tuple[str, str, str]


@dataclass(frozen=True)
class Published:
    """What every shipped dataset version shows: its facts (subject, prompt, answer) and entities."""

    versions: tuple[str, ...]
    facts: frozenset[FactKey]
    entities: frozenset[str]

    def row_problem(self, row: Mapping[str, Any]) -> str | None:
        """Why a chains row would not protect a ranking (a shared fact or edit subject), or None."""
        from knowgic.dataset.tracks import row_facts

        subject = row["requested_rewrite"][0]["subject"]
        if subject in self.entities:
            return f"its edit subject {subject!r} is an entity of the published data"
        shared = sorted(row_facts(row) & self.facts)
        if shared:
            s, p, a = shared[0]
            return f"it shares the fact ({s!r}, {p!r}, {a!r}) with the published data"
        return None


@lru_cache(maxsize=1)
def published() -> Published:
    """Every fact and entity of every version the benchmark spec declares (every track's)."""
    from knowgic.dataset.tracks import fact_entities, row_facts

    versions = tuple(available_versions())
    facts: set[FactKey] = set()
    for version in versions:
        for row in load_rows("chains", version):
            facts |= row_facts(row)
    return Published(versions, frozenset(facts), frozenset(fact_entities(facts)))


@dataclass(frozen=True)
class PrivateSplit:
    """A private split read from ``folder``: its chains (``case_id`` order), aliases, reference, ``kind``
    (:data:`DISJOINT` or :data:`DRILL`), the model its graph was built for (disjoint splits) and the public
    version its edits come from (drills)."""

    folder: Path
    cases: list[Case]
    aliases: AliasMap
    ref: DatasetRef
    kind: str
    model: str | None = None
    based_on: str | None = None

    @property
    def ranks(self) -> bool:
        """Whether the split can rank: a disjoint split; a drill shares every graph with the public one."""
        return self.kind == DISJOINT

    def edit_count(self) -> int:
        return len({case.request for case in self.cases})

    def describe(self) -> str:
        what = (
            f"new edits disjoint from every shipped version, built for {self.model}"
            if self.ranks
            else f"edits of {self.based_on}: a drill, never ranks"
        )
        return (
            f"private split {self.folder} ({len(self.cases)} chains of {self.edit_count()} {what}; "
            f"sha256 {self.ref.sha256[:12]}…)"
        )

    def problem_for(self, model: str, dataset_version: str) -> str | None:
        """Why this split is not scored with a job of ``model`` on ``dataset_version`` (None: it is). A
        disjoint split holds facts its model knows; a drill holds chains of one public version's edits."""
        if self.ranks:
            if self.model is not None and model != self.model:
                return f"it was built for {self.model}, not {model}"
            return None
        if dataset_version != self.based_on:
            return f"it is a drill of {self.based_on}'s edits, the job runs {dataset_version}"
        return None

    def check_edits(self, public: Sequence[Case], public_version: str) -> None:
        """A drill: refuse a chain whose edit request is not one of the public version's."""
        if self.ranks:
            return
        known = {case.request for case in public}
        for case in self.cases:
            if case.request not in known:
                request = case.request
                raise KnowgicError(
                    f"private split {self.folder} (a drill): chain {case.case_id} edits "
                    f"{request.rewrite_text!r} -> {request.target_new!r} (edit {request.edit_id}), which is "
                    f"not an edit request of the public dataset {public_version}"
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
        raise KnowgicError(f"private split: {report.errors[0].render()}{more}")
    info = read_json(folder / VERSION_FILE)
    # Splits written before kinds were recorded are held-out published chains: drills.
    kind = info.get("private_kind") or (DRILL if "holdout" in info else None)
    if kind not in PRIVATE_KINDS:
        raise KnowgicError(
            f"private split {folder}: {VERSION_FILE} names no private_kind ({' or '.join(PRIVATE_KINDS)}); "
            "write splits with knowgic dataset holdout"
        )
    rows = [dict(row) for row in read_rows(config_path(folder, info, "chains"))]
    if not rows:
        raise KnowgicError(f"private split {folder} holds no chain")
    if kind == DISJOINT:  # checked on every read: a version released after the split may overlap it
        _, reasons = disjoint_rows(rows, published())
        if reasons:
            raise KnowgicError(
                f"private split {folder}: {reasons[0]} ({len(reasons)} of {len(rows)} chains share facts "
                "with a shipped version); draw a new split: knowgic dataset holdout --from BUILD"
            )
    cases = sorted((Case.from_row(row) for row in rows), key=lambda c: c.case_id)
    raw = read_json(folder / ALIASES_FILE)
    if not isinstance(raw, dict):
        raise KnowgicError(f"{folder / ALIASES_FILE}: expected a JSON object")
    ref = DatasetRef(
        name=str(info.get("name") or PRIVATE_NAME),
        version=str(info.get("version") or "unversioned"),
        config="chains",
        sha256=str(info["sha256"]),  # validate_folder recomputed it
    )
    return PrivateSplit(
        folder=folder,
        cases=cases,
        aliases=clean_aliases(alias_lists(raw)),
        ref=ref,
        kind=kind,
        model=info.get("model"),
        based_on=info.get("based_on"),
    )


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


def write_drill(
    out: str | Path, version: str | None = None, fraction: float = DEFAULT_FRACTION, seed: int = 0
) -> Path:
    """Write a drill split of the published ``version``'s chains held out per edit into ``out`` (which
    must not exist or be empty); returns ``out``."""
    from knowgic.dataset.loading import load_aliases

    if not 0.0 < fraction < 1.0:
        raise KnowgicError(f"--fraction must be between 0 and 1 (exclusive), got {fraction:g}")
    base = resolve_version(version)
    rows = held_out_rows(load_rows("chains", base), fraction, seed)
    summary = (
        f"A drill for the runner's private-split machinery: {len(rows)} published chains of KnowGIC {base} "
        f"held out per edit (fraction {fraction:g}, seed {seed}). It shares every graph with {base}, so it "
        "never ranks."
    )
    aliases = {name: list(names) for name, names in load_aliases(base).items()}
    record = {"private_kind": DRILL, "based_on": base, "holdout": {"fraction": fraction, "seed": seed}}
    return write_split(out, rows, aliases, base, summary, record)


@dataclass(frozen=True)
class DisjointDraw:
    """What :func:`write_disjoint` kept of a build and why it dropped the rest."""

    out: Path
    rows: int
    edits: int
    dropped_rows: int
    dropped_edits: int
    first_problem: str | None


def disjoint_rows(rows: Sequence[Mapping[str, Any]], shown: Published) -> tuple[list[dict], list[str]]:
    """The rows that share nothing with the published data, and the reason each other row was dropped."""
    kept, reasons = [], []
    for row in rows:
        problem = shown.row_problem(row)
        if problem is None:
            kept.append(dict(row))
        else:
            reasons.append(f"chain {row['case_id']}: {problem}")
    return kept, reasons


def write_disjoint(
    build: str | Path,
    out: str | Path,
    min_edits: int = MIN_PRIVATE_EDITS,
    max_edits: int | None = None,
    seed: int = 0,
) -> DisjointDraw:
    """A disjoint private split from a ``knowgic build`` output folder ``build``: every row of the build
    that shares no fact and no edit subject with any shipped version, written into ``out``. Refuses, before
    writing anything, a build that leaves fewer than ``min_edits`` edits (one line with the counts and the
    first reason). ``max_edits``: keep that many of the edits left, whole, in the order of
    sha256(seed, edit id)."""
    from knowgic.dataset.validate import validate_folder

    build = Path(build)
    if max_edits is not None and max_edits < min_edits:
        raise KnowgicError(f"--max-edits {max_edits}: a private split needs at least {min_edits} edits")
    if not (build / VERSION_FILE).is_file():
        raise KnowgicError(f"--from {build}: not a knowgic build output folder (no {VERSION_FILE})")
    report = validate_folder(build)
    if report.errors:
        raise KnowgicError(f"--from {build}: {report.errors[0].render()}")
    info = read_json(build / VERSION_FILE)
    model = ((info.get("source") or {}).get("model") or {}).get("id")
    if not model:
        raise KnowgicError(
            f"--from {build}: {VERSION_FILE} names no source model; a private split holds facts one model "
            "knows, so it must come from a knowgic build output"
        )
    rows = [dict(r) for r in read_rows(config_path(build, info, "chains"))]
    shown = published()
    kept, reasons = disjoint_rows(rows, shown)
    edits = {Case.from_row(r).request.edit_id for r in kept}
    all_edits = {Case.from_row(r).request.edit_id for r in rows}
    if len(edits) < min_edits:
        first = f"; e.g. {reasons[0]}" if reasons else ""
        raise KnowgicError(
            f"no private split can be drawn from {build} for {model}: {len(edits)} of its {len(all_edits)} "
            f"edits share no fact and no edit subject with the {len(shown.versions)} shipped versions, at "
            f"least {min_edits} are needed{first}. Build from seed facts the published data does not use"
        )
    if max_edits is not None and len(edits) > max_edits:
        chosen = set(
            sorted(edits, key=lambda e: hashlib.sha256(f"{seed}\x1f{e}".encode()).hexdigest())[:max_edits]
        )
        kept = [r for r in kept if Case.from_row(r).request.edit_id in chosen]
        edits = chosen
    raw = read_json(build / ALIASES_FILE)
    named = {e for r in kept for e in _row_entities(r)}
    aliases = {k: list(v) for k, v in alias_lists(raw).items() if k in named}
    summary = (
        f"A private split for the runner's score stage: {len(kept)} chains of {len(edits)} new edits that "
        f"{model} knows, sharing no fact and no edit subject with KnowGIC's shipped versions "
        f"({', '.join(shown.versions)}). Keep it where submitted code never runs; never publish it."
    )
    record = {
        "private_kind": DISJOINT,
        "model": model,
        "disjoint_from": list(shown.versions),
        "drawn_from": {
            "build_sha256": info["sha256"],
            "rows": len(rows),
            "dropped_rows": len(reasons),
            "max_edits": max_edits,
            "seed": seed,
        },
    }
    version = str(info.get("version") or "0.1.0")
    write_split(out, kept, aliases, version, summary, record)
    return DisjointDraw(
        Path(out),
        len(kept),
        len(edits),
        len(reasons),
        len(all_edits - edits),
        reasons[0] if reasons else None,
    )


def _row_entities(row: Mapping[str, Any]) -> set[str]:
    from knowgic.dataset.tracks import fact_entities, row_facts

    return fact_entities(row_facts(row)) | {row["requested_rewrite"][0]["target_new"]["str"]}


def write_split(
    out: str | Path,
    rows: Sequence[dict],
    aliases: dict[str, list[str]],
    base: str,
    summary: str,
    record: dict | None = None,
) -> Path:
    """Write ``rows`` (chains) as a private split folder in the published shape: the derived configs, the
    aliases, a card and ``version.json`` with the content hash, named ``knowgic-private`` and versioned
    ``base`` (``record`` adds fields to version.json)."""
    from knowgic.dataset.build import BuiltVersion, version_files, write_version

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise KnowgicError(f"{out} already exists and is not an empty folder: choose a new one")
    built = BuiltVersion(version=base, summary=summary, chains=list(rows), aliases=aliases, changes=[])
    files = version_files(built, [built])
    info = json.loads(files[VERSION_FILE])
    info.update({"name": PRIVATE_NAME, **(record or {})})
    files[VERSION_FILE] = json.dumps(info, indent=2, ensure_ascii=False) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    write_version(out, files)
    return out
