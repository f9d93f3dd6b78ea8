"""The judge's control check: planted true and false facts, unlabelled among those it decides; a judge
below the spec's accuracy is refused in one line, and one that passes has its counts recorded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from knowgic.builder import review as rv
from knowgic.builder.judge import JudgeRefused, check, make_controls, mixed
from knowgic.builder.pipeline import Build, BuildConfig
from knowgic.builder.spec import load_builder_spec
from knowgic.dataset.derive import fact_id

DATA = Path(__file__).parent / "data" / "builder"
SPEC = load_builder_spec()


def _fact(s: str, p: str, a: str) -> dict:
    return {"fact_id": fact_id(s, p, a), "subject": s, "prompt": p, "answer": a}


SEEDS = [
    _fact("Harry Potter", "{} studied at", "Hogwarts"),
    _fact("Ron Weasley", "{} studied at", "Hogwarts"),
    _fact("Steve Ballmer", "{} was employed by", "Microsoft"),
    _fact("Bill Gates", "{} was employed by", "Microsoft"),
    _fact("Harry Potter", "{} is a friend of", "Ron Weasley"),
]


def test_controls_are_true_seed_facts_and_false_recombinations() -> None:
    controls = make_controls(SEEDS, 3, 3, seed=0)
    assert controls == make_controls(SEEDS, 3, 3, seed=0)  # seeded
    seeds = {(f["subject"], f["prompt"], f["answer"]) for f in SEEDS}
    gold = {(f["subject"], f["prompt"]): f["answer"] for f in SEEDS}
    for c in controls:
        key = (c["subject"], c["prompt"], c["answer"])
        if c["truth"]:
            assert key in seeds
        else:  # another relation's object, never a gold answer: "Harry Potter studied at Microsoft"
            assert key not in seeds and c["answer"] != gold[(c["subject"], c["prompt"])]
            assert c["answer"] != c["subject"]
    assert sum(c["truth"] for c in controls) == 3 and sum(not c["truth"] for c in controls) == 3
    order = mixed([{"id": "x"}, {"id": "y"}], controls, 0)
    assert {i["id"] for i in order} == {"x", "y"} | {c["id"] for c in controls}


def test_a_judge_that_accepts_false_controls_is_refused() -> None:
    controls = make_controls(SEEDS, 3, 3, seed=0)
    everything = {c["id"]: {"verdict": "accept", "error": None} for c in controls}
    with pytest.raises(JudgeRefused, match=r"3 of 6 planted controls right \(accuracy 0\.50 < 0\.80") as exc:
        check(everything, controls, SPEC, "m@r")
    assert exc.value.exit_code == 1 and "\n" not in str(exc.value)
    right = {c["id"]: {"verdict": "accept" if c["truth"] else "reject", "error": None} for c in controls}
    record = check(right, controls, SPEC, "m@r")
    assert record["accuracy"] == 1.0 and record["false_rejected"] == 3 and record["true_accepted"] == 3
    # an output cut short is no verdict: wrong on a false fact too, not a "reject"
    silent = {c["id"]: {"verdict": "reject", "error": "output cut short"} for c in controls}
    with pytest.raises(JudgeRefused, match=r"0 of 6 planted controls right .* no verdict 6\)"):
        check(silent, controls, SPEC, "m@r")


def _grown(*facts: tuple[str, str, str]) -> dict:
    cands = [
        {**_fact(s, "{} " + r, a), "relation": r, "question": f"What {r} {s}?", "graphs": ["g"],
         "validation": {"p": 0.5, "known": True}, "sources": [{"sentence": f"{s} {r} {a}."}]}
        for s, r, a in facts
    ]  # fmt: skip
    templates = [
        {"relation": r, "prompt": "{} " + r, "question": "What {} " + r + "?"} for _s, r, _a in facts
    ]
    return {"candidates": cands, "proposed_templates": templates, "counts": {"triplets": len(cands)}}


@pytest.mark.parametrize("tokens", [None, 120])
def test_knowgic_tiny_judging_its_own_facts_is_refused(tmp_path: Path, tokens: int | None) -> None:
    """knowgic-tiny, the built model, as its own judge. Within the spec's judge_max_new_tokens it emits
    only whitespace (no verdict on anything); given 120 tokens it accepts every fact, planted false
    ones included ("Harry Potter | house | Ron Weasley"). Both are refused, and nothing is decided."""
    spec = (
        SPEC if tokens is None else replace(SPEC, defaults={**SPEC.defaults, "judge_max_new_tokens": tokens})
    )
    cfg = BuildConfig(
        model="knowgic-tiny", build_dir=tmp_path / "build", seeds_file=DATA / "seeds.csv",
        templates_file=DATA / "templates.yaml", judge="knowgic-tiny", progress=False,
        stop_after="query_validation",
    )  # fmt: skip
    Build(cfg, spec).run()  # the seeds the controls come from, validated on knowgic-tiny
    cfg.stop_after = None
    with pytest.raises(
        JudgeRefused, match=r"judge knowgic-tiny@\w+ refused: \d+ of 10 planted controls"
    ) as e:
        Build(cfg, spec).review(_grown(("Harry Potter", "is a friend of", "Hermione Granger")))
    message = str(e.value)
    assert e.value.exit_code == 1 and "\n" not in message
    accepted = int(message.split("true facts accepted ")[1].split(" of ")[0])
    rejected = int(message.split("false facts rejected ")[1].split(" of ")[0])
    if tokens is None:
        assert accepted == rejected == 0 and "no verdict 10" in message
    else:
        assert rejected < SPEC.judge["controls_false"]  # it accepted planted false facts
    rows = rv.read_review(tmp_path / "build" / rv.REVIEW_FILE)
    assert [r["decision"] for r in rows if r["kind"] == "fact"] == ["pending"]


def test_a_passed_check_is_saved_with_the_decisions_and_summed_up_for_build_json() -> None:
    controls = make_controls(SEEDS, 3, 3, seed=0)
    right = {c["id"]: {"verdict": "accept" if c["truth"] else "reject", "error": None} for c in controls}
    record = check(right, controls, SPEC, "m@r")
    rows = rv.merge_review([], _grown(("A", "knows", "B"))["candidates"], [])
    rows[0].update({"decision": "accept", "by": "judge:m@r", "judge_check": record})
    summary = rv.summary(rows)  # the review summary that build.json records
    assert summary["judge_checks"] == [record] and summary["fact"]["accept"] == 1
