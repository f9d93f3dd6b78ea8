"""From raw pre/post scores to a run's records: one per chain and one per edit (what every metric is
computed from, :mod:`knowgic.measure`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from knowgic import metrics as M
from knowgic.evaluation.harness import RunScores
from knowgic.evaluation.plan import EvalPlan
from knowgic.measure.definitions import METRICS
from knowgic.measure.records import EditRecord, Records, RippleRecord


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
                    restates_edit=chain.restates_edit,
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


def edit_record(
    edit_id: str,
    pairs: Sequence[M.PreservationPair],
    rewrite: M.TargetOutcome,
    question: M.TargetOutcome | None,
    neighbours: Sequence[M.NeighbourOutcome],
    neighbourhood: str,
) -> EditRecord:
    """One edit's record from its item outcomes, by the per-item formulas of :mod:`knowgic.metrics`: its
    rewrite and question outcomes, and the sums over its broader-context facts and neighbours that the
    metrics are computed from (recorded exactly, so that a reader recomputes every number)."""
    counted = [p for p in pairs if p.known_pre and p.p_pre > 0.0]
    return EditRecord(
        edit_id=edit_id,
        p_new=rewrite.p_new,
        p_true=rewrite.p_true,
        generalization=None if question is None else float(M.prefers_new(question.p_new, question.p_true)),
        preservation_facts=len(pairs),
        preservation_facts_known=sum(p.known_pre for p in pairs),
        preservation_sum=float(sum(M.preservation_ratio(p.p_pre, p.p_post) for p in counted)),
        preservation_n=len(counted),
        neighbourhood=neighbourhood,
        neighbours=len(neighbours),
        neighbours_known=sum(n.known_pre for n in neighbours),
        specificity_kept=sum(n.known_pre and M.keeps_answer(n.p_true_post, n.p_new_post) for n in neighbours),
    )


def ripple_outcomes(plan: EvalPlan, run: RunScores) -> tuple[RippleRecord, ...] | None:
    """One record per ripple row of the plan's edits (edit order, then the config's): its conditions known
    before the edit and, for a kept row, its accuracy and p' of target and competitor after it. None when
    the ripple queries were not scored (a plan without a ripple config)."""
    if not plan.has_ripple or run.ripple_pre is None:
        return None
    known = run.ripple_pre.known
    out = []
    for edit in plan.edits:
        p = run.ripple_post[edit.edit_id].lookup() if edit.ripple else {}
        acc = run.ripple_accuracy[edit.edit_id].lookup() if edit.ripple else {}
        for q in edit.ripple:
            kept = q.kept(known)
            out.append(
                RippleRecord(
                    edit_id=edit.edit_id,
                    query_id=q.query_id,
                    criterion=q.criterion,
                    conditions=len(q.conditions),
                    conditions_known=sum(bool(known[i]) for i in q.conditions),
                    kept=kept,
                    accuracy=acc[q.target][0] if kept else None,
                    p_target=p[q.target][0] if kept else None,
                    p_competitor=p[q.competitor][0] if kept and q.competitor is not None else None,
                    has_competitor=q.competitor is not None,
                )
            )
    return tuple(out)


def records_of(
    out: Outcomes,
    edit_ids: Sequence[str],
    ripple: tuple[RippleRecord, ...] | None = None,
    ripple_reason: str | None = None,
) -> Records:
    """The typed records of ``out``, edits in the order of ``edit_ids``; ``ripple``: its ripple records
    (None: none were scored, for ``ripple_reason``)."""
    edits = []
    for edit_id in edit_ids:
        question = [o for o in out.question if o.edit_id == edit_id]
        edits.append(
            edit_record(
                edit_id,
                [p for p in out.preservation if p.edit_id == edit_id],
                next(o for o in out.rewrite if o.edit_id == edit_id),
                question[0] if question else None,
                [n for n in out.neighbours if n.edit_id == edit_id],
                out.neighbourhoods[edit_id],
            )
        )
    facts = sum(e.preservation_facts or 0 for e in edits)
    if ripple_reason is None:
        return Records(tuple(edits), tuple(out.chains), facts, ripple)
    return Records(tuple(edits), tuple(out.chains), facts, ripple, ripple_reason)


NO_QUESTION = "the edit has no question form (no step with its subject and target_true has a question)"


def per_edit_records(
    plan: EvalPlan, records: Records, run: RunScores, seconds_observed: bool = True
) -> list[dict[str, Any]]:
    """One document record per edit: the request, the typed record's fields, the editor's diagnostics,
    and the edit's own IFR, Preservation and Specificity, each the registered metric computed on that
    edit's records alone (:mod:`knowgic.measure`), with the reason where it is undefined."""
    out = []
    for edit, record in zip(plan.edits, records.edits, strict=True):
        r = edit.request
        own = records.only(edit.edit_id)
        values = {name: METRICS.sums(name, own).value for name in ("ifr", "preservation", "specificity")}
        reasons = {name: str(v.reason) for name, v in values.items() if v.value is None}
        if record.generalization is None:
            reasons["generalization"] = NO_QUESTION
        chains = [c for c in records.chains if c.edit_id == edit.edit_id]
        out.append(
            {
                "edit_id": edit.edit_id,
                "subject": r.subject,
                "prompt": r.prompt,
                "target_true": r.target_true,
                "target_new": r.target_new,
                "case_ids": list(edit.case_ids),
                "chains": len(chains),
                "active_chains": sum(c.active for c in chains),
                "ifr": values["ifr"].value,
                "preservation": values["preservation"].value,
                "preservation_facts": record.preservation_facts,
                "preservation_facts_known": record.preservation_facts_known,
                "preservation_sum": record.preservation_sum,
                "preservation_n": record.preservation_n,
                "p_new": record.p_new,
                "p_true": record.p_true,
                "efficacy": float(M.prefers_new(record.p_new, record.p_true)),
                "generalization": record.generalization,
                "specificity": values["specificity"].value,
                # Why each null metric above is null (the same reasons as the top-level metrics give).
                "reasons": {
                    k: reasons[k]
                    for k in ("ifr", "preservation", "generalization", "specificity")
                    if k in reasons
                },
                "neighbourhood": record.neighbourhood,
                "neighbours": record.neighbours,
                "neighbours_known": record.neighbours_known,
                "specificity_kept": record.specificity_kept,
                # A replayed edit's seconds would be the copy of its tensors, not the editor's work:
                # unknown rather than reported as something else.
                "seconds": run.edit_seconds.get(edit.edit_id) if seconds_observed else None,
                "info": _jsonable(run.edit_info.get(edit.edit_id, {})),
                # What an in-context editor put before every query of this edit (sequential: the edits'
                # prefixes joined in order are what was scored), so a reader can see whether it carries
                # answers.
                "prompt_prefix": run.edit_prefix.get(edit.edit_id, ""),
            }
        )
    return out


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
