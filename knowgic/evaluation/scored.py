"""One scored block: a plan's records and every metric computed from them, for the public and the private
chains alike.

::

    plan + RunScores ──collect_outcomes──> Outcomes ──records_of──> Records (typed chain and edit records)
                     ──knowgic.measure.compute(records, spec)──> metrics, counts
                     ──per_edit_records──> the document's per_edit (with each edit's own metrics)
                     ──ripple_outcomes──> the ripple records (one per ripple row of the plan's edits)
    scored_block(...) = {"metrics", "counts", "per_edit", "chains", "ripple", "uncertainty"}

``knowgic evaluate`` puts the public block at the top of a results document and, with a private split, the
private block under ``private`` (:mod:`knowgic.evaluation.private`). Both are the same computation anyone
repeats on the published file (:mod:`knowgic.recompute`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from knowgic.evaluation.harness import RunScores
from knowgic.evaluation.outcomes import collect_outcomes, per_edit_records, records_of, ripple_outcomes
from knowgic.evaluation.plan import EvalPlan
from knowgic.intervals import BootstrapSettings
from knowgic.measure.compute import compute
from knowgic.spec import BenchmarkSpec


def scored_block(
    plan: EvalPlan,
    run: RunScores,
    spec: BenchmarkSpec,
    settings: BootstrapSettings | None = None,
    seconds_observed: bool = True,
) -> dict[str, Any]:
    """The records of ``plan`` scored by ``run``, and every declared metric, interval and count of them (a
    plan without a ripple config has no ripple records: RippleEdits' metrics are undefined on it).

    ``seconds_observed``: whether trusted code timed each edit (not so where the runner's score stage
    replays recorded deltas: each edit's ``seconds`` is then left unknown)."""
    outcomes = collect_outcomes(plan, run)
    ripple = ripple_outcomes(plan, run)
    records = records_of(outcomes, [edit.edit_id for edit in plan.edits], () if ripple is None else ripple)
    computed = compute(records, spec, settings)
    return {
        "metrics": computed["metrics"],
        "counts": {**computed["counts"], "distinct_queries": len(plan.queries)},
        "per_edit": per_edit_records(plan, records, run, seconds_observed),
        "chains": [asdict(c) for c in records.chains],
        "ripple": [asdict(r) for r in records.ripple or ()],
        "uncertainty": computed["uncertainty"],
    }
