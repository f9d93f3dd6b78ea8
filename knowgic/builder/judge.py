"""The LLM judge's control check: a judge is trusted only after it tells planted true facts from false.

    known seed facts --seeded sample--> true controls
    known seed facts --subject with another relation's object (never a gold answer)--> false controls
    candidates + controls --one seeded order, unlabelled, the same prompt--> judge --> verdicts
    verdicts on controls --accuracy >= judge.min_control_accuracy?--> decisions | refused (exit 1)

True controls are facts of the seed set the built model was validated on; false controls recombine a
seed fact's subject with the object of a fact of another relation ("Harry Potter studied at Microsoft"),
false by construction: the object is never one of the seeds' answers for that subject and relation. The
judge sees them mixed among the facts it decides, in the same prompt, and cannot tell which they are. A
judge below the spec's accuracy decides nothing; the check applies to every judge, so a model never
judges facts about itself without it. The check's counts are saved with every decision the judge makes
(``judge_check`` of its review rows) and summed up in the review summary of ``build.json``.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from knowgic.dataset.derive import fact_id
from knowgic.errors import FailedCheck, KnowgicError

CONTROL = "control:"


class JudgeRefused(FailedCheck):
    """The judge failed its control check (exit code 1, the code of a failed check)."""


def _settings(spec: Any) -> tuple[float, int, int]:
    j = spec.judge
    try:
        floor = float(j["min_control_accuracy"])
        n_true, n_false = int(j["controls_true"]), int(j["controls_false"])
    except (KeyError, TypeError, ValueError):
        raise KnowgicError(
            f"{spec.path}: judge needs min_control_accuracy, controls_true and controls_false"
        ) from None
    if not 0 < floor <= 1 or n_true < 1 or n_false < 1:
        raise KnowgicError(
            f"{spec.path}: judge.min_control_accuracy must be in (0, 1] and each control count >= 1 "
            "(no judge decides without the check)"
        )
    return floor, n_true, n_false


def make_controls(facts: Sequence[Mapping[str, Any]], n_true: int, n_false: int, seed: int) -> list[dict]:
    """``n_true`` true and ``n_false`` false control facts drawn from the known seed ``facts``."""
    rng = random.Random(f"judge-controls:{seed}")
    facts = sorted(facts, key=lambda f: f["fact_id"])
    gold: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in facts:
        gold[(f["subject"], f["prompt"])].add(f["answer"].casefold())
    names = {f["answer"] for f in facts} | {f["subject"] for f in facts}
    controls = [
        {"subject": f["subject"], "prompt": f["prompt"], "answer": f["answer"], "truth": True}
        for f in rng.sample(facts, min(n_true, len(facts)))
    ]
    false: dict[str, dict[str, Any]] = {}
    for f in rng.sample(facts, len(facts)):
        others = sorted(
            {
                g["answer"]
                for g in facts
                if g["prompt"] != f["prompt"]
                and g["answer"].casefold() not in gold[(f["subject"], f["prompt"])]
                and g["answer"] != f["subject"]
                and g["answer"] in names
            }
        )
        if others:
            answer = rng.choice(others)
            fid = fact_id(f["subject"], f["prompt"], answer)
            false.setdefault(
                fid, {"subject": f["subject"], "prompt": f["prompt"], "answer": answer, "truth": False}
            )
        if len(false) == n_false:
            break
    controls += list(false.values())
    if sum(c["truth"] for c in controls) < 1 or sum(not c["truth"] for c in controls) < 1:
        raise KnowgicError(
            "the judge's control check needs known seed facts of at least two relations "
            f"({len(facts)} known seed facts give {len(controls)} controls)"
        )
    for c in controls:
        c["id"] = CONTROL + fact_id(c["subject"], c["prompt"], c["answer"])
    return controls


def controls_from_store(store: Any, spec: Any, seed: int) -> list[dict[str, Any]]:
    """The controls of a build: drawn from its query validation's known seed facts."""
    entry = store.manifest().get("query_validation")
    out = store.cached("query_validation", entry["key"]) if entry else None
    if out is None:
        raise KnowgicError("the judge's control check needs the build's query validation, which has not run")
    _floor, n_true, n_false = _settings(spec)
    return make_controls([f for f in out["facts"] if f["validation"]["known"]], n_true, n_false, seed)


def mixed(rows: Sequence[Mapping[str, Any]], controls: Sequence[Mapping[str, Any]], seed: int) -> list:
    """The facts to judge and the controls in one seeded order (the judge sees no label)."""
    items = [*rows, *controls]
    random.Random(f"judge-order:{seed}").shuffle(items)
    return items


def check(
    verdicts: Mapping[str, Mapping[str, Any]], controls: Sequence[Mapping[str, Any]], spec: Any, judge: str
) -> dict[str, Any]:
    """The control check's record from the judge's journal records ({verdict, error}) of the controls;
    raises :class:`JudgeRefused` (one line) below the spec's accuracy. A control whose output was cut
    short has no verdict and counts as wrong (a judge that says nothing is not right on false facts)."""
    floor, _t, _f = _settings(spec)
    true = [c for c in controls if c["truth"]]
    false = [c for c in controls if not c["truth"]]

    def said(c: Mapping[str, Any]) -> str | None:
        v = verdicts[c["id"]]
        return None if v.get("error") else v["verdict"]

    true_right = sum(said(c) == "accept" for c in true)
    false_right = sum(said(c) == "reject" for c in false)
    unparsed = sum(said(c) is None for c in controls)
    accuracy = (true_right + false_right) / len(controls)
    record = {
        "judge": judge,
        "controls": len(controls),
        "true_accepted": true_right,
        "true_controls": len(true),
        "false_rejected": false_right,
        "false_controls": len(false),
        "no_verdict": unparsed,
        "accuracy": round(accuracy, 4),
        "min_accuracy": floor,
    }
    if accuracy < floor:
        raise JudgeRefused(
            f"judge {judge} refused: {true_right + false_right} of {len(controls)} planted controls right "
            f"(accuracy {accuracy:.2f} < {floor:.2f}; true facts accepted {true_right} of {len(true)}, "
            f"false facts rejected {false_right} of {len(false)}, no verdict {unparsed}); "
            "no decision was made"
        )
    return record


def judge_with_controls(
    todo: Sequence[Mapping[str, Any]],
    controls: Sequence[Mapping[str, Any]] | None,
    prompt_of: Callable[[Mapping[str, Any]], str],
    generate: Callable[..., Any],
    journal: Any,
    spec: Any,
    judge: str,
    seed: int = 0,
) -> dict[str, Any]:
    """Judge ``todo`` (rows not yet in the journal) with ``controls`` mixed in; the check's record."""
    from knowgic.builder.generation import parse_constrained

    if not controls:
        raise JudgeRefused(f"judge {judge} refused: no control facts to check it on; no decision was made")
    items = [i for i in mixed(todo, controls, seed) if i["id"] not in journal.done]
    prompts = [prompt_of(i) for i in items]

    def record(start: int, outputs: list[str]) -> None:
        for item, prompt, output in zip(items[start:], prompts[start:], outputs, strict=False):
            value, error = parse_constrained(output)
            verdict = value["verdict"] if error is None else "reject"
            journal.add(item["id"], {"prompt": prompt, "output": output, "verdict": verdict, "error": error})

    if prompts:
        generate(prompts, record)
    return check({c["id"]: journal.done[c["id"]] for c in controls}, controls, spec, judge)
