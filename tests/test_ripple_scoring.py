"""RippleEdits' criteria scored by ``knowgic evaluate`` on knowgic-tiny (KnowGIC 1.1.0, its ripple config):
the ripple records, the conditions checked before the edit, the 20-token greedy accuracy against the model's
own generation, the probability form, and their recomputation from the records."""

from __future__ import annotations

import copy
import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from knowgic.dataset.loading import load_aliases, load_cases, load_rows
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.evaluation.plan import build_plan
from knowgic.measure.compute import BEFORE_RIPPLE, metric_entry_at
from knowgic.recompute import check_results
from knowgic.ripple.queries import CRITERIA
from knowgic.scoring.logprob import LogprobScorer
from knowgic.scoring.matching import contains_answer
from knowgic.spec import benchmark_spec

VERSION = "1.1.0"


def _run(loaded: Any, editor: str, mode: str = "independent") -> dict[str, Any]:
    request = EvaluationRequest(
        model="knowgic-tiny", editor=editor, dataset_version=VERSION, limit=2, mode=mode, use_cache=False
    )
    return evaluate(request, progress=False, loaded=loaded, plots=False).document


@pytest.fixture(scope="module")
def rome_run(knowgic_tiny: Any) -> dict[str, Any]:
    return _run(knowgic_tiny, "rome")


@pytest.fixture(scope="module")
def none_run(knowgic_tiny: Any) -> dict[str, Any]:
    return _run(knowgic_tiny, "none")


def _rows_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ripple config's rows of the run's edits, by query id."""
    edits = {e["edit_id"] for e in document["per_edit"]}
    return {r["query_id"]: r for r in load_rows("ripple", VERSION) if r["edit_id"] in edits}


def test_a_two_edit_run_records_every_ripple_query_and_both_metrics(rome_run: dict[str, Any]) -> None:
    rows = _rows_of(rome_run)
    records = rome_run["ripple"]
    assert len(rows) > 0 and sorted(r["query_id"] for r in records) == sorted(rows)
    for record in records:
        row = rows[record["query_id"]]
        assert (record["edit_id"], record["criterion"]) == (row["edit_id"], row["criterion"])
        assert record["conditions"] == len(row["conditions"])
        assert record["has_competitor"] == (row["competitor"] is not None)
        assert record["kept"] == (record["conditions_known"] == record["conditions"])
        scored = [record["accuracy"], record["p_target"]]
        assert all(x is not None for x in scored) if record["kept"] else scored == [None, None]
    counts = rome_run["counts"]["ripple"]
    for c in CRITERIA:
        mine = [r for r in records if r["criterion"] == c]
        assert counts[c] == {
            "queries": len(mine),
            "kept": sum(r["kept"] for r in mine),
            "dropped_by_conditions": sum(not r["kept"] for r in mine),
            "with_competitor": sum(r["has_competitor"] for r in mine),
        }
    for name in ("ripple_accuracy", "ripple_probability"):
        assert list(rome_run["metrics"][name]) == list(CRITERIA)
    assert any(rome_run["metrics"]["ripple_accuracy"][c]["value"] is not None for c in CRITERIA)
    assert check_results(rome_run) == []


def test_a_query_whose_condition_the_model_does_not_know_is_dropped_and_counted(
    rome_run: dict[str, Any], knowgic_tiny: Any
) -> None:
    """Among the first two edits' queries some condition fact is unknown to knowgic-tiny before the edit:
    scored here on the unedited model, the query is dropped, unscored and counted."""
    dropped = [r for r in rome_run["ripple"] if not r["kept"]]
    assert dropped, "the first two edits of 1.1.0 have a query with an unknown condition on knowgic-tiny"
    record = dropped[0]
    row = _rows_of(rome_run)[record["query_id"]]
    plan = build_plan(load_cases(VERSION), load_aliases(VERSION), limit=2, ripple=[row])
    conditions = [
        plan.ripple_queries[i]
        for i in plan.edits[[e.edit_id for e in plan.edits].index(row["edit_id"])].ripple[0].conditions
    ]
    known = LogprobScorer().score(knowgic_tiny.model, knowgic_tiny.tokenizer, conditions).known
    assert not known.all() and int(known.sum()) == record["conditions_known"]
    assert record["accuracy"] is None and record["p_target"] is None and record["p_competitor"] is None
    by = rome_run["counts"]["ripple"][record["criterion"]]
    assert by["dropped_by_conditions"] >= 1 and by["kept"] + by["dropped_by_conditions"] == by["queries"]


def _generated(loaded: Any, text: str) -> str:
    """knowgic-tiny's own greedy generation (transformers' ``generate``) of the spec's new-token count."""
    tokenizer, model = loaded.tokenizer, loaded.model
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=benchmark_spec().ripple_max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.eos_token_id,
        )
    return str(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))


