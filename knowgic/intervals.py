r"""The interval of every metric, on arrays of per-edit sums, by the metric's declared kind.

No document and no spec inside: callers hand in the sums (``knowgic.measure`` computes them from a run's
records) and the declarations. Paired comparisons of two runs are ``knowgic.paired``.

Why edits are the unit. The chains, broader-context facts and neighbours of one edit are measured on the
same edited model and share its subject, so they move together; treating the 1,206 active chains of
knowgic-tiny (of 1,406) as independent evidence would give intervals far too narrow. Every method here
treats the *edits* :math:`e = 1..E` as the independent units and carries every item of an edit along.

Every metric except the composite deep-editing score is a ratio of per-edit sums,

.. math:: \hat\theta = \frac{\sum_e a_e}{\sum_e b_e},

with the edit's *sufficient statistics* :math:`a_e, b_e` (recorded in ``results.json``; each metric's are
listed in ``knowgic.measure.definitions``).

How each interval is made (the metric's ``kind`` in ``spec/benchmark.yaml`` chooses; docs/metrics.md has
the coverage each method measured)::

    kind                  interval (METHOD_BY_KIND)                       paired test (knowgic.paired)
    edit_outcome          Clopper-Pearson, exact                           McNemar's exact test
    edit_mean             Clopper-Pearson on the effective edits           sign-flip permutation test
    clustered_proportion  Korn-Graubard (CP on p(1-p)/se^2 facts)          sign-flip permutation test
    ratio_of_sums         symmetric bootstrap-t, Satterthwaite-widened     sign-flip permutation test
    composite             symmetric bootstrap-t, Satterthwaite-widened     sign-flip permutation test

*Studentized (bootstrap-t) cluster bootstrap.* A resample :math:`k` draws the edits with replacement,
``numpy.random.default_rng(seed).integers(0, E, size=(resamples, E))``; with :math:`c_{k,e}` the number of
times edit :math:`e` was drawn, :math:`\theta^*_k = \sum_e c_{k,e} a_e / \sum_e c_{k,e} b_e`. Each estimate
gets its linearized (cluster-robust) standard error

.. math:: \widehat{se}^2 = \frac{m}{m-1} \sum_e c_e\, z_e^2, \qquad
          z_e = \frac{a_e - \theta b_e}{\sum_{e'} c_{e'} b_{e'}},

:math:`m` the number of drawn edits with :math:`b_e > 0`; the composite's :math:`z_e` is the chain rule's
:math:`\sum_j \partial H / \partial \theta_j \, z_{j,e}`. With :math:`t^*_k = (\theta^*_k - \hat\theta) /
\widehat{se}^*_k` the interval is :math:`[\hat\theta - q_{1-\alpha/2}(t^*)\,\widehat{se},\;
\hat\theta - q_{\alpha/2}(t^*)\,\widehat{se}]`, clipped to the metric's declared bounds. Unlike the
percentile interval it widens where a few edits carry most of the weight.

*Symmetric studentized bootstrap, widened by the variance's degrees of freedom* (ratios of sums and the
composite; the method of :data:`METHOD_BY_KIND`). The equal-tailed bootstrap-t above covered 0.90 for IFR
under ROME at 26 edits, whose weight sits in 9.6 effective edits: a sample that happens to draw few of the
heavy edits also understates its own spread. The interval

.. math:: \hat\theta \pm q_{1-\alpha}(|t^*|)\,\widehat{se}\,\frac{t_{\nu,\,1-\alpha/2}}{z_{1-\alpha/2}},
          \qquad \nu = \frac{(\sum_e z_e^2)^2}{\sum_e z_e^4}\cdot\frac{m-1}{m}

takes the symmetric bootstrap-t quantile and widens it by the ratio of Student's to the normal quantile at
the Satterthwaite degrees of freedom :math:`\nu` of the cluster-robust variance (a sum of one term per
edit): :math:`m-1` when the edits weigh the same, near the number of heavy edits when a few carry the
variance. Its coverage is measured by the simulation of docs/metrics.md (at least 0.93 for every ratio
metric and population at 26 edits).

All resamples of all metrics are elementwise products and sums over a ``(resamples, E)`` array
(vectorised; no BLAS product, so that the recorded intervals are bitwise reproducible whatever the BLAS
library or thread count).

*Korn-Graubard* for a share of 0/1 facts clustered in edits: Clopper-Pearson on the effective sample size
:math:`n^* = \hat p(1-\hat p)/\widehat{se}^2 \cdot (z_{\alpha/2}/t_{m-1,\alpha/2})^2`. *Bernoulli bound*
for one bounded value per edit: Clopper-Pearson on :math:`n_\mathrm{eff}` edits with the mean (scaled to
[0, 1]) as the share, the widest a bounded value can spread (wide, and safe where values pile at a bound).

*Clopper-Pearson* for a 0/1 outcome per edit: :math:`[B(\alpha/2; k, n-k+1),\, B(1-\alpha/2; k+1, n-k)]`
(``scipy.stats.beta``), never narrower than its nominal level for any true share, and never zero-width:
26 of 26 gives [0.868, 1]. Wilson's interval is shorter but covers as little as 0.855 at 26 edits and
0.833 at 6 for some true shares (near 1, where benchmark figures such as Efficacy sit).

*Every edit's value the same.* When every contributing edit has the same value the bootstrap has no spread
to show. At a bound of the metric (Specificity 1 in every edit) the interval is the Clopper-Pearson bound
for :math:`n_\mathrm{eff}` successes in :math:`n_\mathrm{eff}` trials on the declared range, with
:math:`n_\mathrm{eff}` the effective number of edits; elsewhere it is the point itself, and the entry's
``interval_note`` says so in both cases.

*Effective number of edits* (Kish): :math:`n_\mathrm{eff} = (\sum_e b_e)^2 / \sum_e b_e^2`, the number of
equally weighted edits that would give the estimate the same variance. IFR's weights sit in a few edits
(9.6 effective of 26 on knowgic-tiny under ROME). Below :data:`FEW_EDITS` effective edits an entry is
flagged ``few_edits``: the figure rests on few edits, its interval is wide, and the lowest coverages of
the simulation (docs/metrics.md) are in such figures.

Undefined resamples. A resample that draws none of the edits a metric is defined on has
:math:`\sum_e c_{k,e} b_e = 0`. It is left out, and the interval is conditional on the metric being
defined, which is what the reported value is too. When fewer than half of the resamples are defined, or the
metric rests on a single edit, the interval is ``null`` with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from knowgic.errors import KnowgicError
from knowgic.spec import MetricSpec

UNIT = "edit"
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95
MIN_DEFINED_SHARE = 0.5
"""An interval needs the metric to be defined on at least this share of the resamples."""
FEW_EDITS = 10.0
"""Below this effective number of edits a metric is flagged ``few_edits``."""
PERMUTATIONS = 10000
"""Random sign flips of the permutation test beyond :data:`EXACT_FLIPS_UP_TO` edits."""
EXACT_FLIPS_UP_TO = 12
"""Up to this many edits the permutation test enumerates all 2^E swaps (exact p-value)."""

METHODS = {
    "exact": "Clopper-Pearson exact binomial interval over edits",
    "studentized": "studentized cluster bootstrap over edits (bootstrap-t, linearized standard error)",
    "studentized_satterthwaite": (
        "symmetric studentized cluster bootstrap over edits (bootstrap-t, linearized standard error), "
        "widened by t(df)/z, df the Satterthwaite degrees of freedom of the cluster-robust variance"
    ),
    "t": "cluster-robust t over edits (linearized standard error, m/(m-1) correction, m-1 degrees of freedom)",
    "percentile": "percentile cluster bootstrap over edits",
    "bca": "BCa cluster bootstrap over edits (acceleration from the jackknife over edits)",
    "bernoulli_bound": (
        "Clopper-Pearson on the effective number of edits, each edit's value taken as a 0/1 outcome's share "
        "(the widest spread a bounded value can have)"
    ),
    "effective_binomial": (
        "Korn-Graubard: Clopper-Pearson on the effective sample size p(1-p)/se^2 (cluster-robust se over "
        "edits, degrees-of-freedom adjusted)"
    ),
}
"""Every interval method this module implements (the simulation of docs/metrics.md measures them all)."""
BOOTSTRAP_METHODS = frozenset({"studentized", "studentized_satterthwaite", "percentile", "bca"})
"""The methods of :data:`METHODS` that resample edits (a caption states their resamples and seed)."""
BOUNDARY_METHOD = "Clopper-Pearson bound on the effective number of edits (every edit at the bound)"
CONSTANT_METHOD = "none: every edit has the same value"
METHOD_BY_KIND = {
    "edit_outcome": "exact",
    "edit_mean": "bernoulli_bound",
    "clustered_proportion": "effective_binomial",
    "ratio_of_sums": "studentized_satterthwaite",
    "composite": "studentized_satterthwaite",
}
"""The interval method of each metric kind: the best-covering one in the simulation of docs/metrics.md."""


def methods_for(
    declared: Mapping[str, MetricSpec], method_of_kind: Mapping[str, str]
) -> list[tuple[str, list[str]]]:
    """Each method that ``method_of_kind`` (:data:`METHOD_BY_KIND`, ``knowgic.paired.PAIRED_TEST_BY_KIND``)
    gives the metrics ``declared`` (path -> declaration), with the labels of those metrics (each once, in
    order): what a caption says so that every value's interval or test is named. Kinds without an entry are
    left out."""
    groups: dict[str, dict[str, None]] = {}
    for metric in declared.values():
        if metric.kind in method_of_kind:
            groups.setdefault(method_of_kind[metric.kind], {})[metric.label] = None
    return [(method, list(labels)) for method, labels in groups.items()]


def listing(words: Sequence[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``; a word holding a comma is quoted, so that the list stays
    readable (``Specificity, "Specificity, same relation" and ...``)."""
    quoted = [f'"{w}"' if "," in w else w for w in words]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


