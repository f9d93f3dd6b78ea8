r"""Rank ranges: where each run of one ranking stands on a metric, as a range that never inverts the values.

::

    runs of one ranking (one RankingKey: model and revision, dataset version and content hash, limit and
    edits, protocol with its parameters and known rule, mode)
      ──knowgic.measure.compare.paired_resamples──> every run's per-edit sums a_e, b_e, edit e the same edit
      ──one draw of the edits shared by every run (knowgic.intervals.resample_counts)──>
            theta*_{r,k}: run r's value in resample k; z_{r,e}: edit e's linearized influence on run r
      ──for each run i, simultaneous intervals of its differences with every other run──>
            B_i = #{j : j better beyond doubt},  W_i = #{j : j worse beyond doubt}
      ──rank range of i = [1 + B_i, n - W_i], widened in value order──> RankRange per run

*On which edits.* Where every run of a ranking was scored on one private split (results schema 1.5),
the values and ranges come from its per-edit sums, paired over its edit keys; the public figures are
shown to reproduce. Else the public edits rank, and the ranking says so
(:func:`knowgic.measure.compare.rank_basis`).

*What is ranked.* A metric's ``ranked_by`` form (``spec/benchmark.yaml``): IFR ranks by its per-edit form,
Preservation by its macro form, every other metric by itself (:func:`ranked_forms`). Rows are ordered by
that form's value, and the rank of a run is :math:`1 + |\{j : \theta_j \text{ better than } \theta_i\}|`
(equal values share a rank).

*The range* (a marginal confidence set for each run's rank, after Mogstad, Romano, Shaikh and Wilhelm, *Inference
for ranks*). With :math:`s = +1` for a higher-is-better metric and :math:`-1` otherwise, run :math:`i`'s
differences are :math:`\Delta_{ij} = s(\hat\theta_j - \hat\theta_i)`, each with the linearized standard
error :math:`\sigma_{ij} = \sqrt{\sum_e (z_{j,e} - z_{i,e})^2}` over the edits both runs share (the
cluster-robust form of ``knowgic.intervals``; its constant factor cancels below). One joint resample of the
edits gives every run's :math:`\theta^*_{r,k}` (the same edits for all: the comparison is paired), and

.. math:: T^*_{i,k} = \max_{j \ne i} \frac{|\Delta^*_{ij,k} - \Delta_{ij}|}{\sigma_{ij}}, \qquad
          c_i = q_{1-\alpha}(T^*_{i,\cdot}) \cdot \frac{t_{m-1,\,1-\alpha/2}}{z_{1-\alpha/2}},

:math:`m` the fewest edits run :math:`i` shares with another run: the bootstrap's quantile, widened by the
ratio of Student's to the normal quantile (without it, five runs of equal value covered 0.90 at 6 edits).

Run :math:`j` is better than :math:`i` beyond doubt when :math:`\Delta_{ij} - c_i\sigma_{ij} > 0`, worse when
:math:`\Delta_{ij} + c_i\sigma_{ij} < 0`: the intervals :math:`\Delta_{ij} \pm c_i\sigma_{ij}` hold for every
:math:`j` at once with probability :math:`1-\alpha`, so the set :math:`[1 + B_i,\, n - W_i]` holds run
:math:`i`'s true rank with at least that probability. A pair whose per-edit influences agree on every edit
(:math:`\sigma_{ij} = 0`) has no spread: its difference is the same on every edit, beyond doubt only when
the exact sign test over the :math:`m_{ij}` edits both rest on says so (:math:`2 \cdot 2^{-m_{ij}} < \alpha/(n-1)`);
two runs equal on every edit are not told apart (equal on 26 edits drawn is no proof of equal values:
treating them as certainly tied covered 0.86 for Efficacy at 26 edits).

*In value order.* Runs of very different spreads can give a better value a worse end than a worse value
(a noisy run is told apart from fewer runs). The ends are widened so that this never shows:
:math:`L_i = \min\{L_j : \theta_j \text{ no better than } \theta_i\}`,
:math:`U_i = \max\{U_j : \theta_j \text{ no worse than } \theta_i\}`. Widening keeps the coverage, equal
values get the same range, and every range holds the run's own rank. Two runs are *tied* when their
ranges overlap. The coverage of the ranges, measured on real and hostile populations, is in
docs/metrics.md ("Rank ranges"; ``python -m knowgic.evaluation.rank_coverage``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats as sps

from knowgic.errors import KnowgicError
from knowgic.intervals import (
    BootstrapSettings,
    Linear,
    composite_linear,
    ratio_linear,
    resample_counts,
)
from knowgic.measure.compare import (
    PairedResamples,
    RankBasis,
    paired_resamples,
    private_paired,
    rank_basis,
)
from knowgic.measure.compute import metric_entry_at
from knowgic.spec import BenchmarkSpec, MetricSpec, benchmark_spec

RANK_METHODS = {
    "simultaneous": (
        "joint paired bootstrap over the edits: each run's differences with every other run, standardized, "
        "held at once (max-|t| quantile); range = [1 + runs better beyond doubt, n - runs worse beyond "
        "doubt], widened in value order"
    ),
    "simultaneous_t": (
        "the simultaneous method with its critical value widened by t(m-1)/z, m the edits the runs share"
    ),
    "percentile": "percentiles of each run's rank in joint paired bootstrap resamples of the edits",
}
"""The rank-range methods this module implements (the simulation measures both; see :data:`RANK_METHOD`)."""
RANK_METHOD = "simultaneous_t"
"""The method every ranking uses: of the methods whose coverage held 0.95 on every population at 26
edits, the one that held best at 6 (docs/metrics.md, Rank ranges)."""
_TINY = 1e-12
_CHUNK = 8  # runs per linearization: (runs, resamples, edits) arrays stay small for a ranking of 100 runs


# --- which runs share a ranking -------------------------------------------------------------------------


def known_rule(config: Mapping[str, Any]) -> str:
    """The known rule a run used: its ``protocol_params.known_rule``; a ``logprob`` run from before the rule
    was a parameter used ``first_token``; other protocols have none ("")."""
    params = config.get("protocol_params")
    rule = params.get("known_rule") if isinstance(params, Mapping) else None
    if rule is None and config.get("protocol") == "logprob":
        return "first_token"
    return "" if rule is None else str(rule)


@dataclass(frozen=True)
class RankingKey:
    """What runs must share to be ranked together: one model, one edit set, scored one way.

    ``limit`` and ``edits`` name the edit set within the dataset version (``limit`` None: all its edits):
    a run on a subset is never ranked with full runs. ``protocol_params`` holds the protocol's parameters,
    the known rule among them (filled in for ``logprob`` runs from before it was recorded), as sorted JSON.
    """

    model: str
    model_revision: str
    dataset: str
    dataset_version: str
    dataset_sha256: str
    limit: int | None
    edits: int
    protocol: str
    protocol_params: str
    mode: str

    FIELDS = (
        ("model", "model"),
        ("model_revision", "model revision"),
        ("dataset", "dataset"),
        ("dataset_version", "dataset version"),
        ("dataset_sha256", "dataset content hash"),
        ("limit", "limit"),
        ("edits", "number of edits"),
        ("protocol", "protocol"),
        ("protocol_params", "protocol parameters"),
        ("mode", "mode"),
    )

    @property
    def full(self) -> bool:
        """Whether the runs cover every edit of their dataset version (no ``--limit``)."""
        return self.limit is None

    @property
    def rule(self) -> str:
        return str(json.loads(self.protocol_params).get("known_rule", ""))

    @property
    def edit_set(self) -> str:
        """The edit set in words: ``KnowGIC 1.1.0 (sha256 1a2b3c4d5e6f), all 26 edits``."""
        which = (
            f"all {self.edits} edits" if self.full else f"the first {self.edits} edits (--limit {self.limit})"
        )
        return f"{self.dataset} {self.dataset_version} (sha256 {self.dataset_sha256[:12]}), {which}"

    @property
    def label(self) -> str:
        """The ranking's header: model, edit set, protocol (and known rule), mode."""
        protocol = self.protocol + (f", known rule {self.rule}" if self.rule else "")
        return f"{self.model} · {self.edit_set} · {protocol} · {self.mode}"

    @property
    def digest(self) -> str:
        """A short stable id of the key (a URL or cache key)."""
        text = json.dumps([getattr(self, name) for name, _ in self.FIELDS], sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    def difference(self, other: RankingKey) -> str | None:
        """The first setting in which ``other`` differs, in words, or None when both are one ranking."""
        for name, words in self.FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                shown = {"limit": lambda v: "no limit" if v is None else f"limit {v}"}.get(name, str)
                return f"{words}: {shown(mine)} vs {shown(theirs)}"
        return None


def ranking_key(document: Mapping[str, Any]) -> RankingKey:
    """The :class:`RankingKey` of a results document (its summary, without records, is enough)."""
    config, dataset = document["config"], document["dataset"]
    params = dict(config.get("protocol_params") or {})
    rule = known_rule(config)
    if rule:
        params["known_rule"] = rule
    return RankingKey(
        model=str(config["model"]),
        model_revision=str(config.get("model_revision", "")),
        dataset=str(dataset.get("name", "KnowGIC")),
        dataset_version=str(dataset["version"]),
        dataset_sha256=str(dataset["sha256"]),
        limit=config.get("limit"),
        edits=int(document["counts"]["edits"]),
        protocol=str(config["protocol"]),
        protocol_params=json.dumps(params, sort_keys=True, default=str),
        mode=str(config["mode"]),
    )


def one_ranking(documents: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None) -> RankingKey:
    """The key all ``documents`` share; a :class:`KnowgicError` naming the first run and setting that
    differ (``names``: how to call each run, default ``run 1``, ``run 2``...)."""
    if not documents:
        raise KnowgicError("no runs to rank")
    names = names or [f"run {i}" for i in range(1, len(documents) + 1)]
    key = ranking_key(documents[0])
    for name, document in zip(names[1:], documents[1:], strict=True):
        problem = key.difference(ranking_key(document))
        if problem is not None:
            raise KnowgicError(
                f"{names[0]} and {name} cannot share a ranking (they differ in {problem}): a ranking holds "
                "runs of one model on one edit set, scored one way"
            )
    return key


# --- rank ranges ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankRange:
    """A run's rank as a range ``low``–``high`` (1 is best); ``low == high`` when it is certain."""

    low: int
    high: int

    @property
    def text(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}–{self.high}"

    def holds(self, rank: int) -> bool:
        return self.low <= rank <= self.high

    def overlaps(self, other: RankRange) -> bool:
        return self.low <= other.high and other.low <= self.high


def ranked_form(spec: BenchmarkSpec, path: str) -> str:
    """The path of the form that ranks the metric at ``path`` (``ranked_by``; a part ranks by the same part
    of it: ``ifr_by_length.2`` by ``ifr_by_length_per_edit.2``); ``path`` itself when undeclared."""
    metric = spec.metric_at(path)
    if metric is None:
        return path
    part = path.partition(".")[2]
    return f"{metric.ranked_by}.{part}" if part else metric.ranked_by


def ranked_forms(spec: BenchmarkSpec | None = None) -> dict[str, str]:
    """Each headline metric (by path, spec order) -> the path of the form that ranks it (``ranked_by``)."""
    spec = spec or benchmark_spec()
    return {p: ranked_form(spec, p) for p, m in spec.metric_paths().items() if m.headline and not m.parts}


def with_paper_forms(spec: BenchmarkSpec, paths: Sequence[str]) -> list[tuple[str, bool]]:
    """``paths`` as a table shows them, each once: a metric that ranks by another form (the paper's pooled
    IFR, Preservation) as ``(path, True)`` followed by that form ``(form, False)``; a form that ranks a
    paper's metric is preceded by it. The paper's figures are shown, their per-edit forms rank."""
    declared = spec.metric_paths()
    papers: dict[str, str] = {}
    for path in declared:
        form = ranked_form(spec, path)
        if form != path:
            papers.setdefault(form, path)
    out: dict[str, bool] = {}
    for path in paths:
        form = ranked_form(spec, path)
        paper = path if form != path else papers.get(path)
        if paper is not None and paper not in out:
            out[paper] = True
        out.setdefault(form, False)
    return list(out.items())


@dataclass(frozen=True)
class MetricRanking:
    """One metric's ranking of several runs: the value that orders them and each run's :class:`RankRange`
    (``None`` where the value is undefined). ``reason``: why the ranges say nothing (one edit), else None."""

    metric: str
    lower_is_better: bool
    values: tuple[float | None, ...]
    ranges: tuple[RankRange | None, ...]
    method: str
    level: float
    reason: str | None = None
    # What the ranks rest on (knowgic.measure.compare.rank_basis): the private split every run was scored
    # on, or the public data, in words; ``private`` whether it is the private split.
    basis: str = ""
    private: bool = False

    @property
    def ranked(self) -> int:
        """How many runs are ranked (those with a value)."""
        return sum(v is not None for v in self.values)

    def order(self) -> list[int]:
        """Run indices best value first (equal values in run order), undefined values last."""
        sign = 1.0 if self.lower_is_better else -1.0
        return sorted(
            range(len(self.values)),
            key=lambda i: (self.values[i] is None, sign * (self.values[i] or 0.0), i),
        )

    def record(self, i: int) -> dict[str, Any]:
        """Run ``i``'s rank as JSON: ``{"metric", "value", "rank": [low, high], "of"}`` (rank null unranked)."""
        found = self.ranges[i]
        return {
            "metric": self.metric,
            "value": self.values[i],
            "rank": None if found is None else [found.low, found.high],
            "of": self.ranked,
        }


def _stated(document: Mapping[str, Any], path: str) -> float | None:
    try:
        value = metric_entry_at(document["metrics"], path)["value"]
    except (KeyError, TypeError):
        return None
    return None if value is None else float(value)


@dataclass(frozen=True)
class Linearized:
    """Every run of a ranking on one metric in every weighting of the edits: ``theta`` (runs, 1 +
    resamples; column 0 the sample itself), each edit's linearized influence on the sample ``z`` (runs,
    edits), and ``defined`` (runs, edits): the edits the run's metric rests on (every part's, a composite's)."""

    theta: np.ndarray
    z: np.ndarray
    defined: np.ndarray


def linearize(
    sums: Mapping[str, tuple[np.ndarray, np.ndarray]],
    metric: MetricSpec,
    path: str,
    declared: Mapping[str, MetricSpec],
    weights: np.ndarray,
) -> Linearized:
    r"""The :class:`Linearized` runs from ``sums[path] = (a, b)`` of shape (runs, edits) (a composite: from its
    parts' sums) and the weights of the edits (row 0: ones), by ``knowgic.intervals``' own linearization."""
    runs = next(iter(sums.values()))[0].shape[0]
    parts = metric.of if metric.kind == "composite" else (path,)
    thetas, zs = [], []
    for start in range(0, runs, _CHUNK):
        rows = slice(start, start + _CHUNK)
        lin: Linear
        if metric.kind == "composite":
            lin = composite_linear(
                [ratio_linear(weights, sums[p][0][rows], sums[p][1][rows]) for p in parts],
                [declared[p].lower_is_better for p in parts],
            )
        else:
            lin = ratio_linear(weights, sums[path][0][rows], sums[path][1][rows])
        thetas.append(lin.theta)
        zs.append(lin.z[:, 0, :])
    defined = np.logical_and.reduce([sums[p][1] > 0 for p in parts])
    return Linearized(np.concatenate(thetas), np.concatenate(zs), defined)


def _critical(t: np.ndarray, level: float) -> float:
    """The ``level`` quantile of the largest ``|t|`` over comparisons (rows) in each resample (columns)."""
    if not t.size:
        return float(np.inf)
    kept = ~np.isnan(t).all(axis=0)
    return float(np.quantile(np.nanmax(t[:, kept], axis=0), level)) if kept.any() else float(np.inf)


def _sign_test_separates(edits: np.ndarray, alpha: float) -> np.ndarray:
    r"""Whether a difference seen on every one of ``edits`` edits, all one way, is beyond doubt: the exact
    sign test's p-value :math:`2 \cdot 2^{-m}` below ``alpha``."""
    return 2.0 * 0.5 ** edits.astype(float) < alpha


def rank_bounds(
    lin: Linearized,
    values: Sequence[float],
    lower_is_better: bool,
    level: float,
    method: str = RANK_METHOD,
    ordered: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Each run's rank range (``low``, ``high``, integer arrays) from :func:`linearize`; ``values`` orders
    the runs (the stated values). Every run must have a value; a resample where a run's value is undefined
    is left out of that run's comparisons. ``ordered``: widened in value order (:func:`in_value_order`);
    False gives the method's own ends."""
    theta, z = lin.theta, lin.z
    n = theta.shape[0]
    s = -1.0 if lower_is_better else 1.0
    if method in ("simultaneous", "simultaneous_t"):
        low, high = np.ones(n, dtype=int), np.full(n, n, dtype=int)
        shared = (lin.defined[:, None, :] & lin.defined[None, :, :]).sum(axis=2)  # edits both runs rest on
        alpha = 1.0 - level
        for i in range(n):
            delta0 = s * (theta[:, 0] - theta[i, 0])  # > 0: run j better than run i
            sigma = np.sqrt(((z - z[i]) ** 2).sum(axis=1))
            others = np.arange(n) != i
            spread = (sigma > _TINY) & others
            with np.errstate(invalid="ignore", divide="ignore"):
                t = np.abs(s * (theta[:, 1:] - theta[i, 1:]) - delta0[:, None]) / sigma[:, None]
            crit = _critical(t[spread], level)
            if method == "simultaneous_t":  # Student's tail at the shared edits' degrees of freedom
                m = max(int(shared[i][others].min()) if n > 1 else 2, 2)
                crit *= float(sps.t.ppf(1 - alpha / 2, m - 1) / sps.norm.ppf(1 - alpha / 2))
            # No spread (the runs' influences agree on every edit): the difference is the same on every
            # edit, beyond doubt only when the sign test over those edits says so; none at all: no claim.
            flat = ~spread & others & (np.abs(delta0) > _TINY)
            sure = flat & _sign_test_separates(shared[i], alpha / max(n - 1, 1))
            with np.errstate(invalid="ignore"):
                better = np.where(spread, delta0 - crit * sigma > 0, sure & (delta0 > 0))
                worse = np.where(spread, delta0 + crit * sigma < 0, sure & (delta0 < 0))
            better[i] = worse[i] = False
            low[i], high[i] = 1 + int(better.sum()), n - int(worse.sum())
    elif method == "percentile":
        scores = s * theta[:, 1:]
        kept = ~np.isnan(scores).any(axis=0)
        scores = scores[:, kept]
        ranks = 1 + (scores[None, :, :] > scores[:, None, :]).sum(axis=1)  # (runs, resamples)
        alpha = 1.0 - level
        low = np.quantile(ranks, alpha / 2, axis=1, method="lower").astype(int)
        high = np.quantile(ranks, 1 - alpha / 2, axis=1, method="higher").astype(int)
    else:
        raise KnowgicError(f"unknown rank method {method!r}; known: {', '.join(RANK_METHODS)}")
    return in_value_order(values, low, high, lower_is_better) if ordered else (low, high)


def in_value_order(
    values: Sequence[float], low: np.ndarray, high: np.ndarray, lower_is_better: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The ranges widened so that a better value never shows a worse end and equal values share a range
    (``low_i`` the least over values no better, ``high_i`` the most over values no worse); each range then
    also holds the run's own rank, 1 + the number of better values."""
    s = -1.0 if lower_is_better else 1.0
    score = s * np.asarray(values, dtype=float)
    own = 1 + (score[None, :] > score[:, None]).sum(axis=1)
    low, high = np.minimum(low, own), np.maximum(high, own)
    no_better = score[None, :] <= score[:, None]  # [i, j]: run j's value is no better than run i's
    widened_low = np.where(no_better, low[None, :], np.iinfo(int).max).min(axis=1)
    widened_high = np.where(no_better.T, high[None, :], 0).max(axis=1)
    return widened_low, widened_high


def rank_metric(paired: PairedResamples, metric: str, method: str = RANK_METHOD) -> MetricRanking:
    """Every run's rank range on ``metric`` (a path of ``paired.declared``, ranked by its own values: pass
    the ``ranked_by`` form, :func:`ranked_forms`), from the runs' edits resampled jointly."""
    spec = paired.declared[metric]
    settings = paired.settings
    values = [_stated(d, metric) for d in paired.documents]
    defined = [i for i, v in enumerate(values) if v is not None]
    ranges: list[RankRange | None] = [None] * len(values)
    n = len(defined)
    common = {"metric": metric, "lower_is_better": spec.lower_is_better, "values": tuple(values)}
    n_edits = 0 if paired.problem else len(next(iter(paired.sums[0].values())).ratio.numerator)
    reason = paired.problem or (
        "the runs share fewer than two edits: resampling edits cannot tell them apart"
        if n_edits < 2
        else None
    )
    if reason is not None or n < 2:
        for i in defined:
            ranges[i] = RankRange(1, n)
        return MetricRanking(
            **common, ranges=tuple(ranges), method=method, level=settings.level, reason=reason
        )
    parts = spec.of if spec.kind == "composite" else (metric,)
    sums = {
        p: (
            np.stack([paired.sums[i][p].ratio.numerator for i in defined]),
            np.stack([paired.sums[i][p].ratio.denominator for i in defined]),
        )
        for p in parts
    }
    weights = np.vstack([np.ones((1, n_edits)), resample_counts(n_edits, settings.resamples, settings.seed)])
    lin = linearize(sums, spec, metric, paired.declared, weights)
    ordered = [float(v) for v in values if v is not None]
    low, high = rank_bounds(lin, ordered, spec.lower_is_better, settings.level, method)
    for k, i in enumerate(defined):
        ranges[i] = RankRange(int(low[k]), int(high[k]))
    return MetricRanking(**common, ranges=tuple(ranges), method=method, level=settings.level)


def rank_runs(
    documents: Sequence[Mapping[str, Any]],
    metrics: Sequence[str] | None = None,
    settings: BootstrapSettings | None = None,
    spec: BenchmarkSpec | None = None,
    names: Sequence[str] | None = None,
    private: bool = True,
) -> dict[str, MetricRanking]:
    """The rank ranges of runs of one ranking (:func:`one_ranking`, else a :class:`KnowgicError`) on each
    metric of ``metrics`` (default: the headline metrics), by its ranked form: metric path -> ranking.

    Where every run was scored on one private split (:func:`knowgic.measure.compare.rank_basis`), the
    values and ranges are the private split's, paired over its edit keys; else the public data's. Each
    ranking's ``basis`` says which (``private``: False gives the public ranks regardless)."""
    spec = spec or benchmark_spec()
    one_ranking(documents, names)
    forms = ranked_forms(spec)
    wanted = list(metrics) if metrics is not None else list(forms)
    basis = rank_basis(documents) if private else RankBasis(None, 0, "ranked on the public data")
    if basis.private:
        paired = private_paired(documents, settings, spec)
    else:
        paired = paired_resamples(documents, settings, spec)
    by_form: dict[str, MetricRanking] = {}
    out = {}
    for path in wanted:
        form = ranked_form(spec, path)
        if form not in by_form:
            found = rank_metric(paired, form)
            by_form[form] = replace(found, basis=basis.note, private=basis.private)
        out[path] = by_form[form]
    return out
