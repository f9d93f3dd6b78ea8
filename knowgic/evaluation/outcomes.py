"""From raw pre/post scores to the metric records of :mod:`knowgic.metrics`, and the metrics themselves."""

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


METRIC_NAMES = (
    "ifr",
    "ifr_uncapped",
    "ifr_by_length",
    "preservation",
    "preservation_macro",
    "efficacy",
    "efficacy_magnitude",
    "generalization",
    "specificity",
    "specificity_same_relation",
    "specificity_other_graphs",
    "deep_editing_score",
)
"""The keys of :func:`compute_metrics`; each must be declared (with its version) in the benchmark spec."""


def metric_entry(value: M.MetricValue) -> dict[str, Any]:
    entry: dict[str, Any] = {"value": value.value, "n": value.n}
    if value.value is None:
        entry["reason"] = value.reason
    return entry


def compute_metrics(out: Outcomes) -> dict[str, Any]:
    """All headline metrics as ``{"value", "n", "reason"?}`` entries (``ifr_by_length`` maps "1".."5")."""
    ifr = M.indirect_fact_recovery(out.chains)
    pres = M.preservation(out.preservation)
    eff = M.efficacy(out.rewrite)
    spec = M.specificity(out.neighbours)
    return {
        "ifr": metric_entry(ifr),
        "ifr_uncapped": metric_entry(M.indirect_fact_recovery(out.chains, capped=False)),
        "ifr_by_length": {k: metric_entry(v) for k, v in M.ifr_by_length(out.chains).items()},
        "preservation": metric_entry(pres),
        "preservation_macro": metric_entry(M.preservation_macro(out.preservation)),
        "efficacy": metric_entry(eff),
        "efficacy_magnitude": metric_entry(M.efficacy_magnitude(out.rewrite)),
        "generalization": metric_entry(M.generalization(out.question)),
        "specificity": metric_entry(spec),
        # Same-relation neighbours are where a method that rewrites the relation wholesale shows; the
        # fallback neighbours from other graphs are a weaker test, so both parts are reported too.
        "specificity_same_relation": metric_entry(
            M.specificity(
                [n for n, k in zip(out.neighbours, out.neighbour_kinds, strict=True) if k == "same-relation"]
            )
        ),
        "specificity_other_graphs": metric_entry(
            M.specificity(
                [n for n, k in zip(out.neighbours, out.neighbour_kinds, strict=True) if k == "other-graphs"]
            )
        ),
        "deep_editing_score": metric_entry(
            M.deep_editing_score(ifr.value, pres.value, eff.value, spec.value)
        ),
    }


def compute_counts(plan: EvalPlan, out: Outcomes) -> dict[str, int]:
    return {
        "rows": sum(len(e.chains) for e in plan.edits),
        "chains": len(out.chains),
        "active_chains": sum(c.active for c in out.chains),
        "recoverable_chains": M.recoverable_chains(out.chains),
        "edits": len(plan.edits),
        "preservation_facts": len(out.preservation),
        "preservation_facts_known": sum(p.known_pre for p in out.preservation),
        "specificity_facts": len(out.neighbours),
        "specificity_facts_known": sum(n.known_pre for n in out.neighbours),
        "generalization_edits": len(out.question),
        "distinct_queries": len(plan.queries),
    }


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
    # Sufficient statistics of the per-edit sums the bootstrap resamples (knowgic.uncertainty), recorded
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
