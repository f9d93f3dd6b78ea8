"""A private split that protects a ranking: new edits sharing no fact and no edit subject with any shipped
version (`knowgic dataset holdout --from BUILD`), refused loudly where a build cannot give one (the published
facts themselves, which is every fact `knowgic-tiny` knows), and handed to the edit stage as a second group
of edit requests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from knowgic.dataset.derive import edit_id
from knowgic.dataset.loading import load_rows
from knowgic.dataset.private import (
    DISJOINT,
    MIN_PRIVATE_EDITS,
    published,
    read_private_split,
    write_disjoint,
    write_split,
)
from knowgic.dataset.tracks import fact_entities, row_facts
from knowgic.dataset.versions import available_versions
from knowgic.errors import KnowgicError
from knowgic.records import Case
from knowgic.runner.stages.contract import EditRequests

MODEL = "knowgic-tiny"


def _renamed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with every entity renamed (``Harry Potter`` -> ``Ersatz Harry Potter``): the same graphs, no
    published fact and no published entity."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (v if k in ("prompt", "prompts") else walk(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return f"Ersatz {value}" if isinstance(value, str) and value in entities else value

    entities = fact_entities(set().union(*(row_facts(r) for r in rows))) | {
        r["requested_rewrite"][0]["target_new"]["str"] for r in rows
    }
    out = []
    for row in rows:
        new = walk({k: v for k, v in row.items() if k not in ("edit_id", "flags")})
        new.update(case_id=row["case_id"], flags=row["flags"])
        new["edit_id"] = edit_id(new)
        out.append(new)
    return out


def _build(folder: Path, rows: list[dict[str, Any]]) -> Path:
    """A folder shaped as a `knowgic build` output (the version files and the source model it records)."""
    return write_split(folder, rows, {}, "0.1.0", "A build.", {"source": {"model": {"id": MODEL}}})


def test_published_holds_every_shipped_version() -> None:
    shown = published()
    assert shown.versions == tuple(available_versions())
    for version in shown.versions:
        rows = load_rows("chains", version)
        assert set().union(*(row_facts(r) for r in rows)) <= shown.facts


def test_the_published_facts_give_no_private_split(tmp_path: Path) -> None:
    """Every fact knowgic-tiny knows is a fact of 1.1.0's chains: a build from them draws nothing."""
    build = _build(tmp_path / "build", load_rows("chains", "1.1.0"))
    with pytest.raises(KnowgicError) as caught:
        write_disjoint(build, tmp_path / "split")
    message = str(caught.value)
    assert message.startswith(f"no private split can be drawn from {build} for {MODEL}: 0 of its 26 edits ")
    assert f"at least {MIN_PRIVATE_EDITS} are needed; e.g. chain " in message and "\n" not in message
    assert not (tmp_path / "split").exists()


def test_a_disjoint_split_keeps_only_rows_sharing_nothing(tmp_path: Path) -> None:
    rows = load_rows("chains", "1.1.0")
    renamed = _renamed(rows)
    mixed = [*renamed, dict(rows[0], case_id=10**6)]  # one published chain slipped in
    draw = write_disjoint(_build(tmp_path / "build", mixed), tmp_path / "split")
    assert (draw.rows, draw.dropped_rows, draw.dropped_edits) == (len(renamed), 1, 1)
    split = read_private_split(tmp_path / "split")
    assert split.kind == DISJOINT and split.ranks and split.model == MODEL
    assert split.edit_count() == 26
    info = json.loads((tmp_path / "split" / "version.json").read_text())
    assert info["disjoint_from"] == list(available_versions())
    assert split.problem_for(MODEL, "1.1.0") is None
    assert split.problem_for("gpt2", "1.1.0") == f"it was built for {MODEL}, not gpt2"
    shown = published()
    for case in split.cases:
        assert case.request.subject not in shown.entities


def test_max_edits_keeps_whole_edits_by_a_seeded_hash(tmp_path: Path) -> None:
    renamed = _renamed(load_rows("chains", "1.1.0"))
    first = list(dict.fromkeys(Case.from_row(r).request.edit_id for r in renamed))[:14]
    rows = [
        r for r in renamed if Case.from_row(r).request.edit_id in first and len(r["chain"]["subjects"]) < 3
    ]
    build = _build(tmp_path / "build", rows)
    draws = [
        write_disjoint(build, tmp_path / f"split-{i}", max_edits=12, seed=s) for i, s in enumerate((0, 0, 1))
    ]
    splits = [read_private_split(d.out) for d in draws]
    edits = [{c.request.edit_id for c in s.cases} for s in splits]
    assert [len(e) for e in edits] == [12, 12, 12] and edits[0] == edits[1] != edits[2]
    for split, kept in zip(splits, edits, strict=True):  # whole edits: every chain of a kept edit
        assert len(split.cases) == sum(Case.from_row(r).request.edit_id in kept for r in rows)
    with pytest.raises(KnowgicError, match=r"^--max-edits 5: a private split needs at least 10 edits$"):
        write_disjoint(build, tmp_path / "x", max_edits=5)


def test_too_few_new_edits_are_refused(tmp_path: Path) -> None:
    renamed = _renamed(load_rows("chains", "1.1.0"))
    first = Case.from_row(renamed[0]).request
    few = [r for r in renamed if Case.from_row(r).request == first]
    with pytest.raises(
        KnowgicError,
        match=r"1 of its 1 edits share no fact .* at least 10 are needed\. Build from seed facts",
    ):
        write_disjoint(_build(tmp_path / "build", few), tmp_path / "split")


def test_the_holdout_command_wants_a_build_or_a_drill(tmp_path: Path) -> None:
    def holdout(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "knowgic.cli", "dataset", "holdout", "--out", str(tmp_path / "o")]
        return subprocess.run([*command, *args], capture_output=True, text=True, timeout=300)

    neither = holdout()
    assert neither.returncode == 2 and neither.stderr.strip() == (
        "error: dataset holdout: give --from BUILD (a private split) or --drill (a drill)"
    )
    not_a_build = holdout("--from", str(tmp_path))
    assert not_a_build.returncode == 2
    assert not_a_build.stderr.strip() == (
        f"error: --from {tmp_path}: not a knowgic build output folder (no version.json)"
    )
    assert not (tmp_path / "o").exists()


def test_private_edit_requests_are_a_second_group() -> None:
    cases = [Case.from_row(r) for r in load_rows("chains", "1.1.0")]
    requests = list(dict.fromkeys(c.request for c in cases))
    both = EditRequests.of("sequential", "1.1.0", requests[:3], requests[3:5])
    assert both.group_sizes() == (3, 2) and both.group_of() == [0, 0, 0, 1, 1]
    again = EditRequests.from_document(json.loads(json.dumps(both.to_document())))
    assert again == both
    bad = both.to_document()
    bad["groups"] = [3, 3]
    with pytest.raises(
        KnowgicError, match=r"at /groups: the group sizes \[3, 3\] add up to 6, there are 5 edits"
    ):
        EditRequests.from_document(bad)
    assert EditRequests.of("independent", "1.1.0", requests[:2], []).group_sizes() == (2,)
