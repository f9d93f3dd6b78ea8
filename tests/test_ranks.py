"""Rank ranges (knowgic.measure.ranks): in value order, ties shared, honest about what the edits can tell,
on the nine baselines' real per-edit sums and on hostile populations; which runs share a ranking."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowgic.errors import KnowgicError
from knowgic.evaluation.rank_coverage import (
    competition_ranks,
    hostile_populations,
    load_population,
    rank_coverage,
)
from knowgic.measure.ranks import (
    RANK_METHOD,
    RankRange,
    in_value_order,
    one_ranking,
    rank_bounds,
    ranked_form,
    ranked_forms,
    ranking_key,
    with_paper_forms,
)
from knowgic.spec import benchmark_spec


def _inverts(values: np.ndarray, low: np.ndarray, high: np.ndarray, lower_is_better: bool) -> list[str]:
    """Every pair where a better value shows a worse end, or equal values show different ranges."""
    score = (-1.0 if lower_is_better else 1.0) * np.asarray(values)
    found = []
    for i in range(len(score)):
        for j in range(len(score)):
            if score[i] > score[j] and (low[i] > low[j] or high[i] > high[j]):
                found.append(
                    f"{i} ({values[i]:.4f}: {low[i]}-{high[i]}) vs {j} ({values[j]:.4f}: {low[j]}-{high[j]})"
                )
            if score[i] == score[j] and (low[i], high[i]) != (low[j], high[j]):
                found.append(f"{i} and {j} are equal but ranked {low[i]}-{high[i]} and {low[j]}-{high[j]}")
    return found


def test_widening_puts_the_ends_in_value_order_and_keeps_each_runs_own_rank() -> None:
    # A noisy second-best run told apart from nothing, precise runs around it: the raw ends invert.
    values = [0.9, 0.8, 0.79, 0.5, 0.5]
    low, high = in_value_order(values, np.array([1, 1, 2, 4, 4]), np.array([1, 5, 3, 5, 4]), False)
    assert low.tolist() == [1, 1, 2, 4, 4] and high.tolist() == [1, 5, 5, 5, 5]
    assert _inverts(np.array(values), low, high, False) == []
    # Each range holds the run's own rank (1 + the better values), whatever the raw ranges said.
    low, high = in_value_order([0.1, 0.2, 0.3], np.array([1, 1, 1]), np.array([1, 1, 1]), True)
    assert low.tolist() == [1, 1, 1] and high.tolist() == [1, 2, 3]


def test_a_run_better_on_every_edit_is_told_apart_and_runs_equal_on_every_edit_are_not() -> None:
    """Per-edit values of four runs: one 0.3 above a pattern, two on it, one 0.3 below. The pattern's twins
    are not told apart (equal on 26 edits drawn proves no equal values); the others are, by the sign test
    over 26 edits (no spread in their differences)."""
    from knowgic.intervals import resample_counts
    from knowgic.measure.ranks import Linearized, linearize

    base = np.random.default_rng(1).random(26) * 0.4 + 0.3
    a = np.stack([base + 0.3, base, base, base - 0.3])
    spec = benchmark_spec().metric_paths()["ifr_per_edit"]
    weights = np.vstack([np.ones((1, 26)), resample_counts(26, 500, 0)])
    lin = linearize({"ifr_per_edit": (a, np.ones_like(a))}, spec, "ifr_per_edit", {}, weights)
    assert isinstance(lin, Linearized) and lin.defined.all()
    low, high = rank_bounds(lin, lin.theta[:, 0], False, 0.95)
    assert [RankRange(int(x), int(y)).text for x, y in zip(low, high, strict=True)] == [
        "1",
        "2–3",
        "2–3",
        "4",
    ]
    # On 3 edits the sign test cannot say so: 2 * 2^-3 is not below 0.05 / 3.
    few = linearize({"ifr_per_edit": (a[:, :3], np.ones((4, 3)))}, spec, "ifr_per_edit", {}, weights[:, :3])
    low, high = rank_bounds(few, few.theta[:, 0], False, 0.95)
    assert low.tolist() == [1, 1, 1, 1] and high.tolist() == [4, 4, 4, 4]


def test_the_nine_baselines_ranks_never_invert_their_values() -> None:
    """The real per-edit sums of the nine baselines on knowgic-tiny 1.1.0 (tests/data/rank_populations.json,
    from `knowgic sweep` over all nine): every ranked metric, ranges in value order, each run's own rank
    inside its range, equal values with one range."""
    pop = load_population()
    assert len(pop.runs) == 9 and pop.size == 26
    declared = benchmark_spec().metric_paths()
    for path, spec in pop.metrics().items():
        lin = pop.values(path, resamples=2000)
        values = lin.theta[:, 0]
        low, high = rank_bounds(lin, values, spec.lower_is_better, 0.95)
        assert _inverts(values, low, high, spec.lower_is_better) == [], path
        own = competition_ranks(values, spec.lower_is_better)
        assert ((low <= own) & (own <= high)).all(), path
    assert set(pop.metrics()) == set(ranked_forms().values()) and "deep_editing_score" in declared


def test_on_the_real_runs_the_methods_own_ends_invert_where_the_widening_does_not() -> None:
    """The simultaneous ends alone invert the real values (a noisy run is told apart from fewer runs:
    Preservation (macro), MEMIT's 0.951 ranked 4-7 below AlphaEdit's 0.950 at 2-7), so the widening, not the
    data, keeps the order."""
    pop = load_population()
    inverted = {}
    for path, spec in pop.metrics().items():
        lin = pop.values(path, resamples=2000)
        values = lin.theta[:, 0]
        raw = rank_bounds(lin, values, spec.lower_is_better, 0.95, ordered=False)
        inverted[path] = _inverts(values, *raw, spec.lower_is_better) != []
        assert (
            _inverts(values, *in_value_order(values, *raw, spec.lower_is_better), spec.lower_is_better) == []
        )
    assert inverted["preservation_macro"]


def test_coverage_holds_under_equal_values_with_other_spreads_where_percentiles_fail() -> None:
    """A small run of the simulation: every true rank is 1; the simultaneous ranges hold it, the percentile
    ranges of the bootstrap ranks do not."""
    equal = hostile_populations()[0]
    assert equal.name.startswith("equal values") and (equal.true_ranks("ifr_per_edit") == 1).all()
    found = rank_coverage(equal, 26, samples=60, methods=(RANK_METHOD, "percentile"), resamples=400)
    ours, theirs = found["ifr_per_edit", RANK_METHOD], found["ifr_per_edit", "percentile"]
    assert ours["coverage"] >= 0.93 and ours["inverted"] == 0.0
    assert theirs["coverage"] < ours["coverage"] - 0.05


@pytest.mark.slow
def test_coverage_of_the_real_and_hostile_populations_at_26_edits() -> None:
    """The table of docs/metrics.md at 26 edits, smaller: at least 0.95 of the run ranges hold the true rank
    on every population and metric, and no sample inverts the values."""
    real = load_population()
    for pop in (real, *hostile_populations(real)):
        for (path, _), row in rank_coverage(pop, 26, samples=300, resamples=1000).items():
            assert row["coverage"] >= 0.95 and row["inverted"] == 0.0, (pop.name, path, row)


def test_the_paper_forms_sit_beside_the_forms_that_rank_them() -> None:
    spec = benchmark_spec()
    assert ranked_form(spec, "ifr") == "ifr_per_edit" and ranked_form(spec, "ifr_by_length.2").endswith(".2")
    shown = with_paper_forms(spec, ["ifr", "ifr_per_edit", "preservation", "efficacy"])
    assert shown[:2] == [("ifr", True), ("ifr_per_edit", False)]
    assert ("preservation", True) in shown and ("preservation_macro", False) in shown
    assert with_paper_forms(spec, ["ifr_per_edit"]) == [("ifr", True), ("ifr_per_edit", False)]


def _summary(limit: int | None = None, **config: Any) -> dict[str, Any]:
    return {
        "config": {
            "model": "knowgic-tiny",
            "model_revision": "abc",
            "protocol": "logprob",
            "protocol_params": {"known_rule": "greedy_contains", "batch_size": 32},
            "mode": "independent",
            "limit": limit,
            **config,
        },
        "dataset": {"name": "knowgic", "version": "1.1.0", "sha256": "9" * 64},
        "counts": {"edits": 26 if limit is None else limit},
    }


def test_a_limit_run_never_shares_a_ranking_with_full_runs() -> None:
    full, part = _summary(), _summary(limit=2)
    assert ranking_key(full) != ranking_key(part) and ranking_key(full).full and not ranking_key(part).full
    assert "all 26 edits" in ranking_key(full).label and "--limit 2" in ranking_key(part).label
    with pytest.raises(KnowgicError, match="limit: no limit vs limit 2"):
        one_ranking([full, part])
    # The known rule is part of the key; a logprob run from before it was recorded used first_token.
    old = copy.deepcopy(full)
    del old["config"]["protocol_params"]["known_rule"]
    assert json.loads(ranking_key(old).protocol_params)["known_rule"] == "first_token"
    with pytest.raises(KnowgicError, match="protocol parameters"):
        one_ranking([full, old])
    assert one_ranking([full, copy.deepcopy(full)]) == ranking_key(full)


def test_the_populations_file_is_the_nine_baselines() -> None:
    data = json.loads(Path("tests/data/rank_populations.json").read_text(encoding="utf-8"))
    assert data["runs"] == ["alphaedit", "ft", "ice", "lora", "memit", "none", "prune", "rect", "rome"]
