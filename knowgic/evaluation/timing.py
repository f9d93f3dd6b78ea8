"""Speed and memory timing (``knowgic timing``): prints one JSON line of figures measured in one process.

- ``speedup_vs_naive`` = naive protocol time / full evaluation time, both with ``logprob``.
  The *full evaluation* is ``knowgic evaluate``: rows grouped by edit (each edit applied and restored
  once), queries deduplicated and batched, pre-edit scores computed once (the score cache is bypassed, so
  they are computed and timed), restore checks included.
  The *naive protocol* is what a direct implementation does: for each row, apply the row's edit to the
  pristine model, score each of the row's queries one at a time, restore; nothing else (no pre-edit
  pass per row). A row's queries are its chain steps, its own broader-context facts, the rewrite prompt
  with both targets, the question form with both targets, and the edit's neighbours (the neighbourhood
  the full evaluation chose).
  By default the naive protocol is timed on a seeded uniform sample of ``DEFAULT_NAIVE_SAMPLE`` rows and
  its mean time per row is scaled to all rows; ``naive_rows_measured`` and ``naive_extrapolated`` say
  which. ``--naive-rows`` at or above the number of rows times every row (no extrapolation).
- ``scoring_vs_forward_ratio``: the logprob scorer's time over a bare batched forward pass on the same
  token rows and batches (:mod:`knowgic.scoring.forward`, which says how the two passes differ), with the
  scorer's tokenization cache warm as in every post-edit call; ``scoring_vs_forward_ratio_cold`` includes
  tokenization. Best of ``repeats`` interleaved measurements, on the unedited model.
- ``peak_rss_mb`` (the process's peak resident memory) against ``model_size_mb + 1024``.
- ``bootstrap_seconds``: the intervals of every metric of the run (:func:`knowgic.recompute.recompute_metrics`,
  ``bootstrap_resamples`` resamples of the edits, from the records of ``results.json``), best of ``repeats``.

``--limit N`` restricts everything to the first N distinct edits and their rows, for a quick run.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from knowgic.editors.base import Editor
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate, make_editor
from knowgic.evaluation.plan import EditPlan, EvalPlan
from knowgic.models.base import LoadedModel
from knowgic.scoring.base import Scorer

DEFAULT_NAIVE_SAMPLE = 100


@dataclass(frozen=True)
class NaiveRow:
    """One dataset row as the naive protocol sees it: its edit and the query indices it scores."""

    edit: EditPlan
    case_id: int
    queries: tuple[int, ...]


def naive_rows(
    plan: EvalPlan, broader_of_case: dict[int, list[tuple[str, str, str]]], known_pre: np.ndarray
) -> list[NaiveRow]:
    """Every row of the plan with its queries (see the module docstring), in dataset order."""
    rows = []
    for edit in plan.edits:
        fact_query = {f.fact: f.query for f in edit.broader}
        targets = [edit.rewrite.true_query, edit.rewrite.new_query]
        if edit.question is not None:
            targets += [edit.question.true_query, edit.question.new_query]
        neighbours = [
            q for n in edit.neighbourhood(known_pre).neighbours for q in (n.true_query, n.new_query)
        ]
        for chain in edit.chains:
            broader = [fact_query[key] for key in broader_of_case[chain.case_id]]
            queries = (*chain.step_queries, *broader, *targets, *neighbours)
            rows.append(NaiveRow(edit=edit, case_id=chain.case_id, queries=queries))
    return rows


def naive_seconds(
    loaded: LoadedModel, editor: Editor, scorer: Scorer, plan: EvalPlan, rows: Sequence[NaiveRow]
) -> float:
    """Wall-clock seconds of the naive protocol on ``rows``: apply, score one query at a time, restore."""
    model, tok = loaded.model, loaded.tokenizer
    start = time.perf_counter()
    for row in rows:
        editor.reset()
        handle = editor.apply(model, tok, [row.edit.request])
        try:
            for i in row.queries:
                scorer.score(model, tok, [plan.queries[i]], prefix=handle.prompt_prefix)
        finally:
            handle.restore()
    return time.perf_counter() - start


def model_size_mb(model: torch.nn.Module) -> float:
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    size += sum(b.numel() * b.element_size() for b in model.buffers())
    return size / 2**20


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def bootstrap_time(document: dict[str, Any], repeats: int) -> float:
    """Seconds to compute every metric's interval of ``document`` (best of ``repeats``)."""
    from knowgic.intervals import BootstrapSettings
    from knowgic.recompute import recompute_metrics

    settings = BootstrapSettings(resamples=int(document["uncertainty"]["resamples"]))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        recompute_metrics(document, settings)
        best = min(best, time.perf_counter() - start)
    return best


