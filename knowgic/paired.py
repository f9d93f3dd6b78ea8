r"""Paired comparison of two runs on one metric, edit by edit, on arrays of per-edit sums and the metric's
declaration (no document and no spec inside; ``knowgic.measure.compare`` aligns runs and calls it).

The question a comparison answers is whether the two runs' values differ, :math:`\Delta = \theta_B -
\theta_A \ne 0`, over the edits both ran: a test of the mean difference, not of whether the runs are
interchangeable edit by edit (two runs with the same value and different per-edit patterns must not be
told apart more often than the test's level). Each kind has one method (:data:`PAIRED_METHOD_BY_KIND`),
and the p-value and the interval printed beside it come from that one method, so that the verdict
("told apart": :math:`p < \alpha`) and the interval (it excludes 0) never disagree::

    kind                   method                  statistic and reference     interval (inverts the test)
    edit_outcome           mcnemar                 discordant edits, binomial  conditional Clopper-Pearson
    edit_mean, ratios,     satterthwaite_t         Delta / se, Student's t,    Delta +- t(nu) se
    shares, composite                              nu Satterthwaite's

*Paired t over edits* (``t``, ``satterthwaite_t``). Each run's estimate is linearized edit by edit
(``knowgic.intervals.ratio_linear``; a composite by the chain rule), so that the difference has the
per-edit influence :math:`d_e = z_{B,e} - z_{A,e}` and the cluster-robust standard error
:math:`\widehat{se} = \sqrt{m/(m-1) \sum_e d_e^2}`. With :math:`T = \hat\Delta / \widehat{se}`,

.. math:: p = 2\,(1 - F_\nu(|T|)), \qquad \hat\Delta \pm t_{\nu,\,1-\alpha/2}\,\widehat{se},

with :math:`\nu = m - 1` (``t``) or the Satterthwaite degrees of freedom of :math:`\sum_e d_e^2`
(``satterthwaite_t``, :func:`knowgic.intervals.satterthwaite_df`): near the number of edits that carry the
difference, so that a difference resting on a few edits is not read as if every edit showed it. For one
value per edit (an ``edit_mean``) it is the paired t-test on the per-edit differences.

*McNemar's exact test* for a 0/1 outcome per edit: of the :math:`N` edits where the runs disagree,
:math:`n_{01}` favour B; :math:`p = \min(1, 2 F_{\mathrm{Bin}(N, 1/2)}(\min(n_{01}, n_{10})))`. Its interval
is the test inverted (:func:`mcnemar_interval`): :math:`\Delta = D(2\pi - 1)` over Clopper-Pearson's
intervals for the share :math:`\pi` of discordant edits that favour B and the share :math:`D` of
discordant edits; it excludes 0 exactly when :math:`p < \alpha`.

*Symmetric paired bootstrap-t* (``studentized_symmetric``): the reference is the resampled :math:`|t^*|`
(the runs resampled on the same edits); the critical value is the :math:`\lceil \alpha K \rceil`-th largest
of the :math:`K` draws and :math:`p` the share of draws at least :math:`|T|`, so that again :math:`p <
\alpha` exactly when the interval excludes 0. *Sign-flip permutation test* (``sign_flip``): the test of
interchangeability the comparison used before, with a bootstrap-t interval that does not invert it; kept so
that the simulation of docs/metrics.md can show why it was replaced.

"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from knowgic.errors import KnowgicError
from knowgic.intervals import (
    OK,
    ONE_EDIT,
    UNDEFINED,
    BootstrapSettings,
    Linear,
    clopper_pearson,
    composite_linear,
    harmonic,
    method_bounds,
    ratio_linear,
    resample_counts,
    robust_se,
    satterthwaite_df,
    studentized_draws,
    wsum,
)
from knowgic.spec import MetricSpec

PERMUTATIONS = 10000
"""Random sign flips of the permutation test beyond :data:`EXACT_FLIPS_UP_TO` edits."""
EXACT_FLIPS_UP_TO = 12
"""Up to this many edits the permutation test enumerates all 2^E swaps (exact p-value)."""

PAIRED_METHODS = {
    "mcnemar": "McNemar's exact test (its interval: the test inverted, with Clopper-Pearson's share of discordant edits)",
    "t": "paired t over edits (linearized differences, m-1 degrees of freedom; its own interval)",
    "satterthwaite_t": (
        "paired t over edits (linearized differences, Satterthwaite degrees of freedom; its own interval)"
    ),
    "studentized_symmetric": "symmetric paired bootstrap-t over edits (its own interval)",
    "sign_flip": "sign-flip permutation test over edits (studentized bootstrap interval, not its inversion)",
}
"""Every paired method this module implements (the null simulation of docs/metrics.md measures them)."""
PAIRED_METHOD_BY_KIND = {
    "edit_outcome": "mcnemar",
    "edit_mean": "satterthwaite_t",
    "clustered_proportion": "satterthwaite_t",
    "ratio_of_sums": "satterthwaite_t",
    "composite": "satterthwaite_t",
}
"""The paired method of each metric kind: one that held its level under both nulls of the simulation at
26 edits (docs/metrics.md; ``python -m knowgic.coverage table --tables null``)."""
PAIRED_TEST_BY_KIND = {kind: PAIRED_METHODS[method] for kind, method in PAIRED_METHOD_BY_KIND.items()}
"""What each kind's paired comparison is, in words (captions and reports)."""


