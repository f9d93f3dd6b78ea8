"""The evaluation loop: score the unedited model once, apply each edit, score what it needs, restore.

``independent`` mode applies every edit to the pristine model and restores it before the next, checking
with a parameter fingerprint that the restore was exact. ``sequential`` mode applies the edits one after
another in dataset order and scores every edit's queries once at the end, then restores them all.

Ripple queries (RippleEdits' criteria) are scored in the same places, apart from the plan's other queries:
with each edit's post-edit model (its in-context prefix included; in sequential mode at the end), the kept
rows' targets and competitors by the run's scorer and their targets' greedy continuations by the
continuation scorer (:mod:`knowgic.scoring.continuation`); ``ripple_pre`` (their condition facts scored
before the edits) says which rows are kept.

A private split (:mod:`knowgic.dataset.private`) is a second plan with edits of its own: the caller runs
this loop again over it, after the public plan and on the restored model, so the public scores are those of
a run without it (and, in sequential mode, the two sequences never mix).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from knowgic.editors.base import EditHandle, Editor
from knowgic.errors import KnowgicError
from knowgic.evaluation.fingerprint import assert_restored, fingerprint
from knowgic.evaluation.plan import EditPlan, EvalPlan
from knowgic.scoring.base import NonFiniteLogits, Query, Scorer, Scores
from knowgic.spec import benchmark_spec

MODES = ("independent", "sequential")


@dataclass
class PostScores:
    """Post-edit scores of the queries ``indices`` (indices into ``EvalPlan.queries``)."""

    indices: np.ndarray
    scores: Scores

    def lookup(self) -> dict[int, tuple[float, bool]]:
        return {
            int(i): (float(p), bool(k))
            for i, p, k in zip(self.indices, self.scores.p, self.scores.known, strict=True)
        }


@dataclass
class RunScores:
    pre: Scores
    post: dict[str, PostScores]
    edit_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The in-context prefix each edit's handle returned ("" for weight edits), recorded per edit.
    edit_prefix: dict[str, str] = field(default_factory=dict)
    edit_seconds: dict[str, float] = field(default_factory=dict)
    scoring_seconds: float = 0.0
    pre_scoring_seconds: float = 0.0
    pre_from_cache: bool = False
    # The private split's run (its own edits, applied after the public ones), when one was given.
    private: RunScores | None = None
    # Ripple queries: the pre-edit scores of EvalPlan.ripple_queries (condition facts; None: not scored),
    # and per edit the kept rows' post-edit p' (targets, competitors) and continuation accuracy (targets).
    ripple_pre: Scores | None = None
    ripple_post: dict[str, PostScores] = field(default_factory=dict)
    ripple_accuracy: dict[str, PostScores] = field(default_factory=dict)
    ripple_seconds: float = 0.0


def _score_subset(
    scorer: Scorer,
    model: torch.nn.Module,
    tokenizer: Any,
    queries: Sequence[Query],
    indices: Sequence[int],
    prefix: str,
) -> PostScores:
    idx = np.asarray(indices, dtype=np.int64)
    scores = scorer.score(model, tokenizer, [queries[i] for i in idx], prefix=prefix)
    return PostScores(indices=idx, scores=scores)


def _score_union(
    scorer: Scorer, model: torch.nn.Module, tokenizer: Any, plan: EvalPlan, pre: Scores, prefix: str
) -> dict[str, PostScores]:
    """Every edit's post-edit queries scored in one call (sequential mode: all edits are in place)."""
    post_queries = {edit.edit_id: edit.post_queries(pre.known) for edit in plan.edits}
    needed = sorted({i for queries in post_queries.values() for i in queries})
    union = _score_subset(scorer, model, tokenizer, plan.queries, needed, prefix)
    position = {int(q): k for k, q in enumerate(union.indices)}
    post = {}
    for edit in plan.edits:
        rows = np.asarray([position[i] for i in post_queries[edit.edit_id]], dtype=np.int64)
        post[edit.edit_id] = PostScores(
            indices=np.asarray(post_queries[edit.edit_id], dtype=np.int64),
            scores=Scores(p=union.scores.p[rows], known=union.scores.known[rows]),
        )
    return post


@dataclass(frozen=True)
class RippleScoring:
    """What scores a plan's ripple queries: the pre-edit scores of ``EvalPlan.ripple_queries`` (their
    condition facts) and the continuation scorer of RippleEdits' accuracy."""

    pre: Scores
    continuation: Scorer


def _score_ripple(
    ripple: RippleScoring,
    scorer: Scorer,
    model: torch.nn.Module,
    tokenizer: Any,
    plan: EvalPlan,
    edits: Sequence[EditPlan],
    prefix: str,
    run: RunScores,
) -> None:
    """The kept ripple rows of ``edits`` scored on the model as it is (one call per scorer for all of them)."""
    start = time.perf_counter()
    known = ripple.pre.known
    post = {e.edit_id: e.ripple_post(known) for e in edits}
    targets = {e.edit_id: e.ripple_targets(known) for e in edits}
    for scores, by_edit, which in (
        (run.ripple_post, post, scorer),
        (run.ripple_accuracy, targets, ripple.continuation),
    ):
        needed = sorted({i for indices in by_edit.values() for i in indices})
        union = _score_subset(which, model, tokenizer, plan.ripple_queries, needed, prefix)
        position = {int(q): k for k, q in enumerate(union.indices)}
        for edit_id, indices in by_edit.items():
            rows = np.asarray([position[i] for i in indices], dtype=np.int64)
            scores[edit_id] = PostScores(
                indices=np.asarray(indices, dtype=np.int64),
                scores=Scores(p=union.scores.p[rows], known=union.scores.known[rows]),
            )
    run.ripple_seconds += time.perf_counter() - start


