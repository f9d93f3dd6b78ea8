"""``knowgic timing``: the naive protocol it compares against, and a quick smoke run on knowgic-tiny."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from knowgic.cli import main
from knowgic.editors.base import EditHandle
from knowgic.editors.ice import InContextEditor
from knowgic.evaluation.plan import EvalPlan, build_plan
from knowgic.evaluation.timing import naive_rows, naive_seconds
from knowgic.models.base import LoadedModel
from knowgic.records import Case, EditRequest
from knowgic.scoring.base import Query, Scores
from knowgic.scoring.logprob import LogprobScorer
from tests.conftest import UPSTREAM_CHAINS


class CountingEditor(InContextEditor):
    """In-context editing that records each apply and restore, and whether the model was pristine."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def apply(self, model: Any, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        self.events.append("apply")
        handle = super().apply(model, tokenizer, requests)
        handle.restore_fn = lambda: self.events.append("restore")
        return handle


class CountingScorer(LogprobScorer):
    def __init__(self) -> None:
        super().__init__()
        self.batch_sizes: list[int] = []
        self.prefixes: set[str] = set()

    def score(self, model: Any, tokenizer: Any, queries: Sequence[Query], prefix: str = "") -> Scores:
        self.batch_sizes.append(len(queries))
        self.prefixes.add(prefix)
        return super().score(model, tokenizer, queries, prefix=prefix)


def test_naive_protocol_is_apply_score_one_at_a_time_restore(random_gpt2) -> None:
    model, tok = random_gpt2
    cases = [Case.from_row(r) for r in json.loads(UPSTREAM_CHAINS.read_text(encoding="utf-8"))]
    full = build_plan(cases, {}, fallback_neighbours=3)
    edit = next(e for e in full.edits if e.request.subject == "Steve Ballmer")
    plan = EvalPlan(queries=full.queries, edits=[edit], total_rows=full.total_rows)
    broader_of_case = {c.case_id: [f.key for f in c.broader_context.facts] for c in cases}
    known = np.ones(len(plan.queries), dtype=bool)
    rows = naive_rows(plan, broader_of_case, known)

    assert [r.case_id for r in rows] == [c.case_id for c in edit.chains]
    query_of_fact = {f.fact: f.query for f in edit.broader}
    for row, chain in zip(rows, edit.chains, strict=True):
        case = next(c for c in cases if c.case_id == row.case_id)
        own_broader = [query_of_fact[f.key] for f in case.broader_context.facts]
        assert row.queries[: len(chain.step_queries)] == chain.step_queries
        assert row.queries[len(chain.step_queries) : len(chain.step_queries) + len(own_broader)] == tuple(
            own_broader
        )
        assert {edit.rewrite.true_query, edit.rewrite.new_query} <= set(row.queries)
        assert {n.true_query for n in edit.same_relation} <= set(row.queries)

    editor, scorer = CountingEditor(), CountingScorer()
    loaded = LoadedModel(model, tok, "random", "r", "gpt2", "float32", "cpu")
    assert naive_seconds(loaded, editor, scorer, plan, rows) > 0
    # Per row: one apply on the pristine model, each query scored alone under the edit, one restore.
    assert editor.events == ["apply", "restore"] * len(rows)
    assert scorer.batch_sizes == [1] * sum(len(r.queries) for r in rows)
    assert scorer.prefixes == {f"Imagine that {edit.request.rewrite_text} {edit.request.target_new}. "}


def test_timing_smoke_run_on_knowgic_tiny(knowgic_tiny, capsys) -> None:
    code = main(["timing", "--editor", "ice", "--limit", "1", "--naive-rows", "2", "--repeats", "1"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    report = json.loads(lines[-1])
    for key in ("speedup_vs_naive", "scoring_vs_forward_ratio", "peak_rss_mb"):
        assert isinstance(report[key], float) and math.isfinite(report[key]) and report[key] > 0, key
    assert report["edits"] == 1 and report["limit"] == 1
    assert report["rows"] > 2
    assert report["naive_rows_measured"] == 2 and report["naive_extrapolated"] is True
    assert report["naive_queries"] > report["distinct_queries"]
    assert report["peak_rss_mb"] > report["model_size_mb"]
    assert report["bare_forward_logits"] == "full"
    assert report["bootstrap_seconds"] >= 0 and report["bootstrap_resamples"] == 2000
