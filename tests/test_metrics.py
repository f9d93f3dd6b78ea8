"""The metrics on hand-made outcomes: the KnowGIC README's worked examples and hand-computed cases.

Each value goes the way a run's does: item outcomes -> typed records (``records_of``) -> the metric's one
registered function (knowgic.measure) -> its value."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from knowgic.evaluation.outcomes import Outcomes, records_of
from knowgic.measure.definitions import METRICS
from knowgic.metrics import (
    ChainOutcome,
    MetricValue,
    NeighbourOutcome,
    PreservationPair,
    TargetOutcome,
    chain_is_active,
    chain_reliability,
    chain_weight,
    deep_editing_score,
    preservation_ratio,
    recoverable_chains,
    retention_ratio,
)


def _metric(
    name: str,
    chains: Sequence[ChainOutcome] = (),
    pairs: Sequence[PreservationPair] = (),
    rewrite: Sequence[TargetOutcome] = (),
    question: Sequence[TargetOutcome] = (),
    neighbours: Sequence[NeighbourOutcome] = (),
) -> MetricValue:
    """Metric ``name`` (``ifr_by_length.2`` for a part) of the outcomes of the edits they name; an edit
    without a rewrite outcome gets p'(o*) = p'(o^c) = 0 on its rewrite prompt."""
    items = [*chains, *pairs, *rewrite, *question, *neighbours]
    edit_ids = list(dict.fromkeys(item.edit_id for item in items))
    given = {o.edit_id for o in rewrite}
    out = Outcomes(
        chains=list(chains),
        preservation=list(pairs),
        rewrite=[*rewrite, *(TargetOutcome(e, 0.0, 0.0) for e in edit_ids if e not in given)],
        question=list(question),
        neighbours=list(neighbours),
        neighbour_kinds=["same-relation"] * len(neighbours),
        neighbourhoods=dict.fromkeys(edit_ids, "same-relation"),
    )
    head, _, part = name.partition(".")
    sums = METRICS.sums(head, records_of(out, edit_ids))
    return (sums[part] if part else sums).value  # type: ignore[index, union-attr]


def indirect_fact_recovery(chains: Sequence[ChainOutcome], capped: bool = True) -> MetricValue:
    return _metric("ifr" if capped else "ifr_uncapped", chains=chains)


def preservation(pairs: Sequence[PreservationPair]) -> MetricValue:
    return _metric("preservation", pairs=pairs)


def _chain(
    pre: list[float], post: list[float], active: bool = True, case_id: int = 0, edit: str = "e"
) -> ChainOutcome:
    return ChainOutcome(
        case_id=case_id,
        edit_id=edit,
        length=len(pre),
        active=active,
        r_pre=chain_reliability(pre),
        r_post=chain_reliability(post),
    )


def _pair(p: float, q: float, known: bool = True, edit: str = "e", name: str = "f") -> PreservationPair:
    return PreservationPair(edit_id=edit, fact=(name, "{} x", "y"), p_pre=p, p_post=q, known_pre=known)


class TestWorkedExamples:
    """The KnowGIC README's Harry Potter example (case 9)."""

    def test_chain_ifr(self) -> None:
        # Pre 0.9, 0.85, 0.9 -> R = 0.6885; post 0.7, 0.8, 0.85 -> R' = 0.476.
        chain = _chain([0.9, 0.85, 0.9], [0.7, 0.8, 0.85])
        assert chain.r_pre == pytest.approx(0.6885)
        assert chain.r_post == pytest.approx(0.476)
        ifr = indirect_fact_recovery([chain]).value
        assert ifr == pytest.approx(0.476 / 0.6885)
        # The README rounds R to 0.69 and R' to 0.48 before dividing and reports "≈ 0.70".
        assert ifr == pytest.approx(0.70, abs=0.01)
        assert pytest.approx(0.70, abs=0.005) == 0.48 / 0.69

    def test_preservation_from_readme_ratios(self) -> None:
        # The README's four ratios 0.78, 0.94, 0.67, 0.51 average to 0.725.
        pairs = [_pair(1.0, r, name=str(i)) for i, r in enumerate([0.78, 0.94, 0.67, 0.51])]
        assert preservation(pairs).value == pytest.approx(0.725)

    def test_preservation_from_readme_probabilities(self) -> None:
        # From the table's probabilities directly, 0.5/0.85 is 0.588, not the README's 0.51, so the exact
        # mean is 0.7435: the README's 0.725 carries that arithmetic slip.
        pairs = [
            _pair(0.9, 0.7, name="a"),
            _pair(0.85, 0.8, name="b"),
            _pair(0.9, 0.6, name="c"),
            _pair(0.85, 0.5, name="d"),
        ]
        expected = (0.7 / 0.9 + 0.8 / 0.85 + 0.6 / 0.9 + 0.5 / 0.85) / 4
        assert preservation(pairs).value == pytest.approx(expected)
        assert expected == pytest.approx(0.7435, abs=1e-4)