def test_accuracy_is_the_greedy_20_token_continuation_containing_the_target(
    none_run: dict[str, Any], knowgic_tiny: Any
) -> None:
    """With ``none`` the edited model is the unedited one: every kept query's accuracy is whether
    knowgic-tiny's own greedy generation of 20 tokens after the cloze contains the target or an alias; the
    criteria whose answer should stay (PV, RS) get the pre-edit accuracy, edit by edit then over edits."""
    assert benchmark_spec().ripple_max_new_tokens == 20
    rows = _rows_of(none_run)
    own: dict[tuple[str, str], list[float]] = {}
    kept = [r for r in none_run["ripple"] if r["kept"]]
    assert kept
    for record in kept:
        row = rows[record["query_id"]]
        text = _generated(knowgic_tiny, row["prompt"].format(row["subject"]))
        expected = float(contains_answer(text, [row["target"], *row["target_aliases"]]))
        assert record["accuracy"] == expected, (row["prompt"], row["subject"], text)
        own.setdefault((record["edit_id"], record["criterion"]), []).append(expected)
    for c in ("PV", "RS"):
        means = [sum(v) / len(v) for (_, crit), v in own.items() if crit == c]
        entry = none_run["metrics"]["ripple_accuracy"][c]
        assert entry["value"] == (pytest.approx(sum(means) / len(means)) if means else None)
    # An RS query is its own condition, which counts only where the greedy continuation names it: an editor
    # that changes nothing keeps every kept RS test, under both forms.
    rs = [r for r in kept if r["criterion"] == "RS"]
    assert rs and all(r["accuracy"] == 1.0 for r in rs)
    assert none_run["metrics"]["ripple_accuracy"]["RS"]["value"] == 1.0
    assert none_run["metrics"]["ripple_probability"]["RS"]["value"] == 1.0


def test_the_probability_form_compares_target_and_competitor(none_run: dict[str, Any]) -> None:
    """[p'(target) > p'(competitor)] per kept query with a competitor, averaged per edit, then over edits;
    queries without a competitor are left out (and counted)."""
    for c in CRITERIA:
        own: dict[str, list[float]] = {}
        for r in none_run["ripple"]:
            if r["criterion"] == c and r["kept"] and r["has_competitor"]:
                own.setdefault(r["edit_id"], []).append(float(r["p_target"] > r["p_competitor"]))
        value = none_run["metrics"]["ripple_probability"][c]["value"]
        means = [sum(v) / len(v) for v in own.values()]
        assert value == (pytest.approx(sum(means) / len(means)) if means else None)


def test_sequential_mode_scores_the_ripple_queries_at_the_end(
    knowgic_tiny: Any, none_run: dict[str, Any]
) -> None:
    """With ``none`` nothing changes the model, so sequential mode gives the independent run's records."""
    sequential = _run(knowgic_tiny, "none", mode="sequential")
    strip = ("p_target", "p_competitor")
    mine = [{k: v for k, v in r.items() if k not in strip} for r in sequential["ripple"]]
    theirs = [{k: v for k, v in r.items() if k not in strip} for r in none_run["ripple"]]
    assert mine == theirs
    for a, b in zip(sequential["ripple"], none_run["ripple"], strict=True):
        for key in strip:
            assert (a[key] is None) == (b[key] is None)
            if a[key] is not None:
                assert a[key] == pytest.approx(b[key], abs=1e-6)


def test_a_tampered_ripple_record_is_caught(rome_run: dict[str, Any]) -> None:
    tampered = copy.deepcopy(rome_run)
    record = next(r for r in tampered["ripple"] if r["kept"] and r["criterion"] in ("SA", "RS", "CII"))
    record["accuracy"] = 1.0 - record["accuracy"]
    problems = check_results(tampered)
    assert any(p.startswith(f"metrics.ripple_accuracy.{record['criterion']}.value") for p in problems), (
        problems
    )
    dropped = copy.deepcopy(rome_run)
    next(r for r in dropped["ripple"] if r["kept"])["kept"] = False
    assert any(p.startswith("counts.ripple") for p in check_results(dropped))


def test_a_document_written_before_ripple_scoring_reads_null_with_its_reason() -> None:
    golden = Path(__file__).parent / "data" / "golden" / "rome.results.json.gz"
    with gzip.open(golden, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    assert "ripple_accuracy" not in document["metrics"]
    entry = metric_entry_at(document["metrics"], "ripple_accuracy.LG")
    assert entry == {"value": None, "n": 0, "reason": BEFORE_RIPPLE}
    assert check_results(document) == []


def test_counts_per_criterion_match_the_config(rome_run: dict[str, Any]) -> None:
    config = Counter(r["criterion"] for r in _rows_of(rome_run).values())
    assert {c: rome_run["counts"]["ripple"][c]["queries"] for c in CRITERIA} == {
        c: config[c] for c in CRITERIA
    }
