"""Paired comparisons of whole runs: align comparable runs edit by edit, then test each metric.

::

    results documents ──comparability_problem──> same model, revision, dataset version and hash,
                                                  protocol and parameters, mode, and edits
                      ──Records, reordered to run 1's edits──> metric_sums per run (knowgic.measure)
                      ──knowgic.paired.batch_differences──> MetricDifference per metric and pair
        compare_results(a, b)            every metric, B minus A (``knowgic compare``); the verdict of a
                                         metric is its ``ranked_by`` form's (IFR: IFR per edit)
        compare_with_best(paired, ...)   each run against the best by the ranked form, Holm-adjusted (the
                                         summary's marks)
        rank_basis(documents)            what a ranking of them rests on: the private split every run was
                                         scored on (results schema 1.5), else the public data, in words
        private_paired(documents)        the same alignment over their private blocks' per-edit sums,
                                         paired by edit key (knowgic.measure.private)
        compare_private(a, b)            every metric on the private split, B minus A (``knowgic compare``)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowgic.errors import KnowgicError
from knowgic.intervals import (
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    FEW_EDITS,
    OK,
    BootstrapSettings,
)
from knowgic.measure.compute import metric_entry_at, metric_sums, metric_values
from knowgic.measure.private import has_sums, read_private
from knowgic.measure.records import Records
from knowgic.measure.registry import EditSums
from knowgic.paired import (
    PAIRED_METHOD_BY_KIND,
    PAIRED_TEST_BY_KIND,
    MetricDifference,
    batch_differences,
    sign_flips,
)
from knowgic.spec import BenchmarkSpec, MetricSpec, benchmark_spec, part_label

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


def _stated(document: Mapping[str, Any], metric: str) -> float | None:
    """The value a document states for ``metric``; None when undefined or not stated (a document written
    before the metric was declared)."""
    try:
        return metric_entry_at(document["metrics"], metric)["value"]
    except (KeyError, TypeError):
        return None


def ranked_path(declared: Mapping[str, MetricSpec], path: str) -> str:
    """The path of the metric that ranks, marks and gives the verdict of ``path``: its declaration's
    ``ranked_by`` (``ifr`` -> ``ifr_per_edit``, ``ifr_by_length.2`` -> ``ifr_by_length_per_edit.2``)."""
    part = path.partition(".")[2]
    ranker = declared[path].ranked_by
    return f"{ranker}.{part}" if part else ranker


def path_label(declared: Mapping[str, MetricSpec], path: str) -> str:
    """``"IFR (per edit)"``, ``"IFR by chain length (per edit), n = 2"``: a metric path in words."""
    return part_label(declared[path].label, path.partition(".")[2])


@dataclass(frozen=True)
class PairedResamples:
    """Several comparable runs, their per-edit statistics aligned edit by edit (see :func:`paired_resamples`).

    :meth:`difference` compares any two of them on a metric with the paired method of its kind.
    """

    settings: BootstrapSettings
    documents: tuple[Mapping[str, Any], ...]
    sums: tuple[
        Mapping[str, EditSums], ...
    ]  # each run's per-edit sums by path, in the first run's edit order
    declared: Mapping[str, MetricSpec]
    flips: tuple[np.ndarray, bool] | None = None
    problem: str | None = None  # why the runs' records cannot be compared (an old results schema)
    values: tuple[Mapping[str, float | None], ...] = ()  # each run's values recomputed from its records

    def value(self, run: int, metric: str) -> float | None:
        """Run ``run``'s value of ``metric`` as this version of its definition gives it from the run's
        records (the interval and test are of that value); the stated one where the records cannot be read.
        The two differ only where a document states another version of the definition."""
        if self.values:
            return self.values[run][metric]
        return _stated(self.documents[run], metric)

    def ranked_difference(self, metric: str, a: int, b: int) -> MetricDifference:
        """Run ``b`` minus run ``a`` on the form that ranks ``metric`` (:func:`ranked_path`): what a verdict on
        ``metric`` rests on."""
        return self.difference(ranked_path(self.declared, metric), a, b)

    def difference(self, metric: str, a: int, b: int) -> MetricDifference:
        """Run ``b`` minus run ``a`` on ``metric``: interval, p-value, verdict and the few-edits flag, from the
        paired method of its kind (the verdict agrees with the interval). A metric ranked by another form
        (IFR by IFR per edit) gets its own difference, interval and p-value, but no verdict: ``told_apart``
        is ``None``, ``ranked_by`` names the form whose verdict counts."""
        spec = self.declared[metric]
        test = PAIRED_TEST_BY_KIND[spec.kind]
        ranker = ranked_path(self.declared, metric)
        va, vb = self.value(a, metric), self.value(b, metric)
        if va is None or vb is None:
            which = " and ".join(x for x, v in (("A", va), ("B", vb)) if v is None)
            return MetricDifference(
                metric, va, vb, None, None, None, None, f"undefined in {which}", test=test, ranked_by=ranker
            )
        parts = spec.of if spec.kind == "composite" else (metric,)
        n_edits = 0 if self.problem else len(next(iter(self.sums[a].values())).ratio.numerator)
        if self.problem is not None or n_edits < 2:
            reason = self.problem or "the runs have one edit: a comparison over edits needs at least two"
            return MetricDifference(
                metric, va, vb, vb - va, None, None, None, reason, test=test, ranked_by=ranker
            )
        sums_a = {p: (s.ratio.numerator[None], s.ratio.denominator[None]) for p, s in self.sums[a].items()}
        sums_b = {p: (s.ratio.numerator[None], s.ratio.denominator[None]) for p, s in self.sums[b].items()}
        batch = batch_differences(metric, self.declared, sums_a, sums_b, self.settings, self.flips)
        edits = min(min(self.sums[i][p].ratio.edits_defined for p in parts) for i in (a, b))
        effective = min(min(self.sums[i][p].ratio.effective_edits for p in parts) for i in (a, b))
        common = {
            "test": test,
            "edits": edits,
            "effective_edits": effective,
            "few_edits": effective < FEW_EDITS,
            "ranked_by": ranker,
        }
        if int(batch.status[0]) != OK:
            reason = "the metric rests on one edit: resampling edits cannot show its spread"
            return MetricDifference(metric, va, vb, vb - va, None, None, None, reason, **common)
        p = float(batch.p_value[0])
        told: bool | None = p < 1.0 - self.settings.level
        better = None
        reason = None
        if ranker != metric:
            told = None
            reason = f"verdict by {path_label(self.declared, ranker)}"
        elif told:
            b_lower = vb < va
            better = "B" if b_lower == spec.lower_is_better else "A"
        discordant = None
        if spec.kind == "edit_outcome":
            xa = self.sums[a][metric].ratio
            xb = self.sums[b][metric].ratio
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
            reason,
            p,
            discordant=discordant,
            better=better,
            **common,
        )


def paired_resamples(
    documents: Sequence[Mapping[str, Any]],
    settings: BootstrapSettings | None = None,
    spec: BenchmarkSpec | None = None,
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
    spec = spec or benchmark_spec()
    try:
        records = [Records.from_document(d) for d in documents]
    except KnowgicError as exc:
        return PairedResamples(settings, tuple(documents), (), spec.metric_paths(), None, str(exc))
    order = records[0].edit_ids
    sums = tuple(metric_sums(r.reordered(order), spec) for r in records)
    return _paired(tuple(documents), sums, len(order), settings, spec)


def _paired(
    documents: tuple[Mapping[str, Any], ...],
    sums: tuple[Mapping[str, EditSums], ...],
    edits: int,
    settings: BootstrapSettings,
    spec: BenchmarkSpec,
) -> PairedResamples:
    """Runs' per-edit sums, aligned on ``edits`` common edits, with their values and the sign flips the
    paired tests draw."""
    values = tuple({p: v.value for p, v in metric_values(s, spec).items()} for s in sums)
    flipping = "sign_flip" in PAIRED_METHOD_BY_KIND.values() and edits >= 2
    flips = sign_flips(edits, settings.seed) if flipping else None
    return PairedResamples(settings, documents, sums, spec.metric_paths(), flips, values=values)


def compare_results(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    spec: BenchmarkSpec | None = None,
) -> list[MetricDifference]:
    r"""Run B minus run A on every declared metric (by path, spec order), paired edit by edit.

    Each difference has its interval and the p-value of the one paired method of its kind
    (``knowgic.paired.PAIRED_METHOD_BY_KIND``: McNemar's exact test for a 0/1 outcome per edit, the paired
    t over edits with Satterthwaite's degrees of freedom otherwise), whether the runs are told apart at
    ``1 - level`` (``excludes_zero``: the p-value is below it, which is when the interval excludes 0), which
    run is better by the metric's direction, and the few-edits flag. A metric ranked by another form (the
    paper's pooled IFR and Preservation, ranked by their per-edit forms) has no verdict of its own: its
    ``ranked_by`` form's entry gives it. Raises :class:`KnowgicError` when the runs differ in model, dataset version or hash,
    protocol or mode, or cover different edits.
    """
    problem = comparability_problem(a, b)
    if problem is not None:
        raise KnowgicError(f"cannot compare the runs: {problem}")
    settings = BootstrapSettings(resamples=resamples, seed=seed, level=level)
    paired = paired_resamples([a, b], settings, spec)
    return [paired.difference(path, 0, 1) for path in paired.declared]


PUBLIC_BASIS = "ranked on the public data: no private split"
"""The note of a ranking whose runs were scored on no private split (for knowgic-tiny none can exist: every
fact it knows is on a published chain)."""


@dataclass(frozen=True)
class RankBasis:
    """What a ranking or comparison of runs rests on: the private split every run was scored on (its
    dataset reference and number of edits), or the public data (``split`` None); ``note`` says which, and
    why not the private split, in words."""

    split: Mapping[str, Any] | None
    edits: int
    note: str

    @property
    def private(self) -> bool:
        return self.split is not None


def rank_basis(documents: Sequence[Mapping[str, Any]]) -> RankBasis:
    """The private split when every run has a private block of results schema 1.5 of one split over the
    same edits (Kaggle's rule: the private figures rank, the public ones reproduce); else the public data,
    with the reason."""
    blocks = [d.get("private") for d in documents]
    n = len(blocks)
    if all(b is None for b in blocks):
        return RankBasis(None, 0, PUBLIC_BASIS)
    missing = sum(b is None for b in blocks)
    if missing:
        return RankBasis(None, 0, f"ranked on the public data: {missing} of {n} runs have no private split")
    old = sum(not has_sums(b) for b in blocks)
    if old:
        return RankBasis(
            None,
            0,
            f"ranked on the public data: {old} of {n} runs have a private block of results schema 1.4 or "
            "before (scored on chains of the public edits), which never ranks",
        )
    drills = sum(b.get("kind") != "disjoint" for b in blocks)  # type: ignore[union-attr]
    if drills:
        return RankBasis(
            None,
            0,
            f"ranked on the public data: {drills} of {n} runs were scored on a drill (chains of the public "
            "edits), which never ranks",
        )
    splits = {str(b["dataset"]["sha256"]) for b in blocks}  # type: ignore[index]
    if len(splits) > 1:
        return RankBasis(
            None,
            0,
            f"ranked on the public data: the runs were scored on {len(splits)} different private splits",
        )
    keys = {frozenset(b["edits"]) for b in blocks}  # type: ignore[index]
    if len(keys) > 1:
        return RankBasis(
            None, 0, "ranked on the public data: the runs scored different edits of the private split"
        )
    split = blocks[0]["dataset"]  # type: ignore[index]
    edits = len(blocks[0]["edits"])  # type: ignore[index]
    return RankBasis(
        split,
        edits,
        f"ranked on the private split {split['name']} {split['version']} (sha256 {str(split['sha256'])[:12]}, "
        f"{edits} edits); the public figures are shown to reproduce",
    )


def private_paired(
    documents: Sequence[Mapping[str, Any]],
    settings: BootstrapSettings | None = None,
    spec: BenchmarkSpec | None = None,
) -> PairedResamples:
    """:func:`paired_resamples` over the runs' private blocks (:func:`rank_basis` must be the private
    split): each run's per-edit sums in the first run's order of edit keys, so that edit ``e`` is the same
    private edit in every run. ``documents`` of the result are the private blocks (their ``metrics``)."""
    settings = settings or BootstrapSettings()
    spec = spec or benchmark_spec()
    blocks = [read_private(d["private"], f"run {i} private") for i, d in enumerate(documents, 1)]
    order = blocks[0].keys
    sums = tuple(b.reordered(order) for b in blocks)
    return _paired(tuple(d["private"] for d in documents), sums, len(order), settings, spec)


def compare_private(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    spec: BenchmarkSpec | None = None,
) -> tuple[list[MetricDifference] | None, RankBasis]:
    """:func:`compare_results` on the private split both runs were scored on, paired by edit key, and the
    basis; no differences (None) where they share none (the basis says why)."""
    problem = comparability_problem(a, b)
    if problem is not None:
        raise KnowgicError(f"cannot compare the runs: {problem}")
    basis = rank_basis([a, b])
    if not basis.private:
        return None, basis
    settings = BootstrapSettings(resamples=resamples, seed=seed, level=level)
    paired = private_paired([a, b], settings, spec)
    return [paired.difference(path, 0, 1) for path in paired.declared], basis
