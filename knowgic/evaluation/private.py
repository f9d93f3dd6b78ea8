"""The private split's part of a results document: the same metrics, on chains submitted code never read.

    evaluate(request, private=split)                               (knowgic.dataset.private.PrivateSplit)
        private plan = the split's chains of the run's edits       (each split edit is a public edit request)
        harness: scored while each edit is in place                (RunScores.private)
        document["private"] = {dataset, edits_outside_run, metrics (+ intervals), counts, per_edit, chains,
                               uncertainty, ifr_check}

``ifr_check`` flags a run whose public and private IFR differ beyond their intervals, that is, whose two
intervals (each the cluster bootstrap over edits of :mod:`knowgic.intervals`, on its own chains) do not
overlap. A method that memorised the published chains recovers fewer of them after its edits (a low public
IFR) than of chains it never saw; an honest method's two figures estimate the same quantity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from knowgic.evaluation.plan import EvalPlan, build_plan
from knowgic.evaluation.scored import scored_block
from knowgic.measure.compare import ifr_check

if TYPE_CHECKING:
    from knowgic.dataset.private import PrivateSplit
    from knowgic.evaluation.harness import RunScores
    from knowgic.records import Case
    from knowgic.spec import BenchmarkSpec


def private_plan(
    split: PrivateSplit, public_cases: Sequence[Case], public_version: str, plan: EvalPlan
) -> tuple[EvalPlan, int]:
    """The split's plan, applied after the run's own, and how many of the split's edits it leaves out.

    A disjoint split: every one of its edits, in its own plan order (none left out). A drill (chains of
    the public edits): the run's edits only (``--limit``), in the run's order."""
    if split.ranks:
        return build_plan(split.cases, split.aliases), 0
    split.check_edits(public_cases, public_version)
    run_edits = {edit.edit_id for edit in plan.edits}
    private = build_plan(split.cases, split.aliases, edit_ids=run_edits)
    order = {edit.edit_id: index for index, edit in enumerate(plan.edits)}
    private.edits.sort(key=lambda edit: order[edit.edit_id])  # per-edit records in the run's order
    split_edits = {case.request.edit_id for case in split.cases}
    return private, len(split_edits - run_edits)


def private_document(
    plan: EvalPlan,
    run: RunScores,
    split: PrivateSplit,
    edits_outside_run: int,
    public_metrics: Mapping[str, Any],
    spec: BenchmarkSpec,
    seconds_observed: bool = True,
) -> dict[str, Any]:
    """The ``private`` object of a results document (``public_metrics`` with their intervals): the same
    scored block as the top level's (:func:`knowgic.evaluation.scored.scored_block`), so
    :func:`knowgic.recompute.check_results` applies to it unchanged."""
    block = scored_block(plan, run, spec, seconds_observed=seconds_observed)
    return {
        "dataset": asdict(split.ref),
        "edits_outside_run": edits_outside_run,
        **block,
        "ifr_check": ifr_check(public_metrics, block["metrics"]),
    }