class TestChains:
    def test_reliability_and_weight(self) -> None:
        assert chain_reliability([0.5, 0.5, 0.5]) == pytest.approx(0.125)
        assert chain_weight(4) == pytest.approx(0.5)
        with pytest.raises(ValueError):
            chain_reliability([1.2])
        with pytest.raises(ValueError):
            chain_weight(0)

    def test_active(self) -> None:
        assert chain_is_active([True, True])
        assert not chain_is_active([True, False])

    def test_weighted_mean_over_lengths(self) -> None:
        one = _chain([0.8], [0.2])  # r = 0.25, w = 1
        four = _chain([0.5] * 4, [0.5] * 4)  # r = 1, w = 0.5
        ifr = indirect_fact_recovery([one, four]).value
        assert ifr == pytest.approx((1 * 0.25 + 0.5 * 1.0) / 1.5)

    def test_cap_and_uncapped(self) -> None:
        up = _chain([0.5], [0.9])  # ratio 1.8
        assert indirect_fact_recovery([up]).value == pytest.approx(1.0)
        assert indirect_fact_recovery([up], capped=False).value == pytest.approx(1.8)
        assert retention_ratio(0.5, 0.9, capped=False) == pytest.approx(1.8)

    def test_inactive_chains_are_left_out(self) -> None:
        inactive = _chain([0.9, 0.1], [0.0, 0.0], active=False)
        active = _chain([0.9], [0.45])
        result = indirect_fact_recovery([inactive, active])
        assert result.value == pytest.approx(0.5)
        assert result.n == 1

    def test_no_active_chain_is_null_not_zero(self) -> None:
        result = indirect_fact_recovery([_chain([0.1], [0.1], active=False)])
        assert result.value is None
        assert "no active chains" in (result.reason or "")

    def test_zero_probabilities(self) -> None:
        # A post-edit zero makes the chain unrecoverable: r = 0.
        chain = _chain([0.9, 0.9], [0.9, 0.0])
        assert indirect_fact_recovery([chain]).value == 0.0
        assert recoverable_chains([chain]) == 0
        # A pre-edit zero (underflow on an "active" chain) cannot give a ratio: excluded, not a crash.
        zero_pre = ChainOutcome(case_id=1, edit_id="e", length=1, active=True, r_pre=0.0, r_post=0.3)
        assert indirect_fact_recovery([zero_pre]).value is None
        with pytest.raises(ValueError):
            retention_ratio(0.0, 0.1)
        with pytest.raises(ValueError):
            preservation_ratio(0.0, 0.1)

    def test_every_length(self) -> None:
        chains = [_chain([0.8] * n, [0.8] * (n - 1) + [0.4], case_id=n) for n in range(1, 6)]
        for n in range(1, 6):
            assert _metric(f"ifr_by_length.{n}", chains=chains).value == pytest.approx(0.5)
            assert _metric(f"ifr_by_length.{n}", chains=chains).n == 1
        assert _metric("ifr_by_length.5", chains=chains[:2]).value is None
        assert _metric("ifr_by_length.5", chains=chains[:2]).reason == "no chains of length 5"


