"""The private split's part of a results document: the same metrics, on chains submitted code never read.

    evaluate(request, private=split)                               (knowgic.dataset.private.PrivateSplit)
        private plan = the split's chains of the run's edits       (each split edit is a public edit request)
        harness: scored while each edit is in place                (RunScores.private)
        document["private"] = {dataset, edits_outside_run, metrics (+ intervals), counts, per_edit, chains,
                               uncertainty, ifr_check}

``ifr_check`` flags a run whose public and private IFR differ beyond their intervals, that is, whose two
intervals (each the cluster bootstrap over edits of :mod:`knowgic.uncertainty`, on its own chains) do not
overlap. A method that memorised the published chains recovers fewer of them after its edits (a low public
IFR) than of chains it never saw; an honest method's two figures estimate the same quantity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the leaderboard reads ifr_check from here, without torch
    from knowgic.dataset.private import PrivateSplit
    from knowgic.evaluation.harness import RunScores
    from knowgic.evaluation.plan import EvalPlan
    from knowgic.evaluation.spec import EvaluationSpec
    from knowgic.records import Case

IFR_CHECK_RULE = "flagged when the public and the private IFR intervals do not overlap"


def private_plan(
    split: PrivateSplit, public_cases: Sequence[Case], public_version: str, plan: EvalPlan
) -> tuple[EvalPlan, int]:
    """The split's plan over the run's edits (in the run's order), and how many of the split's edits the run leaves out
    (``--limit``). Refuses a split with an edit the public version does not request."""
    from knowgic.evaluation.plan import build_plan

    split.check_edits(public_cases, public_version)
    run_edits = {edit.edit_id for edit in plan.edits}
    private = build_plan(split.cases, split.aliases, edit_ids=run_edits)
    order = {edit.edit_id: index for index, edit in enumerate(plan.edits)}
    private.edits.sort(key=lambda edit: order[edit.edit_id])  # per-edit records in the run's order
    split_edits = {case.request.edit_id for case in split.cases}
    return private, len(split_edits - run_edits)


def ifr_check(public: Mapping[str, Any], private: Mapping[str, Any]) -> dict[str, Any]:
    """Public against private IFR (metric entries with intervals): the difference and the flag."""
    pub, pri = public["ifr"], private["ifr"]
    record: dict[str, Any] = {
        "public": pub["value"],
        "private": pri["value"],
        "difference": None,
        "public_interval": pub.get("interval"),
        "private_interval": pri.get("interval"),
        "flagged": False,
        "rule": IFR_CHECK_RULE,
    }
    if pub["value"] is None or pri["value"] is None:
        record["reason"] = (
            "IFR is undefined on the " + ("public" if pub["value"] is None else "private") + " chains"
        )
        return record
    record["difference"] = pri["value"] - pub["value"]
    if not pub.get("interval") or not pri.get("interval"):
        which = "public" if not pub.get("interval") else "private"
        why = (pub if which == "public" else pri).get("interval_reason") or "no interval"
        record["reason"] = f"the {which} IFR has no interval ({why})"
        return record
    (pub_low, pub_high), (pri_low, pri_high) = pub["interval"], pri["interval"]
    record["flagged"] = pub_high < pri_low or pri_high < pub_low
    return record


def private_document(
    plan: EvalPlan,
    run: RunScores,
    split: PrivateSplit,
    edits_outside_run: int,
    public_metrics: Mapping[str, Any],
    spec: EvaluationSpec,
) -> dict[str, Any]:
    """The ``private`` object of a results document (``public_metrics`` with their intervals). Its metrics
    are recomputed from its own records as the top level's are, so :func:`knowgic.recompute.check_results`
    applies to it unchanged."""
    from knowgic.evaluation.evaluate import fill_metrics
    from knowgic.evaluation.outcomes import collect_outcomes, compute_counts, per_edit_records

    outcomes = collect_outcomes(plan, run)
    block: dict[str, Any] = {
        "dataset": asdict(split.ref),
        "edits_outside_run": edits_outside_run,
        "metrics": {},
        "counts": compute_counts(plan, outcomes),
        "per_edit": per_edit_records(plan, outcomes, run),
        "chains": [asdict(c) for c in outcomes.chains],
    }
    fill_metrics(block, outcomes, spec)
    block["ifr_check"] = ifr_check(public_metrics, block["metrics"])
    return block
