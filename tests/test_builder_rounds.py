"""The builder's rounds on knowgic-tiny with the template extractor: a two-round build has facts that no
single round finds (round 2 expands the facts accepted in round 1 into facts round 1 did not find)."""

from __future__ import annotations

import json
from pathlib import Path

from knowgic.builder import review as rv
from knowgic.builder.pipeline import BuildConfig, ReviewPending, run_build

ROUNDS_DATA = Path(__file__).parent / "data" / "builder" / "rounds"
MAX_SEEDS = 60
"""The first 60 facts of 1.1.0: enough for round 1 to accept new facts on knowgic-tiny."""


def _accept_all_and_build(cfg: BuildConfig) -> None:
    """Runs the build, accepting every pending review decision (a reviewer who accepts every fact the
    model was validated to know), until it passes its review stage."""
    path = cfg.build_dir / rv.REVIEW_FILE
    for _ in range(4):
        try:
            run_build(cfg)
            return
        except ReviewPending:
            rows = rv.read_review(path)
            for row in rv.pending(rows):
                rv.decide(rows, row["id"], "accept", "person:test")
            rv.write_review(path, rows)
    raise AssertionError("the build kept stopping at review")


def _accepted(build_dir: Path) -> dict[str, tuple[str, str, str]]:
    facts, _ = rv.accepted(rv.read_review(build_dir / rv.REVIEW_FILE))
    return {fid: (f["subject"], f["prompt"], f["answer"]) for fid, f in facts.items()}


def _stage(build_dir: Path, name: str):
    return json.loads((build_dir / "stages" / f"{name}.json").read_text(encoding="utf-8"))


def _cfg(build_dir: Path, rounds: int) -> BuildConfig:
    return BuildConfig(model="knowgic-tiny", build_dir=build_dir, source="1.1.0", max_seeds=MAX_SEEDS,
                       extractor="templates", rounds=rounds, stop_after="graph", progress=False)  # fmt: skip


def test_the_second_round_grows_from_what_the_first_accepted(tmp_path: Path) -> None:
    """Round 2 thinks about exactly the facts round 1 added (their subjects) and the objects of those facts
    that no fact starts from, and every fact it adds comes from them; nothing of round 1 is lost."""
    build_dir = tmp_path / "build"
    _accept_all_and_build(_cfg(build_dir, 1))
    one = _accepted(build_dir)
    assert one and not (build_dir / "stages" / "expand.r2.json").exists()
    seeds_known = [f for f in _stage(build_dir, "query_validation")["facts"] if f["validation"]["known"]]

    _accept_all_and_build(_cfg(build_dir, 2))  # round 1's stages come from the cache
    two = _accepted(build_dir)
    assert set(one) <= set(two)
    items = _stage(build_dir, "expand.r2")
    assert {c["fact_id"] for c in items} == set(one)
    subjects = {f["subject"] for f in seeds_known} | {fact[0] for fact in one.values()}
    objects = [c for c in items if c["cot_id"].endswith(":object")]
    assert objects and all(c["subject"] not in subjects for c in objects)
    assert {c["subject"] for c in objects} == {one[c["fact_id"]][2] for c in objects}
    for cand in _stage(build_dir, "triplet_validation.r2")["candidates"]:
        assert cand["round"] == 2
        assert {s["seed_fact_id"] for s in cand["sources"]} <= set(one)


def test_two_rounds_find_a_fact_that_one_round_does_not(tmp_path: Path) -> None:
    """Seeds about Professor Sprout and Cedric Diggory: round 1's chains of thought give "Professor Sprout is
    head of house Hufflepuff." and "Cedric Diggory belongs to Hufflepuff."; only round 2, thinking about
    Hufflepuff (an object no fact starts from, asked the spec's entity question), finds that Hufflepuff
    belongs to Hogwarts."""

    def build(rounds: int) -> set[tuple[str, str, str]]:
        cfg = BuildConfig(model="knowgic-tiny", build_dir=tmp_path / "build", seeds_file=ROUNDS_DATA / "seeds.csv",
                          templates_file=ROUNDS_DATA / "templates.yaml", extractor="templates", rounds=rounds,
                          stop_after="graph", progress=False)  # fmt: skip
        _accept_all_and_build(cfg)
        return set(_accepted(cfg.build_dir).values())

    one = build(1)
    assert one == {
        ("Professor Sprout", "{} is head of house", "Hufflepuff"),
        ("Cedric Diggory", "{} belongs to", "Hufflepuff"),
    }
    two = build(2)
    assert two - one == {("Hufflepuff", "{} belongs to", "Hogwarts School of Witchcraft and Wizardry")}
    [item] = [c for c in _stage(tmp_path / "build", "expand.r2") if c["cot_id"].endswith(":object")]
    assert item["subject"] == "Hufflepuff" and "What do you know about Hufflepuff?" in item["prompt"]
