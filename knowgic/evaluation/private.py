"""The private split's part of a results document: what ranking needs of it, on edits submitted code never read.

    evaluate(request, private=split)                               (knowgic.dataset.private.PrivateSplit)
        private plan = the split's edits                           (RunScores.private)
        harness: scored while each edit is in place
        records ──metric_sums──> per-edit sums ──knowgic.measure.private.private_block──>
        document["private"] = {dataset, edits_outside_run, counts, edits (opaque keys), sums, metrics,
                               uncertainty, ifr_gap}

The block publishes no case id, chain, per-chain score, per-edit text or prefix: each edit is an opaque key
(:func:`knowgic.measure.private.edit_key`), each metric its per-edit sums, from which every value and
interval is recomputed (:func:`knowgic.recompute.check_results`) and every ranking pairs runs edit by edit.

``ifr_gap`` is the flag of :mod:`knowgic.measure.gap`: the run's per-edit IFR on the private against the
public edits, calibrated by the honest editors' gaps the split's ``version.json`` records (its
``calibration``, :func:`knowgic.measure.gap.calibration_record`); not calibrated (``flagged`` null) where it
records none for this run's ranking. The leaderboard decides the flag again from the store's reference runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from knowgic.dataset.io import read_json
from knowgic.dataset.versions import VERSION_FILE
from knowgic.evaluation.outcomes import collect_outcomes, records_of
from knowgic.evaluation.plan import EvalPlan, build_plan
from knowgic.measure.compute import counts, metric_sums
from knowgic.measure.gap import edit_gap, flag_record, gap_metric, split_calibration
from knowgic.measure.private import private_block
from knowgic.measure.ranks import ranking_key
from knowgic.measure.records import Records

if TYPE_CHECKING:
    from knowgic.dataset.private import PrivateSplit
    from knowgic.evaluation.harness import RunScores
    from knowgic.records import Case
    from knowgic.spec import BenchmarkSpec


PRIVATE_NO_RIPPLE = (
    "a private split has no ripple config: RippleEdits' criteria are scored on the public data only"
)
"""Why the private block's RippleEdits metrics are null (their sums record it)."""


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
    public: Mapping[str, Any],
    spec: BenchmarkSpec,
) -> dict[str, Any]:
    """The ``private`` object of a results document.

    ``plan`` and ``run``: the split's plan and its scores; ``public``: the document being built (its
    ``config``, ``dataset``, ``counts``, ``per_edit`` and ``chains``), whose per-edit IFR the flag compares
    with the split's."""
    records = records_of(
        collect_outcomes(plan, run), [edit.edit_id for edit in plan.edits], ripple_reason=PRIVATE_NO_RIPPLE
    )
    sums = metric_sums(records, spec)
    block = private_block(
        asdict(split.ref),
        split.kind,
        edits_outside_run,
        records.edit_ids,
        sums,
        {**counts(records), "distinct_queries": len(plan.queries)},
        spec,
    )
    metric = gap_metric(spec)
    public_sums = metric_sums(Records.from_document(public), spec)[metric]
    found = split_calibration(_calibration_of(split), ranking_key(public).digest, split.ref.sha256, metric)
    if not split.ranks:  # a drill's chains are the public edits': no gap to speak of
        found = "the split is a drill (chains of the public edits): no flag"
    block["ifr_gap"] = flag_record(edit_gap(public_sums, sums[metric]), metric, found)
    return block


def _calibration_of(split: PrivateSplit) -> Any:
    """The ``calibration`` record of the split's ``version.json`` (None where it has none)."""
    info = read_json(split.folder / VERSION_FILE)
    return info.get("calibration") if isinstance(info, Mapping) else None