@dataclass(frozen=True)
class MetricDifference:
    """Run B minus run A on one metric: the paired interval, the paired test's p-value and its verdict.

    ``excludes_zero`` (kept for readers of the old field) is ``told_apart``: the p-value is below
    ``1 - level``, which is when the interval excludes 0 (one method gives both). ``better`` is ``"A"``,
    ``"B"`` or ``None`` by the metric's direction; ``few_edits`` flags a comparison resting on fewer than
    ``FEW_EDITS`` effective edits. ``ranked_by``: the metric whose comparison gives the verdict (a pooled
    figure's per-edit form; ``told_apart`` is ``None`` on a metric ranked by another, with that as its
    ``reason``).
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
    ranked_by: str | None = None

    @property
    def told_apart(self) -> bool | None:
        return self.excludes_zero


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """McNemar's exact two-sided p-value: the binomial test of the discordant edits at one half."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * sps.binom.cdf(min(a_only, b_only), n, 0.5)))


def mcnemar_interval(
    a_only: np.ndarray, b_only: np.ndarray, n: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray]:
    r"""McNemar's exact test inverted. :math:`B - A = D\,(2\pi - 1)`, with :math:`D` the share of the ``n``
    compared edits where the runs disagree and :math:`\pi` the share of those that favour B; with
    Clopper-Pearson's :math:`[\pi_L, \pi_U]` for ``b_only`` of the :math:`N` discordant edits and
    :math:`[D_L, D_U]` for :math:`N` of ``n``, the interval is every :math:`D(2\pi - 1)` of the box: its
    lower end :math:`D_U(2\pi_L - 1)` where that factor is negative, :math:`D_L(2\pi_L - 1)` otherwise (the
    upper end likewise). As :math:`D_L > 0` once an edit is discordant, it excludes 0 exactly when
    :math:`[\pi_L, \pi_U]` excludes 1/2, which is when McNemar's p-value is below :math:`1 - \text{level}`;
    without a discordant edit it is :math:`[-D_U, D_U]`."""
    a_only, b_only, n = (np.asarray(x, dtype=float) for x in (a_only, b_only, n))
    discordant = a_only + b_only
    d_low, d_high = clopper_pearson(discordant, np.maximum(n, 1), level)
    p_low, p_high = clopper_pearson(b_only, np.maximum(discordant, 1), level)
    p_low, p_high = np.where(discordant > 0, p_low, 0.0), np.where(discordant > 0, p_high, 1.0)
    low_factor, high_factor = 2 * p_low - 1, 2 * p_high - 1
    low = np.where(low_factor < 0, d_high, d_low) * low_factor
    high = np.where(high_factor > 0, d_high, d_low) * high_factor
    return low, high


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
class BatchDifferences:
    """Run B minus run A on one metric in each of S paired samples: the difference, its interval, the
    p-value of the same method, and a status code (``knowgic.intervals``' OK, UNDEFINED, ONE_EDIT)."""

    difference: np.ndarray
    low: np.ndarray
    high: np.ndarray
    p_value: np.ndarray
    status: np.ndarray


def _mcnemar_batch(
    path: str,
    sums_a: Mapping[str, tuple[np.ndarray, np.ndarray]],
    sums_b: Mapping[str, tuple[np.ndarray, np.ndarray]],
    level: float,
) -> BatchDifferences:
    (aa, ba), (ab, bb) = sums_a[path], sums_b[path]
    both_defined = (ba > 0) & (bb > 0)
    xa, xb = (aa > 0.5) & both_defined, (ab > 0.5) & both_defined
    n10 = (xa & ~xb).sum(axis=1)
    n01 = (~xa & xb).sum(axis=1)
    n = both_defined.sum(axis=1)
    diff = np.where(n > 0, (n01 - n10) / np.maximum(n, 1), np.nan)
    low, high = mcnemar_interval(n10, n01, n, level)
    discordant = n10 + n01
    p = np.where(
        discordant > 0,
        np.minimum(1.0, 2.0 * sps.binom.cdf(np.minimum(n10, n01), np.maximum(discordant, 1), 0.5)),
        1.0,
    )
    return BatchDifferences(diff, low, high, p, np.where(n > 0, OK, UNDEFINED))


