"""The benchmark's metrics as pure functions of scores (no model, no I/O).

Notation (DESIGN.md, "Metrics"): ``p`` is a query's score before the edit and ``p'`` after; a chain
``c_i`` of length ``n_i`` has step scores ``p_{i,1..n_i}``. Every function takes plain records and returns
a :class:`MetricValue`, whose ``value`` is ``None`` (with a ``reason``) when the metric is undefined on the
given data, never a silent 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
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
    """

    case_id: int
    edit_id: str
    length: int
    active: bool
    r_pre: float
    r_post: float
    known_post: bool | None = None


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


def indirect_fact_recovery(
    chains: Sequence[ChainOutcome], capped: bool = True, length: int | None = None
) -> MetricValue:
    r"""Indirect Fact Recovery over active chains (ThinkEdit, Def. 3), lower is better:

    .. math:: \mathrm{IFR} = \frac{\sum_i w_i\, r_i}{\sum_i w_i}, \quad w_i = \frac{1}{\sqrt{n_i}},
              \quad r_i = \min\!\left(1, \frac{R'_i}{R_i}\right)

    Only active chains with :math:`R_i > 0` count. ``length`` restricts to chains of that length;
    ``capped=False`` drops the min(1, .) cap. ``n`` is the number of chains that entered the sum.
    """
    selected = [c for c in chains if length is None or c.length == length]
    active = [c for c in selected if c.active and c.r_pre > 0.0]
    if not selected:
        what = f"of length {length}" if length is not None else ""
        return MetricValue.undefined(f"no chains {what}".strip())
    if not active:
        return MetricValue.undefined(
            "no active chains: the unedited model does not know every step of any chain"
        )
    num = sum(chain_weight(c.length) * retention_ratio(c.r_pre, c.r_post, capped) for c in active)
    den = sum(chain_weight(c.length) for c in active)
    return MetricValue(value=num / den, n=len(active))


def ifr_by_length(chains: Sequence[ChainOutcome], capped: bool = True) -> dict[str, MetricValue]:
    """IFR restricted to chains of each length 1..5 (keys ``"1"``..``"5"``)."""
    return {
        str(n): indirect_fact_recovery(chains, capped=capped, length=n)
        for n in range(1, MAX_CHAIN_LENGTH + 1)
    }


def recoverable_chains(chains: Sequence[ChainOutcome]) -> int:
    """Active chains the edited model still knows step by step (``known_post``), by the protocol's rule.

    Such a chain still leads to the original fact after the edit. (R' > 0 would not tell runs apart: a
    softmax gives every answer some probability.)
    """
    return sum(1 for c in chains if c.active and c.known_post)


def _preservation_ratio(pair: PreservationPair) -> float:
    return min(1.0, pair.p_post / pair.p_pre)


def preservation(pairs: Sequence[PreservationPair]) -> MetricValue:
    r"""Preservation (micro; ThinkEdit's CKP, Def. 4), higher is better:

    .. math:: \mathrm{Pres} = \frac{1}{|T|} \sum_{t \in T} \min\!\left(1, \frac{p'_t}{p_t}\right)

    over the distinct (edit, broader-context fact) pairs ``T`` that the pre-edit model knows (``p_t > 0``).
    """
    known = [p for p in pairs if p.known_pre and p.p_pre > 0.0]
    if not pairs:
        return MetricValue.undefined("no broader-context facts")
    if not known:
        return MetricValue.undefined("the unedited model knows none of the broader-context facts")
    return MetricValue(value=sum(_preservation_ratio(p) for p in known) / len(known), n=len(known))


def preservation_macro(pairs: Sequence[PreservationPair]) -> MetricValue:
    r"""Preservation averaged per edit first: :math:`\frac{1}{|E|}\sum_e \mathrm{Pres}_e`.

    Edits whose broader context has no known fact are left out (they have no per-edit value).
    """
    by_edit: dict[str, list[PreservationPair]] = defaultdict(list)
    for pair in pairs:
        by_edit[pair.edit_id].append(pair)
    per_edit = [preservation(ps).value for ps in by_edit.values()]
    values = [v for v in per_edit if v is not None]
    if not values:
        return MetricValue.undefined("no edit has a known broader-context fact")
    return MetricValue(value=sum(values) / len(values), n=len(values))


def efficacy(outcomes: Sequence[TargetOutcome]) -> MetricValue:
    r"""Efficacy (CounterFact's efficacy score): :math:`\frac{1}{|E|}\sum_e [p'_e(o^*) > p'_e(o^c)]`,
    the share of edits whose rewrite prompt now prefers the new target ``o*`` over the true one ``o^c``."""
    if not outcomes:
        return MetricValue.undefined("no edits")
    return MetricValue(value=sum(o.p_new > o.p_true for o in outcomes) / len(outcomes), n=len(outcomes))


def efficacy_magnitude(outcomes: Sequence[TargetOutcome]) -> MetricValue:
    r"""Efficacy magnitude: :math:`\frac{1}{|E|}\sum_e \big(p'_e(o^*) - p'_e(o^c)\big)`, in [-1, 1]."""
    if not outcomes:
        return MetricValue.undefined("no edits")
    return MetricValue(value=sum(o.p_new - o.p_true for o in outcomes) / len(outcomes), n=len(outcomes))


def generalization(outcomes: Sequence[TargetOutcome]) -> MetricValue:
    """Generalization: Efficacy measured on the edited fact's question form instead of its rewrite prompt."""
    if not outcomes:
        return MetricValue.undefined("no edit has a question form of the edited fact")
    return efficacy(outcomes)


def specificity(neighbours: Sequence[NeighbourOutcome]) -> MetricValue:
    r"""Specificity (CounterFact's neighbourhood score), higher is better:

    .. math:: \frac{1}{|N|}\sum_{f \in N} [p'_f(o_f) > p'_f(o^*)]

    over neighbourhood facts ``N`` known before the edit: does each keep its own answer ``o_f`` rather than
    switching to the edit's new target ``o*``?
    """
    known = [n for n in neighbours if n.known_pre]
    if not neighbours:
        return MetricValue.undefined("no neighbourhood facts")
    if not known:
        return MetricValue.undefined("the unedited model knows none of the neighbourhood facts")
    return MetricValue(value=sum(n.p_true_post > n.p_new_post for n in known) / len(known), n=len(known))


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