def _edited_non_finite(error: NonFiniteLogits, what: str) -> KnowgicError:
    """Non-finite logits after an edit: the edit's weights (or prefix) did it, in the dtype the model runs."""
    edited = NonFiniteLogits(error.where, error.dtype, model="the edited model")
    return KnowgicError(f"{what}: {edited}")


def _edit_label(plan_edit: Any) -> str:
    request = plan_edit.request
    return f"edit {plan_edit.edit_id} ({request.rewrite_text!r} -> {request.target_new!r})"


def _apply(editor: Editor, model: torch.nn.Module, tokenizer: Any, plan_edit: Any) -> EditHandle:
    try:
        handle = editor.apply(model, tokenizer, [plan_edit.request])
    except KnowgicError:
        raise
    except Exception as exc:  # a user's editor failing must say which edit, not just crash
        raise KnowgicError(
            f"editor {editor.name!r} failed on edit {plan_edit.edit_id} "
            f"({plan_edit.request.rewrite_text!r} -> {plan_edit.request.target_new!r}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(handle, EditHandle):
        raise KnowgicError(
            f"editor {editor.name!r}.apply returned {type(handle).__name__}, expected knowgic.editors.EditHandle"
        )
    return handle


def run_edits(
    model: torch.nn.Module,
    tokenizer: Any,
    editor: Editor,
    scorer: Scorer,
    plan: EvalPlan,
    pre: Scores,
    mode: str | None = None,
    progress: bool = True,
    on_edit: Callable[[str, dict[str, Any]], None] | None = None,
    ripple: RippleScoring | None = None,
) -> RunScores:
    """Apply the plan's edits in ``mode`` (default: the benchmark spec's) and score each edit's queries
    after it.

    ``pre`` are the unedited model's scores of ``plan.queries`` (computed or cached by the caller); they
    decide each edit's neighbourhood, hence which queries it scores (:meth:`EditPlan.post_queries`).
    ``on_edit(edit_id, info)`` is called after each edit: once it is scored and restored (independent), or
    once it is applied (sequential, where all edits are scored together at the end). ``ripple``: score the
    plan's ripple queries too (module docstring); their time is ``ripple_seconds``, apart from
    ``scoring_seconds`` and the edits' seconds.
    """
    mode = mode or benchmark_spec().default_mode
    if mode not in MODES:
        raise KnowgicError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    run = RunScores(pre=pre, post={}, ripple_pre=None if ripple is None else ripple.pre)
    stamps = fingerprint(model)
    bar = tqdm(plan.edits, desc=f"{editor.name} ({mode})", unit="edit", disable=not progress)

    if mode == "independent":
        for edit in bar:
            editor.reset()
            start = time.perf_counter()
            handle = _apply(editor, model, tokenizer, edit)
            applied = time.perf_counter()
            try:
                run.post[edit.edit_id] = _score_subset(
                    scorer, model, tokenizer, plan.queries, edit.post_queries(pre.known), handle.prompt_prefix
                )
                scored = time.perf_counter()
                if ripple is not None:
                    _score_ripple(ripple, scorer, model, tokenizer, plan, [edit], handle.prompt_prefix, run)
            except NonFiniteLogits as error:
                raise _edited_non_finite(error, _edit_label(edit)) from None
            finally:
                done = time.perf_counter()
                handle.restore()
            run.edit_seconds[edit.edit_id] = (applied - start) + (time.perf_counter() - done)
            run.scoring_seconds += scored - applied
            run.edit_info[edit.edit_id] = dict(handle.info)
            run.edit_prefix[edit.edit_id] = handle.prompt_prefix
            stamps = assert_restored(model, stamps, editor.name)
            if on_edit is not None:
                on_edit(edit.edit_id, run.edit_info[edit.edit_id])
        editor.reset()
        return run

    # sequential: every edit on top of the previous ones, scored once at the end.
    editor.reset()
    handles: list[EditHandle] = []
    try:
        for edit in bar:
            start = time.perf_counter()
            handles.append(_apply(editor, model, tokenizer, edit))
            run.edit_seconds[edit.edit_id] = time.perf_counter() - start
            run.edit_info[edit.edit_id] = dict(handles[-1].info)
            run.edit_prefix[edit.edit_id] = handles[-1].prompt_prefix
            if on_edit is not None:
                on_edit(edit.edit_id, run.edit_info[edit.edit_id])
        prefix = "".join(h.prompt_prefix for h in handles)
        start = time.perf_counter()
        try:
            run.post = _score_union(scorer, model, tokenizer, plan, pre, prefix)
            run.scoring_seconds = time.perf_counter() - start
            if ripple is not None:
                _score_ripple(ripple, scorer, model, tokenizer, plan, plan.edits, prefix, run)
        except NonFiniteLogits as error:
            raise _edited_non_finite(error, f"the {len(handles)} sequential edits") from None
    finally:
        start = time.perf_counter()
        for handle in reversed(handles):
            handle.restore()
        if handles:
            share = (time.perf_counter() - start) / len(handles)
            for edit_id in run.edit_seconds:
                run.edit_seconds[edit_id] += share
    assert_restored(model, stamps, editor.name)
    editor.reset()
    return run
