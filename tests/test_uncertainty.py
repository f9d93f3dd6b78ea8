"""The intervals of :mod:`knowgic.intervals` and the comparisons of :mod:`knowgic.measure.compare`: on synthetic data against the textbook answers, and on
real ``knowgic evaluate`` runs against an independent recomputation from the records of ``results.json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from knowgic.cli import main
from knowgic.intervals import (
    COVERAGE_MET_FROM,
    METHOD_BY_KIND,
    METHODS,
    BootstrapSettings,
    Ratio,
    batch_intervals,
    ratio_interval,
)
from knowgic.measure.compare import compare_results
from knowgic.measure.compute import metric_entry_at
from knowgic.spec import benchmark_spec


def _evaluate(out: Path, *args: str) -> dict[str, Any]:
    assert main(["evaluate", "--model", "knowgic-tiny", *args, "--out", str(out)]) == 0
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def rome_run(knowgic_tiny, tmp_path_factory) -> dict[str, Any]:
    return _evaluate(tmp_path_factory.mktemp("rome"), "--editor", "rome", "--limit", "6")


@pytest.fixture(scope="module")
def none_run(knowgic_tiny, tmp_path_factory) -> dict[str, Any]:
    return _evaluate(tmp_path_factory.mktemp("none"), "--editor", "none", "--limit", "6")


# --- synthetic data -------------------------------------------------------------------------------------


def test_interval_of_a_mean_matches_the_normal_approximation() -> None:
    values = np.random.default_rng(7).normal(0.4, 0.15, size=300)
    interval = ratio_interval(Ratio(values, np.ones_like(values)))
    assert interval.low is not None and interval.high is not None
    # Normal approximation: mean +- z * s / sqrt(E), s the plug-in standard deviation the bootstrap samples.
    half = 1.959964 * values.std() / math.sqrt(values.size)
    low, high = values.mean() - half, values.mean() + half
    width = high - low
    assert abs(interval.low - low) < 0.1 * width
    assert abs(interval.high - high) < 0.1 * width
    assert interval.method == METHODS["satterthwaite_t"]  # no resampling: the interval is a formula


def _chain_level_interval(values: np.ndarray, resamples: int, level: float, seed: int) -> tuple[float, float]:
    """The naive bootstrap: chains resampled one by one, as if independent."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def _edits_of_chains(edit_effect_sd: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """30 edits of 40 chains each; a chain's retention = its edit's effect + its own noise, in [0, 1].

    ``edit_effect_sd`` > 0 makes the chains of an edit correlated (they share the edited model)."""
    rng = np.random.default_rng(seed)
    effects = rng.normal(0.5, edit_effect_sd, size=30)
    chains = np.clip(effects[:, None] + rng.normal(0.0, 0.05, size=(30, 40)), 0.0, 1.0)
    return chains, np.repeat(np.arange(30), 40)


def _widths(chains: np.ndarray) -> tuple[float, float]:
    """The width of the cluster-robust interval over edits (the ratio kind's method alone, without the
    unseen-edit margin, which is a floor of its own) and of the naive bootstrap over chains."""
    settings = BootstrapSettings()
    a, b = chains.sum(axis=1)[None, :], np.full((1, chains.shape[0]), float(chains.shape[1]))
    spec = benchmark_spec().metric_paths()["ifr"]
    batch = batch_intervals({"ifr": (a, b)}, settings, {"ifr": spec}, margins=frozenset())["ifr"]
    naive_low, naive_high = _chain_level_interval(chains.ravel(), settings.resamples, settings.level, 1)
    return float(batch.high[0] - batch.low[0]), naive_high - naive_low


def test_the_interval_over_edits_is_wider_than_a_chain_level_one_when_an_edits_chains_are_correlated() -> (
    None
):
    chains, _ = _edits_of_chains(edit_effect_sd=0.2, seed=3)
    cluster, naive = _widths(chains)
    # Design effect 1 + (m - 1) * ICC with m = 40 chains and ICC ~ 0.94: the honest interval is ~6x wider.
    assert cluster > 3.0 * naive
    # Without the shared edit effect both bootstraps agree: the cluster one is not just always wider.
    independent, _ = _edits_of_chains(edit_effect_sd=0.0, seed=3)
    cluster, naive = _widths(independent)
    assert 0.75 * naive < cluster < 1.35 * naive


def test_an_interval_needs_two_contributing_edits() -> None:
    one = ratio_interval(Ratio(np.array([0.3, 0.0, 0.0]), np.array([1.0, 0.0, 0.0])))
    assert one.low is None and one.reason is not None and "one edit" in one.reason
    single = ratio_interval(Ratio(np.array([0.3]), np.array([1.0])))
    assert single.low is None and single.reason is not None


def _ones_and(odd: float, kind: str = "edit_mean") -> tuple[float, float]:
    interval = ratio_interval(Ratio(np.r_[np.ones(25), odd], np.ones(26)), kind=kind)
    assert interval.low is not None and interval.high is not None
    return interval.low, interval.high


@pytest.mark.parametrize("kind", ["edit_mean", "ratio_of_sums", "clustered_proportion"])
def test_a_change_in_the_sixth_decimal_of_one_edit_moves_no_interval_end(kind: str) -> None:
    """25 edits at 1 and one just below: the interval moves with the odd edit, continuously, from the
    Clopper-Pearson bound of 26 in 26 ([0.868, 1]) that every edit at 1 gets; it never jumps to [0, 1]."""
    at_bound = _ones_and(1.0, kind)
    assert at_bound == pytest.approx((0.025 ** (1 / 26), 1.0))
    previous = at_bound
    for odd in (1 - 1e-6, 1 - 2e-4, 1 - 3e-4, 0.99):
        low, high = _ones_and(odd, kind)
        assert high > 0.9999 and 0.86 < low <= previous[0] + 1e-12, (odd, low)
        assert abs(low - previous[0]) < 1e-3 * max(1.0, (1 - odd) / 1e-4), (odd, low, previous)
        previous = (low, high)
    # A sixth-decimal change moves the lower end in the sixth decimal at most.
    assert abs(_ones_and(1 - 2e-4, kind)[0] - _ones_and(1 - 2e-4 - 1e-6, kind)[0]) < 1e-6


def test_a_smaller_value_near_a_bound_never_gets_a_narrower_interval() -> None:
    """IFR at one chain length resting on three or four effective edits, all near 0: 3.8e-5 and 9.3e-6
    (LoRA on knowgic-tiny) got [0, 0.0003] and [0, 0.355] from the rule that called a spread below 1e-5 none.
    Their intervals now differ in the fifth decimal at most, in the order of the values."""
    weights = np.array([1.0, 0.5, 2.0, 1.0])
    shape = np.array([2.0, 1.0, 0.0, 0.5])

    def upper(value: float) -> float:
        a = shape * weights * value / (shape * weights).sum() * weights.sum()
        interval = ratio_interval(Ratio(a, weights))
        assert interval.low == 0.0 and interval.high is not None
        return interval.high

    high, low_value_high = upper(3.8e-5), upper(9.3e-6)
    assert low_value_high <= high < low_value_high + 1e-4
    assert upper(0.0) <= low_value_high and upper(0.0) > 0.3  # three-odd effective edits say little


@pytest.mark.parametrize("kind", ["ratio_of_sums", "edit_mean", "clustered_proportion", "edit_outcome"])
def test_every_interval_respects_the_bounds(kind: str) -> None:
    """Inputs that sent the studentized bootstrap to +-1e8 (a near-zero ratio with one odd edit, an uncapped
    ratio far above 1) stay within the declared bounds, and an unbounded side stays finite."""
    rng = np.random.default_rng(5)
    b = rng.integers(1, 4, size=8).astype(float) if kind != "edit_outcome" else np.ones(8)
    shares = [np.r_[np.zeros(7), 1e-9], rng.random(8), np.r_[np.full(7, 1.0), 0.999999]]
    for share in shares:
        a = (np.rint(share) if kind == "edit_outcome" else share) * b
        for bounds in ((0.0, 1.0), (-1.0, 1.0), (0.0, None)):
            interval = ratio_interval(Ratio(a, b), kind=kind, bounds=bounds)
            assert interval.low is not None and interval.high is not None
            low_b, high_b = bounds
            assert low_b <= interval.low <= interval.high, (kind, bounds, interval)
            assert interval.high <= (np.inf if high_b is None else high_b) and np.isfinite(interval.high)
    uncapped = ratio_interval(Ratio(np.array([0.1, 0.2, 40.0, 0.0]), np.ones(4)), bounds=(0.0, None))
    assert uncapped.low == 0.0 and uncapped.high is not None and uncapped.high < 200


# --- real runs --------------------------------------------------------------------------------------------


def test_no_zero_width_interval_where_edits_are_at_a_bound(none_run) -> None:
    m = none_run["metrics"]
    edits = len(none_run["per_edit"])
    # Unedited, no edit's new target wins: Efficacy 0 of 6, whose exact interval is [0, 1 - 0.025^(1/6)].
    for name in ("efficacy", "generalization"):
        n = m[name]["n"]
        assert m[name]["value"] == 0.0
        assert m[name]["interval"] == pytest.approx([0.0, 1 - 0.025 ** (1 / n)]), name
        assert m[name]["interval_method"] == METHODS["exact"]
    # Specificity is 1 in every edit (nothing changed): its interval is the unseen-edit margin, the
    # Clopper-Pearson bound on its effective edits, and says so; not a point.
    per_edit = none_run["per_edit"]
    assert {r["specificity"] for r in per_edit} == {1.0}
    entry = m["specificity"]
    low, high = entry["interval"]
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / entry["effective_edits"]), rel=1e-4)
    assert entry["interval_method"] == METHODS[METHOD_BY_KIND["clustered_proportion"]]
    assert "every edit's value is 1" in entry["interval_note"]
    assert 0 < entry["effective_edits"] <= edits and entry["few_edits"]
    # IFR and Preservation are 1 up to the float noise of restoring the weights (differing in the 7th digit
    # between edits): the margin makes their interval that of an exact 1, up to that noise, continuously.
    for name in ("ifr", "preservation", "ifr_per_edit", "preservation_macro"):
        values = [r[name.removesuffix("_per_edit").removesuffix("_macro")] for r in per_edit]
        assert all(abs(v - 1.0) < 1e-5 for v in values), name
        low, high = m[name]["interval"]
        bound = 0.025 ** (1 / m[name]["effective_edits"])
        assert high == 1.0 and low == pytest.approx(bound, abs=1e-5), name
    # The deep-editing score is 0 (Efficacy 0 in every edit): no spread, and no margin for its kind.
    assert m["deep_editing_score"]["value"] == 0.0 and m["deep_editing_score"]["interval"] == [0.0, 0.0]
    # ... and one that varies (the unedited model's margin for the new target) has a proper interval.
    low, high = m["efficacy_magnitude"]["interval"]
    assert low < m["efficacy_magnitude"]["value"] < high


def test_comparing_a_run_with_itself_gives_zero_and_tells_nothing_apart(rome_run) -> None:
    differences = compare_results(rome_run, rome_run)
    assert [d.metric for d in differences] == list(benchmark_spec().metric_paths())
    for d in differences:
        if d.a is None:
            assert d.difference is None and d.reason
            continue
        assert d.difference == 0.0
        if d.low is None:
            assert d.reason, d.metric
            continue
        assert d.p_value == 1.0 and not d.excludes_zero and d.better is None, d.metric
        if d.metric in ("efficacy", "generalization"):
            # No discordant edit of 6: McNemar's interval is +-(the share of discordant edits 6 edits allow).
            assert (
                d.discordant == (0, 0)
                and d.low == pytest.approx(-(1 - 0.025 ** (1 / d.edits)))
                and d.high == -d.low
            )
        else:
            assert (d.low, d.high) == (0.0, 0.0), d.metric
    assert sum(d.low is not None for d in differences) >= 10


def _per_edit_sums(doc: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Numerator and denominator of every ratio metric per edit, read straight from the records."""
    edits = [r["edit_id"] for r in doc["per_edit"]]
    zeros = {
        name: (np.zeros(len(edits)), np.zeros(len(edits)))
        for name in ("ifr", "ifr_uncapped", *(f"ifr_by_length.{n}" for n in range(1, 6)))
    }
    for chain in doc["chains"]:
        if not chain["active"] or chain["r_pre"] == 0.0:
            continue
        e = edits.index(chain["edit_id"])
        weight = chain["length"] ** -0.5
        ratio = chain["r_post"] / chain["r_pre"]
        for name, r in (
            ("ifr", min(ratio, 1.0)),
            ("ifr_uncapped", ratio),
            (f"ifr_by_length.{chain['length']}", min(ratio, 1.0)),
        ):
            zeros[name][0][e] += weight * r
            zeros[name][1][e] += weight
    sums = dict(zeros)
    records = doc["per_edit"]

    def column(key: str, default: float = 0.0) -> np.ndarray:
        return np.array([default if r[key] is None else float(r[key]) for r in records])

    def defined(key: str) -> np.ndarray:
        return np.array([0.0 if r[key] is None else 1.0 for r in records])

    sums["preservation"] = (column("preservation_sum"), column("preservation_n"))
    sums["preservation_macro"] = (column("preservation"), defined("preservation"))
    sums["efficacy"] = (column("efficacy"), np.ones(len(records)))
    sums["efficacy_magnitude"] = (column("p_new") - column("p_true"), np.ones(len(records)))
    sums["generalization"] = (column("generalization"), defined("generalization"))
    kept, known = column("specificity_kept"), column("neighbours_known")
    sums["specificity"] = (kept, known)
    for name, kind in (
        ("specificity_same_relation", "same-relation"),
        ("specificity_other_graphs", "other-graphs"),
    ):
        mask = np.array([r["neighbourhood"] == kind for r in records], dtype=float)
        sums[name] = (kept * mask, known * mask)
    return sums


