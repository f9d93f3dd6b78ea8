"""The private split's flag (knowgic.measure.gap) on the real per-edit IFRs of the nine baselines on
knowgic-tiny 1.1.0 (tests/data/gap_populations.json): a gross cheat is flagged, identical distributions are
not, and the flag says when it cannot be calibrated instead of deciding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from knowgic.evaluation.gap_calibration import GapPopulation, family_split, flag_rates, load_populations
from knowgic.measure.gap import (
    MIN_REFERENCE_RUNS,
    NO_EDIT_EDITORS,
    calibration,
    critical_value,
    edit_gap,
    flag_record,
    recalibrated,
)

METRIC = "ifr_per_edit"


@pytest.fixture(scope="module")
def population() -> GapPopulation:
    (found,) = [p for p in load_populations() if p.name == "1.1.0"]
    return found


@pytest.fixture(scope="module")
def split(population: GapPopulation) -> tuple[np.ndarray, np.ndarray]:
    """Private: whole fact families, 13 of the 26 edits (as a real split, sharing no fact with the rest)."""
    private = family_split(population.families, 13, np.random.default_rng(3))
    return np.flatnonzero(~private), np.flatnonzero(private)


def _reference_gaps(population: GapPopulation, split, leave_out: str) -> list[float]:
    public, private = split
    return [
        edit_gap(population.sums(i, public), population.sums(i, private)).gap  # type: ignore[misc]
        for i, run in enumerate(population.runs)
        if run not in NO_EDIT_EDITORS and run != leave_out
    ]


def test_a_gross_cheat_is_flagged_and_the_honest_run_is_not(population, split) -> None:
    public, private = split
    rome = population.runs.index("rome")
    found = calibration(_reference_gaps(population, split, "rome"), "the other baselines")
    honest = flag_record(
        edit_gap(population.sums(rome, public), population.sums(rome, private)), METRIC, found
    )
    assert honest["flagged"] is False and honest["calibration"]["runs"] == 7
    # The cheat learned the published chains: its IFR is 0 on every public edit, its private edits as before.
    cheat = population.values[rome].copy()
    cheat[public] = 0.0
    record = flag_record(
        edit_gap(population.sums(rome, public, cheat), population.sums(rome, private, cheat)), METRIC, found
    )
    assert record["flagged"] is True and record["public"] == 0.0
    cal = record["calibration"]
    expected = (record["gap"] - cal["mean"]) / math.sqrt(record["se"] ** 2 + cal["sd"] ** 2)
    assert math.isclose(record["statistic"], expected) and record["statistic"] > critical_value()


def test_identical_distributions_are_not_flagged(population, split) -> None:
    """A run whose private edits carry exactly its public edits' values has no gap."""
    public, _ = split
    found = calibration(_reference_gaps(population, split, ""), "the baselines")
    for i, run in enumerate(population.runs):
        record = flag_record(edit_gap(population.sums(i, public), population.sums(i, public)), METRIC, found)
        assert record["gap"] == 0.0 and record["flagged"] is not True, run


def test_too_few_reference_runs_leave_the_flag_undecided(population, split) -> None:
    public, private = split
    gaps = _reference_gaps(population, split, "rome")[: MIN_REFERENCE_RUNS - 1]
    rome = population.runs.index("rome")
    cheat = population.values[rome].copy()
    cheat[public] = 0.0
    record = flag_record(
        edit_gap(population.sums(rome, public, cheat), population.sums(rome, private, cheat)),
        METRIC,
        calibration(gaps, "two runs"),
    )
    assert record["flagged"] is None and record["statistic"] is None and record["calibration"] is None
    assert record["reason"] == (
        "not calibrated: 2 reference runs (two runs); the flag needs the gaps of at least 3 built-in editors' "
        "runs on the same public edits and private split"
    )
    # The same run decided again with enough reference runs (the leaderboard's store) is flagged.
    enough = calibration(_reference_gaps(population, split, "rome"), "the store")
    assert recalibrated(record, enough)["flagged"] is True


def test_a_side_with_one_edit_has_no_gap(population) -> None:
    rome = population.runs.index("rome")
    record = flag_record(
        edit_gap(population.sums(rome, np.arange(1)), population.sums(rome, np.arange(1, 26))),
        METRIC,
        calibration([0.0, 0.1, -0.1], "three runs"),
    )
    assert record["gap"] is None and record["flagged"] is None
    assert record["reason"].startswith("the public edits have fewer than two values")


def test_the_simulation_holds_the_level_and_finds_the_cheat(population) -> None:
    """A few splits of the simulation of docs/metrics.md (its table uses 1000 per line)."""
    honest = flag_rates(population, 13, "random", samples=40)
    assert honest["calibrated"][0] <= 0.05
    cheat = flag_rates(population, 13, "cheat 1", samples=20)
    assert cheat["calibrated"][0] >= 0.9
