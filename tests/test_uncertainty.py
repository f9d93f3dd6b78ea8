"""The intervals of :mod:`knowgic.intervals` and the comparisons of :mod:`knowgic.measure.compare`: on synthetic data against the textbook answers, and on
real ``knowgic evaluate`` runs against an independent recomputation from the records of ``results.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from knowgic.cli import main
from knowgic.intervals import (
    BOUNDARY_METHOD,
    CONSTANT_METHOD,
    METHODS,
    BootstrapSettings,
    Ratio,
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
    assert interval.resamples_defined == 2000


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
    settings = BootstrapSettings()
    cluster = ratio_interval(Ratio(chains.sum(axis=1), np.full(chains.shape[0], chains.shape[1])), settings)
    assert cluster.low is not None and cluster.high is not None
    naive_low, naive_high = _chain_level_interval(chains.ravel(), settings.resamples, settings.level, 1)
    return cluster.high - cluster.low, naive_high - naive_low


def test_cluster_bootstrap_is_wider_than_a_chain_level_one_when_an_edits_chains_are_correlated() -> None:
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


def test_rounding_is_no_spread_but_a_real_spread_is() -> None:
    """A spread below the scorer's float32 rounding (a standard error under 1e-5) is none: the interval is
    the point (a studentized interval of that noise alone would run over the whole range); a spread above
    it keeps a proper interval."""
    b = np.ones(8)
    noisy = ratio_interval(Ratio(0.5 + 1e-7 * np.array([0, 1, 0, 2, 0, 0, 1, 0]), b))
    assert noisy.method == CONSTANT_METHOD and noisy.low == noisy.high
    spread = ratio_interval(Ratio(0.5 + 1e-3 * np.array([0, 1, 0, 2, 0, 0, 1, 0]), b))
    assert spread.method != CONSTANT_METHOD and spread.low is not None and spread.high is not None
    assert spread.low < 0.5005 < spread.high


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
    # Specificity is 1 in every edit (nothing changed): its interval is the Clopper-Pearson bound on its
    # effective edits, and says so; not a point.
    per_edit = none_run["per_edit"]
    assert {r["specificity"] for r in per_edit} == {1.0}
    entry = m["specificity"]
    low, high = entry["interval"]
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / entry["effective_edits"]), rel=1e-4)
    assert entry["interval_method"] == BOUNDARY_METHOD and "every edit's value is 1" in entry["interval_note"]
    assert 0 < entry["effective_edits"] <= edits and entry["few_edits"]
    # IFR and Preservation are 1 up to the float noise of restoring the weights (differing in the 7th digit
    # between edits): that noise is no spread between edits, so the interval is the same bound as for an
    # exact 1 (a studentized interval of the noise alone would run to 0), not a point.
    for name in ("ifr", "preservation"):
        values = [r[name] for r in per_edit]
        assert all(abs(v - 1.0) < 1e-5 for v in values) and len(set(values)) > 1, name
        low, high = m[name]["interval"]
        assert high == 1.0 and low == pytest.approx(0.025 ** (1 / m[name]["effective_edits"]), rel=1e-4), name
        assert m[name]["interval_method"] == BOUNDARY_METHOD, name
    # The deep-editing score is 0 (Efficacy 0) and its interval reaches above 0, from its parts' intervals.
    low, high = m["deep_editing_score"]["interval"]
    assert m["deep_editing_score"]["value"] == 0.0 and low == 0.0 < high
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
        assert d.p_value == 1.0 and d.excludes_zero is False and d.better is None, d.metric
        if d.metric in ("efficacy", "generalization"):
            # Newcombe's interval of no discordant edit is not a point: 6 edits cannot show the difference is 0.
            assert d.discordant == (0, 0) and d.low < 0.0 < d.high
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


def _symmetric_t(
    estimate: Callable[[np.ndarray], tuple[float, np.ndarray, int]], n: int, draws: np.ndarray, level: float
) -> tuple[float, float]:
    """The symmetric bootstrap-t interval widened by t(df)/z, written out resample by resample.

    ``estimate(idx)`` gives the estimate on the drawn edits, each drawn edit's linearized influence ``z``
    and the number ``m`` of drawn edits it rests on; ``se = sqrt(m/(m-1) sum z^2)``, and ``df`` is the
    Satterthwaite degrees of freedom ``(sum z^2)^2 / sum z^4 * (m-1)/m`` of the sample's variance."""

    def with_se(idx: np.ndarray) -> tuple[float, float]:
        theta, z, m = estimate(idx)
        return theta, math.sqrt(m / (m - 1) * (z**2).sum())

    theta, z, m = estimate(np.arange(n))
    se = math.sqrt(m / (m - 1) * (z**2).sum())
    df = max(1.0, (z**2).sum() ** 2 / (z**4).sum() * (m - 1) / m)
    ts = []
    for idx in draws:
        t_theta, t_se = with_se(idx)
        if math.isnan(t_theta):
            continue
        if t_se > 1e-12:
            ts.append(abs(t_theta - theta) / t_se)
        else:
            ts.append(0.0 if abs(t_theta - theta) <= 1e-12 else 1e12)
    half = np.quantile(ts, level) * se * stats.t.ppf((1 + level) / 2, df) / stats.norm.ppf((1 + level) / 2)
    return max(0.0, theta - half), min(1.0, theta + half)


