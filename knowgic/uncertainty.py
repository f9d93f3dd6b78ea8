r"""Uncertainty of every metric: a cluster bootstrap over edits, and paired comparisons of two runs.

Why edits are the unit. The chains, broader-context facts and neighbours of one edit are measured on the
same edited model and share its subject, so they move together; resampling them one by one would treat
1,406 correlated chains as independent evidence and give intervals far too narrow. The bootstrap draws
the *edits* :math:`e = 1..E` with replacement and carries every item of a drawn edit along.

Every metric of :mod:`knowgic.metrics` except the deep-editing score is a ratio of per-edit sums,

.. math:: \hat\theta = \frac{\sum_e a_e}{\sum_e b_e},

with the edit's *sufficient statistics* :math:`a_e, b_e` (recorded in ``results.json``, see
:func:`edit_statistics`): IFR has :math:`a_e = \sum_{i \in e} w_i r_i` and :math:`b_e = \sum_{i \in e} w_i`
over the edit's active chains; micro Preservation the sum of :math:`\min(1, p'/p)` over the edit's known
broader-context facts and their number; macro Preservation the edit's own Preservation and 1 (0 when it has
none); Efficacy :math:`[p'(o^*) > p'(o^c)]` and 1; its magnitude :math:`p'(o^*) - p'(o^c)` and 1;
Generalization the same on the question form (0 and 0 without one); Specificity the number of known
neighbours that keep their answer and the number of known neighbours (its two parts restrict this to the
edits whose neighbourhood is of that kind). A resample :math:`k` draws the edits
:math:`e_{k,1..E} \sim \mathrm{Uniform}\{1..E\}`; with :math:`c_{k,e}` the number of times edit ``e`` was
drawn,

.. math:: \theta^*_k = \frac{\sum_e c_{k,e}\, a_e}{\sum_e c_{k,e}\, b_e},

so all resamples of all metrics are a few matrix products (vectorised, well under a second for 2,000
resamples). The deep-editing score of a resample is the harmonic mean of that resample's
:math:`1-\mathrm{IFR}`, Preservation, Efficacy and Specificity (:func:`knowgic.metrics.deep_editing_score`).

The interval is the percentile interval :math:`[q_{\alpha/2}, q_{1-\alpha/2}]` of the defined
:math:`\theta^*_k` (``numpy.quantile``, linear interpolation), :math:`\alpha = 1 - \text{level}`.
The draws are ``numpy.random.default_rng(seed).integers(0, E, size=(resamples, E))``: the same seed and
the same number of edits give the same draws, so anyone can recompute an interval from the records.

Undefined resamples. A resample that draws none of the edits a metric is defined on (IFR of length 5 when
only a few edits have an active five-step chain) has :math:`\sum_e c_{k,e} b_e = 0`. It is left out, and
the interval is conditional on the metric being defined, which is what the reported value is too. When
fewer than half of the resamples are defined, or the metric rests on a single edit (every defined
resample would repeat its value), the interval is ``null`` with the reason; so it is for a run of one edit
and for a metric that is itself undefined.

Paired comparison (:func:`compare_results`): both runs' metrics are computed on the *same* resampled
edits and the interval is that of the differences :math:`\theta^{B*}_k - \theta^{A*}_k`; it is far
narrower than the two marginal intervals suggest when both runs are hard or easy on the same edits.
:func:`paired_resamples` does this for any number of comparable runs at once, and
:func:`compare_with_best` tests every run against the best one on a metric (the marks of the tables of
``knowgic sweep`` and ``knowgic summarize``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowgic.errors import KnowgicError
from knowgic.evaluation.spec import load_evaluation_spec
from knowgic.metrics import MAX_CHAIN_LENGTH, chain_weight

METHOD = "cluster bootstrap (percentile) over edits"
UNIT = "edit"
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95
MIN_DEFINED_SHARE = 0.5
"""An interval needs the metric to be defined on at least this share of the resamples."""

_SPEC = load_evaluation_spec()
INTERVAL_METRICS = tuple(_SPEC.metric_paths())
"""Every metric that gets an interval, by its path in ``metrics`` (``ifr_by_length.2``: a length), in the
order ``spec/benchmark.yaml`` declares them."""
RATIO_METRICS = tuple(p for p, m in _SPEC.metric_paths().items() if m.kind != "composite")
"""The metrics that are a ratio of per-edit sums (every kind but ``composite``)."""
COMPOSITES = {p: m.of for p, m in _SPEC.metric_paths().items() if m.kind == "composite"}
"""Each composite metric and the metrics it is computed from (the deep-editing score's four)."""


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
            "method": METHOD,
            "unit": UNIT,
            "resamples": self.resamples,
            "seed": self.seed,
            "level": self.level,
            "draws": "numpy.random.default_rng(seed).integers(0, E, size=(resamples, E)), E = per_edit count",
            "quantiles": "numpy.quantile (linear) of the defined resamples at (1 - level)/2 and (1 + level)/2",
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


@dataclass(frozen=True)
class EditStatistics:
    """Per-edit sufficient statistics of every ratio metric of one run, in the run's edit order."""

    edit_ids: tuple[str, ...]
    ratios: dict[str, Ratio]
    missing: dict[str, str]  # metric -> why its statistics cannot be read (an old results file)


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None
    resamples_defined: int
    reason: str | None = None


@dataclass(frozen=True)
class MetricDifference:
    """Run B minus run A on one metric, with a paired bootstrap interval over the same resampled edits."""

    metric: str
    a: float | None
    b: float | None
    difference: float | None
    low: float | None
    high: float | None
    excludes_zero: bool | None
    reason: str | None = None


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


def _resampled_ratio(counts: np.ndarray, ratio: Ratio) -> np.ndarray:
    """:math:`\\theta^*_k` for every resample, NaN where undefined (no drawn edit contributes)."""
    # Elementwise product and numpy's pairwise row sums, not a BLAS product: the result must not depend on
    # the BLAS library or its thread count, so that a run's recorded intervals are bitwise reproducible.
    num = (counts * ratio.numerator).sum(axis=1)
    den = (counts * ratio.denominator).sum(axis=1)
    out = np.full(counts.shape[0], np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _deep_score(ifr: np.ndarray, pres: np.ndarray, eff: np.ndarray, spec: np.ndarray) -> np.ndarray:
    """The deep-editing score of each resample (NaN where a component is undefined)."""
    parts = np.stack([1.0 - np.minimum(1.0, ifr), pres, eff, spec])
    undefined = np.isnan(parts).any(axis=0)
    zero = (parts <= 0.0).any(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        harmonic = 4.0 / (1.0 / parts).sum(axis=0)
    return np.where(undefined, np.nan, np.where(zero, 0.0, harmonic))


def resampled_metrics(stats: EditStatistics, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric's value in every resample (NaN where undefined or where its statistics are missing)."""
    nan = np.full(counts.shape[0], np.nan)
    out = {
        name: _resampled_ratio(counts, stats.ratios[name]) if name in stats.ratios else nan
        for name in RATIO_METRICS
    }
    for name, parts in COMPOSITES.items():
        out[name] = _deep_score(*(out[p] for p in parts))
    return out


def _edits_defined(stats: EditStatistics, metric: str) -> int:
    if metric in COMPOSITES:
        parts = COMPOSITES[metric]
        return min(stats.ratios[p].edits_defined if p in stats.ratios else 0 for p in parts)
    return stats.ratios[metric].edits_defined if metric in stats.ratios else 0


def _percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    alpha = 1.0 - level
    low, high = np.quantile(samples, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high)


def _interval(samples: np.ndarray, level: float, edits_defined: int) -> Interval:
    defined = samples[~np.isnan(samples)]
    if edits_defined < 2:
        return Interval(
            None,
            None,
            int(defined.size),
            "the metric rests on one edit: resampling edits cannot show its spread"
            if edits_defined == 1
            else "no edit contributes to the metric",
        )
    if defined.size < MIN_DEFINED_SHARE * samples.size:
        return Interval(
            None,
            None,
            int(defined.size),
            f"the metric is defined in only {defined.size} of {samples.size} resamples of the edits",
        )
    low, high = _percentile_interval(defined, level)
    return Interval(low, high, int(defined.size))


def ratio_interval(ratio: Ratio, settings: BootstrapSettings | None = None) -> Interval:
    r"""The cluster-bootstrap interval of one ratio metric :math:`\sum_e a_e / \sum_e b_e` from its per-edit
    sums: the building block of :func:`metric_intervals`, for metrics computed outside a results file."""
    settings = settings or BootstrapSettings()
    n_edits = ratio.numerator.shape[0]
    if n_edits < 2:
        return Interval(None, None, 0, "a bootstrap over edits needs at least two")
    samples = _resampled_ratio(resample_counts(n_edits, settings.resamples, settings.seed), ratio)
    return _interval(samples, settings.level, ratio.edits_defined)


def metric_entry_at(metrics: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The entry of ``metrics`` at ``path`` (``"ifr"`` or ``"ifr_by_length.2"``)."""
    head, _, tail = path.partition(".")
    entry = metrics[head]
    return entry[tail] if tail else entry


def metric_intervals(document: Mapping[str, Any], settings: BootstrapSettings) -> dict[str, Interval]:
    """The interval of every metric of ``document`` (by path, see :data:`INTERVAL_METRICS`)."""
    stats = edit_statistics(document)
    n_edits = len(stats.edit_ids)
    intervals: dict[str, Interval] = {}
    if n_edits < 2:
        reason = (
            "the run has one edit: a bootstrap over edits needs at least two"
            if n_edits == 1
            else "the run has no edits"
        )
        return {name: Interval(None, None, 0, reason) for name in INTERVAL_METRICS}
    resampled = resampled_metrics(stats, resample_counts(n_edits, settings.resamples, settings.seed))
    for name in INTERVAL_METRICS:
        entry = metric_entry_at(document["metrics"], name)
        if entry["value"] is None:
            intervals[name] = Interval(None, None, 0, "the metric is undefined")
        elif name in stats.missing:
            intervals[name] = Interval(None, None, 0, stats.missing[name])
        else:
            intervals[name] = _interval(resampled[name], settings.level, _edits_defined(stats, name))
    return intervals


def interval_fields(interval: Interval) -> dict[str, Any]:
    """A metric entry's interval fields: ``interval`` and ``interval_resamples``, or a null ``interval``
    with its ``interval_reason``."""
    if interval.reason is None:
        return {"interval": [interval.low, interval.high], "interval_resamples": interval.resamples_defined}
    return {"interval": None, "interval_reason": interval.reason}


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
    """Several comparable runs' metrics, each recomputed on the *same* resampled edits.

    ``resampled[i][metric]`` is run ``i``'s metric in every resample (``None`` with fewer than two edits).
    """

    settings: BootstrapSettings
    documents: tuple[Mapping[str, Any], ...]
    stats: tuple[EditStatistics, ...]
    resampled: tuple[dict[str, np.ndarray], ...] | None

    def difference(self, metric: str, a: int, b: int) -> MetricDifference:
        r"""Run ``b`` minus run ``a`` on ``metric``: the percentile interval of
        :math:`\theta^{b*}_k - \theta^{a*}_k` over the resamples where both are defined."""
        va = metric_entry_at(self.documents[a]["metrics"], metric)["value"]
        vb = metric_entry_at(self.documents[b]["metrics"], metric)["value"]
        if va is None or vb is None:
            which = " and ".join(x for x, v in (("A", va), ("B", vb)) if v is None)
            return MetricDifference(metric, va, vb, None, None, None, None, f"undefined in {which}")
        missing = self.stats[a].missing.get(metric) or self.stats[b].missing.get(metric)
        if self.resampled is None or missing is not None:
            reason = missing or "the runs have one edit: a bootstrap over edits needs at least two"
            return MetricDifference(metric, va, vb, vb - va, None, None, None, reason)
        interval = _interval(
            self.resampled[b][metric] - self.resampled[a][metric],
            self.settings.level,
            min(_edits_defined(self.stats[a], metric), _edits_defined(self.stats[b], metric)),
        )
        if interval.reason is not None:
            return MetricDifference(metric, va, vb, vb - va, None, None, None, interval.reason)
        assert interval.low is not None and interval.high is not None
        excludes = bool(interval.low > 0.0 or interval.high < 0.0)
        return MetricDifference(metric, va, vb, vb - va, interval.low, interval.high, excludes)


def paired_resamples(
    documents: Sequence[Mapping[str, Any]], settings: BootstrapSettings | None = None
) -> PairedResamples:
    """Resample the edits once and recompute every run's metrics on those draws.

    Every run must be comparable with the first (:func:`comparability_problem`); its per-edit records
    are put in the first run's edit order, so that draw ``e`` means the same edit in every run.
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
    resampled = None
    if n_edits >= 2:
        counts = resample_counts(n_edits, settings.resamples, settings.seed)
        resampled = tuple(resampled_metrics(s, counts) for s in stats)
    return PairedResamples(settings, tuple(documents), stats, resampled)


def compare_results(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> list[MetricDifference]:
    r"""Run B minus run A on every metric (:data:`INTERVAL_METRICS`), with a paired cluster-bootstrap interval.

    Both runs' metrics are recomputed on the same resampled edits :math:`c_{k,e}` and the interval is the
    percentile interval of :math:`\theta^{B*}_k - \theta^{A*}_k` over the resamples where both are defined.
    ``excludes_zero`` says whether the interval lies wholly on one side of 0 (``None`` without an interval).
    Raises :class:`KnowgicError` when the runs differ in model, dataset version or hash, protocol or mode,
    or cover different edits.
    """
    problem = comparability_problem(a, b)
    if problem is not None:
        raise KnowgicError(f"cannot compare the runs: {problem}")
    paired = paired_resamples([a, b], BootstrapSettings(resamples=resamples, seed=seed, level=level))
    return [paired.difference(name, 0, 1) for name in INTERVAL_METRICS]


@dataclass(frozen=True)
class BestComparison:
    """Per metric: the best run and, for every run, whether it is distinguishable from it.

    ``tied[i]`` is ``True`` when the paired interval of run ``i`` minus the best run includes 0 (the best
    run itself is ``True``), ``False`` when it excludes 0, and ``None`` when it cannot be computed or the
    run's value is undefined.
    """

    metric: str
    best: int | None
    tied: tuple[bool | None, ...]


def compare_with_best(paired: PairedResamples, metric: str, lower_is_better: bool) -> BestComparison:
    """The run with the best value of ``metric`` (the first of equal ones) and each run's paired test
    against it (see :class:`BestComparison`)."""
    values = [metric_entry_at(d["metrics"], metric)["value"] for d in paired.documents]
    defined = [i for i, v in enumerate(values) if v is not None]
    if not defined:
        return BestComparison(metric, None, tuple(None for _ in values))
    sign = 1.0 if lower_is_better else -1.0
    best = min(defined, key=lambda i: (sign * float(values[i]), i))
    tied: list[bool | None] = []
    for i in range(len(values)):
        if i == best:
            tied.append(True)
            continue
        difference = paired.difference(metric, best, i)
        tied.append(None if difference.excludes_zero is None else not difference.excludes_zero)
    return BestComparison(metric, best, tuple(tied))


def format_value(entry: Mapping[str, Any], digits: int = 3) -> str:
    """``0.418 [0.35, 0.49]`` (the interval one digit shorter), ``0.418`` without an interval, ``–`` if null."""
    value = entry.get("value")
    if value is None:
        return "–"
    text = f"{value:.{digits}f}"
    interval = entry.get("interval")
    if interval:
        low, high = interval
        text += f" [{low:.{max(1, digits - 1)}f}, {high:.{max(1, digits - 1)}f}]"
    return text
