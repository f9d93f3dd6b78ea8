"""From raw pre/post scores to the metric records of :mod:`knowgic.metrics`, and the metrics themselves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from knowgic import metrics as M
from knowgic.errors import KnowgicError
from knowgic.evaluation.harness import RunScores
from knowgic.evaluation.plan import EditPlan, EvalPlan
from knowgic.evaluation.spec import EvaluationSpec, load_evaluation_spec


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


def metric_entry(value: M.MetricValue) -> dict[str, Any]:
    entry: dict[str, Any] = {"value": value.value, "n": value.n}
    if value.value is None:
        entry["reason"] = value.reason
    return entry


def _specificity_of(out: Outcomes, kind: str) -> M.MetricValue:
    return M.specificity([n for n, k in zip(out.neighbours, out.neighbour_kinds, strict=True) if k == kind])


def _deep_editing_score(out: Outcomes) -> M.MetricValue:
    return M.deep_editing_score(
        M.indirect_fact_recovery(out.chains).value,
        M.preservation(out.preservation).value,
        M.efficacy(out.rewrite).value,
        M.specificity(out.neighbours).value,
    )


_COMPUTE: dict[str, Callable[[Outcomes], Any]] = {
    "ifr": lambda out: M.indirect_fact_recovery(out.chains),
    "ifr_uncapped": lambda out: M.indirect_fact_recovery(out.chains, capped=False),
    "ifr_by_length": lambda out: M.ifr_by_length(out.chains),
    "preservation": lambda out: M.preservation(out.preservation),
    "preservation_macro": lambda out: M.preservation_macro(out.preservation),
    "efficacy": lambda out: M.efficacy(out.rewrite),
    "efficacy_magnitude": lambda out: M.efficacy_magnitude(out.rewrite),
    "generalization": lambda out: M.generalization(out.question),
    "specificity": lambda out: M.specificity(out.neighbours),
    # Same-relation neighbours are where a method that rewrites the relation wholesale shows; the
    # fallback neighbours from other graphs are a weaker test, so both parts are reported too.
    "specificity_same_relation": lambda out: _specificity_of(out, "same-relation"),
    "specificity_other_graphs": lambda out: _specificity_of(out, "other-graphs"),
    "deep_editing_score": _deep_editing_score,
}
"""How each metric is computed from the outcomes; which metrics a run reports, their order and their
declarations come from ``spec/benchmark.yaml`` (:func:`metric_declaration_problem` checks they agree)."""


def metric_declaration_problem(spec: EvaluationSpec) -> str | None:
    """Why the spec's metrics and the ones this package computes disagree, or ``None`` when they agree."""
    undeclared = [name for name in _COMPUTE if name not in spec.metrics]
    if undeclared:
        return f"spec/benchmark.yaml declares no version for the metric(s) {', '.join(undeclared)}"
    unknown = [name for name in spec.metrics if name not in _COMPUTE]
    if unknown:
        return (
            f"spec/benchmark.yaml declares the metric(s) {', '.join(unknown)}, which this version of "
            "knowgic does not compute"
        )
    return None


def compute_metrics(out: Outcomes, spec: EvaluationSpec | None = None) -> dict[str, Any]:
    """Every declared metric as a ``{"value", "n", "reason"?}`` entry, in spec order (a metric with
    ``parts``, ``ifr_by_length``, maps each part "1".."5" to such an entry)."""
    spec = spec or load_evaluation_spec()
    problem = metric_declaration_problem(spec)
    if problem is not None:
        raise KnowgicError(problem)
    metrics: dict[str, Any] = {}
    for name in spec.metrics:
        value = _COMPUTE[name](out)
        metrics[name] = (
            {k: metric_entry(v) for k, v in value.items()} if isinstance(value, dict) else metric_entry(value)
        )
    return metrics


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
