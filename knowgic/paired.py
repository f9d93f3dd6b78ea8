r"""Paired comparison of two runs on one metric, edit by edit, on arrays of per-edit sums and the metric's
declaration (no document and no spec inside; ``knowgic.measure.compare`` aligns runs and calls it).

For a 0/1 outcome per edit the test
is McNemar's exact test (a binomial test of the edits where the runs disagree) with Newcombe's hybrid-score
interval for the paired difference. For the other kinds the test is a sign-flip permutation test: under the
null that the two runs are exchangeable on every edit, swapping A and B on any set of edits gives a
difference as likely as the observed one; all :math:`2^E` swaps up to :data:`EXACT_FLIPS_UP_TO` edits,
:data:`PERMUTATIONS` random ones beyond. The interval of the difference is the studentized bootstrap of
:math:`\theta^{B*}_k - \theta^{A*}_k` over the same resampled edits. A difference counts as told apart when
the test's p-value is below :math:`\alpha` (Holm-adjusted, :func:`holm`, where a table makes several comparisons).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from knowgic.intervals import (
    OK,
    ONE_EDIT,
    UNDEFINED,
    BootstrapSettings,
    Linear,
    bootstrap_bounds,
    composite_linear,
    harmonic,
    no_spread,
    ratio_linear,
    resample_counts,
    robust_se,
    wsum,
)
from knowgic.spec import MetricSpec

PERMUTATIONS = 10000
"""Random sign flips of the permutation test beyond :data:`EXACT_FLIPS_UP_TO` edits."""
EXACT_FLIPS_UP_TO = 12
"""Up to this many edits the permutation test enumerates all 2^E swaps (exact p-value)."""
PAIRED_TEST_BY_KIND = {
    "edit_outcome": "McNemar's exact test (Newcombe's hybrid-score interval)",
    "edit_mean": "sign-flip permutation test over edits (studentized bootstrap interval)",
    "clustered_proportion": "sign-flip permutation test over edits (cluster-robust t interval)",
    "ratio_of_sums": "sign-flip permutation test over edits (studentized bootstrap interval)",
    "composite": "sign-flip permutation test over edits (studentized bootstrap interval)",
}

PAIRED_METHOD_BY_KIND = {
    "edit_mean": "studentized",
    "clustered_proportion": "t",
    "ratio_of_sums": "studentized",
    "composite": "studentized",
}
"""The interval of a paired difference of two runs (edit_outcome: Newcombe's). A share near 1 leaves many
resamples without spread, where the studentized interval of a difference runs to the bound: the cluster-robust
t interval is used for clustered shares instead (the verdict comes from the permutation test either way)."""


@dataclass(frozen=True)
class MetricDifference:
    """Run B minus run A on one metric: the paired interval, the paired test's p-value and its verdict.

    ``excludes_zero`` (kept for readers of the old field) is ``told_apart``: the p-value is below
    ``1 - level``. ``better`` is ``"A"``, ``"B"`` or ``None`` by the metric's direction; ``few_edits``
    flags a comparison resting on fewer than :data:`FEW_EDITS` effective edits.
    """

    metric: str
    a: float | None
    b: float | None
    difference: float | None
    low: float | None
    high: float | None
    excludes_zero: bool | None
    reason: str | None = None
    p_value: float | None = None
    test: str | None = None
    better: str | None = None
    edits: int = 0
    effective_edits: float = 0.0
    few_edits: bool = False
    discordant: tuple[int, int] | None = field(default=None)  # (A only, B only) for 0/1 outcomes

    @property
    def told_apart(self) -> bool | None:
        return self.excludes_zero


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (``None`` entries are left out of the family)."""
    index = [i for i, p in enumerate(p_values) if p is not None]
    ordered = sorted(index, key=lambda i: float(p_values[i]))  # type: ignore[arg-type]
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, i in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * float(p_values[i])))  # type: ignore[arg-type]
        adjusted[i] = running
    return adjusted


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """McNemar's exact two-sided p-value: the binomial test of the discordant edits at one half."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * sps.binom.cdf(min(a_only, b_only), n, 0.5)))


def _wilson(k: float, n: float, z: float) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


def newcombe_paired(both: int, a_only: int, b_only: int, neither: int, level: float) -> tuple[float, float]:
    """Newcombe's hybrid-score interval (his method 10) for the paired difference of two shares, B - A."""
    n = both + a_only + b_only + neither
    z = float(sps.norm.ppf(1 - (1 - level) / 2))
    pa, pb = (both + a_only) / n, (both + b_only) / n
    la, ua = _wilson(both + a_only, n, z)
    lb, ub = _wilson(both + b_only, n, z)
    denom = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = (both * neither - a_only * b_only) / np.sqrt(denom) if denom > 0 else 0.0
    d = pb - pa
    low = d - np.sqrt(max(0.0, (pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2))
    high = d + np.sqrt(max(0.0, (ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la) + (pa - la) ** 2))
    return float(max(-1.0, low)), float(min(1.0, high))


def sign_flips(n_edits: int, seed: int, permutations: int = PERMUTATIONS) -> tuple[np.ndarray, bool]:
    """The swaps of the permutation test, ``(P, E)`` of 0/1: all ``2^E`` up to :data:`EXACT_FLIPS_UP_TO`
    edits (exact), else ``permutations`` random ones (``default_rng(seed + 1)``); and whether exact."""
    if n_edits <= EXACT_FLIPS_UP_TO:
        codes = np.arange(2**n_edits)[:, None]
        return ((codes >> np.arange(n_edits)[None, :]) & 1).astype(float), True
    return np.random.default_rng(seed + 1).integers(0, 2, size=(permutations, n_edits)).astype(float), False


def _swapped_values(
    path: str,
    declared: Mapping[str, MetricSpec],
    flips: np.ndarray,
    sums_a: Mapping[str, tuple[np.ndarray, np.ndarray]],
    sums_b: Mapping[str, tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """Run A's and run B's ``path`` after swapping their records on the flipped edits: ``(S, P)`` each."""
    spec = declared[path]
    if spec.kind == "composite":
        parts = [_swapped_values(p, declared, flips, sums_a, sums_b) for p in spec.of]
        lower = [declared[p].lower_is_better for p in spec.of]
        xa = np.stack(
            [1.0 - np.minimum(1.0, pa) if low else pa for (pa, _), low in zip(parts, lower, strict=True)]
        )
        xb = np.stack(
            [1.0 - np.minimum(1.0, pb) if low else pb for (_, pb), low in zip(parts, lower, strict=True)]
        )
        return harmonic(xa), harmonic(xb)
    (aa, ba), (ab, bb) = sums_a[path], sums_b[path]
    da, db = wsum(flips, ab - aa), wsum(flips, bb - ba)
    num_a, den_a = aa.sum(axis=1)[:, None] + da, ba.sum(axis=1)[:, None] + db
    num_b, den_b = ab.sum(axis=1)[:, None] - da, bb.sum(axis=1)[:, None] - db
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den_a > 0, num_a / den_a, np.nan), np.where(den_b > 0, num_b / den_b, np.nan)


@dataclass
class _BatchDifferences:
    difference: np.ndarray
    low: np.ndarray
    high: np.ndarray
    p_value: np.ndarray
    status: np.ndarray


def batch_differences(
    path: str,
    declared: Mapping[str, MetricSpec],
    sums_a: Mapping[str, tuple[np.ndarray, np.ndarray]],
    sums_b: Mapping[str, tuple[np.ndarray, np.ndarray]],
    settings: BootstrapSettings,
    flips: tuple[np.ndarray, bool] | None = None,
) -> _BatchDifferences:
    """Run B minus run A on ``path`` in each of S paired samples (``sums_*[p] = (a, b)``, ``(S, E)``): the
    difference, its interval and the paired test's p-value (see the module docstring). ``declared``: the
    declarations by path (``path``'s, and a composite's parts')."""
    spec = declared[path]
    level = settings.level
    if spec.kind == "edit_outcome":
        (aa, ba), (ab, bb) = sums_a[path], sums_b[path]
        both_defined = (ba > 0) & (bb > 0)
        xa, xb = (aa > 0.5) & both_defined, (ab > 0.5) & both_defined
        n11 = (xa & xb).sum(axis=1)
        n10 = (xa & ~xb).sum(axis=1)
        n01 = (~xa & xb).sum(axis=1)
        n = both_defined.sum(axis=1)
        n00 = n - n11 - n10 - n01
        s = aa.shape[0]
        low, high, p = np.zeros(s), np.zeros(s), np.ones(s)
        diff = np.where(n > 0, (n01 - n10) / np.maximum(n, 1), np.nan)
        for i in range(s):
            if n[i] == 0:
                continue
            low[i], high[i] = newcombe_paired(int(n11[i]), int(n10[i]), int(n01[i]), int(n00[i]), level)
            p[i] = mcnemar_exact(int(n10[i]), int(n01[i]))
        status = np.where(n > 0, OK, UNDEFINED)
        return _BatchDifferences(diff, low, high, p, status)
    some = next(iter(sums_a.values()))[0]
    n_edits = some.shape[1]
    weights = np.vstack([np.ones((1, n_edits)), resample_counts(n_edits, settings.resamples, settings.seed)])

    def linear(sums: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> Linear:
        if spec.kind == "composite":
            parts = [ratio_linear(weights, *sums[p]) for p in spec.of]
            return composite_linear(parts, [declared[p].lower_is_better for p in spec.of])
        return ratio_linear(weights, *sums[path])

    la, lb = linear(sums_a), linear(sums_b)
    lin = Linear(lb.theta - la.theta, lb.z - la.z, np.minimum(la.m, lb.m), lb.jack - la.jack, weights)
    low, high = bootstrap_bounds(PAIRED_METHOD_BY_KIND[spec.kind], lin, level)
    diff = lin.theta[:, 0]
    se0 = robust_se(lin)[:, 0]
    constant = no_spread(se0)
    low, high = np.where(constant, diff, low), np.where(constant, diff, high)
    lo_b, hi_b = spec.bounds
    if lo_b is not None and hi_b is not None:
        low, high = np.clip(low, lo_b - hi_b, hi_b - lo_b), np.clip(high, lo_b - hi_b, hi_b - lo_b)
    swaps, exact = flips if flips is not None else sign_flips(n_edits, settings.seed)
    va, vb = _swapped_values(path, declared, swaps, sums_a, sums_b)
    swapped = np.abs(vb - va)
    observed = np.abs(diff)[:, None]
    hits = (swapped >= observed - 1e-12).sum(axis=1)
    valid = (~np.isnan(swapped)).sum(axis=1)
    p = hits / np.maximum(valid, 1) if exact else (1 + hits) / (1 + valid)
    p = np.where(no_spread(np.abs(diff)), 1.0, np.minimum(1.0, p))
    defined = ~np.isnan(diff)
    status = np.where(defined, OK, UNDEFINED)
    status = np.where(defined & (np.minimum(la.m[:, 0], lb.m[:, 0]) < 2), ONE_EDIT, status)
    return _BatchDifferences(diff, low, high, p, status)
