"""The benchmark's per-item formulas, in the paper's notation, as pure functions of scores (no model, no I/O).

Each metric *aggregates* these over a run's items and edits in one registered function
(:mod:`knowgic.measure.definitions`); this module holds what one chain, fact, prompt or neighbour
contributes, the record types the evaluation hands over, and the deep-editing score's harmonic mean.

Notation (DESIGN.md, "Metrics"): ``p`` is a query's score before the edit and ``p'`` after; a chain
``c_i`` of length ``n_i`` has step scores ``p_{i,1..n_i}``. A metric's value is a :class:`MetricValue`,
whose ``value`` is ``None`` (with a ``reason``) when the metric is undefined on the given data, never a
silent 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_CHAIN_LENGTH = 5


@dataclass(frozen=True)
class MetricValue:
    """A metric's value over ``n`` items, or ``None`` with the reason it cannot be computed."""

    value: float | None
    n: int
    reason: str | None = None

    @classmethod
    def undefined(cls, reason: str, n: int = 0) -> MetricValue:
        return cls(value=None, n=n, reason=reason)


@dataclass(frozen=True)
class ChainOutcome:
    """One implication chain, scored before and after an edit.

    ``active``: the pre-edit model knows every step. ``r_pre``/``r_post`` are the reliabilities R, R'.
    ``known_post``: the edited model still knows every step by the protocol's rule (``None``: not recorded).
    ``restates_edit``: the chain is one step asking the edited fact itself (the dataset row's
    ``flags.chain_restates_edit``; ``None``: not recorded, as in documents written before it was).
    """

    case_id: int
    edit_id: str
    length: int
    active: bool
    r_pre: float
    r_post: float
    known_post: bool | None = None
    restates_edit: bool | None = None


@dataclass(frozen=True)
class PreservationPair:
    """A distinct (edit, broader-context fact) pair: the fact's score before and after the edit."""

    edit_id: str
    fact: tuple[str, str, str]
    p_pre: float
    p_post: float
    known_pre: bool


@dataclass(frozen=True)
class TargetOutcome:
    """Post-edit scores of the new and the true target on one prompt (rewrite prompt or question form)."""

    edit_id: str
    p_new: float
    p_true: float


@dataclass(frozen=True)
class NeighbourOutcome:
    """A neighbourhood fact of an edit: post-edit scores of its own true answer and of the edit's new target."""

    edit_id: str
    fact: tuple[str, str, str]
    p_true_post: float
    p_new_post: float
    known_pre: bool


def chain_reliability(step_scores: Iterable[float]) -> float:
    r"""Chain reliability :math:`R_i = \prod_{j=1}^{n_i} p_{i,j}` (ThinkEdit, Def. 3).

    The empty product is 1; a chain always has at least one step in the dataset.
    """
    reliability = 1.0
    for p in step_scores:
        if not 0.0 <= p <= 1.0 or math.isnan(p):
            raise ValueError(f"step score {p!r} is not a probability in [0, 1]")
        reliability *= p
    return reliability


def chain_is_active(step_known: Iterable[bool]) -> bool:
    """A chain is active when the pre-edit model knows every one of its steps."""
    return all(step_known)


def chain_weight(length: int) -> float:
    r"""Weight :math:`w_i = 1/\sqrt{n_i}`: shorter chains imply the original fact more strongly."""
    if length < 1:
        raise ValueError(f"chain length must be >= 1, got {length}")
    return 1.0 / math.sqrt(length)


def retention_ratio(r_pre: float, r_post: float, capped: bool = True) -> float:
    r"""Retention :math:`r_i = \min(1, R'_i / R_i)` (uncapped: :math:`R'_i/R_i`). Requires :math:`R_i > 0`."""
    if r_pre <= 0.0:
        raise ValueError("retention ratio is undefined for a chain with pre-edit reliability 0")
    ratio = r_post / r_pre
    return min(1.0, ratio) if capped else ratio


def recoverable_chains(chains: Sequence[ChainOutcome]) -> int:
    """Active chains the edited model still knows step by step (``known_post``), by the protocol's rule.

    Such a chain still leads to the original fact after the edit. (R' > 0 would not tell runs apart: a
    softmax gives every answer some probability.)
    """
    return sum(1 for c in chains if c.active and c.known_post)


def preservation_ratio(p_pre: float, p_post: float) -> float:
    r"""A broader-context fact's retention :math:`\min(1, p'_t / p_t)` (ThinkEdit's CKP, Def. 4); requires
    :math:`p_t > 0`. Preservation is their mean over the facts known before the edit
    (``knowgic.measure.definitions``)."""
    if p_pre <= 0.0:
        raise ValueError("preservation ratio is undefined for a fact with pre-edit score 0")
    return min(1.0, p_post / p_pre)


def prefers_new(p_new: float, p_true: float) -> bool:
    r"""An edit took on a prompt: :math:`p'(o^*) > p'(o^c)` (CounterFact's efficacy score; Efficacy is the
    share of edits, Generalization the same on the question form)."""
    return p_new > p_true


def keeps_answer(p_true_post: float, p_new_post: float) -> bool:
    r"""A neighbourhood fact kept its own answer: :math:`p'_f(o_f) > p'_f(o^*)` (CounterFact's neighbourhood
    score; Specificity is the share of known neighbours)."""
    return p_true_post > p_new_post


def deep_editing_score(
    ifr: float | None,
    preservation_value: float | None,
    efficacy_value: float | None,
    specificity_value: float | None,
) -> MetricValue:
    r"""Harmonic mean of :math:`(1-\mathrm{IFR})`, Preservation, Efficacy and Specificity; a sorting summary.

    .. math:: H = \frac{4}{\frac{1}{1-\mathrm{IFR}} + \frac{1}{\mathrm{Pres}} + \frac{1}{\mathrm{Eff}}
              + \frac{1}{\mathrm{Spec}}}

    It is 0 when any component is 0, and undefined when any component is. IFR is capped at 1 first.
    """
    parts = {
        "1 - IFR": None if ifr is None else 1.0 - min(1.0, ifr),
        "preservation": preservation_value,
        "efficacy": efficacy_value,
        "specificity": specificity_value,
    }
    missing = [k for k, v in parts.items() if v is None]
    if missing:
        return MetricValue.undefined(f"undefined component(s): {', '.join(missing)}", n=4 - len(missing))
    values = [float(v) for v in parts.values() if v is not None]
    if any(v <= 0.0 for v in values):
        return MetricValue(value=0.0, n=4)
    return MetricValue(value=len(values) / sum(1.0 / v for v in values), n=4)
