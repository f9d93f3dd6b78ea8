r"""Every built-in metric's computation: one registered function each, from a run's records to its per-edit
sums :math:`a_e, b_e` (see :mod:`knowgic.measure.registry`). The declarations (label, direction, kind,
bounds, parts) are in ``spec/benchmark.yaml``; the per-item formulas, in the paper's notation, are in
:mod:`knowgic.metrics`.

==============================  =====================================================  ===================
metric                          :math:`a_e`                                            :math:`b_e`
==============================  =====================================================  ===================
``ifr``                         :math:`\sum_{i \in e} w_i \min(1, R'_i/R_i)`            :math:`\sum_{i \in e} w_i`
``ifr_uncapped``                :math:`\sum_{i \in e} w_i R'_i/R_i`                     :math:`\sum_{i \in e} w_i`
``ifr_indirect``                IFR's, over the chains that do not restate the edit    IFR's, idem
``ifr_by_length`` (part n)      IFR's, over the edit's chains of length n              IFR's, length n
``ifr_per_edit``                the edit's own IFR, a_e/b_e of ``ifr``                 1 (0 without one)
``ifr_by_length_per_edit``      the edit's own IFR at length n                         1 (0 without one)
``preservation``                :math:`\sum_{t \in e} \min(1, p'_t/p_t)`                known facts of e
``preservation_macro``          the edit's own Preservation, a_e/b_e of ``preservation``  1 (0 without one)
``efficacy``                    :math:`[p'(o^*) > p'(o^c)]`                             1
``efficacy_magnitude``          :math:`p'(o^*) - p'(o^c)`                               1
``generalization``              the question form's outcome                            1 (0 without one)
``specificity``                 known neighbours that keep their answer                known neighbours
``specificity_same_relation``   Specificity's, edits with same-relation neighbours     idem
``specificity_other_graphs``    Specificity's, edits with neighbours of other graphs   idem
``deep_editing_score``          harmonic mean of 1 - IFR, Preservation, Efficacy, Specificity (composite)
``ripple_accuracy`` (part c)    mean over e's kept criterion-c queries of              1 (0 without one)
                                [greedy continuation contains the target]
``ripple_probability`` (part c) mean over e's kept criterion-c queries with a           1 (0 without one)
                                competitor of :math:`[p'(\text{target}) > p'(\text{competitor})]`
==============================  =====================================================  ===================

The sums run over active chains with :math:`R_i > 0` (weights :math:`w_i = 1/\sqrt{n_i}`) and over facts the
unedited model knows; an undefined metric carries the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from knowgic import metrics as M
from knowgic.measure.records import EditRecord, Records, RippleRecord
from knowgic.measure.registry import EditSums, MetricRegistry
from knowgic.ripple.queries import CRITERIA

METRICS = MetricRegistry()
"""The registry :func:`knowgic.measure.compute.compute` uses by default: every built-in metric."""

NO_ACTIVE_CHAINS = "no active chains: the unedited model does not know every step of any chain"


NOT_RECORDED_RESTATES = (
    "the chain records do not say which chains restate the edit (results written before chains recorded "
    "restates_edit): rerun the evaluation"
)


def _chain_sums(
    records: Records, capped: bool, length: int | None = None, indirect: bool = False
) -> EditSums:
    index = records.index()
    a, b = np.zeros(len(records.edits)), np.zeros(len(records.edits))
    if indirect and any(c.restates_edit is None for c in records.chains):
        return EditSums.of(a, b, 0, NOT_RECORDED_RESTATES)
    selected = [
        c
        for c in records.chains
        if (length is None or c.length == length) and not (indirect and c.restates_edit)
    ]
    counted = [c for c in selected if c.active and c.r_pre > 0.0]
    for chain in counted:
        e, w = index[chain.edit_id], M.chain_weight(chain.length)
        a[e] += w * M.retention_ratio(chain.r_pre, chain.r_post, capped)
        b[e] += w
    empty = None if selected else ("no chains" if length is None else f"no chains of length {length}")
    if indirect and not selected and records.chains:
        empty = "every chain restates the edit"
    return EditSums.of(a, b, len(counted), empty, None if counted else NO_ACTIVE_CHAINS)


@METRICS.register("ifr")
def ifr(records: Records) -> EditSums:
    return _chain_sums(records, capped=True)


@METRICS.register("ifr_uncapped")
def ifr_uncapped(records: Records) -> EditSums:
    return _chain_sums(records, capped=False)


@METRICS.register("ifr_indirect")
def ifr_indirect(records: Records) -> EditSums:
    return _chain_sums(records, capped=True, indirect=True)


@METRICS.register("ifr_by_length")
def ifr_by_length(records: Records) -> dict[str, EditSums]:
    return {str(n): _chain_sums(records, True, n) for n in range(1, M.MAX_CHAIN_LENGTH + 1)}


def _own_ifr(records: Records, length: int | None = None) -> EditSums:
    """Each edit's own IFR (its a_e/b_e of IFR) as one value, every edit with active chains weighing the same."""
    pooled = _chain_sums(records, True, length)
    if pooled.reason is not None:
        return pooled
    own = [
        float(a / b) if b > 0 else None
        for a, b in zip(pooled.ratio.numerator, pooled.ratio.denominator, strict=True)
    ]
    return _edit_means(own, NO_ACTIVE_CHAINS)


