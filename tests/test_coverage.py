"""How often the intervals and paired tests are right (knowgic.coverage), on populations built from real
per-edit records of knowgic-tiny runs (tests/data/coverage_populations.json) and synthetic skewed ones.

The default suite runs small versions that still fail on the old percentile bootstrap (a 0/1 share near 1
covered 0.65 of the time); the ``slow`` tests run the 2,000-sample simulation of docs/metrics.md."""

from __future__ import annotations

import numpy as np
import pytest

from knowgic.coverage import coverage, false_told_apart, load_populations, synthetic_populations
from knowgic.intervals import clopper_pearson
from knowgic.paired import holm


@pytest.fixture(scope="module")
def real():
    return {p.name.split()[0]: p for p in load_populations()}


def test_clopper_pearson_matches_the_textbook() -> None:
    low, high = clopper_pearson(np.array([26.0, 0.0, 13.0]), np.array([26.0, 6.0, 26.0]), 0.95)
    assert low[0] == pytest.approx(0.025 ** (1 / 26)) and high[0] == 1.0  # 26 of 26: [0.868, 1]
    assert low[1] == 0.0 and high[1] == pytest.approx(1 - 0.025 ** (1 / 6))
    assert (low[2], high[2]) == pytest.approx((0.2993, 0.7007), abs=1e-4)


def test_holm_steps_down() -> None:
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06])


def test_an_exact_interval_covers_a_share_near_one() -> None:
    # Efficacy 0.96: the percentile bootstrap gave [1, 1] to every all-success sample (coverage 0.65).
    population = synthetic_populations()[1]
    result = coverage(population, 26, 600, resamples=50)["efficacy"]
    assert result["coverage"] >= 0.93 and result["with_interval"] == 1.0


def test_ifr_and_preservation_cover_on_a_real_population(real) -> None:
    result = coverage(real["rome"], 26, 300, resamples=400, seed=3)
    for name in ("ifr", "preservation", "specificity", "efficacy", "preservation_macro"):
        assert result[name]["coverage"] >= 0.88, (name, result[name])


def test_the_paired_tests_keep_their_level_under_an_exchangeable_null(real) -> None:
    result = false_told_apart(
        real["rome"], real["memit"], 26, 300, "exchangeable", resamples=100, paths=("ifr", "efficacy")
    )
    for name, rates in result.items():
        assert rates["test"] <= 0.09, (name, rates)


@pytest.mark.slow
def test_coverage_at_26_edits_meets_the_target(real) -> None:
    for population in (*real.values(), *synthetic_populations()):
        result = coverage(population, 26, 2000, resamples=1000)
        for name, r in result.items():
            assert r["coverage"] >= 0.93, (population.name, name, r)