def _t_interval(
    theta: float, z: np.ndarray, m: int, level: float, satterthwaite: bool
) -> tuple[float, float]:
    """theta +- t * se, se = sqrt(m/(m-1) sum z^2), with m - 1 degrees of freedom or Satterthwaite's,
    (sum z^2)^2 / sum z^4 * (m-1)/m (at least 1)."""
    se = math.sqrt(m / (m - 1) * (z**2).sum())
    df = max(1.0, (z**2).sum() ** 2 / (z**4).sum() * (m - 1) / m) if satterthwaite else m - 1
    half = stats.t.ppf((1 + level) / 2, df) * se
    return theta - half, theta + half


def _with_margin(
    theta: float, interval: tuple[float, float], weights: np.ndarray, level: float
) -> tuple[float, float]:
    """The interval widened to the unseen-edit margin of n_eff = (sum b)^2 / sum b^2 edits, within [0, 1]."""
    n_eff = weights.sum() ** 2 / (weights**2).sum()
    q = 1 - ((1 - level) / 2) ** (1 / n_eff)
    low, high = min(interval[0], theta - q * theta), max(interval[1], theta + q * (1 - theta))
    return max(0.0, low), min(1.0, high)


def _ratio_parts(num: np.ndarray, den: np.ndarray) -> tuple[float, np.ndarray, int]:
    theta = num.sum() / den.sum()
    return theta, (num - theta * den) / den.sum(), int((den > 0).sum())