@dataclass(frozen=True)
class BootstrapSettings:
    """How intervals are computed: recorded as the results document's ``uncertainty``."""

    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    level: float = DEFAULT_LEVEL

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise KnowgicError(f"bootstrap resamples must be a positive number, got {self.resamples}")
        if not 0.0 < self.level < 1.0:
            raise KnowgicError(f"interval level must lie strictly between 0 and 1, got {self.level}")

    def record(self) -> dict[str, Any]:
        return {
            "method": "by metric kind; each metric entry names its interval_method",
            "methods_by_kind": {kind: METHODS[m] for kind, m in METHOD_BY_KIND.items()},
            "unit": UNIT,
            "resamples": self.resamples,
            "seed": self.seed,
            "level": self.level,
            "draws": "numpy.random.default_rng(seed).integers(0, E, size=(resamples, E)), E = per_edit count",
            "effective_edits": "Kish: (sum_e b_e)^2 / sum_e b_e^2 of the metric's per-edit denominators",
            "few_edits_below": FEW_EDITS,
            "undefined_resamples": (
                "left out; the interval is null when fewer than half of the resamples are defined or the "
                "metric rests on one edit"
            ),
        }


@dataclass(frozen=True)
class Ratio:
    r"""A metric :math:`\sum_e a_e / \sum_e b_e` over edits, by its per-edit sums (in the run's edit order)."""

    numerator: np.ndarray
    denominator: np.ndarray

    @property
    def edits_defined(self) -> int:
        """How many edits contribute (:math:`b_e > 0`)."""
        return int(np.count_nonzero(self.denominator > 0))

    @property
    def effective_edits(self) -> float:
        r"""Kish's effective number of edits, :math:`(\sum_e b_e)^2 / \sum_e b_e^2` (0 without any)."""
        return effective_edits(self.denominator)


