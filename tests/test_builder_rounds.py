"""The builder's rounds on knowgic-tiny with the template extractor: a two-round build has facts that no
single round finds (round 2 expands the facts accepted in round 1 into facts round 1 did not find)."""

from __future__ import annotations

import json
from pathlib import Path

from knowgic.builder import review as rv
from knowgic.builder.pipeline import BuildConfig, ReviewPending, run_build

# the first 193 facts of 1.1.0: the last one, California "is in the country" USA, is the one whose chain
# of thought round 1 reads as California "is associated with" (a junk object the known rule lets through)
MAX_SEEDS = 193


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


def test_a_second_round_finds_facts_no_single_round_finds(tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    _accept_all_and_build(_cfg(build_dir, 1))
    one = _accepted(build_dir)
    assert one and not (build_dir / "stages" / "expand.r2.json").exists()
    round_one = {c["fact_id"] for c in _stage(build_dir, "triplet_validation")["candidates"]}

    _accept_all_and_build(_cfg(build_dir, 2))  # round 1's stages come from the cache
    two = _accepted(build_dir)
    assert set(one) <= set(two)
    new = {fid: two[fid] for fid in set(two) - set(one)}
    assert ("California", "{} is associated with the sport of", "baseball") in new.values()
    # round 1 never found them, not even as a candidate the model did not know
    assert not set(new) & round_one
    # each came from the chain of thought about a fact accepted in round 1
    for cand in _stage(build_dir, "triplet_validation.r2")["candidates"]:
        if cand["fact_id"] in new:
            assert cand["round"] == 2 and cand["validation"]["known"]
            assert {s["seed_fact_id"] for s in cand["sources"]} <= set(one)
