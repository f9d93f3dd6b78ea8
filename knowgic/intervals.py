r"""The interval of every metric, on arrays of per-edit sums, by the metric's declared kind.

No document and no spec inside: callers hand in the sums (``knowgic.measure`` computes them from a run's
records) and the declarations. Paired comparisons of two runs are ``knowgic.paired``.

Why edits are the unit. The chains, broader-context facts and neighbours of one edit are measured on the
same edited model and share its subject, so they move together; treating the 1,185 active chains of
knowgic-tiny (of 1,406) as independent evidence would give intervals far too narrow. Every method here
treats the *edits* :math:`e = 1..E` as the independent units and carries every item of an edit along.

Every metric except the composite deep-editing score is a ratio of per-edit sums,

.. math:: \hat\theta = \frac{\sum_e a_e}{\sum_e b_e},

with the edit's *sufficient statistics* :math:`a_e, b_e` (recorded in ``results.json``; each metric's are
listed in ``knowgic.measure.definitions``). Its linearized (cluster-robust) standard error over the
:math:`m` edits with :math:`b_e > 0` is

.. math:: \widehat{se}^2 = \frac{m}{m-1} \sum_e z_e^2, \qquad z_e = \frac{a_e - \hat\theta b_e}{\sum_{e'} b_{e'}},

and the composite's :math:`z_e` is the chain rule's :math:`\sum_j \partial H / \partial x_j \,(\pm z_{j,e})`.

How each interval is made: the metric's ``kind`` in ``spec/benchmark.yaml`` chooses (:data:`METHOD_BY_KIND`),
each method the one the coverage simulation of docs/metrics.md chose (``knowgic.coverage``: the narrowest
of those continuous in the data that covered 0.93 on every population at 26 edits)::

    kind                  interval                                              margin   paired (knowgic.paired)
    edit_outcome          Clopper-Pearson, exact                                 yes      McNemar, inverted
    edit_mean             t on the per-edit values, m - 1 degrees of freedom     yes      paired Satterthwaite t
    clustered_proportion  Korn-Graubard (Clopper-Pearson on p(1-p)/se^2 facts)   yes      paired Satterthwaite t
    ratio_of_sums         t, Satterthwaite degrees of freedom                     yes      paired Satterthwaite t
    composite             t, Satterthwaite degrees of freedom                     no       paired Satterthwaite t

*t over edits* (``t``, ``satterthwaite_t``): :math:`\hat\theta \pm t_{\nu,1-\alpha/2}\,\widehat{se}`, with
:math:`\nu = m - 1` or the Satterthwaite degrees of freedom of the variance, a sum of one term per edit
(:func:`satterthwaite_df`),

.. math:: \nu = \frac{(\sum_e z_e^2)^2}{\sum_e z_e^4}\cdot\frac{m-1}{m},

:math:`m - 1` when the edits weigh the same, near the number of heavy edits when a few carry the variance
(pooled IFR's weight sits in 9.6 effective edits of 26 under every editor on knowgic-tiny).

*Korn-Graubard* for a share of 0/1 facts clustered in edits: Clopper-Pearson on the effective sample size
:math:`n^* = \hat p(1-\hat p)/\widehat{se}^2 \cdot (z_{\alpha/2}/t_{m-1,\alpha/2})^2`. *Clopper-Pearson* for
a 0/1 outcome per edit: :math:`[B(\alpha/2; k, n-k+1),\, B(1-\alpha/2; k+1, n-k)]` (``scipy.stats.beta``),
never narrower than its nominal level for any true share.

*The unseen-edit margin* (:func:`unseen_margin`). However alike the drawn edits are, a share
:math:`q = 1 - (\alpha/2)^{1/n_\mathrm{eff}}` of edits unlike all of them is missed with probability
:math:`\alpha/2`. An interval of a kind in :data:`MARGIN_KINDS` reaches at least
:math:`[\hat\theta - q(\hat\theta - L),\; \hat\theta + q(U - \hat\theta)]`, what such a share at the bound
:math:`L` or :math:`U` would make of the value. It is continuous in the data (it replaces a rule that called a
standard error below 1e-5 "no spread", under which one edit's sixth decimal could move an interval from
[0.87, 1] to [0, 1]), and where every edit sits at a bound it is the Clopper-Pearson bound of
:math:`n_\mathrm{eff}` successes in :math:`n_\mathrm{eff}` trials. Without it the t interval covered macro
Preservation (values piled near 1, a few edits far below) about 0.8 of the time at 26 edits.

The other methods of :data:`METHODS` (percentile, BCa, the equal-tailed, symmetric and widened symmetric
bootstrap-t, the Bernoulli bound) are measured by the simulation and chosen by no kind: the bootstrap-t
variants divide by each resample's own standard error, which is 0 in a resample whose edits share one value,
and BCa counts the resamples below the estimate, so their ends jump with the data. A resample ``k`` draws
the edits with ``numpy.random.default_rng(seed).integers(0, E, size=(resamples, E))``; every sum over edits is
an elementwise product and sum (no BLAS product, so that intervals are bitwise reproducible whatever the
BLAS library or thread count).

*Effective number of edits* (Kish): :math:`n_\mathrm{eff} = (\sum_e b_e)^2 / \sum_e b_e^2`, the number of
equally weighted edits that would give the estimate the same variance. Below :data:`FEW_EDITS` effective
edits an entry is flagged ``few_edits``; below the fewest edits from which the simulation found its kind's
method covering (:data:`COVERAGE_MET_FROM`, :func:`coverage_unmet`) it says ``coverage_unmet``.

A metric resting on a single edit gets a ``null`` interval with the reason (a 0/1 outcome keeps its exact
interval); so does one defined in fewer than half of the resamples of a bootstrap method.
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

METHODS = {
    "exact": "Clopper-Pearson exact binomial interval over edits",
    "t": "cluster-robust t over edits (linearized standard error, m/(m-1) correction, m-1 degrees of freedom)",
    "satterthwaite_t": (
        "cluster-robust t over edits (linearized standard error, m/(m-1) correction), degrees of freedom "
        "the Satterthwaite degrees of freedom of the cluster-robust variance"
    ),
    "studentized": "equal-tailed studentized cluster bootstrap over edits (bootstrap-t, linearized standard error)",
    "studentized_symmetric": (
        "symmetric studentized cluster bootstrap over edits (bootstrap-t on |t*|, linearized standard error)"
    ),
    "studentized_satterthwaite": (
        "symmetric studentized cluster bootstrap over edits (bootstrap-t, linearized standard error), "
        "widened by t(df)/z, df the Satterthwaite degrees of freedom of the cluster-robust variance"
    ),
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
BOOTSTRAP_METHODS = frozenset(
    {"studentized", "studentized_symmetric", "studentized_satterthwaite", "percentile", "bca"}
)
"""The methods of :data:`METHODS` that resample edits (a caption states their resamples and seed)."""
METHOD_BY_KIND = {
    "edit_outcome": "exact",
    "edit_mean": "t",
    "clustered_proportion": "effective_binomial",
    "ratio_of_sums": "satterthwaite_t",
    "composite": "satterthwaite_t",
}
"""The interval method of each metric kind: among the methods whose coverage reached
:data:`COVERAGE_TARGET` on every population of the simulation at 26 edits, the one with the narrowest mean
width (docs/metrics.md; ``python -m knowgic.coverage choose``)."""
MARGIN = (
    "unseen-edit margin: each end reaches at least as far as a share q = 1 - (alpha/2)^(1/n_eff) of edits at "
    "the far bound, which n_eff edits miss with probability alpha/2, would move the value"
)
"""What every interval of a bounded metric holds besides its method's interval (:func:`unseen_margin`)."""
COVERAGE_TARGET = 0.93
"""The coverage every kind's method must reach on every population of the simulation."""
CONTINUOUS_METHODS = frozenset(
    {"exact", "t", "satterthwaite_t", "percentile", "bernoulli_bound", "effective_binomial"}
)
"""The methods whose ends move continuously with the data, the only ones a kind may get. The bootstrap-t
variants divide by each resample's own standard error, which is 0 in a resample whose edits all have one
value, so that a change in the sixth decimal of one edit can take their interval from [0.87, 1] to
[0, 1]; BCa's bias correction counts the resamples below the estimate, which jumps."""
MARGIN_KINDS = frozenset({"edit_outcome", "edit_mean", "clustered_proportion", "ratio_of_sums"})
"""The kinds whose intervals hold the unseen-edit margin (:data:`MARGIN`): those whose methods reached the
coverage target only with it (the composite's did without; docs/metrics.md)."""
COVERAGE_MET_FROM = {
    "edit_outcome": 6,
    "edit_mean": 6,
    "clustered_proportion": 6,
    "ratio_of_sums": 6,
    "composite": 20,
}
"""Per kind, the fewest edits from which the simulation found its method's coverage at least
:data:`COVERAGE_TARGET` on every population and bounded metric, at every size it ran (6, 8, 10, 13, 16, 20
and 26 edits; docs/metrics.md): below, a metric entry says ``coverage_unmet``. Six is the fewest the
simulation ran; the composite, which holds no margin, covers 0.906 at 16 edits and 0.616 at 6 (the
population with 12% catastrophic edits)."""
UNBOUNDED_MET_FROM: int | None = None
"""The same for a metric unbounded on a side (IFR uncapped): no method reached the target at any size (0.880
at 26 edits, on the builder's growth population under MEMIT: a heavy right tail that few samples of 26
edits show), so every such entry says ``coverage_unmet``."""