def _recomputed_intervals(doc: dict[str, Any]) -> dict[str, tuple[float, float] | None]:
    """The headline intervals from the records, as docs/metrics.md describes them, written independently:
    exact Clopper-Pearson (scipy's binomtest) for Efficacy and Generalization; the t interval on the per-edit
    values for IFR per edit and macro Preservation; the t interval with Satterthwaite's degrees of freedom
    for the pooled IFR and Preservation; all of these widened to the unseen-edit margin; and for the
    deep-editing score of the per-edit forms, the Satterthwaite t of the chain rule's influence."""
    from scipy.stats import binomtest

    level = doc["uncertainty"]["level"]
    sums = _per_edit_sums(doc)
    ifr_num, ifr_den = sums["ifr"]
    own = np.divide(ifr_num, ifr_den, out=np.zeros_like(ifr_num), where=ifr_den > 0)
    sums["ifr_per_edit"] = (own, (ifr_den > 0).astype(float))
    out: dict[str, tuple[float, float] | None] = {}
    for name in ("efficacy", "generalization"):
        k, trials = sums[name][0].sum(), sums[name][1].sum()
        ci = binomtest(int(k), int(trials)).proportion_ci(confidence_level=level, method="exact")
        out[name] = (ci.low, ci.high)
    for name, satterthwaite in (
        ("ifr_per_edit", False),
        ("preservation_macro", False),
        ("ifr", True),
        ("preservation", True),
    ):
        num, den = sums[name]
        theta, z, m = _ratio_parts(num, den)
        out[name] = _with_margin(theta, _t_interval(theta, z, m, level, satterthwaite), den, level)
    parts = [
        (*_ratio_parts(*sums[name]), name == "ifr_per_edit")
        for name in ("ifr_per_edit", "preservation_macro", "efficacy", "specificity")
    ]
    xs = [1 - min(1.0, theta) if lower else theta for theta, _z, _m, lower in parts]
    h = len(xs) / sum(1 / x for x in xs)
    z = sum(
        (-1.0 if lower else 1.0) * h**2 / (len(xs) * x**2) * zj
        for (_t, zj, _m, lower), x in zip(parts, xs, strict=True)
    )
    low, high = _t_interval(h, z, min(m for _t, _z, m, _l in parts), level, True)
    out["deep_editing_score"] = (max(0.0, low), min(1.0, high))
    return out