def run_timing(
    model: str = "knowgic-tiny",
    editor: str = "rome",
    naive_rows_measured: int | None = None,
    dataset_version: str | None = None,
    limit: int | None = None,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Time the evaluation, print its JSON line and return it as a dict."""
    from knowgic.dataset.loading import load_cases
    from knowgic.editors.registry import resolve_editor
    from knowgic.models.loading import load_model
    from knowgic.models.threads import cpu_threads
    from knowgic.scoring import make_scorer
    from knowgic.scoring.forward import measure_scoring_ratio

    request = EvaluationRequest(
        model=model,
        editor=editor,
        protocol="logprob",
        dataset_version=dataset_version,
        limit=limit,
        seed=seed,
        use_cache=False,
    )
    loaded = load_model(model, progress=False)
    # Both protocols and the bare forward pass run with the thread count evaluate() chooses.
    with cpu_threads(loaded.model, loaded.device) as threads:
        start = time.perf_counter()
        run = evaluate(request, progress=False, loaded=loaded)
        full_seconds = time.perf_counter() - start

        plan = run.plan
        version = run.document["dataset"]["version"]
        broader_of_case = {
            case.case_id: [fact.key for fact in case.broader_context.facts] for case in load_cases(version)
        }
        all_rows = naive_rows(plan, broader_of_case, run.scores.pre.known)
        n_measured = min(len(all_rows), naive_rows_measured or DEFAULT_NAIVE_SAMPLE)
        measured = (
            all_rows if n_measured == len(all_rows) else random.Random(seed).sample(all_rows, n_measured)
        )
        naive_editor, _, _ = make_editor(request, resolve_editor(editor), loaded)
        scorer = make_scorer("logprob")
        naive_measured_seconds = naive_seconds(loaded, naive_editor, scorer, plan, measured)
        naive_total = naive_measured_seconds / n_measured * len(all_rows)

        bootstrap_seconds = bootstrap_time(run.document, repeats)
        speed = measure_scoring_ratio(
            loaded.model,
            loaded.tokenizer,
            plan.queries,
            batch_size=scorer.params["batch_size"],
            repeats=repeats,
        )
    size = model_size_mb(loaded.model)
    rss = peak_rss_mb()
    report = {
        "model": model,
        "editor": editor,
        "dataset_version": version,
        "limit": limit,
        "device": loaded.device,
        "dtype": loaded.dtype,
        "rows": len(all_rows),
        "edits": len(plan.edits),
        "distinct_queries": len(plan.queries),
        "naive_queries": sum(len(r.queries) for r in all_rows),
        "full_evaluation_seconds": round(full_seconds, 3),
        "naive_rows_measured": n_measured,
        "naive_extrapolated": n_measured < len(all_rows),
        "naive_measured_seconds": round(naive_measured_seconds, 3),
        "naive_seconds_per_row": round(naive_measured_seconds / n_measured, 4),
        "naive_total_seconds": round(naive_total, 2),
        "speedup_vs_naive": round(naive_total / full_seconds, 2),
        "scoring_seconds": round(speed.scoring_warm_s, 4),
        "scoring_cold_seconds": round(speed.scoring_cold_s, 4),
        "bare_forward_seconds": round(speed.forward_s, 4),
        "scoring_vs_forward_ratio": round(speed.ratio_warm, 3),
        "scoring_vs_forward_ratio_cold": round(speed.ratio_cold, 3),
        "bare_forward_logits": "full",
        "peak_rss_mb": round(rss, 1),
        "model_size_mb": round(size, 2),
        "rss_budget_mb": round(size + 1024, 1),
        "within_rss_budget": rss < size + 1024,
        "torch_threads": threads,
        "bootstrap_seconds": round(bootstrap_seconds, 4),
        "bootstrap_resamples": run.document["uncertainty"]["resamples"],
    }
    print(json.dumps(report))
    return report
