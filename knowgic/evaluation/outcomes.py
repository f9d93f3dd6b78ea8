"""From raw pre/post scores to a run's records: one per chain and one per edit (what every metric is
computed from, :mod:`knowgic.measure`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowgic import metrics as M
from knowgic.evaluation.harness import RunScores
from knowgic.evaluation.plan import EditPlan, EvalPlan


@dataclass
class Outcomes:
    chains: list[M.ChainOutcome]
    preservation: list[M.PreservationPair]
    rewrite: list[M.TargetOutcome]
    question: list[M.TargetOutcome]
    neighbours: list[M.NeighbourOutcome]
    neighbour_kinds: list[str]
    neighbourhoods: dict[str, str] = field(default_factory=dict)  # edit id -> kind of its neighbourhood


def collect_outcomes(plan: EvalPlan, run: RunScores) -> Outcomes:
    pre_p, pre_known = run.pre.p, run.pre.known
    out = Outcomes(chains=[], preservation=[], rewrite=[], question=[], neighbours=[], neighbour_kinds=[])
    for edit in plan.edits:
        post = run.post[edit.edit_id].lookup()
        for chain in edit.chains:
            steps = chain.step_queries
            out.chains.append(
                M.ChainOutcome(
                    case_id=chain.case_id,
                    edit_id=edit.edit_id,
                    length=len(steps),
                    active=M.chain_is_active(bool(pre_known[i]) for i in steps),
                    r_pre=M.chain_reliability(float(pre_p[i]) for i in steps),
                    r_post=M.chain_reliability(post[i][0] for i in steps),
                    known_post=all(post[i][1] for i in steps),
                )
            )
        for fact in edit.broader:
            out.preservation.append(
                M.PreservationPair(
                    edit_id=edit.edit_id,
                    fact=fact.fact,
                    p_pre=float(pre_p[fact.query]),
                    p_post=post[fact.query][0],
                    known_pre=bool(pre_known[fact.query]),
                )
            )
        out.rewrite.append(
            M.TargetOutcome(edit.edit_id, post[edit.rewrite.new_query][0], post[edit.rewrite.true_query][0])
        )
        if edit.question is not None:
            out.question.append(
                M.TargetOutcome(
                    edit.edit_id, post[edit.question.new_query][0], post[edit.question.true_query][0]
                )
            )
        hood = edit.neighbourhood(pre_known)
        out.neighbourhoods[edit.edit_id] = hood.kind
        for n in hood.neighbours:
            out.neighbours.append(
                M.NeighbourOutcome(
                    edit_id=edit.edit_id,
                    fact=n.fact,
                    p_true_post=post[n.true_query][0],
                    p_new_post=post[n.new_query][0],
                    known_pre=bool(pre_known[n.true_query]),
                )
            )
            out.neighbour_kinds.append(hood.kind)
    return out


def per_edit_records(plan: EvalPlan, out: Outcomes, run: RunScores) -> list[dict[str, Any]]:
    """One record per edit with its own metrics, for the per-edit table and plots."""
    records = []
    for edit in plan.edits:
        chains = [c for c in out.chains if c.edit_id == edit.edit_id]
        pairs = [p for p in out.preservation if p.edit_id == edit.edit_id]
        rewrite = [o for o in out.rewrite if o.edit_id == edit.edit_id]
        question = [o for o in out.question if o.edit_id == edit.edit_id]
        neighbours = [n for n in out.neighbours if n.edit_id == edit.edit_id]
        records.append(
            _edit_record(
                edit, chains, pairs, rewrite, question, neighbours, out.neighbourhoods[edit.edit_id], run
            )
        )
    return records


def _edit_record(
    edit: EditPlan,
    chains: list[M.ChainOutcome],
    pairs: list[M.PreservationPair],
    rewrite: list[M.TargetOutcome],
    question: list[M.TargetOutcome],
    neighbours: list[M.NeighbourOutcome],
    neighbourhood: str,
    run: RunScores,
) -> dict[str, Any]:
    r = edit.request
    ifr = M.indirect_fact_recovery(chains)
    preservation = M.preservation(pairs)
    specificity = M.specificity(neighbours)
    # Sufficient statistics of the per-edit sums the bootstrap resamples (knowgic.intervals), recorded
    # exactly so that an interval can be recomputed from results.json alone.
    pres_counted = [p for p in pairs if p.known_pre and p.p_pre > 0.0]
    pres_sum = float(sum(min(1.0, p.p_post / p.p_pre) for p in pres_counted))
    generalization = (
        M.MetricValue(float(question[0].p_new > question[0].p_true), 1)
        if question
        else M.MetricValue.undefined(
            "the edit has no question form (no step with its subject and target_true has a question)"
        )
    )
    per_metric = {
        "ifr": ifr,
        "preservation": preservation,
        "generalization": generalization,
        "specificity": specificity,
    }
    return {
        "edit_id": edit.edit_id,
        "subject": r.subject,
        "prompt": r.prompt,
        "target_true": r.target_true,
        "target_new": r.target_new,
        "case_ids": list(edit.case_ids),
        "chains": len(chains),
        "active_chains": sum(c.active for c in chains),
        "ifr": ifr.value,
        "preservation": preservation.value,
        "preservation_facts": len(pairs),
        "preservation_facts_known": sum(p.known_pre for p in pairs),
        "preservation_sum": pres_sum,
        "preservation_n": len(pres_counted),
        "p_new": rewrite[0].p_new,
        "p_true": rewrite[0].p_true,
        "efficacy": float(rewrite[0].p_new > rewrite[0].p_true),
        "generalization": generalization.value,
        "specificity": specificity.value,
        # Why each null metric above is null (the same reasons as the top-level metrics give).
        "reasons": {name: str(v.reason) for name, v in per_metric.items() if v.value is None},
        "neighbourhood": neighbourhood,
        "neighbours": len(neighbours),
        "neighbours_known": sum(n.known_pre for n in neighbours),
        "specificity_kept": sum(n.known_pre and n.p_true_post > n.p_new_post for n in neighbours),
        "seconds": run.edit_seconds.get(edit.edit_id),
        "info": _jsonable(run.edit_info.get(edit.edit_id, {})),
        # What an in-context editor put before every query of this edit (sequential: the edits' prefixes
        # joined in order are what was scored), so a reader can see whether it carries answers.
        "prompt_prefix": run.edit_prefix.get(edit.edit_id, ""),
    }


def _jsonable(value: Any) -> Any:
    """Editor diagnostics as JSON: numbers, strings, lists and dicts; tensors and others as strings/floats."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if number == number and abs(number) != float("inf") else None