def test_recorded_intervals_are_recomputed_from_the_records(rome_run) -> None:
    recomputed = _recomputed_intervals(rome_run)
    for name, interval in recomputed.items():
        entry = metric_entry_at(rome_run["metrics"], name)
        assert entry["interval"] == pytest.approx(interval, rel=1e-9, abs=1e-12), name
    # A ROME edit moves things: the intervals are proper intervals, not points.
    low, high = rome_run["metrics"]["ifr"]["interval"]
    assert low < rome_run["metrics"]["ifr"]["value"] < high
    # Every metric entry says how its interval was made, on how many edits it rests and whether those are
    # enough for its method's measured coverage.
    for name, spec in benchmark_spec().metric_paths().items():
        entry = metric_entry_at(rome_run["metrics"], name)
        assert {"edits", "effective_edits", "few_edits"} <= set(entry), name
        assert entry["interval"] is None or entry["interval_method"], name
        if entry["interval"] is not None:
            met = None not in spec.bounds and entry["edits"] >= COVERAGE_MET_FROM[spec.kind]
            assert entry["coverage_unmet"] is not met, name
    assert not rome_run["metrics"]["efficacy"]["coverage_unmet"]
    assert not rome_run["metrics"]["ifr_per_edit"]["coverage_unmet"]
    # The composite, which holds no margin, covers from 20 edits; IFR uncapped, unbounded above, never.
    assert rome_run["metrics"]["deep_editing_score"]["coverage_unmet"]
    assert rome_run["metrics"]["ifr_uncapped"]["coverage_unmet"]
