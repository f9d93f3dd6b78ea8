"""Speed and memory benchmark (``knowgic bench``): prints one JSON line of ratios measured in one process.

- ``speedup_vs_naive``: the naive protocol (for each row: score its queries on the pristine model one at a
  time, apply the row's edit, score them again one at a time, restore) over the full evaluation (edits
  grouped, queries deduplicated and batched, pre-edit scores computed once). The naive protocol is timed
  on a uniform random sample of rows (seeded) and its mean per-row time scaled to all rows, unless
  ``--naive-rows`` equals the row count; the JSON says which.
- ``scoring_vs_forward_ratio``: the logprob scorer's time over a bare batched forward pass of the same
  tokens (no scoring), both on the unedited model.
- ``peak_rss_mb`` against ``model_size_mb + 1024``.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from typing import Any

import torch

from knowgic.evaluation.evaluate import EvaluationRequest, evaluate, make_editor
from knowgic.evaluation.plan import EditPlan, EvalPlan, build_plan
from knowgic.models.base import LoadedModel
from knowgic.scoring.base import Scorer

DEFAULT_NAIVE_SAMPLE = 100


def _row_queries(edit: EditPlan, case_id: int) -> list[int]:
    """What the naive protocol scores for one row: its chain, its edit's broader context, targets, neighbours."""
    chain = next(c for c in edit.chains if c.case_id == case_id)
    needed = list(chain.step_queries) + [f.query for f in edit.broader]
    needed += [edit.rewrite.true_query, edit.rewrite.new_query]
    if edit.question is not None:
        needed += [edit.question.true_query, edit.question.new_query]
    for n in edit.neighbours:
        needed += [n.true_query, n.new_query]
    return needed


def naive_seconds_per_row(
    loaded: LoadedModel, editor: Any, scorer: Scorer, plan: EvalPlan, rows: list[tuple[EditPlan, int]]
) -> float:
    model, tok = loaded.model, loaded.tokenizer
    start = time.perf_counter()
    for edit, case_id in rows:
        queries = [plan.queries[i] for i in _row_queries(edit, case_id)]
        for q in queries:
            scorer.score(model, tok, [q])
        editor.reset()
        handle = editor.apply(model, tok, [edit.request])
        for q in queries:
            scorer.score(model, tok, [q], prefix=handle.prompt_prefix)
        handle.restore()
    return (time.perf_counter() - start) / max(1, len(rows))


def model_size_mb(model: torch.nn.Module) -> float:
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    size += sum(b.numel() * b.element_size() for b in model.buffers())
    return size / 2**20


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def run_benchmark(
    model: str = "knowgic-tiny",
    editor: str = "rome",
    naive_rows: int | None = None,
    dataset_version: str | None = None,
) -> dict[str, Any]:
    from knowgic.dataset.loading import load_aliases, load_cases
    from knowgic.models.loading import load_model
    from knowgic.scoring import make_scorer
    from knowgic.scoring.forward import bare_forward_seconds

    loaded = load_model(model, progress=False)
    request = EvaluationRequest(model=model, editor=editor, dataset_version=dataset_version, use_cache=False)

    start = time.perf_counter()
    run = evaluate(request, progress=False, loaded=loaded)
    full_seconds = time.perf_counter() - start

    version = run.document["dataset"]["version"]
    plan = build_plan(load_cases(version), load_aliases(version))
    scorer = make_scorer("logprob")
    from knowgic.editors.registry import resolve_editor

    edit_obj, _, _ = make_editor(request, resolve_editor(editor), loaded)
    all_rows = [(edit, chain.case_id) for edit in plan.edits for chain in edit.chains]
    n_sample = min(len(all_rows), naive_rows or DEFAULT_NAIVE_SAMPLE)
    sample = all_rows if n_sample == len(all_rows) else random.Random(0).sample(all_rows, n_sample)
    per_row = naive_seconds_per_row(loaded, edit_obj, scorer, plan, sample)
    naive_total = per_row * len(all_rows)

    # Scorer vs a bare forward pass on the same tokens, same batch size, unedited model.
    start = time.perf_counter()
    scorer.score(loaded.model, loaded.tokenizer, plan.queries)
    scoring = time.perf_counter() - start
    forward = bare_forward_seconds(loaded.model, loaded.tokenizer, plan.queries, scorer.params["batch_size"])

    size = model_size_mb(loaded.model)
    rss = peak_rss_mb()
    report = {
        "model": model,
        "editor": editor,
        "dataset_version": version,
        "rows": len(all_rows),
        "edits": len(plan.edits),
        "distinct_queries": len(plan.queries),
        "full_evaluation_seconds": round(full_seconds, 3),
        "naive_seconds_per_row": round(per_row, 4),
        "naive_rows_measured": n_sample,
        "naive_extrapolated": n_sample < len(all_rows),
        "naive_total_seconds": round(naive_total, 2),
        "speedup_vs_naive": round(naive_total / full_seconds, 2),
        "scoring_seconds": round(scoring, 4),
        "bare_forward_seconds": round(forward, 4),
        "scoring_vs_forward_ratio": round(scoring / forward, 3),
        "peak_rss_mb": round(rss, 1),
        "model_size_mb": round(size, 2),
        "rss_budget_mb": round(size + 1024, 1),
        "within_rss_budget": rss < size + 1024,
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(report))
    return report