def effective_edits(weights: np.ndarray) -> float:
    r"""Kish's effective number of edits :math:`(\sum_e b_e)^2 / \sum_e b_e^2` of per-edit weights ``b``."""
    squares = float((weights * weights).sum())
    return float(weights.sum()) ** 2 / squares if squares > 0 else 0.0


@dataclass(frozen=True)
class Interval:
    """A metric's interval and how it was made.

    ``method``: one of :data:`METHODS`' descriptions (or the boundary/constant cases); ``note``: what a
    reader should know (every edit had the same value); ``edits``: the edits the metric rests on;
    ``effective_edits``: Kish's effective number of them.
    """

    low: float | None
    high: float | None
    resamples_defined: int
    reason: str | None = None
    method: str | None = None
    note: str | None = None
    edits: int = 0
    effective_edits: float = 0.0

    @property
    def few_edits(self) -> bool:
        return self.effective_edits < FEW_EDITS


def resample_counts(n_edits: int, resamples: int, seed: int) -> np.ndarray:
    """``c[k, e]``: how often resample ``k`` drew edit ``e`` (shape ``(resamples, n_edits)``, float64)."""
    draws = np.random.default_rng(seed).integers(0, n_edits, size=(resamples, n_edits))
    flat = draws + (np.arange(resamples, dtype=np.int64) * n_edits)[:, None]
    return np.bincount(flat.ravel(), minlength=resamples * n_edits).reshape(resamples, n_edits).astype(float)


