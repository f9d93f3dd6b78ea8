"""The evaluation loop's mechanics on a small random model: scoring, restore checks, modes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch

from knowgic.editors.base import EditHandle, Editor, snapshot_restore
from knowgic.editors.ice import InContextEditor
from knowgic.editors.none import NoEdit
from knowgic.errors import KnowgicError, RestoreError
from knowgic.evaluation.harness import run_edits
from knowgic.evaluation.outcomes import collect_outcomes
from knowgic.evaluation.plan import EvalPlan, build_plan
from knowgic.evaluation.scored import scored_block
from knowgic.records import Case, EditRequest
from knowgic.scoring.base import Scores
from knowgic.scoring.logprob import LogprobScorer
from knowgic.spec import benchmark_spec
from tests.conftest import UPSTREAM_CHAINS


@pytest.fixture(scope="module")
def small_plan() -> EvalPlan:
    rows = json.loads(UPSTREAM_CHAINS.read_text(encoding="utf-8"))
    cases = [Case.from_row(r) for r in rows]
    # Two small edits keep this fast: Buick LaCrosse (2 rows) and Rutan Voyager (2 rows).
    plan = build_plan(cases, {}, fallback_neighbours=3)
    keep = [e for e in plan.edits if e.request.subject in {"Buick LaCrosse", "Rutan Voyager"}]
    return EvalPlan(queries=plan.queries, edits=keep, total_rows=plan.total_rows)


class BiasShift(Editor):
    """Adds a ramp to one MLP output bias; restores from a snapshot (or, when ``leaky``, forgets to)."""

    name = "bias-shift"

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        name = "transformer.h.1.mlp.c_proj.bias"
        restore = snapshot_restore(model, [name])
        with torch.no_grad():
            # Not a constant: LayerNorm would remove a uniform shift.
            bias = model.get_parameter(name)
            bias.add_(torch.linspace(-1.0, 1.0, bias.numel()) * self.hparams.get("shift", 5.0))
        return EditHandle(restore_fn=None if self.hparams.get("leaky") else restore)


class Failing(Editor):
    name = "failing"

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        raise RuntimeError("boom")


def _pre(model, tok, plan):
    return LogprobScorer().score(model, tok, plan.queries)


def test_no_edit_leaves_scores_unchanged(random_gpt2, small_plan) -> None:
    model, tok = random_gpt2
    pre = _pre(model, tok, small_plan)
    run = run_edits(model, tok, NoEdit(), LogprobScorer(), small_plan, pre, progress=False)
    for edit in small_plan.edits:
        post = run.post[edit.edit_id]
        assert list(post.indices) == list(edit.post_queries(pre.known))
        # Equal up to float32 rounding: the subset is batched differently from the full pre-edit pass.
        np.testing.assert_allclose(post.scores.p, pre.p[post.indices], rtol=1e-5, atol=1e-12)
        np.testing.assert_array_equal(post.scores.known, pre.known[post.indices])


def test_weight_edit_changes_scores_and_is_restored(random_gpt2, small_plan) -> None:
    model, tok = random_gpt2
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pre = _pre(model, tok, small_plan)
    run = run_edits(model, tok, BiasShift(), LogprobScorer(), small_plan, pre, progress=False)
    edit = small_plan.edits[0]
    post = run.post[edit.edit_id]
    assert not np.allclose(post.scores.p, pre.p[post.indices], rtol=1e-3)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert set(run.edit_seconds) == {e.edit_id for e in small_plan.edits}


def test_leaky_restore_stops_the_run(random_gpt2, small_plan) -> None:
    model, tok = random_gpt2
    bias = model.get_parameter("transformer.h.1.mlp.c_proj.bias")
    saved = bias.detach().clone()
    pre = _pre(model, tok, small_plan)
    try:
        with pytest.raises(RestoreError, match=r"bias-shift.*transformer\.h\.1\.mlp\.c_proj\.bias"):
            run_edits(
                model, tok, BiasShift({"leaky": True}), LogprobScorer(), small_plan, pre, progress=False
            )
    finally:
        with torch.no_grad():
            bias.copy_(saved)


def test_in_context_prefix_reaches_the_scorer(random_gpt2, small_plan) -> None:
    model, tok = random_gpt2
    pre = _pre(model, tok, small_plan)
    run = run_edits(model, tok, InContextEditor(), LogprobScorer(), small_plan, pre, progress=False)
    edit = small_plan.edits[0]
    post = run.post[edit.edit_id]
    assert not np.allclose(post.scores.p, pre.p[post.indices])
    prefix = run.edit_info[edit.edit_id]["prefix"]
    assert prefix == f"Imagine that {edit.request.rewrite_text} {edit.request.target_new}. "
    expected = LogprobScorer().score(model, tok, [small_plan.queries[i] for i in post.indices], prefix=prefix)
    np.testing.assert_allclose(post.scores.p, expected.p, rtol=1e-6, atol=1e-9)


def test_sequential_mode_stacks_edits_and_restores_all(random_gpt2, small_plan) -> None:
    model, tok = random_gpt2
    bias = model.get_parameter("transformer.h.1.mlp.c_proj.bias")
    saved = bias.detach().clone()
    pre = _pre(model, tok, small_plan)
    seen: list[torch.Tensor] = []

    class Recording(BiasShift):
        def apply(self, model, tokenizer, requests):
            handle = super().apply(model, tokenizer, requests)
            seen.append(bias.detach().clone())
            return handle

    run = run_edits(
        model, tok, Recording(), LogprobScorer(), small_plan, pre, mode="sequential", progress=False
    )
    # The second edit was applied on top of the first.
    assert torch.allclose(seen[1], saved + 2 * 5.0 * torch.linspace(-1.0, 1.0, saved.numel()))
    assert torch.equal(bias, saved)
    union = sorted({i for e in small_plan.edits for i in e.post_queries(pre.known)})
    assert sum(len(p.indices) for p in run.post.values()) >= len(union)
    # Sequential ICE concatenates both prefixes.
    reported: list[str] = []
    ice = run_edits(
        model,
        tok,
        InContextEditor(),
        LogprobScorer(),
        small_plan,
        pre,
        mode="sequential",
        progress=False,
        on_edit=lambda edit_id, _info: reported.append(edit_id),
    )
    assert len(ice.edit_info) == 2
    assert reported == [e.edit_id for e in small_plan.edits]  # each edit is reported once it is applied


def test_failing_editor_names_the_edit(random_gpt2, small_plan) -> None:
    model, tok = random_gpt2
    pre = _pre(model, tok, small_plan)
    with pytest.raises(
        KnowgicError, match=r"editor 'failing' failed on edit [0-9a-f]{12}.*RuntimeError: boom"
    ):
        run_edits(model, tok, Failing(), LogprobScorer(), small_plan, pre, progress=False)
    with pytest.raises(KnowgicError, match="unknown mode"):
        run_edits(model, tok, NoEdit(), LogprobScorer(), small_plan, pre, mode="parallel", progress=False)


def test_fallback_neighbours_are_scored_only_when_used(random_gpt2) -> None:
    model, tok = random_gpt2
    rows = json.loads(UPSTREAM_CHAINS.read_text(encoding="utf-8"))
    full = build_plan([Case.from_row(r) for r in rows], {}, fallback_neighbours=3)
    # Steve Ballmer's edit (3 rows) has same-relation neighbours ("... was employed by").
    edit = next(e for e in full.edits if e.request.subject == "Steve Ballmer")
    plan = EvalPlan(queries=full.queries, edits=[edit], total_rows=full.total_rows)
    assert len(edit.same_relation) >= 2 and len(edit.fallback) == 3
    measured = LogprobScorer().score(model, tok, plan.queries)
    base = {edit.rewrite.true_query, edit.rewrite.new_query}
    if edit.question is not None:
        base |= {edit.question.true_query, edit.question.new_query}
    base |= {q for chain in edit.chains for q in chain.step_queries} | {f.query for f in edit.broader}
    same_queries = {q for n in edit.same_relation for q in (n.true_query, n.new_query)}
    fallback_queries = {q for n in edit.fallback for q in (n.true_query, n.new_query)}
    same_only, fallback_only = same_queries - base, fallback_queries - base
    assert same_only and fallback_only

    # Crafted pre-edit knowledge: every fact known except the edit's same-relation facts.
    known = np.ones(len(plan.queries), dtype=bool)
    known[[n.true_query for n in edit.same_relation]] = False
    run = run_edits(model, tok, NoEdit(), LogprobScorer(), plan, Scores(measured.p, known), progress=False)
    scored = set(run.post[edit.edit_id].indices.tolist())
    assert fallback_queries <= scored and not same_only & scored
    out = collect_outcomes(plan, run)
    assert out.neighbourhoods[edit.edit_id] == "other-graphs"
    assert [n.fact for n in out.neighbours] == [n.fact for n in edit.fallback]
    metrics = scored_block(plan, run, benchmark_spec())["metrics"]
    assert metrics["specificity_other_graphs"]["n"] == 3
    assert metrics["specificity_same_relation"]["value"] is None

    # One known same-relation fact: the same-relation neighbourhood is kept, the fallback is never scored.
    known[edit.same_relation[0].true_query] = True
    run = run_edits(model, tok, NoEdit(), LogprobScorer(), plan, Scores(measured.p, known), progress=False)
    scored = set(run.post[edit.edit_id].indices.tolist())
    assert same_queries <= scored and not fallback_only & scored
    out = collect_outcomes(plan, run)
    assert out.neighbourhoods[edit.edit_id] == "same-relation"
    metrics = scored_block(plan, run, benchmark_spec())["metrics"]
    assert metrics["specificity_same_relation"]["n"] == 1
    assert metrics["specificity_other_graphs"]["value"] is None
