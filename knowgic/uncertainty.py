r"""Uncertainty of every metric: an interval chosen by the metric's kind, and paired comparisons of runs.

Why edits are the unit. The chains, broader-context facts and neighbours of one edit are measured on the
same edited model and share its subject, so they move together; treating the 1,206 active chains of
knowgic-tiny (of 1,406) as independent evidence would give intervals far too narrow. Every method here
treats the *edits* :math:`e = 1..E` as the independent units and carries every item of an edit along.

Every metric except the composite deep-editing score is a ratio of per-edit sums,

.. math:: \hat\theta = \frac{\sum_e a_e}{\sum_e b_e},

with the edit's *sufficient statistics* :math:`a_e, b_e` (recorded in ``results.json``, see
:func:`edit_statistics`): IFR has :math:`a_e = \sum_{i \in e} w_i r_i` and :math:`b_e = \sum_{i \in e} w_i`
over the edit's active chains; micro Preservation the sum of :math:`\min(1, p'/p)` over the edit's known
broader-context facts and their number; macro Preservation the edit's own Preservation and 1 (0 when it has
none); Efficacy :math:`[p'(o^*) > p'(o^c)]` and 1; its magnitude :math:`p'(o^*) - p'(o^c)` and 1;
Generalization the same on the question form (0 and 0 without one); Specificity the number of known
neighbours that keep their answer and the number of known neighbours (its two parts restrict this to the
edits whose neighbourhood is of that kind).

How each interval is made (the metric's ``kind`` in ``spec/benchmark.yaml`` chooses; docs/metrics.md has
the coverage each method measured)::

    kind                  interval (METHOD_BY_KIND)                       paired test (two runs)
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

Paired comparison (:func:`compare_results`, :func:`paired_resamples`). For a 0/1 outcome per edit the test
is McNemar's exact test (a binomial test of the edits where the runs disagree) with Newcombe's hybrid-score
interval for the paired difference. For the other kinds the test is a sign-flip permutation test: under the
null that the two runs are exchangeable on every edit, swapping A and B on any set of edits gives a
difference as likely as the observed one; all :math:`2^E` swaps up to :data:`EXACT_FLIPS_UP_TO` edits,
:data:`PERMUTATIONS` random ones beyond. The interval of the difference is the studentized bootstrap of
:math:`\theta^{B*}_k - \theta^{A*}_k` over the same resampled edits. A difference counts as told apart when
the test's p-value is below :math:`\alpha` (Holm-adjusted where a table makes several comparisons:
:func:`compare_with_best`, :func:`ranks_by_significance`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from knowgic.errors import KnowgicError
from knowgic.evaluation.spec import MetricSpec, load_evaluation_spec
from knowgic.metrics import MAX_CHAIN_LENGTH, chain_weight

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

_SPEC = load_evaluation_spec()
DECLARED: dict[str, MetricSpec] = _SPEC.metric_paths()
"""Every metric that gets an interval, by its path in ``metrics``, with its declaration (spec order)."""
INTERVAL_METRICS = tuple(DECLARED)
"""Every metric that gets an interval, by its path in ``metrics`` (``ifr_by_length.2``: a length), in the
order ``spec/benchmark.yaml`` declares them."""
RATIO_METRICS = tuple(p for p, m in DECLARED.items() if m.kind != "composite")
"""The metrics that are a ratio of per-edit sums (every kind but ``composite``)."""
COMPOSITES = {p: m.of for p, m in DECLARED.items() if m.kind == "composite"}
"""Each composite metric and the metrics it is computed from (the deep-editing score's four)."""


def methods_for(paths: Sequence[str], method_of_kind: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """Each method that ``method_of_kind`` (:data:`METHOD_BY_KIND`, :data:`PAIRED_TEST_BY_KIND`) gives the
    metrics at ``paths``, with the labels of those metrics (each once, in ``paths`` order): what a caption
    says so that every value's interval or test is named. Kinds without an entry are left out."""
    groups: dict[str, dict[str, None]] = {}
    for path in paths:
        kind = DECLARED[path].kind
        if kind in method_of_kind:
            groups.setdefault(method_of_kind[kind], {})[DECLARED[path].label] = None
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
class EditStatistics:
    """Per-edit sufficient statistics of every ratio metric of one run, in the run's edit order."""

    edit_ids: tuple[str, ...]
    ratios: dict[str, Ratio]
    missing: dict[str, str]  # metric -> why its statistics cannot be read (an old results file)


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


def _edit_chain_sums(
    chains: Sequence[Mapping[str, Any]], index: Mapping[str, int], n_edits: int
) -> dict[str, Ratio]:
    """IFR (capped, uncapped, per length) numerators and denominators per edit, from chain records."""
    sums = {
        name: (np.zeros(n_edits), np.zeros(n_edits))
        for name in ("ifr", "ifr_uncapped", *(f"ifr_by_length.{n}" for n in range(1, MAX_CHAIN_LENGTH + 1)))
    }
    for chain in chains:
        if not chain["active"] or chain["r_pre"] <= 0.0:
            continue
        e = index[chain["edit_id"]]
        w = chain_weight(int(chain["length"]))
        ratio = chain["r_post"] / chain["r_pre"]
        capped = min(1.0, ratio)
        for name, r in (
            ("ifr", capped),
            ("ifr_uncapped", ratio),
            (f"ifr_by_length.{chain['length']}", capped),
        ):
            num, den = sums[name]
            num[e] += w * r
            den[e] += w
    return {name: Ratio(num, den) for name, (num, den) in sums.items()}


def edit_statistics(document: Mapping[str, Any]) -> EditStatistics:
    """The per-edit sums of every ratio metric, read from a results document's ``per_edit`` and ``chains``.

    Schema 1.1 records them exactly (``preservation_sum``, ``preservation_n``, ``specificity_kept``); a 1.0
    document is read approximately where it can be (sum = per-edit mean x count) and the rest is ``missing``.
    """
    per_edit = document["per_edit"]
    edit_ids = tuple(str(r["edit_id"]) for r in per_edit)
    index = {e: i for i, e in enumerate(edit_ids)}
    n = len(edit_ids)
    ratios = _edit_chain_sums(document["chains"], index, n)
    missing: dict[str, str] = {}

    ones = np.ones(n)
    p_new = np.array([float(r["p_new"]) for r in per_edit])
    p_true = np.array([float(r["p_true"]) for r in per_edit])
    ratios["efficacy"] = Ratio((p_new > p_true).astype(float), ones)
    ratios["efficacy_magnitude"] = Ratio(p_new - p_true, ones)
    gen = [r["generalization"] for r in per_edit]
    ratios["generalization"] = Ratio(
        np.array([0.0 if g is None else float(g) for g in gen]),
        np.array([0.0 if g is None else 1.0 for g in gen]),
    )
    pres = [r["preservation"] for r in per_edit]
    ratios["preservation_macro"] = Ratio(
        np.array([0.0 if p is None else float(p) for p in pres]),
        np.array([0.0 if p is None else 1.0 for p in pres]),
    )
    if all("preservation_sum" in r and "preservation_n" in r for r in per_edit):
        ratios["preservation"] = Ratio(
            np.array([float(r["preservation_sum"]) for r in per_edit]),
            np.array([float(r["preservation_n"]) for r in per_edit]),
        )
    elif all("preservation_facts_known" in r for r in per_edit):
        counts = [
            0 if p is None else int(r["preservation_facts_known"])
            for p, r in zip(pres, per_edit, strict=True)
        ]
        ratios["preservation"] = Ratio(
            np.array([0.0 if p is None else float(p) * k for p, k in zip(pres, counts, strict=True)]),
            np.array(counts, dtype=float),
        )
    else:
        missing["preservation"] = "the results file records no per-edit count of known broader-context facts"

    spec = [r["specificity"] for r in per_edit]
    if all("specificity_kept" in r and "neighbours_known" in r for r in per_edit):
        kept = np.array([float(r["specificity_kept"]) for r in per_edit])
        known = np.array([float(r["neighbours_known"]) for r in per_edit])
    elif all("neighbours_known" in r for r in per_edit):
        known = np.array(
            [0.0 if s is None else float(r["neighbours_known"]) for s, r in zip(spec, per_edit, strict=True)]
        )
        kept = np.array([0.0 if s is None else round(float(s) * k) for s, k in zip(spec, known, strict=True)])
    else:
        kept = known = None
    if kept is None or known is None or not all("neighbourhood" in r for r in per_edit):
        for name in ("specificity", "specificity_same_relation", "specificity_other_graphs"):
            missing[name] = "the results file records no per-edit count of known neighbours or their kind"
    else:
        ratios["specificity"] = Ratio(kept, known)
        for name, kind in (
            ("specificity_same_relation", "same-relation"),
            ("specificity_other_graphs", "other-graphs"),
        ):
            mask = np.array([r["neighbourhood"] == kind for r in per_edit], dtype=float)
            ratios[name] = Ratio(kept * mask, known * mask)
    return EditStatistics(edit_ids=edit_ids, ratios=ratios, missing=missing)


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
below this is treated as none (:func:`_no_spread`), so that such noise neither gets the whole range from a
studentized interval (every resample without the odd edit has no spread) nor a test of its own. Absolute,
not relative to the value: a spread this small is far below any figure a table shows, and a relative rule
would hand a near-zero value's rounding to the studentized interval, whose end then scales with it (LoRA's
uncapped IFR of 1.4e-6 on 2 edits got an upper end of 3e6 that moved with the last digits of the scores)."""


def _no_spread(se: np.ndarray) -> np.ndarray:
    """Where a standard error (or a paired difference) is the scorer's rounding (:data:`ROUNDING`), or 0."""
    return ~(se > ROUNDING)


# Interval status codes of the batched core (the wrappers turn them into reasons, methods and notes).
OK, UNDEFINED, ONE_EDIT, FEW_RESAMPLES, BOUNDARY, CONSTANT, FROM_PARTS = range(7)


def _wsum(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:math:`\\sum_e w_{k,e} x_{s,e}` for every sample s and weight row k: shape ``(S, K)``.

    Elementwise products and numpy's pairwise sums, not a BLAS product: the result must not depend on the
    BLAS library or its thread count, so that a run's recorded intervals are bitwise reproducible."""
    return (weights[None, :, :] * x[:, None, :]).sum(axis=2)


@dataclass
class _Linear:
    """A metric in every weighting of the edits (row 0: the sample itself; rows 1..K: the resamples),
    with each edit's linearized influence ``z`` and the number ``m`` of drawn contributing edits."""

    theta: np.ndarray  # (S, K1)
    z: np.ndarray  # (S, K1, E)
    m: np.ndarray  # (S, K1)
    jack: np.ndarray  # (S, E): leave-one-edit-out values of the sample
    weights: np.ndarray  # (K1, E)


def _ratio_linear(weights: np.ndarray, a: np.ndarray, b: np.ndarray) -> _Linear:
    num, den = _wsum(weights, a), _wsum(weights, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        theta = np.where(den > 0, num / den, np.nan)
        z = (a[:, None, :] - theta[..., None] * b[:, None, :]) / den[..., None]
        jack_den = den[:, :1] - b
        jack = np.where(jack_den > 0, (num[:, :1] - a) / jack_den, np.nan)
    m = _wsum(weights, (b > 0).astype(float))
    return _Linear(theta, np.where(np.isfinite(z), z, 0.0), m, jack, weights)


def _harmonic(xs: np.ndarray) -> np.ndarray:
    """Harmonic mean over axis 0; 0 where any part is 0 or below, NaN where any part is NaN."""
    zero = (xs <= 0.0).any(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = xs.shape[0] / (1.0 / xs).sum(axis=0)
    return np.where(np.isnan(xs).any(axis=0), np.nan, np.where(zero, 0.0, h))


def _composite_linear(parts: Sequence[_Linear], lower: Sequence[bool]) -> _Linear:
    r"""The harmonic mean :math:`H = k / \sum_j 1/x_j` of the parts, :math:`x_j = 1 - \min(1, \theta_j)` for a
    lower-is-better part, with the chain rule's influence :math:`\sum_j (\partial H/\partial x_j)\,\pm z_j`."""
    xs = np.stack(
        [1.0 - np.minimum(1.0, p.theta) if low else p.theta for p, low in zip(parts, lower, strict=True)]
    )
    h = _harmonic(xs)
    with np.errstate(divide="ignore", invalid="ignore"):
        grad = np.where(xs > 0.0, h[None] ** 2 / (len(parts) * xs**2), 0.0)
    grad = np.where(np.isfinite(grad), grad, 0.0)
    z = sum((-1.0 if low else 1.0) * g[..., None] * p.z for p, g, low in zip(parts, grad, lower, strict=True))
    jx = np.stack(
        [1.0 - np.minimum(1.0, p.jack) if low else p.jack for p, low in zip(parts, lower, strict=True)]
    )
    m = np.min(np.stack([p.m for p in parts]), axis=0)
    return _Linear(h, np.asarray(z), m, _harmonic(jx), parts[0].weights)


def _se(lin: _Linear) -> np.ndarray:
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


def _satterthwaite_df(lin: _Linear) -> np.ndarray:
    r"""Degrees of freedom of each sample's cluster-robust variance :math:`\sum_e z_e^2`, a sum of one term
    per edit (Satterthwaite): :math:`\nu = \frac{(\sum_e z_e^2)^2}{\sum_e z_e^4} \cdot \frac{m-1}{m}`, at
    least 1. It is :math:`m - 1` when every edit weighs the same, and near the number of heavy edits
    when a few edits carry the variance."""
    z2 = lin.z[:, 0, :] ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        nu = z2.sum(axis=1) ** 2 / (z2 * z2).sum(axis=1) * (lin.m[:, 0] - 1.0) / lin.m[:, 0]
    return np.maximum(np.where(np.isfinite(nu), nu, 1.0), 1.0)


def _bootstrap_bounds(
    method: str, lin: _Linear, level: float, bounds: tuple[float | None, float | None] = (None, None)
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
            se = _se(lin)[:, 0] / span
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
    se = _se(lin)
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
class _BatchIntervals:
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
    methods: Mapping[str, str] | None = None,
    declared: Mapping[str, MetricSpec] | None = None,
) -> dict[str, _BatchIntervals]:
    """Every metric's interval in each of S samples of E edits at once (the core of :func:`metric_intervals`;
    the coverage simulation calls it with thousands of samples).

    ``sums[path] = (a, b)``, both of shape ``(S, E)``: the per-edit sums of each ratio metric; composites are
    computed from their parts. ``methods`` maps a kind to a method of :data:`METHODS` (default
    :data:`METHOD_BY_KIND`); ``declared`` the metric paths to compute (default: every declared one).
    """
    declared = declared if declared is not None else DECLARED
    methods = {**METHOD_BY_KIND, **(methods or {})}
    some = next(iter(sums.values()))[0]
    n_edits = some.shape[1]
    weights = np.vstack([np.ones((1, n_edits)), resample_counts(n_edits, settings.resamples, settings.seed)])
    linear: dict[str, _Linear] = {}
    out: dict[str, _BatchIntervals] = {}
    for path, spec in declared.items():
        if spec.kind == "composite":
            parts = [linear.get(p) or _ratio_linear(weights, *sums[p]) for p in spec.of]
            lin = _composite_linear(parts, [DECLARED[p].lower_is_better for p in spec.of])
            edits = np.min(np.stack([(sums[p][1] > 0).sum(axis=1) for p in spec.of]), axis=0)
            effective = np.min(
                np.stack([np.apply_along_axis(effective_edits, 1, sums[p][1]) for p in spec.of]), axis=0
            )
        else:
            a, b = sums[path]
            lin = _ratio_linear(weights, a, b)
            edits = (b > 0).sum(axis=1)
            effective = np.apply_along_axis(effective_edits, 1, b)
        linear[path] = lin
        counts = None if spec.kind == "composite" else sums[path]
        out[path] = _intervals_of(
            lin, spec, methods[spec.kind], settings.level, edits, effective, counts, out
        )
    return out


def _intervals_of(
    lin: _Linear,
    spec: MetricSpec,
    method: str,
    level: float,
    edits: np.ndarray,
    effective: np.ndarray,
    counts: tuple[np.ndarray, np.ndarray] | None,
    done: Mapping[str, _BatchIntervals],
) -> _BatchIntervals:
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
        return _BatchIntervals(value, low, high, status, edits, effective, defined, METHODS["exact"])
    if method == "bernoulli_bound" and spec.bounds[0] is not None and spec.bounds[1] is not None:
        span = spec.bounds[1] - spec.bounds[0]
        share = (value - spec.bounds[0]) / span
        cp_low, cp_high = clopper_pearson(share * effective, effective, level)
        low, high = spec.bounds[0] + span * cp_low, spec.bounds[0] + span * cp_high
    else:
        method = "studentized" if method == "bernoulli_bound" else method
        low, high = _bootstrap_bounds(method, lin, level, spec.bounds)
    se0 = _se(lin)[:, 0]
    constant = _no_spread(se0)
    lo_b, hi_b = spec.bounds
    # At a bound up to the scorer's rounding.
    at_low = (lo_b is not None) & np.isclose(value, lo_b if lo_b is not None else 0.0, rtol=0, atol=ROUNDING)
    at_high = (hi_b is not None) & np.isclose(value, hi_b if hi_b is not None else 0.0, rtol=0, atol=ROUNDING)
    if spec.kind == "composite":
        # No spread in the resamples (a part is 0 in every edit): the composite of its parts' intervals.
        parts = [done[p] for p in spec.of]
        xs_low = np.stack(
            [
                1.0 - np.minimum(1.0, p.high) if DECLARED[n].lower_is_better else p.low
                for p, n in zip(parts, spec.of, strict=True)
            ]
        )
        xs_high = np.stack(
            [
                1.0 - np.minimum(1.0, p.low) if DECLARED[n].lower_is_better else p.high
                for p, n in zip(parts, spec.of, strict=True)
            ]
        )
        low = np.where(constant, _harmonic(xs_low), low)
        high = np.where(constant, _harmonic(xs_high), high)
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
    return _BatchIntervals(
        value,
        _clip(low, spec.bounds),
        _clip(high, spec.bounds),
        status,
        edits,
        effective,
        defined,
        METHODS[method],
    )


def _interval(batch: _BatchIntervals, i: int, resamples: int) -> Interval:
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


def statistics_intervals(
    stats: EditStatistics, settings: BootstrapSettings, values: Mapping[str, float | None] | None = None
) -> dict[str, Interval]:
    """The interval of every declared metric from per-edit statistics (``values``: the metrics' stated
    values, ``None`` marking an undefined one)."""
    n_edits = len(stats.edit_ids)
    if n_edits == 0:
        return {name: Interval(None, None, 0, "the run has no edits") for name in INTERVAL_METRICS}
    sums = {p: (r.numerator[None, :], r.denominator[None, :]) for p, r in stats.ratios.items()}
    usable = {
        p: m
        for p, m in DECLARED.items()
        if p not in stats.missing and all(part not in stats.missing for part in m.of)
    }
    batch = batch_intervals(sums, settings, declared=usable)
    out: dict[str, Interval] = {}
    for name in INTERVAL_METRICS:
        if values is not None and values.get(name) is None:
            out[name] = Interval(None, None, 0, "the metric is undefined")
        elif name not in batch:
            missing = stats.missing.get(name) or next(
                stats.missing[p] for p in DECLARED[name].of if p in stats.missing
            )
            out[name] = Interval(None, None, 0, missing)
        else:
            out[name] = _interval(batch[name], 0, settings.resamples)
    return out


def ratio_interval(
    ratio: Ratio, settings: BootstrapSettings | None = None, kind: str = "ratio_of_sums"
) -> Interval:
    r"""The interval of one metric :math:`\sum_e a_e / \sum_e b_e` of the given ``kind`` from its per-edit
    sums: the building block of :func:`metric_intervals`, for metrics computed outside a results file."""
    settings = settings or BootstrapSettings()
    if ratio.numerator.shape[0] < 2 and kind != "edit_outcome":
        return Interval(None, None, 0, "an interval over edits needs at least two")
    spec = MetricSpec(name="metric", label="metric", direction="higher", version=1, description="", kind=kind)
    batch = batch_intervals(
        {"metric": (ratio.numerator[None, :], ratio.denominator[None, :])},
        settings,
        declared={"metric": spec},
    )
    return _interval(batch["metric"], 0, settings.resamples)


def metric_entry_at(metrics: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The entry of ``metrics`` at ``path`` (``"ifr"`` or ``"ifr_by_length.2"``)."""
    head, _, tail = path.partition(".")
    entry = metrics[head]
    return entry[tail] if tail else entry


def metric_intervals(document: Mapping[str, Any], settings: BootstrapSettings) -> dict[str, Interval]:
    """The interval of every metric of ``document`` (by path, see :data:`INTERVAL_METRICS`)."""
    values = {name: metric_entry_at(document["metrics"], name)["value"] for name in INTERVAL_METRICS}
    return statistics_intervals(edit_statistics(document), settings, values)


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


def add_intervals(document: dict[str, Any], settings: BootstrapSettings | None = None) -> dict[str, Any]:
    """Write the interval fields (:func:`interval_fields`) into every metric entry and the settings into
    ``document["uncertainty"]``; returns the document."""
    settings = settings or BootstrapSettings()
    for name, interval in metric_intervals(document, settings).items():
        entry = metric_entry_at(document["metrics"], name)
        assert isinstance(entry, dict)
        entry.update(interval_fields(interval))
    document["uncertainty"] = settings.record()
    return document


# --- paired comparisons -----------------------------------------------------------------------------------


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
    flips: np.ndarray,
    sums_a: Mapping[str, tuple[np.ndarray, np.ndarray]],
    sums_b: Mapping[str, tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """Run A's and run B's ``path`` after swapping their records on the flipped edits: ``(S, P)`` each."""
    spec = DECLARED[path]
    if spec.kind == "composite":
        parts = [_swapped_values(p, flips, sums_a, sums_b) for p in spec.of]
        lower = [DECLARED[p].lower_is_better for p in spec.of]
        xa = np.stack(
            [1.0 - np.minimum(1.0, pa) if low else pa for (pa, _), low in zip(parts, lower, strict=True)]
        )
        xb = np.stack(
            [1.0 - np.minimum(1.0, pb) if low else pb for (_, pb), low in zip(parts, lower, strict=True)]
        )
        return _harmonic(xa), _harmonic(xb)
    (aa, ba), (ab, bb) = sums_a[path], sums_b[path]
    da, db = _wsum(flips, ab - aa), _wsum(flips, bb - ba)
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
    sums_a: Mapping[str, tuple[np.ndarray, np.ndarray]],
    sums_b: Mapping[str, tuple[np.ndarray, np.ndarray]],
    settings: BootstrapSettings,
    flips: tuple[np.ndarray, bool] | None = None,
) -> _BatchDifferences:
    """Run B minus run A on ``path`` in each of S paired samples (``sums_*[p] = (a, b)``, ``(S, E)``): the
    difference, its interval and the paired test's p-value (see the module docstring)."""
    spec = DECLARED[path]
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

    def linear(sums: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> _Linear:
        if spec.kind == "composite":
            parts = [_ratio_linear(weights, *sums[p]) for p in spec.of]
            return _composite_linear(parts, [DECLARED[p].lower_is_better for p in spec.of])
        return _ratio_linear(weights, *sums[path])

    la, lb = linear(sums_a), linear(sums_b)
    lin = _Linear(lb.theta - la.theta, lb.z - la.z, np.minimum(la.m, lb.m), lb.jack - la.jack, weights)
    low, high = _bootstrap_bounds(PAIRED_METHOD_BY_KIND[spec.kind], lin, level)
    diff = lin.theta[:, 0]
    se0 = _se(lin)[:, 0]
    constant = _no_spread(se0)
    low, high = np.where(constant, diff, low), np.where(constant, diff, high)
    lo_b, hi_b = spec.bounds
    if lo_b is not None and hi_b is not None:
        low, high = np.clip(low, lo_b - hi_b, hi_b - lo_b), np.clip(high, lo_b - hi_b, hi_b - lo_b)
    swaps, exact = flips if flips is not None else sign_flips(n_edits, settings.seed)
    va, vb = _swapped_values(path, swaps, sums_a, sums_b)
    swapped = np.abs(vb - va)
    observed = np.abs(diff)[:, None]
    hits = (swapped >= observed - 1e-12).sum(axis=1)
    valid = (~np.isnan(swapped)).sum(axis=1)
    p = hits / np.maximum(valid, 1) if exact else (1 + hits) / (1 + valid)
    p = np.where(_no_spread(np.abs(diff)), 1.0, np.minimum(1.0, p))
    defined = ~np.isnan(diff)
    status = np.where(defined, OK, UNDEFINED)
    status = np.where(defined & (np.minimum(la.m[:, 0], lb.m[:, 0]) < 2), ONE_EDIT, status)
    return _BatchDifferences(diff, low, high, p, status)


# What must agree for a paired comparison: the same edits, scored the same way on the same model.
COMPARABLE_SETTINGS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("model", lambda d: d["config"]["model"]),
    ("model revision", lambda d: d["config"]["model_revision"]),
    ("dataset version", lambda d: d["dataset"]["version"]),
    ("dataset hash", lambda d: d["dataset"]["sha256"]),
    ("protocol", lambda d: d["config"]["protocol"]),
    ("protocol parameters", lambda d: d["config"]["protocol_params"]),
    ("mode", lambda d: d["config"]["mode"]),
)


def _shown(value: Any) -> str:
    return "no limit" if value is None else str(value)


def _limit(value: Any) -> str:
    return "no limit" if value is None else f"limit {value}"


def comparability_problem(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Why runs ``a`` and ``b`` cannot be compared edit by edit, or ``None`` when they can."""
    for label, key in COMPARABLE_SETTINGS:
        if key(a) != key(b):
            return f"the runs differ in {label}: {_shown(key(a))} (A) vs {_shown(key(b))} (B)"
    ids_a = [r["edit_id"] for r in a["per_edit"]]
    ids_b = [r["edit_id"] for r in b["per_edit"]]
    if sorted(ids_a) != sorted(ids_b):
        limit_a, limit_b = a["config"].get("limit"), b["config"].get("limit")
        return (
            f"the runs cover different edits ({len(ids_a)} edits, {_limit(limit_a)} (A) vs "
            f"{len(ids_b)} edits, {_limit(limit_b)} (B))"
        )
    return None


def _aligned(b: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """``b`` with its per-edit records in the edit order ``order`` (chains are looked up by edit id)."""
    by_id = {r["edit_id"]: r for r in b["per_edit"]}
    return {**b, "per_edit": [by_id[e] for e in order]}


@dataclass(frozen=True)
class PairedResamples:
    """Several comparable runs, their per-edit statistics aligned edit by edit (see :func:`paired_resamples`).

    :meth:`difference` compares any two of them on a metric with the paired method of its kind.
    """

    settings: BootstrapSettings
    documents: tuple[Mapping[str, Any], ...]
    stats: tuple[EditStatistics, ...]
    flips: tuple[np.ndarray, bool] | None = None

    def difference(self, metric: str, a: int, b: int) -> MetricDifference:
        """Run ``b`` minus run ``a`` on ``metric``: interval, p-value, verdict and the few-edits flag."""
        spec = DECLARED[metric]
        test = PAIRED_TEST_BY_KIND[spec.kind]
        va = metric_entry_at(self.documents[a]["metrics"], metric)["value"]
        vb = metric_entry_at(self.documents[b]["metrics"], metric)["value"]
        if va is None or vb is None:
            which = " and ".join(x for x, v in (("A", va), ("B", vb)) if v is None)
            return MetricDifference(
                metric, va, vb, None, None, None, None, f"undefined in {which}", test=test
            )
        needed = spec.of if spec.kind == "composite" else (metric,)
        missing = next(
            (s.missing[p] for s in (self.stats[a], self.stats[b]) for p in needed if p in s.missing), None
        )
        if missing is not None or len(self.stats[a].edit_ids) < 2:
            reason = missing or "the runs have one edit: a comparison over edits needs at least two"
            return MetricDifference(metric, va, vb, vb - va, None, None, None, reason, test=test)
        sums_a = {p: (r.numerator[None], r.denominator[None]) for p, r in self.stats[a].ratios.items()}
        sums_b = {p: (r.numerator[None], r.denominator[None]) for p, r in self.stats[b].ratios.items()}
        batch = batch_differences(metric, sums_a, sums_b, self.settings, self.flips)
        parts = needed
        edits = min(min(self.stats[i].ratios[p].edits_defined for p in parts) for i in (a, b))
        effective = min(min(self.stats[i].ratios[p].effective_edits for p in parts) for i in (a, b))
        common = {
            "test": test,
            "edits": edits,
            "effective_edits": effective,
            "few_edits": effective < FEW_EDITS,
        }
        if int(batch.status[0]) != OK:
            reason = "the metric rests on one edit: resampling edits cannot show its spread"
            return MetricDifference(metric, va, vb, vb - va, None, None, None, reason, **common)
        p = float(batch.p_value[0])
        told = p < 1.0 - self.settings.level
        better = None
        if told:
            b_lower = vb < va
            better = "B" if b_lower == spec.lower_is_better else "A"
        discordant = None
        if spec.kind == "edit_outcome":
            xa = self.stats[a].ratios[metric]
            xb = self.stats[b].ratios[metric]
            both = (xa.denominator > 0) & (xb.denominator > 0)
            discordant = (
                int(((xa.numerator > 0.5) & (xb.numerator < 0.5) & both).sum()),
                int(((xa.numerator < 0.5) & (xb.numerator > 0.5) & both).sum()),
            )
        return MetricDifference(
            metric,
            va,
            vb,
            vb - va,
            float(batch.low[0]),
            float(batch.high[0]),
            told,
            None,
            p,
            discordant=discordant,
            better=better,
            **common,
        )


def paired_resamples(
    documents: Sequence[Mapping[str, Any]], settings: BootstrapSettings | None = None
) -> PairedResamples:
    """Align several comparable runs edit by edit for paired comparisons.

    Every run must be comparable with the first (:func:`comparability_problem`); its per-edit records
    are put in the first run's edit order, so that edit ``e`` means the same edit in every run.
    Raises :class:`KnowgicError` naming the first run that is not comparable.
    """
    if not documents:
        raise KnowgicError("no runs to compare")
    settings = settings or BootstrapSettings()
    first = documents[0]
    for i, other in enumerate(documents[1:], 2):
        problem = comparability_problem(first, other)
        if problem is not None:
            raise KnowgicError(f"cannot compare the runs (run 1 is A, run {i} is B): {problem}")
    stats_first = edit_statistics(first)
    stats = (stats_first, *(edit_statistics(_aligned(d, stats_first.edit_ids)) for d in documents[1:]))
    n_edits = len(stats_first.edit_ids)
    flips = sign_flips(n_edits, settings.seed) if n_edits >= 2 else None
    return PairedResamples(settings, tuple(documents), stats, flips)


def compare_results(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> list[MetricDifference]:
    r"""Run B minus run A on every metric (:data:`INTERVAL_METRICS`), paired edit by edit.

    Each difference has its interval, the p-value of the paired test of its kind (McNemar's exact test for
    a 0/1 outcome per edit, the sign-flip permutation test otherwise), whether the test tells the runs
    apart at ``1 - level`` (``excludes_zero``), which run is better by the metric's direction, and the
    few-edits flag. Raises :class:`KnowgicError` when the runs differ in model, dataset version or hash,
    protocol or mode, or cover different edits.
    """
    problem = comparability_problem(a, b)
    if problem is not None:
        raise KnowgicError(f"cannot compare the runs: {problem}")
    paired = paired_resamples([a, b], BootstrapSettings(resamples=resamples, seed=seed, level=level))
    return [paired.difference(name, 0, 1) for name in INTERVAL_METRICS]


@dataclass(frozen=True)
class BestComparison:
    """Per metric: the best run and, for every run, whether the paired test can tell it from the best.

    ``tied[i]`` is ``True`` when the Holm-adjusted p-value of run ``i`` against the best run is at least
    ``1 - level`` (the best run itself is ``True``), ``False`` when it is below, and ``None`` when it cannot
    be computed or the run's value is undefined. ``p_values[i]`` is that adjusted p-value.
    """

    metric: str
    best: int | None
    tied: tuple[bool | None, ...]
    p_values: tuple[float | None, ...] = ()


def compare_with_best(paired: PairedResamples, metric: str, lower_is_better: bool) -> BestComparison:
    """The run with the best value of ``metric`` (the first of equal ones) and each run's paired test
    against it, the family of those tests controlled by Holm's method (see :class:`BestComparison`)."""
    values = [metric_entry_at(d["metrics"], metric)["value"] for d in paired.documents]
    defined = [i for i, v in enumerate(values) if v is not None]
    if not defined:
        return BestComparison(metric, None, tuple(None for _ in values), tuple(None for _ in values))
    sign = 1.0 if lower_is_better else -1.0
    best = min(defined, key=lambda i: (sign * float(values[i]), i))
    raw: list[float | None] = []
    for i in range(len(values)):
        if i == best:
            raw.append(None)
            continue
        difference = paired.difference(metric, best, i)
        raw.append(difference.p_value)
    adjusted = holm(raw)
    alpha = 1.0 - paired.settings.level
    tied = tuple(
        True if i == best else (None if adjusted[i] is None else adjusted[i] >= alpha)  # type: ignore[operator]
        for i in range(len(values))
    )
    return BestComparison(metric, best, tied, tuple(adjusted))


def ranks_by_significance(paired: PairedResamples, metric: str) -> list[int | None]:
    """Each run's rank on ``metric``: 1 + the number of runs significantly better than it.

    Every pair of runs is compared with the paired test of the metric's kind and the family of all those
    tests is controlled by Holm's method at ``1 - level``; runs that no test tells apart share a rank. A run
    whose value is undefined gets ``None``. The leaderboard's rank column is this.
    """
    spec = DECLARED[metric]
    values = [metric_entry_at(d["metrics"], metric)["value"] for d in paired.documents]
    pairs = [(i, j) for i in range(len(values)) for j in range(i + 1, len(values))]
    pairs = [(i, j) for i, j in pairs if values[i] is not None and values[j] is not None]
    adjusted = holm([paired.difference(metric, i, j).p_value for i, j in pairs])
    alpha = 1.0 - paired.settings.level
    better_count = [0] * len(values)
    for (i, j), p in zip(pairs, adjusted, strict=True):
        if p is None or p >= alpha or values[i] == values[j]:
            continue
        i_better = (values[i] < values[j]) == spec.lower_is_better  # type: ignore[operator]
        better_count[j if i_better else i] += 1
    return [None if v is None else 1 + better_count[k] for k, v in enumerate(values)]
