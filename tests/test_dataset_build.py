"""The dataset builder: deterministic, idempotent, and the 1.1.0 CHANGELOG accounts for every difference."""

from __future__ import annotations

import difflib
import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from knowgic.dataset import corrections
from knowgic.dataset.build import build, update_spec, upstream_inputs, write_version
from knowgic.dataset.checks import check_aliases, check_chains
from knowgic.dataset.corrections import CorrectionDrift, apply_steps
from knowgic.dataset.loading import load_rows
from knowgic.dataset.versions import HUB_DIR, track_versions, version_dir
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
    # The build makes the main track's folders; another track's (knowgic dataset track) it leaves declared.
    assert sorted(p.name for p in hub.iterdir()) == track_versions() == ["1.0.0", "1.1.0"]
    for version in track_versions():
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
    # another track's version is added in key order and kept when the main track's are written again
    assert update_spec(spec, {"growth-1.0.0": {**record, "based_on": "1.0.0"}})
    assert update_spec(spec, {"1.0.0": {**record, "sha256": "cd" * 32}})
    text = spec.read_text(encoding="utf-8")
    assert text.index('"1.0.0"') < text.index('"growth-1.0.0"')
    assert "path: knowgic/dataset/hub/growth-1.0.0\n      sha256: " + "ab" * 32 in text
    assert "sha256: " + "cd" * 32 in text


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


