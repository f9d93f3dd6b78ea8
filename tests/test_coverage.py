"""How often the intervals and paired tests are right (knowgic.coverage), on populations built from real
per-edit records of knowgic-tiny runs (tests/data/coverage_populations.json) and synthetic hostile ones.

The default suite runs small versions that still fail on the methods that were replaced (a share near 1
from the percentile bootstrap; macro Preservation from a t interval without the unseen-edit margin; a
paired t with m - 1 degrees of freedom on the paper's pooled IFR); the ``slow`` tests run the simulation
of docs/metrics.md at its full size."""

from __future__ import annotations

import numpy as np
import pytest

from knowgic.coverage import (
    NULL_METRICS,
    coverage,
    equal_value,
    false_told_apart,
    load_populations,
    synthetic_populations,
)
from knowgic.intervals import COVERAGE_MET_FROM, COVERAGE_TARGET, METHOD_BY_KIND, clopper_pearson


@pytest.fixture(scope="module")
def real():
    return {
        p.name.split(",")[0].split()[0] + (" growth" if "growth" in p.name else ""): p
        for p in load_populations()
    }


@pytest.fixture(scope="module")
def hostile():
    return {p.name: p for p in synthetic_populations()}


def test_clopper_pearson_matches_the_textbook() -> None:
    low, high = clopper_pearson(np.array([26.0, 0.0, 13.0]), np.array([26.0, 6.0, 26.0]), 0.95)
    assert low[0] == pytest.approx(0.025 ** (1 / 26)) and high[0] == 1.0  # 26 of 26: [0.868, 1]
    assert low[1] == 0.0 and high[1] == pytest.approx(1 - 0.025 ** (1 / 6))
    assert (low[2], high[2]) == pytest.approx((0.2993, 0.7007), abs=1e-4)


def test_the_populations_hold_the_ranked_forms_and_the_builders_growth(real) -> None:
    assert {"rome", "memit", "alphaedit", "prune", "rect", "ft", "lora", "ice"} <= set(real)
    growth = [p for name, p in real.items() if name.endswith("growth")]
    assert len(growth) >= 2 and all(p.size > 100 for p in growth)
    for population in real.values():
        assert {"ifr_per_edit", "preservation_macro", "deep_editing_score"} <= set(population.declared())


def test_an_exact_interval_covers_a_share_near_one(hostile) -> None:
    # Efficacy 0.96: the percentile bootstrap gave [1, 1] to every all-success sample (coverage 0.65).
    result = coverage(hostile["synthetic, skewed, Efficacy 0.96"], 26, 600, resamples=50)["efficacy"]
    assert result["coverage"] >= 0.93 and result["with_interval"] == 1.0


def test_the_unseen_edit_margin_is_what_covers_macro_preservation(real) -> None:
    """ROME's per-edit Preservation piles near 1 with two edits far below: samples that miss them give a t
    interval far too narrow (coverage about 0.8); with the margin it covers."""
    result = coverage(real["rome"], 26, 400, seed=3, paths=("preservation_macro",))["preservation_macro"]
    assert result["coverage_raw"] < 0.88 and result["coverage"] >= 0.93, result


def test_the_chosen_methods_cover_on_real_and_hostile_populations(real, hostile) -> None:
    for population in (real["rome"], real["memit"], hostile["synthetic, 12% catastrophic edits"]):
        result = coverage(population, 26, 300, seed=4)
        for name in (
            "ifr",
            "ifr_per_edit",
            "preservation",
            "preservation_macro",
            "specificity",
            "efficacy",
            "deep_editing_score",
        ):
            assert result[name]["coverage"] >= 0.9, (population.name, name, result[name])


def test_rome_s_per_edit_ifr_is_narrow_where_its_pooled_ifr_was_not(real) -> None:
    result = coverage(real["rome"], 26, 300, seed=5, paths=("ifr", "ifr_per_edit"))
    assert result["ifr_per_edit"]["width"] < 0.3 < result["ifr"]["width"]


def test_equal_value_nulls_make_the_values_equal_and_keep_the_bounds(real) -> None:
    rome, memit = real["rome"], real["memit"]
    for null in ("shifted", "scaled"):
        a, b = equal_value(rome, memit, null)
        for name in ("ifr_per_edit", "preservation_macro", "specificity", "ifr"):
            assert a.truth(name) == pytest.approx(b.truth(name)), (null, name)
    a, b = equal_value(rome, memit, "scaled")
    for population in (a, b):
        for name in ("preservation_macro", "specificity"):
            num, den = population.sums[name]
            ratio = num[den > 0] / den[den > 0]
            assert ((ratio >= -1e-12) & (ratio <= 1 + 1e-12)).all(), name


def test_the_paired_test_keeps_its_level_under_both_nulls(real) -> None:
    for null in ("exchangeable", "shifted"):
        result = false_told_apart(
            real["rome"], real["memit"], 26, 300, null, resamples=100, paths=("ifr_per_edit", "efficacy")
        )
        for name, by_method in result.items():
            for method, rates in by_method.items():
                assert rates["test"] <= 0.08, (null, name, method, rates)
                # One method gives the verdict and the interval: they never disagree.
                assert rates["test"] == rates["interval"], (null, name, method, rates)


def test_a_t_test_with_m_minus_one_degrees_of_freedom_tells_apart_too_often(real) -> None:
    """The paper's pooled IFR rests on about ten of 26 edits: a paired t with 25 degrees of freedom calls
    equal runs different about twice as often as its level, the Satterthwaite degrees of freedom do not."""
    result = false_told_apart(
        real["rome"],
        real["memit"],
        26,
        400,
        "exchangeable",
        paths=("ifr",),
        methods={"ratio_of_sums": ("t", "satterthwaite_t")},
        seed=2,
    )["ifr"]
    assert result["t"]["test"] > 0.07 and result["satterthwaite_t"]["test"] <= 0.06, result


@pytest.mark.slow
def test_coverage_at_26_edits_meets_the_target(real, hostile) -> None:
    for population in (*real.values(), *hostile.values()):
        result = coverage(population, 26, 2000)
        for name, r in result.items():
            spec = population.declared()[name]
            if None not in spec.bounds and COVERAGE_MET_FROM[spec.kind] <= 26:
                assert r["coverage"] >= COVERAGE_TARGET, (population.name, name, METHOD_BY_KIND[spec.kind], r)


@pytest.mark.slow
def test_the_ranked_forms_paired_tests_hold_their_level_at_26_edits(real) -> None:
    ranked = [m for m in NULL_METRICS if m not in ("ifr", "preservation")]
    for a, b in (("rome", "memit"), ("memit", "alphaedit"), ("rome", "ft")):
        for null in ("exchangeable", "shifted"):
            result = false_told_apart(real[a], real[b], 26, 2000, null, paths=ranked)
            for name, by_method in result.items():
                if null == "shifted" and name == "specificity":
                    continue  # shifting a metric piled at a bound leaves its range (docs/metrics.md)
                for rates in by_method.values():
                    assert rates["test"] <= 0.06, (a, b, null, name, rates)