# --- the batched core: S samples of E edits at once (S = 1 for a results document) ---------------------

_TINY = 1e-12
_BIG = 1e12
ROUNDING = 1e-5
"""Spread that is the scorer's rounding, not a difference between edits: probabilities come from float32
forward passes, and the same prompt scored in another batch moves by about 1e-6 relative (the unedited
model's IFR on gemma3-270m is 0.9999997, one edit at 0.999998). A standard error or a paired difference
below this is treated as none (:func:`no_spread`), so that such noise neither gets the whole range from a
studentized interval (every resample without the odd edit has no spread) nor a test of its own. Absolute,
not relative to the value: a spread this small is far below any figure a table shows, and a relative rule
would hand a near-zero value's rounding to the studentized interval, whose end then scales with it (LoRA's
uncapped IFR of 1.4e-6 on 2 edits got an upper end of 3e6 that moved with the last digits of the scores)."""


def no_spread(se: np.ndarray) -> np.ndarray:
    """Where a standard error (or a paired difference) is the scorer's rounding (:data:`ROUNDING`), or 0."""
    return ~(se > ROUNDING)


# Interval status codes of the batched core (the wrappers turn them into reasons, methods and notes).
OK, UNDEFINED, ONE_EDIT, FEW_RESAMPLES, BOUNDARY, CONSTANT, FROM_PARTS = range(7)