class TestPreservation:
    def test_unknown_facts_left_out_and_cap(self) -> None:
        pairs = [
            _pair(0.5, 0.9, name="a"),
            _pair(0.5, 0.25, name="b"),
            _pair(0.01, 0.5, known=False, name="c"),
        ]
        result = preservation(pairs)
        assert result.value == pytest.approx((1.0 + 0.5) / 2)
        assert result.n == 2

    def test_empty_broader_context(self) -> None:
        empty = _metric("preservation", rewrite=[TargetOutcome("e", 0.5, 0.1)])
        assert empty.value is None and empty.reason == "no broader-context facts"
        unknown = preservation([_pair(0.3, 0.3, known=False)])
        assert unknown.value is None and "knows none of the broader-context facts" in (unknown.reason or "")

    def test_macro_weights_edits_equally(self) -> None:
        pairs = [_pair(1.0, 1.0, edit="a", name=str(i)) for i in range(3)] + [_pair(1.0, 0.0, edit="b")]
        assert preservation(pairs).value == pytest.approx(0.75)
        macro = _metric("preservation_macro", pairs=pairs)
        assert macro.value == pytest.approx(0.5)
        assert macro.n == 2

    def test_one_to_many_facts_count_separately(self) -> None:
        # Two gold answers for the same subject and prompt are two facts with their own ratios.
        a = PreservationPair("e", ("Overwatch", "{} was developed by", "Aaron Keller"), 0.4, 0.2, True)
        b = PreservationPair("e", ("Overwatch", "{} was developed by", "Chris Metzen"), 0.4, 0.4, True)
        assert preservation([a, b]).value == pytest.approx(0.75)


class TestEditMetrics:
    def test_efficacy_and_magnitude(self) -> None:
        outcomes = [TargetOutcome("a", 0.7, 0.1), TargetOutcome("b", 0.2, 0.3), TargetOutcome("c", 0.5, 0.5)]
        assert _metric("efficacy", rewrite=outcomes).value == pytest.approx(1 / 3)
        assert _metric("efficacy_magnitude", rewrite=outcomes).value == pytest.approx((0.6 - 0.1 + 0.0) / 3)
        none = _metric("generalization", rewrite=outcomes)
        assert none.value is None and none.reason == "no edit has a question form of the edited fact"
        assert _metric("generalization", rewrite=outcomes, question=outcomes).value == pytest.approx(1 / 3)

    def test_specificity(self) -> None:
        neighbours = [
            NeighbourOutcome("a", ("x", "{} p", "y"), 0.6, 0.1, True),
            NeighbourOutcome("a", ("z", "{} p", "y"), 0.1, 0.6, True),
            NeighbourOutcome("a", ("w", "{} p", "y"), 0.0, 0.9, False),
        ]
        result = _metric("specificity", neighbours=neighbours)
        assert result.value == pytest.approx(0.5)
        assert result.n == 2
        assert _metric("specificity", rewrite=[TargetOutcome("a", 0.5, 0.1)]).value is None
        assert _metric("specificity", neighbours=neighbours[2:]).value is None


class TestDeepEditingScore:
    def test_harmonic_mean(self) -> None:
        result = deep_editing_score(0.5, 0.5, 1.0, 1.0)
        assert result.value == pytest.approx(4 / (2 + 2 + 1 + 1))

    def test_zero_and_undefined(self) -> None:
        assert deep_editing_score(1.0, 0.9, 0.9, 0.9).value == 0.0
        assert deep_editing_score(0.2, 0.9, 0.0, 0.9).value == 0.0
        undefined = deep_editing_score(None, 0.9, 0.9, 0.9)
        assert undefined.value is None
        assert "1 - IFR" in (undefined.reason or "")

    def test_perfect(self) -> None:
        assert deep_editing_score(0.0, 1.0, 1.0, 1.0).value == pytest.approx(1.0)
        assert math.isclose(deep_editing_score(1.5, 1.0, 1.0, 1.0).value or 0.0, 0.0)