def batch_differences(
    path: str,
    declared: Mapping[str, MetricSpec],
    sums_a: Mapping[str, tuple[np.ndarray, np.ndarray]],
    sums_b: Mapping[str, tuple[np.ndarray, np.ndarray]],
    settings: BootstrapSettings,
    flips: tuple[np.ndarray, bool] | None = None,
    method: str | None = None,
) -> BatchDifferences:
    """Run B minus run A on ``path`` in each of S paired samples (``sums_*[p] = (a, b)``, ``(S, E)``): the
    difference, its interval and the p-value of ``method`` (default: the kind's,
    :data:`PAIRED_METHOD_BY_KIND`; see the module docstring). ``declared``: the declarations by path
    (``path``'s, and a composite's parts'); ``flips``: the sign flips of ``sign_flip`` (made when not given).
    """
    spec = declared[path]
    level = settings.level
    alpha = 1.0 - level
    method = method or PAIRED_METHOD_BY_KIND[spec.kind]
    if method not in PAIRED_METHODS:
        raise KnowgicError(f"unknown paired method {method!r}; known: {', '.join(PAIRED_METHODS)}")
    if method == "mcnemar":
        if spec.kind != "edit_outcome":
            raise KnowgicError(f"metric {path}: McNemar's test needs a 0/1 outcome per edit")
        return _mcnemar_batch(path, sums_a, sums_b, level)
    some = next(iter(sums_a.values()))[0]
    n_edits = some.shape[1]
    weights = np.ones((1, n_edits))
    if method in ("studentized_symmetric", "sign_flip"):
        weights = np.vstack([weights, resample_counts(n_edits, settings.resamples, settings.seed)])

    def linear(sums: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> Linear:
        if spec.kind == "composite":
            parts = [ratio_linear(weights, *sums[p]) for p in spec.of]
            return composite_linear(parts, [declared[p].lower_is_better for p in spec.of])
        return ratio_linear(weights, *sums[path])

    la, lb = linear(sums_a), linear(sums_b)
    lin = Linear(lb.theta - la.theta, lb.z - la.z, np.minimum(la.m, lb.m), lb.jack - la.jack, weights)
    diff = lin.theta[:, 0]
    se0 = robust_se(lin)[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        # No spread in the differences: 0 is no evidence; a difference of the same size on every edit is.
        t_obs = np.where(se0 > 0, diff / se0, np.where(diff == 0, 0.0, np.sign(diff) * np.inf))
    if method in ("t", "satterthwaite_t"):
        df = np.maximum(lin.m[:, 0] - 1.0, 1.0) if method == "t" else satterthwaite_df(lin)
        p = 2.0 * sps.t.sf(np.abs(t_obs), df)
        half = sps.t.ppf(1.0 - alpha / 2, df) * se0
        low, high = diff - half, diff + half
    elif method == "studentized_symmetric":
        draws = np.abs(studentized_draws(lin))
        valid = (~np.isnan(draws)).sum(axis=1)
        ordered = -np.sort(-np.where(np.isnan(draws), -np.inf, draws), axis=1)  # largest first
        c = np.maximum(np.ceil(alpha * valid).astype(int), 1)
        crit = ordered[np.arange(ordered.shape[0]), np.minimum(c, ordered.shape[1]) - 1]
        p = (draws >= np.abs(t_obs)[:, None]).sum(axis=1) / np.maximum(valid, 1)
        half = np.where(se0 > 0, crit * se0, 0.0)
        low, high = diff - half, diff + half
    else:  # sign_flip: the test of interchangeability, with the studentized bootstrap interval beside it
        low, high = method_bounds("studentized", lin, level)
        low, high = np.where(se0 > 0, low, diff), np.where(se0 > 0, high, diff)
        swaps, exact = flips if flips is not None else sign_flips(n_edits, settings.seed)
        va, vb = _swapped_values(path, declared, swaps, sums_a, sums_b)
        swapped = np.abs(vb - va)
        hits = (swapped >= np.abs(diff)[:, None] - 1e-12).sum(axis=1)
        valid = (~np.isnan(swapped)).sum(axis=1)
        p = hits / np.maximum(valid, 1) if exact else (1 + hits) / (1 + valid)
        p = np.where(diff == 0, 1.0, np.minimum(1.0, p))
    lo_b, hi_b = spec.bounds
    if lo_b is not None and hi_b is not None:
        # A difference lies in [L - U, U - L]; clipping there never moves an end across 0.
        low, high = np.clip(low, lo_b - hi_b, hi_b - lo_b), np.clip(high, lo_b - hi_b, hi_b - lo_b)
    defined = ~np.isnan(diff)
    status = np.where(defined, OK, UNDEFINED)
    status = np.where(defined & (np.minimum(la.m[:, 0], lb.m[:, 0]) < 2), ONE_EDIT, status)
    return BatchDifferences(diff, low, high, np.minimum(1.0, p), status)