def _jsonl(version: str, config: str) -> list[dict[str, Any]]:
    text = (version_dir(version) / "data" / f"{config}-test.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _aliases(version: str) -> dict[str, list[str]]:
    return json.loads((version_dir(version) / "aliases.json").read_text(encoding="utf-8"))


def _section_1_1_0() -> str:
    changelog = (version_dir("1.1.0") / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "CHANGELOG.md" not in changelog, "the CHANGELOG must not send the reader to itself"
    return changelog.split("## 1.0.0")[0]


def _line(section: str, *parts: str) -> str:
    """The one CHANGELOG line holding every one of ``parts``."""
    lines = [line for line in section.splitlines() if all(p in line for p in parts)]
    assert len(lines) == 1, f"{parts}: {len(lines)} lines"
    return lines[0]


def test_changelog_accounts_for_every_alias_map_difference() -> None:
    old, new = _aliases("1.0.0"), _aliases("1.1.0")
    section = _section_1_1_0()

    # keys: gone from 1.1.0 only by a respelling (other capitals), or new entries
    gone = old.keys() - new.keys()
    renamed = {k: next(n for n in new if n != k and n.casefold() == k.casefold()) for k in gone}
    added = sorted(new.keys() - old.keys() - set(renamed.values()))

    # aliases, entity by entity (under the renamed key), as multisets
    lost: list[tuple[str, str]] = []
    gained: list[tuple[str, str]] = []
    for key, names in old.items():
        entity = renamed.get(key, key)
        before, after = Counter(names), Counter(new[entity])
        lost += [(entity, a) for a, n in (before - after).items() for _ in range(n)]
        gained += [(entity, a) for a, n in (after - before).items() for _ in range(n)]
    moved = [(src, dst, a) for src, a in lost for dst, b in gained if a == b and src != dst]
    fixed = [
        (e, a, b)
        for e, a in lost
        for f, b in gained
        if e == f and a != b and difflib.SequenceMatcher(None, a, b).ratio() >= 0.9
    ]
    assert sorted((dst, a) for _s, dst, a in moved) + sorted((e, b) for e, _a, b in fixed) == sorted(
        gained
    ), "every alias gained by an existing entity was moved there or is a corrected spelling"
    explained = {(src, a) for src, _dst, a in moved} | {(e, a) for e, a, _b in fixed}
    rest = [(e, a) for e, a in lost if (e, a) not in explained]
    self_listed = [(e, a) for e, a in rest if a == e]
    repeated = [(e, a) for e, a in rest if a != e and a in new[e]]  # one copy of a repeat kept
    dropped = [(e, a) for e, a in rest if a != e and a not in new[e]]
    counts = {
        "renamed": len(renamed),
        "moved": len(moved),
        "fixed": len(fixed),
        "self": len(self_listed),
        "repeated": len(repeated),
        "dropped": len(dropped),
    }
    assert counts == {"renamed": 2, "moved": 2, "fixed": 1, "self": 12, "repeated": 2, "dropped": 6}
    assert len(added) == 22
    rename_line = _line(section, "Alias-map keys renamed")
    assert f"({len(renamed)} entries)" in rename_line
    assert all(f"{k!r} -> {v!r}" in rename_line for k, v in renamed.items())
    for src, dst in {(s, d) for s, d, _a in moved}:
        group = [a for s, d, a in moved if (s, d) == (src, dst)]
        line = _line(section, f"moved from {src!r} to {dst!r} ({len(group)})")
        assert all(repr(a) in line for a in group)
    for entity, wrong, right in fixed:
        _line(section, f"Alias of {entity!r} {wrong!r} -> {right!r} (1).")
    _line(
        section, f"Removed {len(self_listed)} aliases equal to their own entity and {len(repeated)} aliases"
    )
    drop_line = _line(section, f"Dropped {len(dropped)} aliases")
    assert all(f"{a!r} ({e})" in drop_line for e, a in dropped)
    with_names = sum(1 for e in added if new[e])
    add_line = _line(section, f"Added {len(added)} alias-map entries", f"({with_names} with aliases")
    assert all(repr(e) in add_line for e in added)

    # and the claim of that line holds: every answer and target of 1.1.0 has an entry
    needed = {
        name
        for row in _jsonl("1.1.0", "chains")
        for name in (
            row["requested_rewrite"][0]["target_true"]["str"],
            row["requested_rewrite"][0]["target_new"]["str"],
            *row["chain"]["answers"],
            *row["broader_context"]["answers"],
        )
    }
    assert needed <= new.keys()


def _restates(row: dict[str, Any]) -> bool:
    request, chain = row["requested_rewrite"][0], row["chain"]
    return (
        len(chain["answers"]) == 1
        and chain["subjects"][0] == request["subject"]
        and chain["answers"][0] == request["target_true"]["str"]
    )


def _answer_in_question(block: dict[str, list[str]]) -> list[int]:
    """Steps whose question names their answer as a whole word, ignoring case."""
    pairs = zip(block["questions"], block["answers"], strict=True)
    return [
        i
        for i, (q, a) in enumerate(pairs)
        if re.search(r"(?<!\w)" + re.escape(a) + r"(?!\w)", q, re.IGNORECASE) is not None
    ]


def test_changelog_accounts_for_the_flags_and_the_restating_rows() -> None:
    rows, base = _jsonl("1.1.0", "chains"), _jsonl("1.0.0", "chains")
    section = _section_1_1_0()
    chain_hits = {r["case_id"]: _answer_in_question(r["chain"]) for r in rows}
    broader_hits = {r["case_id"]: _answer_in_question(r["broader_context"]) for r in rows}
    for r in rows:  # the flags say what the rows hold
        assert r["flags"] == {
            "chain_answer_in_question": chain_hits[r["case_id"]],
            "broader_answer_in_question": broader_hits[r["case_id"]],
            "empty_broader_context": not r["broader_context"]["answers"],
            "chain_restates_edit": _restates(r),
        }, r["case_id"]
    steps = sum(len(v) for v in chain_hits.values())
    final = sum(1 for r in rows if len(r["chain"]["answers"]) - 1 in chain_hits[r["case_id"]])
    line = _line(section, "Added `flags` to every row")
    assert (
        f"`chain_answer_in_question` ({steps} steps, {final} of them final, in "
        f"{sum(1 for v in chain_hits.values() if v)} rows)" in line
    )
    assert (
        f"`broader_answer_in_question` ({sum(len(v) for v in broader_hits.values())} entries in "
        f"{sum(1 for v in broader_hits.values() if v)} rows)" in line
    )
    assert (
        f"`empty_broader_context` ({sum(1 for r in rows if not r['broader_context']['answers'])} rows" in line
    )
    restating = [r["case_id"] for r in rows if _restates(r)]
    assert f"`chain_restates_edit` ({len(restating)} rows)" in line

    # one more row restates the edit than in 1.0.0, and the CHANGELOG says which and why
    before = [r["case_id"] for r in base if _restates(r)]
    newly = sorted(set(restating) - set(before))
    assert set(before) <= set(restating) and (len(before), len(restating), newly) == (23, 24, [460])
    respelling = _line(section, "Answers 'Baseball' -> 'baseball'")
    assert f"case_id {newly[0]}" in respelling
    assert f"{len(restating)} rows restate the edit instead of {len(before)} in 1.0.0" in respelling


def test_changelog_accounts_for_the_derived_configs() -> None:
    section = _section_1_1_0()
    old_edits, new_edits = _jsonl("1.0.0", "edits"), _jsonl("1.1.0", "edits")
    old_facts = {f["fact_id"]: f for f in _jsonl("1.0.0", "facts")}
    new_facts = {f["fact_id"]: f for f in _jsonl("1.1.0", "facts")}
    assert [e["edit_id"] for e in old_edits] == [e["edit_id"] for e in new_edits]
    old_bc = sum(len(e["broader_context"]["answers"]) for e in old_edits)
    new_bc = sum(len(e["broader_context"]["answers"]) for e in new_edits)
    added = len(new_facts.keys() - old_facts.keys())
    removed = len(old_facts.keys() - new_facts.keys())
    changed = sum(1 for k in new_facts.keys() & old_facts.keys() if new_facts[k] != old_facts[k])
    assert (old_bc, new_bc, added, removed) == (431, 429, 5, 5) and changed > 0
    _line(
        section,
        f"edits {len(new_edits)} rows ({old_bc} -> {new_bc} broader-context entries in all); "
        f"facts {len(new_facts)} rows ({added} added, {removed} removed, {changed} with changed",
    )


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