def coverage_unmet(spec: MetricSpec, edits: int) -> bool:
    """Whether a metric resting on ``edits`` edits is below the fewest at which its kind's method reached
    the coverage target in the simulation (:data:`COVERAGE_MET_FROM`, :data:`UNBOUNDED_MET_FROM`)."""
    met_from = UNBOUNDED_MET_FROM if None in spec.bounds else COVERAGE_MET_FROM[spec.kind]
    return met_from is None or edits < met_from


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
            "margin": MARGIN,
            "margin_kinds": sorted(MARGIN_KINDS),
            "undefined_resamples": (
                "left out by a bootstrap method; its interval is null when fewer than half of the resamples "
                "are defined; any interval but an exact one is null when the metric rests on one edit"
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

# Interval status codes of the batched core (the wrappers turn them into reasons).
OK, UNDEFINED, ONE_EDIT, FEW_RESAMPLES = range(4)


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


def satterthwaite_df(lin: Linear) -> np.ndarray:
    r"""Degrees of freedom of each sample's cluster-robust variance :math:`\sum_e z_e^2`, a sum of one term
    per edit (Satterthwaite): :math:`\nu = \frac{(\sum_e z_e^2)^2}{\sum_e z_e^4} \cdot \frac{m-1}{m}`, at
    least 1. It is :math:`m - 1` when every edit weighs the same, and near the number of heavy edits
    when a few edits carry the variance; a continuous function of the data (1 where no edit has any)."""
    z2 = lin.z[:, 0, :] ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        nu = z2.sum(axis=1) ** 2 / (z2 * z2).sum(axis=1) * (lin.m[:, 0] - 1.0) / lin.m[:, 0]
    return np.maximum(np.where(np.isfinite(nu), nu, 1.0), 1.0)


def studentized_draws(lin: Linear) -> np.ndarray:
    r""":math:`t^*_k = (\theta^*_k - \hat\theta) / \widehat{se}^*_k` of every resample, ``(S, K)``; NaN where the
    metric is undefined in the resample, :math:`\pm 10^{12}` where a resample has no spread of its own (every
    edit it drew has the same value) but another value than the sample."""
    theta0, thetas = lin.theta[:, 0], lin.theta[:, 1:]
    se = robust_se(lin)
    diff = thetas - theta0[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        t = diff / se[:, 1:]
    flat = ~(se[:, 1:] > _TINY)
    t = np.where(flat, np.where(np.abs(diff) <= _TINY, 0.0, np.sign(diff) * _BIG), t)
    return np.where(np.isnan(thetas), np.nan, t)


def method_bounds(
    method: str, lin: Linear, level: float, bounds: tuple[float | None, float | None] = (None, None)
) -> tuple[np.ndarray, np.ndarray]:
    """``method``'s interval for each sample, before the margin and the bounds (``bernoulli_bound``, which needs
    the effective number of edits, is computed by :func:`batch_intervals`)."""
    alpha = 1.0 - level
    theta0 = lin.theta[:, 0]
    s = theta0.shape[0]
    if method == "effective_binomial":
        lo_b, hi_b = bounds
        if lo_b is None or hi_b is None:
            method = "t"  # no binomial scale for an unbounded metric
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
    if method in ("t", "satterthwaite_t"):
        se0 = robust_se(lin)[:, 0]
        df = np.maximum(lin.m[:, 0] - 1.0, 1.0) if method == "t" else satterthwaite_df(lin)
        half = sps.t.ppf(1.0 - alpha / 2, df) * se0
        return theta0 - half, theta0 + half
    if lin.theta.shape[1] < 2:
        raise KnowgicError(f"internal error: interval method {method!r} needs resamples")
    thetas = lin.theta[:, 1:]
    if method == "percentile":
        q = _row_quantiles(thetas, np.tile([alpha / 2, 1 - alpha / 2], (s, 1)))
        return q[:, 0], q[:, 1]
    if method in ("studentized", "studentized_symmetric", "studentized_satterthwaite"):
        se0 = robust_se(lin)[:, 0]
        t = studentized_draws(lin)
        if method == "studentized":
            q = _row_quantiles(t, np.tile([alpha / 2, 1 - alpha / 2], (s, 1)))
            return theta0 - q[:, 1] * se0, theta0 - q[:, 0] * se0
        half = _row_quantiles(np.abs(t), np.full((s, 1), level))[:, 0] * se0
        if method == "studentized_satterthwaite":
            half = half * sps.t.ppf(1 - alpha / 2, satterthwaite_df(lin)) / sps.norm.ppf(1 - alpha / 2)
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


def unseen_share(effective: np.ndarray, level: float) -> np.ndarray:
    r""":math:`q = 1 - (\alpha/2)^{1/n_\mathrm{eff}}`: the largest share of edits that :math:`n_\mathrm{eff}`
    edits miss with probability at least :math:`\alpha/2` (1 below one effective edit)."""
    effective = np.asarray(effective, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(
            effective >= 1.0, 1.0 - ((1.0 - level) / 2) ** (1.0 / np.maximum(effective, 1.0)), 1.0
        )


def unseen_margin(
    value: np.ndarray, share: np.ndarray, bounds: tuple[float | None, float | None]
) -> tuple[np.ndarray, np.ndarray]:
    r"""The unseen-edit margin of a value: :math:`[\hat\theta - q(\hat\theta - L),\; \hat\theta + q(U - \hat\theta)]`,
    what a share ``q`` (:func:`unseen_share`) of edits at the bound :math:`L` (or :math:`U`) would make of
    :math:`\hat\theta`; an unbounded side has no margin. Continuous in the value, and at a bound the
    Clopper-Pearson bound of :math:`n_\mathrm{eff}` successes in :math:`n_\mathrm{eff}` trials."""
    lo_b, hi_b = bounds
    low = value if lo_b is None else value - share * (value - lo_b)
    high = value if hi_b is None else value + share * (hi_b - value)
    return low, high


def clip_to(x: np.ndarray, bounds: tuple[float | None, float | None]) -> np.ndarray:
    """``x`` within the bounds (``None``: unbounded on that side)."""
    low, high = bounds
    return np.clip(x, -np.inf if low is None else low, np.inf if high is None else high)


@dataclass
class BatchIntervals:
    """One metric's value and interval in each of S samples, with codes for what happened.

    ``flat``: the sample has no spread between its edits (every edit the same value), so that its
    interval is the margin alone; ``raw_low``, ``raw_high``: the method's interval without the margin."""

    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    status: np.ndarray  # OK, UNDEFINED, ...
    edits: np.ndarray
    effective: np.ndarray
    defined: np.ndarray  # resamples where the metric is defined (all of them for a method without)
    method: str
    flat: np.ndarray
    raw_low: np.ndarray  # the method's own interval, without the margin (the simulation measures both)
    raw_high: np.ndarray


def batch_intervals(
    sums: Mapping[str, tuple[np.ndarray, np.ndarray]],
    settings: BootstrapSettings,
    declared: Mapping[str, MetricSpec],
    methods: Mapping[str, str] | None = None,
    margins: frozenset[str] | None = None,
) -> dict[str, BatchIntervals]:
    """Every metric's interval in each of S samples of E edits at once (a results document is one sample;
    the coverage simulation passes thousands).

    ``sums[path] = (a, b)``, both of shape ``(S, E)``: the per-edit sums of each ratio metric; composites are
    computed from their parts. ``declared``: the metric paths to compute with their declarations (a
    composite's parts included, before it); ``methods`` maps a kind to a method of :data:`METHODS`
    (default :data:`METHOD_BY_KIND`); ``margins``: the kinds whose intervals hold the unseen-edit margin
    (default :data:`MARGIN_KINDS`; each batch also carries the method's interval without it).
    """
    methods = {**METHOD_BY_KIND, **(methods or {})}
    some = next(iter(sums.values()))[0]
    n_edits = some.shape[1]
    resampling = any(methods[spec.kind] in BOOTSTRAP_METHODS for spec in declared.values())
    weights = np.ones((1, n_edits))
    if resampling:
        weights = np.vstack([weights, resample_counts(n_edits, settings.resamples, settings.seed)])
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
        out[path] = _intervals_of(
            path,
            lin,
            spec,
            methods[spec.kind],
            settings.level,
            edits,
            effective,
            sums,
            declared,
            spec.kind in (MARGIN_KINDS if margins is None else margins),
        )
    return out


def _intervals_of(
    path: str,
    lin: Linear,
    spec: MetricSpec,
    method: str,
    level: float,
    edits: np.ndarray,
    effective: np.ndarray,
    sums: Mapping[str, tuple[np.ndarray, np.ndarray]],
    declared: Mapping[str, MetricSpec],
    margin: bool,
) -> BatchIntervals:
    value = lin.theta[:, 0]
    bootstrap = method in BOOTSTRAP_METHODS
    defined = (~np.isnan(lin.theta[:, 1:])).sum(axis=1) if bootstrap else np.zeros(value.shape, dtype=int)
    if method == "exact":
        if spec.kind == "composite":
            raise KnowgicError(f"metric {spec.name}: an exact interval needs a 0/1 outcome per edit")
        a, b = sums[path]
        low, high = clopper_pearson(np.rint(a.sum(axis=1)), np.rint(b.sum(axis=1)), level)
    elif method == "bernoulli_bound" and None not in spec.bounds:
        lo_b, hi_b = spec.bounds
        span = hi_b - lo_b  # type: ignore[operator]
        cp_low, cp_high = clopper_pearson((value - lo_b) / span * effective, effective, level)  # type: ignore[operator]
        low, high = lo_b + span * cp_low, lo_b + span * cp_high  # type: ignore[operator]
    else:
        low, high = method_bounds("t" if method == "bernoulli_bound" else method, lin, level, spec.bounds)
    flat = ~(robust_se(lin)[:, 0] > 0.0)
    raw_low, raw_high = clip_to(low, spec.bounds), clip_to(high, spec.bounds)
    if margin:
        share = unseen_share(effective, level)
        if spec.kind == "composite":
            m_low, m_high = _composite_margin(lin, spec, share, sums, declared)
        else:
            m_low, m_high = unseen_margin(value, share, spec.bounds)
        low = np.fmin(low, m_low)
        high = np.fmax(high, m_high)
    status = np.full(value.shape, OK)
    status = np.where(np.isnan(value), UNDEFINED, status)
    if method != "exact":  # an exact binomial interval holds for one edit too
        status = np.where((status != UNDEFINED) & (edits < 2), ONE_EDIT, status)
    if bootstrap:
        too_few = defined < MIN_DEFINED_SHARE * (lin.theta.shape[1] - 1)
        status = np.where((status == OK) & too_few, FEW_RESAMPLES, status)
    return BatchIntervals(
        value,
        clip_to(low, spec.bounds),
        clip_to(high, spec.bounds),
        status,
        edits,
        effective,
        defined,
        METHODS[method],
        flat,
        raw_low,
        raw_high,
    )


def _composite_margin(
    lin: Linear,
    spec: MetricSpec,
    share: np.ndarray,
    sums: Mapping[str, tuple[np.ndarray, np.ndarray]],
    declared: Mapping[str, MetricSpec],
) -> tuple[np.ndarray, np.ndarray]:
    """The composite's margin: the harmonic mean of its parts' margin ends (each part on its 1 - x scale for a
    lower-is-better part), every part moved by the composite's share ``q``."""
    lows, highs = [], []
    for p in spec.of:
        a, b = sums[p]
        with np.errstate(invalid="ignore", divide="ignore"):
            theta = a.sum(axis=1) / b.sum(axis=1)
        lo, hi = unseen_margin(theta, share, declared[p].bounds)
        if declared[p].lower_is_better:
            lo, hi = 1.0 - np.minimum(1.0, hi), 1.0 - np.minimum(1.0, lo)
        lows.append(lo)
        highs.append(hi)
    return harmonic(np.stack(lows)), harmonic(np.stack(highs))


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
    note = None
    if bool(batch.flat[i]):
        note = (
            f"every edit's value is {value:.4g}: no spread between edits, so the interval is the unseen-edit "
            f"margin for {effective:.1f} effective edits"
        )
    return Interval(float(batch.low[i]), float(batch.high[i]), defined, None, batch.method, note, **common)


def ratio_interval(
    ratio: Ratio,
    settings: BootstrapSettings | None = None,
    kind: str = "ratio_of_sums",
    bounds: tuple[float | None, float | None] = (0.0, 1.0),
) -> Interval:
    r"""The interval of one metric :math:`\sum_e a_e / \sum_e b_e` of the given ``kind`` and ``bounds`` (the
    values it can take; default [0, 1], ``None`` for an unbounded side) from its per-edit sums, for metrics
    computed outside a results file: the method of the kind (:data:`METHOD_BY_KIND`) with the unseen-edit
    margin, within the bounds."""
    settings = settings or BootstrapSettings()
    if ratio.numerator.shape[0] < 2 and kind != "edit_outcome":
        return Interval(None, None, 0, "an interval over edits needs at least two")
    spec = MetricSpec(
        name="metric", label="metric", direction="higher", version=1, description="", kind=kind, bounds=bounds
    )
    batch = batch_intervals(
        {"metric": (ratio.numerator[None, :], ratio.denominator[None, :])},
        settings,
        {"metric": spec},
    )
    return interval_at(batch["metric"], 0, settings.resamples)


def interval_fields(interval: Interval, spec: MetricSpec | None = None) -> dict[str, Any]:
    """A metric entry's interval fields: ``interval`` (or null with ``interval_reason``), ``interval_method``
    (``interval_note``, ``interval_resamples`` where they apply), ``edits``, ``effective_edits``,
    ``few_edits`` and, given the metric's declaration and an interval, ``coverage_unmet``
    (:func:`coverage_unmet`)."""
    fields: dict[str, Any] = {}
    if interval.reason is None:
        fields["interval"] = [interval.low, interval.high]
        fields["interval_method"] = interval.method
        if interval.note:
            fields["interval_note"] = interval.note
        if interval.method in {METHODS[m] for m in BOOTSTRAP_METHODS}:
            fields["interval_resamples"] = interval.resamples_defined
    else:
        fields["interval"] = None
        fields["interval_reason"] = interval.reason
    fields["edits"] = interval.edits
    fields["effective_edits"] = round(interval.effective_edits, 4)
    fields["few_edits"] = interval.few_edits
    if spec is not None and interval.reason is None:
        fields["coverage_unmet"] = coverage_unmet(spec, interval.edits)
    return fields
