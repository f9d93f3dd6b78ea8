"""The dataset builder: deterministic, idempotent, and the 1.1.0 CHANGELOG accounts for every difference."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from knowgic.dataset import corrections
from knowgic.dataset.build import build, update_spec, upstream_inputs, write_version
from knowgic.dataset.checks import check_aliases, check_chains
from knowgic.dataset.corrections import CorrectionDrift, apply_steps
from knowgic.dataset.loading import load_rows
from knowgic.dataset.versions import HUB_DIR, version_dir
from knowgic.paths import spec_dir


@pytest.fixture(scope="module")
def fresh_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("build")
    spec = root / "benchmark.yaml"
    shutil.copy(spec_dir() / "benchmark.yaml", spec)
    changed = build(hub_dir=root / "hub", spec_path=spec, progress=False)
    return root / "hub", spec, changed


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_build_reproduces_the_committed_folders_byte_for_byte(fresh_build) -> None:
    hub, spec, _changed = fresh_build
    assert sorted(p.name for p in hub.iterdir()) == sorted(p.name for p in HUB_DIR.iterdir() if p.is_dir())
    for version in ("1.0.0", "1.1.0"):
        assert _files(hub / version) == _files(HUB_DIR / version), version
    assert spec.read_text(encoding="utf-8") == (spec_dir() / "benchmark.yaml").read_text(encoding="utf-8")


def test_rewriting_the_same_files_changes_nothing(fresh_build, tmp_path: Path) -> None:
    hub, spec, _changed = fresh_build
    files = {k: v.decode("utf-8") for k, v in _files(hub / "1.0.0").items()}
    folder = tmp_path / "1.0.0"
    assert write_version(folder, files)  # first write creates everything
    (folder / "stale.txt").write_text("left over", encoding="utf-8")
    assert write_version(folder, files) == ["removed stale.txt"]
    assert write_version(folder, files) == []
    import yaml

    records = {
        v: {**yaml.safe_load(spec.read_text(encoding="utf-8"))["dataset"]["versions"][v]}
        for v in ("1.0.0", "1.1.0")
    }
    assert records["1.1.0"]["based_on"] == "1.0.0"


def test_spec_update_keeps_every_other_line(tmp_path: Path) -> None:
    spec = tmp_path / "benchmark.yaml"
    original = "name: x\ndataset:\n  split: test\n  versions: {}\n\nprotocols:\n  logprob: {}\n"
    spec.write_text(original, encoding="utf-8")
    record = {"sha256": "ab" * 32, "based_on": None, "configs": {"chains": {"rows": 3}}}
    assert update_spec(spec, {"1.0.0": record})
    text = spec.read_text(encoding="utf-8")
    assert text.startswith('name: x\ndataset:\n  split: test\n  versions:\n    "1.0.0":\n')
    assert text.endswith("\n\nprotocols:\n  logprob: {}\n")
    assert not update_spec(spec, {"1.0.0": record})  # idempotent


def _entries(row: dict, block: str) -> list[tuple[str, str, str, str]]:
    b = row[block]
    return list(zip(b["subjects"], b["prompts"], b["questions"], b["answers"], strict=True))


def test_changelog_accounts_for_every_difference_between_1_0_0_and_1_1_0() -> None:
    old = {r["case_id"]: r for r in load_rows("chains", "1.0.0")}
    new = {r["case_id"]: r for r in load_rows("chains", "1.1.0")}
    assert old.keys() == new.keys()
    changelog = (version_dir("1.1.0") / "CHANGELOG.md").read_text(encoding="utf-8")
    section = changelog.split("## 1.0.0")[0]

    answer_changes: Counter[tuple[str, str]] = Counter()
    question_changes: Counter[tuple[str, str]] = Counter()
    removed = 0
    rows_with_removals = 0
    for case_id, o in old.items():
        n = new[case_id]
        assert set(n) - set(o) == {"edit_id", "flags"}
        assert n["requested_rewrite"] == o["requested_rewrite"]
        # chain: same length, only answer respellings and question fixes
        oc, nc = _entries(o, "chain"), _entries(n, "chain")
        assert len(oc) == len(nc)
        for (s0, p0, q0, a0), (s1, p1, q1, a1) in zip(oc, nc, strict=True):
            assert (s0, p0) == (s1, p1)
            if a0 != a1:
                answer_changes[(a0, a1)] += 1
            if q0 != q1:
                question_changes[(q0, q1)] += 1
        # broader context: an ordered subsequence of the old entries, modulo the same fixes
        ob, nb = _entries(o, "broader_context"), _entries(n, "broader_context")
        fixed = [
            (
                s,
                p,
                corrections.QUESTION_SUBJECT_FIXES.get(q, corrections.QUESTION_FORM_FIXES.get(q, q)),
                corrections.ENTITY_RESPELLINGS.get(a, a),
            )
            for s, p, q, a in ob
        ]
        for (_s0, _p0, q0, a0), (_s, _p, q1, a1) in zip(ob, fixed, strict=True):
            if a0 != a1:
                answer_changes[(a0, a1)] += 1
            if q0 != q1:
                question_changes[(q0, q1)] += 1
        it = iter(fixed)
        assert all(entry in it for entry in nb), f"case_id {case_id}: broader context is not a subsequence"
        if len(ob) != len(nb):
            removed += len(ob) - len(nb)
            rows_with_removals += 1
            # what was removed were repeats: the kept entries have distinct (subject, question, answer)
            # and cover every (subject, question, answer) of the old block
            assert len({(s, q, a) for s, _p, q, a in nb}) == len(nb)
            assert {(s, q, a) for s, _p, q, a in nb} == {(s, q, a) for s, _p, q, a in fixed}

    # every counted difference appears, with its count, in the CHANGELOG
    assert answer_changes == {("Baseball", "baseball"): 17}
    assert "9 chain final steps" in section and "8 broader-context entries" in section
    for (q0, q1), count in question_changes.items():
        line = next(line for line in section.splitlines() if repr(q0) in line and repr(q1) in line)
        chain, broader = map(
            int, re.search(r"\((\d+) chain steps, (\d+) broader-context entries\)", line).groups()
        )
        assert chain + broader == count
    assert len(question_changes) == 6
    assert f"Removed {removed} broader-context entries in {rows_with_removals} rows" in section
    assert (removed, rows_with_removals) == (150, 75)
    assert "Added `edit_id` to every row (1406 rows)" in section


def test_1_1_0_fixes_the_upstream_problems() -> None:
    rows = load_rows("chains", "1.1.0")
    import json

    aliases = json.loads((version_dir("1.1.0") / "aliases.json").read_text(encoding="utf-8"))
    codes = {f.code for f in check_chains(rows) + check_aliases(aliases, rows)}
    assert codes == {
        "answer_in_question",
        "empty_broader_context",
        "one_to_many_facts",
    }  # flagged or by design
    assert all(r["chain"]["answers"][-1] == r["requested_rewrite"][0]["target_true"]["str"] for r in rows)


def test_corrections_fail_loudly_when_they_no_longer_apply() -> None:
    rows, aliases = upstream_inputs()
    already = apply_steps(rows, aliases, corrections.STEPS_1_1_0)
    with pytest.raises(CorrectionDrift):
        apply_steps(already[0], already[1], (corrections.respell_entities,))
    with pytest.raises(CorrectionDrift):
        apply_steps(already[0], already[1], (corrections.dedupe_broader,))
    assert rows[32]["chain"]["answers"][-1] == "Baseball", "apply_steps must not modify its input"