@METRICS.register("ifr_per_edit")
def ifr_per_edit(records: Records) -> EditSums:
    return _own_ifr(records)


@METRICS.register("ifr_by_length_per_edit")
def ifr_by_length_per_edit(records: Records) -> dict[str, EditSums]:
    return {str(n): _own_ifr(records, n) for n in range(1, M.MAX_CHAIN_LENGTH + 1)}


@METRICS.register("preservation")
def preservation(records: Records) -> EditSums:
    known = [e.preservation_n for e in records.edits]
    return EditSums.of(
        [e.preservation_sum for e in records.edits],
        known,
        sum(known),
        None if records.preservation_facts else "no broader-context facts",
        None if sum(known) else "the unedited model knows none of the broader-context facts",
    )


def _edit_means(values: Sequence[float | None], reason: str) -> EditSums:
    """One value per edit that has one, every edit weighing the same."""
    defined = [v is not None for v in values]
    return EditSums.of(
        [0.0 if v is None else float(v) for v in values],
        [float(d) for d in defined],
        sum(defined),
        None if any(defined) else reason,
    )


@METRICS.register("preservation_macro")
def preservation_macro(records: Records) -> EditSums:
    own = [e.preservation_sum / e.preservation_n if e.preservation_n else None for e in records.edits]
    return _edit_means(own, "no edit has a known broader-context fact")


@METRICS.register("efficacy")
def efficacy(records: Records) -> EditSums:
    return _edit_means([float(M.prefers_new(e.p_new, e.p_true)) for e in records.edits], "no edits")


@METRICS.register("efficacy_magnitude")
def efficacy_magnitude(records: Records) -> EditSums:
    return _edit_means([e.p_new - e.p_true for e in records.edits], "no edits")


@METRICS.register("generalization")
def generalization(records: Records) -> EditSums:
    return _edit_means(
        [e.generalization for e in records.edits], "no edit has a question form of the edited fact"
    )


def _specificity(records: Records, neighbourhood: str | None = None) -> EditSums:
    """Known neighbours that keep their answer, of the edits whose neighbourhood is of that kind (all)."""

    def counted(e: EditRecord) -> bool:
        return neighbourhood is None or e.neighbourhood == neighbourhood

    known = [e.neighbours_known if counted(e) else 0 for e in records.edits]
    return EditSums.of(
        [e.specificity_kept if counted(e) else 0 for e in records.edits],
        known,
        sum(known),
        None if any(e.neighbours for e in records.edits if counted(e)) else "no neighbourhood facts",
        None if sum(known) else "the unedited model knows none of the neighbourhood facts",
    )


@METRICS.register("specificity")
def specificity(records: Records) -> EditSums:
    return _specificity(records)


# Same-relation neighbours are where a method that rewrites the relation wholesale shows; the fallback
# neighbours from other graphs are a weaker test, so both parts are reported too.
@METRICS.register("specificity_same_relation")
def specificity_same_relation(records: Records) -> EditSums:
    return _specificity(records, "same-relation")


@METRICS.register("specificity_other_graphs")
def specificity_other_graphs(records: Records) -> EditSums:
    return _specificity(records, "other-graphs")


@METRICS.register_composite("deep_editing_score")
def deep_editing_score(values: Sequence[float | None]) -> M.MetricValue:
    return M.deep_editing_score(*values)


def _ripple_sums(records: Records, outcome: str) -> dict[str, EditSums]:
    """RippleEdits' per-edit mean of one outcome (``accuracy`` or ``probability``) per criterion: a_e the mean
    over e's kept queries of the criterion that have the outcome, b_e = 1 (0 without one)."""
    zeros = np.zeros(len(records.edits))
    if records.ripple is None:
        return {c: EditSums.of(zeros, zeros, 0, records.ripple_reason) for c in CRITERIA}

    def value(r: RippleRecord) -> float | None:
        if outcome == "accuracy":
            return r.accuracy
        if r.p_target is None or r.p_competitor is None:
            return None
        return float(M.prefers_new(r.p_target, r.p_competitor))

    by_edit: dict[tuple[str, str], list[float]] = {}
    for r in records.ripple:
        v = value(r) if r.kept else None
        if v is not None:
            by_edit.setdefault((r.edit_id, r.criterion), []).append(v)
    what = "with a competitor " if outcome == "probability" else ""
    out = {}
    for c in CRITERIA:
        own = [by_edit.get((e.edit_id, c)) for e in records.edits]
        out[c] = _edit_means(
            [None if v is None else sum(v) / len(v) for v in own],
            f"no edit has a {c} query {what}whose condition facts the unedited model knows",
        )
    return out


@METRICS.register("ripple_accuracy")
def ripple_accuracy(records: Records) -> dict[str, EditSums]:
    return _ripple_sums(records, "accuracy")


@METRICS.register("ripple_probability")
def ripple_probability(records: Records) -> dict[str, EditSums]:
    return _ripple_sums(records, "probability")