def wsum(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:math:`\\sum_e w_{k,e} x_{s,e}` for every sample s and weight row k: shape ``(S, K)``.

    Elementwise products and numpy's pairwise sums, not a BLAS product: the result must not depend on the
    BLAS library or its thread count, so that a run's recorded intervals are bitwise reproducible."""
    return (weights[None, :, :] * x[:, None, :]).sum(axis=2)


@dataclass
class Linear:
    """A metric in every weighting of the edits (row 0: the sample itself; rows 1..K: the resamples),
    with each edit's linearized influence ``z`` and the number ``m`` of drawn contributing edits."""

    theta: np.ndarray  # (S, K1)
    z: np.ndarray  # (S, K1, E)
    m: np.ndarray  # (S, K1)
    jack: np.ndarray  # (S, E): leave-one-edit-out values of the sample
    weights: np.ndarray  # (K1, E)


def ratio_linear(weights: np.ndarray, a: np.ndarray, b: np.ndarray) -> Linear:
    num, den = wsum(weights, a), wsum(weights, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        theta = np.where(den > 0, num / den, np.nan)
        z = (a[:, None, :] - theta[..., None] * b[:, None, :]) / den[..., None]
        jack_den = den[:, :1] - b
        jack = np.where(jack_den > 0, (num[:, :1] - a) / jack_den, np.nan)
    m = wsum(weights, (b > 0).astype(float))
    return Linear(theta, np.where(np.isfinite(z), z, 0.0), m, jack, weights)


def harmonic(xs: np.ndarray) -> np.ndarray:
    """Harmonic mean over axis 0; 0 where any part is 0 or below, NaN where any part is NaN."""
    zero = (xs <= 0.0).any(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = xs.shape[0] / (1.0 / xs).sum(axis=0)
    return np.where(np.isnan(xs).any(axis=0), np.nan, np.where(zero, 0.0, h))


def composite_linear(parts: Sequence[Linear], lower: Sequence[bool]) -> Linear:
    r"""The harmonic mean :math:`H = k / \sum_j 1/x_j` of the parts, :math:`x_j = 1 - \min(1, \theta_j)` for a
    lower-is-better part, with the chain rule's influence :math:`\sum_j (\partial H/\partial x_j)\,\pm z_j`."""
    xs = np.stack(
        [1.0 - np.minimum(1.0, p.theta) if low else p.theta for p, low in zip(parts, lower, strict=True)]
    )
    h = harmonic(xs)
    with np.errstate(divide="ignore", invalid="ignore"):
        grad = np.where(xs > 0.0, h[None] ** 2 / (len(parts) * xs**2), 0.0)
    grad = np.where(np.isfinite(grad), grad, 0.0)
    z = sum((-1.0 if low else 1.0) * g[..., None] * p.z for p, g, low in zip(parts, grad, lower, strict=True))
    jx = np.stack(
        [1.0 - np.minimum(1.0, p.jack) if low else p.jack for p, low in zip(parts, lower, strict=True)]
    )
    m = np.min(np.stack([p.m for p in parts]), axis=0)
    return Linear(h, np.asarray(z), m, harmonic(jx), parts[0].weights)


def robust_se(lin: Linear) -> np.ndarray:
    """Cluster-robust standard error of every weighting, :math:`\\sqrt{m/(m-1)\\,\\sum_e c_e z_e^2}`."""
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.where(lin.m > 1, lin.m / (lin.m - 1.0), np.nan)
    return np.sqrt(factor * (lin.weights[None] * lin.z * lin.z).sum(axis=2))


def _row_quantiles(x: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Per-row linear-interpolation quantiles of the non-NaN values: ``x`` (S, K), ``probs`` (S, P)."""
    ordered = np.sort(x, axis=1)  # NaN last
    count = (~np.isnan(x)).sum(axis=1)
    pos = probs * np.maximum(count - 1, 0)[:, None]
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, np.maximum(count - 1, 0)[:, None])
    frac = pos - lo
    rows = np.arange(x.shape[0])[:, None]
    low_v, high_v = ordered[rows, lo], ordered[rows, hi]
    return low_v + (high_v - low_v) * frac


def _satterthwaite_df(lin: Linear) -> np.ndarray:
    r"""Degrees of freedom of each sample's cluster-robust variance :math:`\sum_e z_e^2`, a sum of one term
    per edit (Satterthwaite): :math:`\nu = \frac{(\sum_e z_e^2)^2}{\sum_e z_e^4} \cdot \frac{m-1}{m}`, at
    least 1. It is :math:`m - 1` when every edit weighs the same, and near the number of heavy edits
    when a few edits carry the variance."""
    z2 = lin.z[:, 0, :] ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        nu = z2.sum(axis=1) ** 2 / (z2 * z2).sum(axis=1) * (lin.m[:, 0] - 1.0) / lin.m[:, 0]
    return np.maximum(np.where(np.isfinite(nu), nu, 1.0), 1.0)


def bootstrap_bounds(
    method: str, lin: Linear, level: float, bounds: tuple[float | None, float | None] = (None, None)
) -> tuple[np.ndarray, np.ndarray]:
    """``method``'s interval for each sample (before clipping to the bounds)."""
    alpha = 1.0 - level
    theta0, thetas = lin.theta[:, 0], lin.theta[:, 1:]
    s = thetas.shape[0]
    if method == "effective_binomial":
        lo_b, hi_b = bounds
        if lo_b is None or hi_b is None:
            method = "studentized"  # no binomial scale for an unbounded metric
        else:
            span = hi_b - lo_b
            p = (theta0 - lo_b) / span
            se = robust_se(lin)[:, 0] / span
            df = np.maximum(lin.m[:, 0] - 1.0, 1.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                n_star = (
                    p
                    * (1 - p)
                    / (se * se)
                    * (sps.norm.ppf(1 - alpha / 2) / sps.t.ppf(1 - alpha / 2, df)) ** 2
                )
            n_star = np.where(np.isfinite(n_star), n_star, _BIG)
            low, high = clopper_pearson(p * n_star, n_star, level)
            return lo_b + span * low, lo_b + span * high
    if method == "percentile":
        q = _row_quantiles(thetas, np.tile([alpha / 2, 1 - alpha / 2], (s, 1)))
        return q[:, 0], q[:, 1]
    se = robust_se(lin)
    if method == "t":
        df = np.maximum(lin.m[:, 0] - 1.0, 1.0)
        half = sps.t.ppf(1.0 - alpha / 2, df) * se[:, 0]
        return theta0 - half, theta0 + half
    if method in ("studentized", "studentized_satterthwaite"):
        diff = thetas - theta0[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            t = diff / se[:, 1:]
        # A resample whose drawn edits all share one value has no spread of its own: t is +-infinite.
        flat = ~(se[:, 1:] > _TINY)
        t = np.where(flat, np.where(np.abs(diff) <= _TINY, 0.0, np.sign(diff) * _BIG), t)
        t = np.where(np.isnan(thetas), np.nan, t)
        if method == "studentized":
            q = _row_quantiles(t, np.tile([alpha / 2, 1 - alpha / 2], (s, 1)))
            return theta0 - q[:, 1] * se[:, 0], theta0 - q[:, 0] * se[:, 0]
        widen = sps.t.ppf(1 - alpha / 2, _satterthwaite_df(lin)) / sps.norm.ppf(1 - alpha / 2)
        half = _row_quantiles(np.abs(t), np.full((s, 1), level))[:, 0] * se[:, 0] * widen
        return theta0 - half, theta0 + half
    if method == "bca":
        defined = (~np.isnan(thetas)).sum(axis=1)
        below = (thetas < theta0[:, None]).sum(axis=1) + 0.5 * (thetas == theta0[:, None]).sum(axis=1)
        z0 = sps.norm.ppf(np.clip(below / np.maximum(defined, 1), 1e-6, 1 - 1e-6))
        jack = lin.jack
        centred = np.nanmean(jack, axis=1)[:, None] - jack
        num = np.nansum(centred**3, axis=1)
        den = 6.0 * np.nansum(centred**2, axis=1) ** 1.5
        acc = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
        zs = sps.norm.ppf([alpha / 2, 1 - alpha / 2])
        adj = z0[:, None] + (z0[:, None] + zs[None]) / (1 - acc[:, None] * (z0[:, None] + zs[None]))
        q = _row_quantiles(thetas, sps.norm.cdf(adj))
        return q[:, 0], q[:, 1]
    raise KnowgicError(f"unknown interval method {method!r}; known: {', '.join(METHODS)}")


def clopper_pearson(k: np.ndarray, n: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Clopper-Pearson interval of ``k`` successes in ``n`` trials (``n`` may be fractional: an effective
    count), :math:`[B(\alpha/2; k, n-k+1), B(1-\alpha/2; k+1, n-k)]`; 0 and 1 at the ends."""
    alpha = 1.0 - level
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, sps.beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1), 0.0)
        high = np.where(k < n, sps.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300)), 1.0)
    return low, high


@dataclass
class BatchIntervals:
    """One metric's value and interval in each of S samples, with codes for what happened."""

    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    status: np.ndarray  # OK, UNDEFINED, ...
    edits: np.ndarray
    effective: np.ndarray
    defined: np.ndarray  # resamples where the metric is defined
    method: str


def _clip(x: np.ndarray, bounds: tuple[float | None, float | None]) -> np.ndarray:
    low, high = bounds
    return np.clip(x, -np.inf if low is None else low, np.inf if high is None else high)


def batch_intervals(
    sums: Mapping[str, tuple[np.ndarray, np.ndarray]],
    settings: BootstrapSettings,
    declared: Mapping[str, MetricSpec],
    methods: Mapping[str, str] | None = None,
) -> dict[str, BatchIntervals]:
    """Every metric's interval in each of S samples of E edits at once (a results document is one sample;
    the coverage simulation passes thousands).

    ``sums[path] = (a, b)``, both of shape ``(S, E)``: the per-edit sums of each ratio metric; composites are
    computed from their parts. ``declared``: the metric paths to compute with their declarations (a
    composite's parts included, before it); ``methods`` maps a kind to a method of :data:`METHODS`
    (default :data:`METHOD_BY_KIND`).
    """
    methods = {**METHOD_BY_KIND, **(methods or {})}
    some = next(iter(sums.values()))[0]
    n_edits = some.shape[1]
    weights = np.vstack([np.ones((1, n_edits)), resample_counts(n_edits, settings.resamples, settings.seed)])
    linear: dict[str, Linear] = {}
    out: dict[str, BatchIntervals] = {}
    for path, spec in declared.items():
        if spec.kind == "composite":
            parts = [linear.get(p) or ratio_linear(weights, *sums[p]) for p in spec.of]
            lin = composite_linear(parts, [declared[p].lower_is_better for p in spec.of])
            edits = np.min(np.stack([(sums[p][1] > 0).sum(axis=1) for p in spec.of]), axis=0)
            effective = np.min(
                np.stack([np.apply_along_axis(effective_edits, 1, sums[p][1]) for p in spec.of]), axis=0
            )
        else:
            a, b = sums[path]
            lin = ratio_linear(weights, a, b)
            edits = (b > 0).sum(axis=1)
            effective = np.apply_along_axis(effective_edits, 1, b)
        linear[path] = lin
        counts = None if spec.kind == "composite" else sums[path]
        out[path] = _intervals_of(
            lin, spec, methods[spec.kind], settings.level, edits, effective, counts, out, declared
        )
    return out


def _intervals_of(
    lin: Linear,
    spec: MetricSpec,
    method: str,
    level: float,
    edits: np.ndarray,
    effective: np.ndarray,
    counts: tuple[np.ndarray, np.ndarray] | None,
    done: Mapping[str, BatchIntervals],
    declared: Mapping[str, MetricSpec],
) -> BatchIntervals:
    value = lin.theta[:, 0]
    defined = (~np.isnan(lin.theta[:, 1:])).sum(axis=1)
    status = np.full(value.shape, OK)
    if method == "exact":
        if counts is None:
            raise KnowgicError(f"metric {spec.name}: an exact interval needs a 0/1 outcome per edit")
        a, b = counts
        k, n = a.sum(axis=1), b.sum(axis=1)
        low, high = clopper_pearson(np.rint(k), np.rint(n), level)
        status = np.where(n > 0, OK, UNDEFINED)
        return BatchIntervals(value, low, high, status, edits, effective, defined, METHODS["exact"])
    if method == "bernoulli_bound" and spec.bounds[0] is not None and spec.bounds[1] is not None:
        span = spec.bounds[1] - spec.bounds[0]
        share = (value - spec.bounds[0]) / span
        cp_low, cp_high = clopper_pearson(share * effective, effective, level)
        low, high = spec.bounds[0] + span * cp_low, spec.bounds[0] + span * cp_high
    else:
        method = "studentized" if method == "bernoulli_bound" else method
        low, high = bootstrap_bounds(method, lin, level, spec.bounds)
    se0 = robust_se(lin)[:, 0]
    constant = no_spread(se0)
    lo_b, hi_b = spec.bounds
    # At a bound up to the scorer's rounding.
    at_low = (lo_b is not None) & np.isclose(value, lo_b if lo_b is not None else 0.0, rtol=0, atol=ROUNDING)
    at_high = (hi_b is not None) & np.isclose(value, hi_b if hi_b is not None else 0.0, rtol=0, atol=ROUNDING)
    if spec.kind == "composite":
        # No spread in the resamples (a part is 0 in every edit): the composite of its parts' intervals.
        parts = [done[p] for p in spec.of]
        xs_low = np.stack(
            [
                1.0 - np.minimum(1.0, p.high) if declared[n].lower_is_better else p.low
                for p, n in zip(parts, spec.of, strict=True)
            ]
        )
        xs_high = np.stack(
            [
                1.0 - np.minimum(1.0, p.low) if declared[n].lower_is_better else p.high
                for p, n in zip(parts, spec.of, strict=True)
            ]
        )
        low = np.where(constant, harmonic(xs_low), low)
        high = np.where(constant, harmonic(xs_high), high)
        status = np.where(constant, FROM_PARTS, status)
    elif lo_b is not None and hi_b is not None:
        span = hi_b - lo_b
        cp_low, cp_high = clopper_pearson(effective, effective, level)
        boundary_high = constant & at_high
        boundary_low = constant & at_low
        low = np.where(boundary_high, lo_b + span * cp_low, low)
        high = np.where(boundary_high, hi_b, high)
        low = np.where(boundary_low, lo_b, low)
        high = np.where(boundary_low, lo_b + span * (1.0 - cp_low), high)
        status = np.where(boundary_high | boundary_low, BOUNDARY, np.where(constant, CONSTANT, status))
        del cp_high
    else:
        status = np.where(constant, CONSTANT, status)
    low = np.where(status == CONSTANT, value, low)
    high = np.where(status == CONSTANT, value, high)
    status = np.where(np.isnan(value), UNDEFINED, status)
    status = np.where((status != UNDEFINED) & (edits < 2), ONE_EDIT, status)
    status = np.where(
        (status == OK) & (defined < MIN_DEFINED_SHARE * (lin.theta.shape[1] - 1)), FEW_RESAMPLES, status
    )
    return BatchIntervals(
        value,
        _clip(low, spec.bounds),
        _clip(high, spec.bounds),
        status,
        edits,
        effective,
        defined,
        METHODS[method],
    )


def interval_at(batch: BatchIntervals, i: int, resamples: int) -> Interval:
    """Sample ``i`` of a batch as an :class:`Interval` with its reason, method and note."""
    status = int(batch.status[i])
    value = float(batch.value[i])
    edits, effective = int(batch.edits[i]), float(batch.effective[i])
    defined = int(batch.defined[i])
    common = {"edits": edits, "effective_edits": effective}
    if status == UNDEFINED:
        return Interval(None, None, defined, "the metric is undefined", **common)
    if status == ONE_EDIT:
        reason = "the metric rests on one edit: resampling edits cannot show its spread"
        return Interval(None, None, defined, reason if edits == 1 else "no edit contributes", **common)
    if status == FEW_RESAMPLES:
        reason = f"the metric is defined in only {defined} of {resamples} resamples of the edits"
        return Interval(None, None, defined, reason, **common)
    low, high = float(batch.low[i]), float(batch.high[i])
    method, note = batch.method, None
    if status == BOUNDARY:
        method = BOUNDARY_METHOD
        note = (
            f"every edit's value is {value:.4g}, a bound of the metric: the interval is the Clopper-Pearson "
            f"bound for {effective:.1f} effective edits"
        )
    elif status == CONSTANT:
        method = CONSTANT_METHOD
        note = f"every edit's value is {value:.4g}: no spread between edits, so the interval is the point"
    elif status == FROM_PARTS:
        note = "no spread in the resampled edits: the harmonic mean of its parts' interval ends"
    return Interval(low, high, defined, None, method, note, **common)


def ratio_interval(
    ratio: Ratio, settings: BootstrapSettings | None = None, kind: str = "ratio_of_sums"
) -> Interval:
    r"""The interval of one metric :math:`\sum_e a_e / \sum_e b_e` of the given ``kind`` from its per-edit
    sums, for metrics computed outside a results file."""
    settings = settings or BootstrapSettings()
    if ratio.numerator.shape[0] < 2 and kind != "edit_outcome":
        return Interval(None, None, 0, "an interval over edits needs at least two")
    spec = MetricSpec(name="metric", label="metric", direction="higher", version=1, description="", kind=kind)
    batch = batch_intervals(
        {"metric": (ratio.numerator[None, :], ratio.denominator[None, :])},
        settings,
        {"metric": spec},
    )
    return interval_at(batch["metric"], 0, settings.resamples)


def interval_fields(interval: Interval) -> dict[str, Any]:
    """A metric entry's interval fields: ``interval`` (or null with ``interval_reason``), ``interval_method``
    (``interval_note``, ``interval_resamples`` where they apply), ``edits``, ``effective_edits``, ``few_edits``."""
    fields: dict[str, Any] = {}
    if interval.reason is None:
        fields["interval"] = [interval.low, interval.high]
        fields["interval_method"] = interval.method
        if interval.note:
            fields["interval_note"] = interval.note
        if interval.method not in (METHODS["exact"], BOUNDARY_METHOD, CONSTANT_METHOD, METHODS["t"]):
            fields["interval_resamples"] = interval.resamples_defined
    else:
        fields["interval"] = None
        fields["interval_reason"] = interval.reason
    fields["edits"] = interval.edits
    fields["effective_edits"] = round(interval.effective_edits, 4)
    fields["few_edits"] = interval.few_edits
    return fields