def _ratio_estimate(
    num: np.ndarray, den: np.ndarray
) -> Callable[[np.ndarray], tuple[float, np.ndarray, int]]:
    def estimate(idx: np.ndarray) -> tuple[float, np.ndarray, int]:
        a, b = num[idx], den[idx]
        if b.sum() <= 0:
            return math.nan, np.zeros(idx.size), 0
        theta = a.sum() / b.sum()
        return theta, (a - theta * b) / b.sum(), int((b > 0).sum())

    return estimate


def _harmonic_estimate(
    parts: list[tuple[np.ndarray, np.ndarray, bool]],
) -> Callable[[np.ndarray], tuple[float, np.ndarray, int]]:
    """The deep-editing score H = k / sum_j 1/x_j of its parts (x = 1 - min(1, IFR) for IFR), with the chain
    rule's influence sum_j dH/dx_j * (-z_j for IFR, z_j otherwise)."""

    def estimate(idx: np.ndarray) -> tuple[float, np.ndarray, int]:
        estimates = [(_ratio_estimate(num, den)(idx), lower) for num, den, lower in parts]
        xs = [1 - min(1.0, theta) if lower else theta for (theta, _z, _m), lower in estimates]
        if any(math.isnan(x) for x in xs):
            return math.nan, np.zeros(idx.size), 0
        if any(x <= 0 for x in xs):
            return 0.0, np.zeros(idx.size), min(m for (_t, _z, m), _l in estimates)
        h = len(xs) / sum(1 / x for x in xs)
        z = sum(
            (-1.0 if lower else 1.0) * h**2 / (len(xs) * x**2) * zj
            for ((_theta, zj, _m), lower), x in zip(estimates, xs, strict=True)
        )
        return h, z, min(m for (_t, _z, m), _l in estimates)

    return estimate


def _recomputed_intervals(doc: dict[str, Any]) -> dict[str, tuple[float, float] | None]:
    """The headline intervals from the records, as docs/metrics.md describes them, written independently:
    exact Clopper-Pearson (scipy's binomtest) for Efficacy and Generalization; for IFR, Preservation and the
    deep-editing score the symmetric bootstrap-t over the same draws of edits (``default_rng(seed).integers``),
    widened by t(df)/z."""
    from scipy.stats import binomtest

    settings = doc["uncertainty"]
    n = len(doc["per_edit"])
    draws = np.random.default_rng(settings["seed"]).integers(0, n, size=(settings["resamples"], n))
    level = settings["level"]
    sums = _per_edit_sums(doc)
    out: dict[str, tuple[float, float] | None] = {}
    for name in ("efficacy", "generalization"):
        k, trials = sums[name][0].sum(), sums[name][1].sum()
        ci = binomtest(int(k), int(trials)).proportion_ci(confidence_level=level, method="exact")
        out[name] = (ci.low, ci.high)
    for name in ("ifr", "preservation"):
        out[name] = _symmetric_t(_ratio_estimate(*sums[name]), n, draws, level)
    parts = [(*sums[name], name == "ifr") for name in ("ifr", "preservation", "efficacy", "specificity")]
    out["deep_editing_score"] = _symmetric_t(_harmonic_estimate(parts), n, draws, level)
    return out


def test_recorded_intervals_are_recomputed_from_the_records(rome_run) -> None:
    recomputed = _recomputed_intervals(rome_run)
    for name, interval in recomputed.items():
        entry = metric_entry_at(rome_run["metrics"], name)
        assert entry["interval"] == pytest.approx(interval, rel=1e-9, abs=1e-12), name
    # A ROME edit moves things: the intervals are proper intervals, not points.
    low, high = rome_run["metrics"]["ifr"]["interval"]
    assert low < rome_run["metrics"]["ifr"]["value"] < high
    # Every metric entry says how its interval was made and on how many edits it rests.
    for name in benchmark_spec().metric_paths():
        entry = metric_entry_at(rome_run["metrics"], name)
        assert {"edits", "effective_edits", "few_edits"} <= set(entry), name
        assert entry["interval"] is None or entry["interval_method"], name
