r"""How often the intervals and paired tests of :mod:`knowgic.intervals` and :mod:`knowgic.paired` are right: a simulation.

A *population* is a set of edits with their per-edit sums :math:`(a_e, b_e)` for each metric (the
sufficient statistics of :func:`knowgic.measure.compute.metric_sums`). Its true value of a metric is
:math:`\theta = \sum_e a_e / \sum_e b_e` over the whole population (a composite: of its parts' true values).
A *sample* draws E edits from it with replacement, as a run draws its edits from all the edits one could
write; the interval of the sample is computed by :func:`knowgic.intervals.batch_intervals`, the function
every results document's intervals come from (:func:`knowgic.recompute.recompute_metrics`)::

    populations (real per-edit records of knowgic-tiny runs on KnowGIC 1.1.0 and on the builder's growth
                 of knowgic-tiny; synthetic hostile ones)
        └─ S samples of E edits ─> batch_intervals(each candidate method) ─> covered? width? whole range?
                                   ─> candidates table ─> per kind, the narrowest method that covers
                                      COVERAGE_TARGET on every population at 26 edits (METHOD_BY_KIND)
        └─ S paired samples under a null ─> batch_differences(each paired method) ─> told apart?
                                   ─> null table (PAIRED_METHOD_BY_KIND)

Three nulls for the paired tests. *Exchangeable*: each edit's two records (two methods' runs on the same
edit) randomly assigned to A and B. *Equal value, other pattern*, the question a leaderboard asks (two runs
of equal value are not to be told apart): the two runs' populations made equal in value while each keeps
its own per-edit pattern, either *shifted* (B's per-edit ratios shifted by the difference, as far as values
then leave the metric's bounds) or *scaled* (the run farther from the nearer bound brought to the other's
value by scaling every edit's distance from that bound, so that every value stays possible); see
:func:`equal_value`. A 0/1 outcome, which can be neither, is replaced by A's outcome on another edit drawn
at random: the same share, another pattern.

Run ``python -m knowgic.coverage populations RUN...`` to derive the real populations from run folders
(``tests/data/coverage_populations.json``), and ``python -m knowgic.coverage table`` for the tables of
docs/metrics.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from knowgic.intervals import (
    BOOTSTRAP_METHODS,
    CONTINUOUS_METHODS,
    COVERAGE_TARGET,
    MARGIN_KINDS,
    METHOD_BY_KIND,
    OK,
    BootstrapSettings,
    batch_intervals,
)
from knowgic.measure.compute import metric_sums
from knowgic.measure.records import Records
from knowgic.paired import PAIRED_METHOD_BY_KIND, batch_differences, sign_flips
from knowgic.spec import MetricSpec, benchmark_spec

POPULATIONS_FILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "coverage_populations.json"

Sums = dict[str, tuple[np.ndarray, np.ndarray]]

CANDIDATES = {
    "edit_outcome": ("exact",),
    "edit_mean": (
        "t",
        "satterthwaite_t",
        "studentized",
        "studentized_symmetric",
        "studentized_satterthwaite",
        "bca",
        "percentile",
        "bernoulli_bound",
    ),
    "clustered_proportion": ("effective_binomial", "t", "satterthwaite_t", "studentized_symmetric", "bca"),
    "ratio_of_sums": (
        "t",
        "satterthwaite_t",
        "studentized",
        "studentized_symmetric",
        "studentized_satterthwaite",
        "bca",
        "percentile",
    ),
    "composite": (
        "t",
        "satterthwaite_t",
        "studentized",
        "studentized_symmetric",
        "studentized_satterthwaite",
        "bca",
        "percentile",
    ),
}
"""The interval methods the simulation compares for each kind (each with and without the unseen-edit margin)."""
PAIRED_CANDIDATES = {
    "edit_outcome": ("mcnemar",),
    "edit_mean": ("t", "satterthwaite_t", "studentized_symmetric", "sign_flip"),
    "clustered_proportion": ("t", "satterthwaite_t", "studentized_symmetric", "sign_flip"),
    "ratio_of_sums": ("t", "satterthwaite_t", "studentized_symmetric", "sign_flip"),
    "composite": ("t", "satterthwaite_t", "studentized_symmetric", "sign_flip"),
}
"""The paired methods the null simulation compares for each kind."""
NULLS = ("exchangeable", "shifted", "scaled")
NULL_PERMUTATIONS = 2000
"""Random sign flips of the simulated sign-flip tests (the comparison itself takes 10,000)."""
SIZE_ROWS = (*((kind, True) for kind in METHOD_BY_KIND), ("ratio_of_sums", False))
"""The rows of the table of lowest coverage by edits: every kind's bounded metrics, and the unbounded one."""
NULL_METRICS = (
    "ifr_per_edit",
    "preservation_macro",
    "efficacy",
    "generalization",
    "specificity",
    "deep_editing_score",
    "ifr",
    "preservation",
)
"""The metrics whose paired tests the null simulation measures: the ranked forms of the headline columns,
and the paper's pooled IFR and Preservation."""
NULL_PAIRS = (
    ("rome", "memit"),
    ("memit", "alphaedit"),
    ("prune", "rect"),
    ("rome", "ft"),
    ("memit", "ice"),
    ("rome on knowgic-tiny, growth", "memit on knowgic-tiny, growth"),
)
"""The pairs of real populations the null simulation compares (by the start of their names)."""


@dataclass(frozen=True)
class Population:
    name: str
    sums: dict[str, tuple[np.ndarray, np.ndarray]]  # path -> (a, b), each (N,)

    @property
    def size(self) -> int:
        return int(next(iter(self.sums.values()))[0].size)

    def declared(self) -> dict[str, MetricSpec]:
        """The declared metrics this population has every sum of (a composite: all its parts)."""
        return {
            p: m
            for p, m in benchmark_spec().metric_paths().items()
            if (p in self.sums if m.kind != "composite" else all(q in self.sums for q in m.of))
            and (m.kind == "composite" or self.sums[p][1].sum() > 0)
        }

    def truth(self, path: str) -> float:
        declared = benchmark_spec().metric_paths()
        spec = declared[path]
        if spec.kind == "composite":
            xs = [
                1 - min(1.0, self.truth(p)) if declared[p].lower_is_better else self.truth(p) for p in spec.of
            ]
            return 0.0 if min(xs) <= 0 else len(xs) / sum(1 / x for x in xs)
        a, b = self.sums[path]
        return float(a.sum() / b.sum())


def population_name(document: Mapping[str, Any]) -> str:
    """``"rome on knowgic-tiny, KnowGIC 1.1.0, 26 edits"``: a population's name from its run."""
    config, dataset = document["config"], document["dataset"]
    data = "KnowGIC" if dataset["name"] == "knowgic" else "growth"
    return f"{config['editor']} on {config['model']}, {data} {dataset['version']}, {len(document['per_edit'])} edits"


def population_of_document(name: str, document: Mapping[str, Any]) -> Population:
    sums = metric_sums(Records.from_document(document), benchmark_spec())
    return Population(
        name, {p: (s.ratio.numerator.copy(), s.ratio.denominator.copy()) for p, s in sums.items()}
    )


def _per_edit(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return values, np.ones_like(values)


def _population(
    name: str,
    ifr: np.ndarray,
    weights: np.ndarray,
    pres: np.ndarray,
    facts: np.ndarray,
    eff: np.ndarray,
    kept: np.ndarray,
    neighbours: np.ndarray,
) -> Population:
    """A synthetic population from each edit's IFR and chain weight, Preservation and facts, Efficacy, and
    neighbours kept of known: the pooled and per-edit forms both."""
    return Population(
        name,
        {
            "ifr": (ifr * weights, weights),
            "ifr_per_edit": _per_edit(ifr),
            "preservation": (pres * facts, facts),
            "preservation_macro": _per_edit(pres),
            "efficacy": _per_edit(eff),
            "generalization": _per_edit(eff),
            "specificity": (kept, neighbours),
        },
    )


def synthetic_populations(n: int = 2000, seed: int = 12) -> list[Population]:
    """Hostile populations of ``n`` edits.

    * *skewed* (Efficacy 0.85 and 0.96): IFR-like chain weights log-normal (σ = 1.2) and independent of the
      outcome, Preservation near 1 with a long tail, Specificity near 1 (most edits keep every neighbour);
    * *weights tied to the outcome*: log-normal chain weights (σ = 1.2) with the heavy edits recovering
      most (IFR = expit(log w + noise)), and the edits with many broader-context facts keeping fewer;
    * *12% catastrophic edits*: most edits good (IFR near 0.1, Preservation and Specificity near 1,
      Efficacy 0.98), and one edit in eight a failure that damages the model (IFR near 1, Preservation
      and Specificity near 0, Efficacy 0).
    """
    rng = np.random.default_rng(seed)
    out = []
    weights = rng.lognormal(0.0, 1.2, n)
    ifr = rng.beta(0.5, 0.5, n)
    neighbours = (1 + rng.poisson(6, n)).astype(float)
    kept = rng.binomial(neighbours.astype(int), rng.beta(6.0, 0.3, n)).astype(float)
    facts = (1 + rng.poisson(4, n)).astype(float)
    pres = rng.beta(4.0, 0.4, n)
    for share in (0.85, 0.96):
        eff = (rng.random(n) < share).astype(float)
        out.append(
            _population(
                f"synthetic, skewed, Efficacy {share}", ifr, weights, pres, facts, eff, kept, neighbours
            )
        )
    weights = rng.lognormal(0.0, 1.2, n)
    ifr = 1.0 / (1.0 + np.exp(-(np.log(weights) + rng.normal(0.0, 0.8, n))))
    facts = (1 + rng.poisson(4 * np.sqrt(weights))).astype(float)
    pres = rng.beta(8.0, 0.4 + 0.3 * facts)
    neighbours = (1 + rng.poisson(6, n)).astype(float)
    kept = rng.binomial(neighbours.astype(int), 1.0 - 0.2 * (ifr > 0.8) * rng.random(n)).astype(float)
    eff = (rng.random(n) < 0.9).astype(float)
    out.append(
        _population(
            "synthetic, weights tied to the outcome", ifr, weights, pres, facts, eff, kept, neighbours
        )
    )
    bad = rng.random(n) < 0.12
    weights = rng.lognormal(0.0, 0.5, n)
    ifr = np.where(bad, rng.beta(12.0, 1.0, n), rng.beta(2.0, 16.0, n))
    facts = (1 + rng.poisson(4, n)).astype(float)
    pres = np.where(bad, rng.beta(1.0, 6.0, n), rng.beta(30.0, 1.0, n))
    neighbours = (1 + rng.poisson(6, n)).astype(float)
    kept = rng.binomial(neighbours.astype(int), np.where(bad, rng.beta(1.0, 4.0, n), rng.beta(60.0, 0.5, n)))
    eff = np.where(bad, 0.0, (rng.random(n) < 0.98).astype(float))
    out.append(
        _population(
            "synthetic, 12% catastrophic edits",
            ifr,
            weights,
            pres,
            facts,
            eff,
            kept.astype(float),
            neighbours,
        )
    )
    return out


def load_populations(path: Path = POPULATIONS_FILE) -> list[Population]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        Population(
            name, {p: (np.array(v["a"], dtype=float), np.array(v["b"], dtype=float)) for p, v in sums.items()}
        )
        for name, sums in data["populations"].items()
    ]


def _draw(pop: Population, idx: np.ndarray, declared: Mapping[str, MetricSpec]) -> Sums:
    return {
        p: (a[idx], b[idx])
        for p, (a, b) in pop.sums.items()
        if p in declared or any(p in m.of for m in declared.values())
    }


def _with_parts(pop: Population, paths: Sequence[str] | None) -> dict[str, MetricSpec]:
    """The population's metrics among ``paths`` (all when ``None``), a composite's parts before it."""
    declared = pop.declared()
    if paths is None:
        return declared
    wanted = {p for p in paths if p in declared}
    wanted |= {q for p in list(wanted) for q in declared[p].of}
    return {p: m for p, m in declared.items() if p in wanted}


def coverage(
    pop: Population,
    n_edits: int,
    samples: int,
    methods: Mapping[str, str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    chunk: int = 40,
    paths: Sequence[str] | None = None,
    margins: frozenset[str] | None = None,
) -> dict[str, dict[str, float]]:
    """Per metric (``paths``, default all the population has), for ``samples`` samples of ``n_edits``:
    ``coverage`` (share of the samples with an interval whose interval holds the true value),
    ``with_interval`` (share of samples that have one), ``width`` (mean), ``whole`` (share of intervals that
    are the metric's whole range), each also ``..._raw`` without the unseen-edit margin. ``methods`` maps a
    kind to its method (default :data:`METHOD_BY_KIND`), ``margins`` names the kinds that hold the margin
    (default :data:`knowgic.intervals.MARGIN_KINDS`)."""
    declared = _with_parts(pop, paths)
    report = [p for p in declared if paths is None or p in paths]
    rng = np.random.default_rng(seed)
    settings = BootstrapSettings(resamples=resamples, seed=seed)
    totals = {
        p: dict.fromkeys(("hits", "have", "width", "whole", "hits_raw", "width_raw", "whole_raw"), 0.0)
        for p in report
    }
    for start in range(0, samples, chunk):
        idx = rng.integers(0, pop.size, size=(min(chunk, samples - start), n_edits))
        batch = batch_intervals(_draw(pop, idx, declared), settings, declared, methods, margins)
        for p in report:
            result, spec, truth = batch[p], declared[p], pop.truth(p)
            ok = result.status == OK
            span = None if None in spec.bounds else spec.bounds[1] - spec.bounds[0]  # type: ignore[operator]
            t = totals[p]
            t["have"] += int(ok.sum())
            for suffix, low, high in (
                ("", result.low, result.high),
                ("_raw", result.raw_low, result.raw_high),
            ):
                inside = (low <= truth + 1e-12) & (truth - 1e-12 <= high)
                t["hits" + suffix] += int((ok & inside).sum())
                t["width" + suffix] += float((high - low)[ok].sum())
                if span is not None:
                    t["whole" + suffix] += int((ok & (high - low >= span * (1 - 1e-9))).sum())
    out: dict[str, dict[str, float]] = {}
    for p in report:
        t = totals[p]

        def share(x: float, have: float = t["have"]) -> float:
            return x / have if have else float("nan")

        out[p] = {
            "coverage": share(t["hits"]),
            "width": share(t["width"]),
            "whole": share(t["whole"]),
            "coverage_raw": share(t["hits_raw"]),
            "width_raw": share(t["width_raw"]),
            "whole_raw": share(t["whole_raw"]),
            "with_interval": t["have"] / samples,
            "truth": pop.truth(p),
        }
    return out


def equal_value(pop_a: Population, pop_b: Population, null: str) -> tuple[Population, Population]:
    r"""The two populations made equal in value, metric by metric, under ``null``:

    * ``shifted``: B's per-edit ratios shifted by the difference, :math:`a'_{B,e} = a_{B,e} + (\theta_A -
      \theta_B)\, b_{B,e}` (values may leave the metric's bounds where they pile at one);
    * ``scaled``: the run farther from the bound nearer to both is brought to the other's value by scaling
      every edit's distance from that bound, :math:`a'_e = c\,b_e + k\,(a_e - c\,b_e)` with :math:`k =
      |\theta_N - c| / |\theta_F - c| \le 1`: every edit stays within the bounds, an edit at the bound
      stays there, and the per-edit pattern is the run's own.

    A 0/1 outcome per edit is left as it is here (:func:`_paired_draws` draws B's from another edit of
    the first population). Returns (A, B)."""
    declared = benchmark_spec().metric_paths()
    sums_a, sums_b = dict(pop_a.sums), dict(pop_b.sums)
    for p in pop_a.sums.keys() & pop_b.sums.keys():
        spec = declared.get(p)
        if (
            spec is None
            or spec.kind == "edit_outcome"
            or not pop_a.sums[p][1].sum()
            or not pop_b.sums[p][1].sum()
        ):
            continue
        theta_a, theta_b = pop_a.truth(p), pop_b.truth(p)
        if null == "shifted":
            a, b = pop_b.sums[p]
            sums_b[p] = (a + (theta_a - theta_b) * b, b)
            continue
        low, high = spec.bounds
        middle = (theta_a + theta_b) / 2
        near = low if high is None or (low is not None and middle - low <= high - middle) else high
        if near is None or theta_a == theta_b:
            continue
        a_far = abs(theta_a - near) > abs(theta_b - near)
        (a, b), far, close = (pop_a.sums[p], theta_a, theta_b) if a_far else (pop_b.sums[p], theta_b, theta_a)
        k = abs(close - near) / abs(far - near)
        scaled = (near * b + k * (a - near * b), b)
        if a_far:
            sums_a[p] = scaled
        else:
            sums_b[p] = scaled
    return Population(pop_a.name, sums_a), Population(pop_b.name, sums_b)


def _paired_draws(
    pop_a: Population,
    pop_b: Population,
    null: str,
    n_edits: int,
    samples: int,
    declared: Mapping[str, MetricSpec],
    rng: np.random.Generator,
    chunk: int,
) -> Iterator[tuple[Sums, Sums]]:
    """Chunks of paired samples (A's and B's sums on the same drawn edits) under ``null``."""
    if null == "exchangeable":
        pop_a, shifted = pop_a, pop_b
    else:
        pop_a, shifted = equal_value(pop_a, pop_b, null)
    size = pop_a.size
    for start in range(0, samples, chunk):
        s = min(chunk, samples - start)
        idx = rng.integers(0, size, size=(s, n_edits))
        sa, sb = _draw(pop_a, idx, declared), _draw(shifted, idx, declared)
        if null == "exchangeable":
            swap = rng.random((s, n_edits)) < 0.5
            sa, sb = (
                {p: (np.where(swap, sb[p][0], sa[p][0]), np.where(swap, sb[p][1], sa[p][1])) for p in sa},
                {p: (np.where(swap, sa[p][0], sb[p][0]), np.where(swap, sa[p][1], sb[p][1])) for p in sa},
            )
        else:
            other = rng.integers(0, size, size=(s, n_edits))
            for p in sb:
                spec = benchmark_spec().metric_at(p)
                if spec is not None and spec.kind == "edit_outcome":
                    sb[p] = (pop_a.sums[p][0][other], pop_a.sums[p][1][other])
        yield sa, sb


def false_told_apart(
    pop_a: Population,
    pop_b: Population,
    n_edits: int,
    samples: int,
    null: str = "exchangeable",
    resamples: int = 1000,
    seed: int = 0,
    chunk: int = 40,
    paths: Sequence[str] | None = None,
    methods: Mapping[str, Sequence[str]] | None = None,
    permutations: int = NULL_PERMUTATIONS,
) -> dict[str, dict[str, dict[str, float]]]:
    """Per metric and paired method (``methods``: kind -> methods, the metrics of other kinds left out;
    default each kind's one, :data:`knowgic.paired.PAIRED_METHOD_BY_KIND`), under ``null``
    (:data:`NULLS`; see the module docstring): the share of samples the test tells apart (``test``), the
    share whose interval excludes 0 (``interval``), and the mean width of the interval (``width``).
    ``permutations``: random sign flips of the ``sign_flip`` test beyond 12 edits."""
    if null not in NULLS:
        raise ValueError(f"unknown null {null!r}; known: {', '.join(NULLS)}")
    declared = {p: m for p, m in _with_parts(pop_a, paths).items() if p in pop_b.declared()}
    report = [p for p in declared if paths is None or p in paths]
    if methods is not None:
        report = [p for p in report if methods.get(declared[p].kind)]
    chosen = {
        p: tuple(methods[declared[p].kind])
        if methods is not None
        else (PAIRED_METHOD_BY_KIND[declared[p].kind],)
        for p in report
    }
    rng = np.random.default_rng(seed)
    settings = BootstrapSettings(resamples=resamples, seed=seed)
    flips = sign_flips(n_edits, seed, permutations)
    zero = {"told": 0, "excluded": 0, "counted": 0, "width": 0.0}
    tally = {p: {m: dict(zero) for m in chosen[p]} for p in report}
    for sa, sb in _paired_draws(pop_a, pop_b, null, n_edits, samples, declared, rng, chunk):
        for p in report:
            for m in chosen[p]:
                result = batch_differences(p, benchmark_spec().metric_paths(), sa, sb, settings, flips, m)
                ok = result.status == OK
                t = tally[p][m]
                t["counted"] += int(ok.sum())
                t["told"] += int((ok & (result.p_value < 1 - settings.level)).sum())
                t["excluded"] += int((ok & ((result.low > 0) | (result.high < 0))).sum())
                t["width"] += float((result.high - result.low)[ok].sum())
    return {
        p: {
            m: {
                "test": t["told"] / t["counted"] if t["counted"] else float("nan"),
                "interval": t["excluded"] / t["counted"] if t["counted"] else float("nan"),
                "width": t["width"] / t["counted"] if t["counted"] else float("nan"),
                "compared": t["counted"] / samples,
            }
            for m, t in by_method.items()
        }
        for p, by_method in tally.items()
    }


def _fmt(x: float) -> str:
    return "–" if x != x else f"{x:.3f}"


def _label(path: str) -> str:
    return benchmark_spec().path_label(path)


def _kind_paths(pop: Population, kind: str) -> list[str]:
    return [p for p, m in pop.declared().items() if m.kind == kind]


@dataclass(frozen=True)
class CandidateResult:
    """One candidate interval method of a kind at one size, over every population and metric of the kind:
    the lowest coverage over the bounded metrics (what the choice reads) and over the unbounded ones (IFR
    uncapped, which no method covers; see :data:`knowgic.intervals.UNBOUNDED_MET_FROM`)."""

    kind: str
    method: str
    margin: bool
    edits: int
    worst: float  # the lowest coverage over populations and bounded metrics
    worst_at: str  # where
    width: float  # mean over populations and bounded metrics of the mean width
    whole: float  # mean share of whole-range intervals
    worst_unbounded: float  # the lowest coverage over the unbounded metrics (NaN: none)
    rows: tuple[tuple[str, str, float, float, float], ...]  # (population, path, coverage, width, whole)
    samples: int = 0  # samples per row

    @property
    def meets(self) -> bool:
        """The lowest coverage reaches the target: its point estimate does."""
        return self.worst >= COVERAGE_TARGET

    @property
    def certain(self) -> bool:
        """The lowest coverage reaches the target beyond the simulation's own error: its one-sided 95% lower
        bound, :math:`\\hat c - 1.645 \\sqrt{\\hat c (1 - \\hat c) / S}` over ``samples`` samples, does."""
        return self.worst - SIMULATION_Z * float(
            np.sqrt(self.worst * (1 - self.worst) / max(self.samples, 1))
        ) >= (COVERAGE_TARGET)


CandidateRows = dict[bool, list[tuple[str, str, float, float, float]]]
SIMULATION_Z = 1.645
"""A coverage counts as reaching the target when its one-sided 95% lower bound does (the choice of methods
must not rest on the simulation's own noise: 0.930 from 4,000 samples is 0.930 +- 0.008)."""


def candidate_rows(
    pop: Population, kind: str, method: str, n_edits: int, samples: int, resamples: int
) -> CandidateRows:
    """``method`` for ``kind`` at ``n_edits`` edits on every metric of the kind ``pop`` has, with the
    unseen-edit margin (``True``) and without it: rows (population, path, coverage, width, whole range);
    the width is NaN for a metric unbounded on a side."""
    rows: CandidateRows = {True: [], False: []}
    paths = _kind_paths(pop, kind)
    if not paths:
        return rows
    declared = benchmark_spec().metric_paths()
    steps = resamples if method in BOOTSTRAP_METHODS else 1
    result = coverage(pop, n_edits, samples, {kind: method}, steps, paths=paths, margins=frozenset({kind}))
    for p in paths:
        r, bounded = result[p], None not in declared[p].bounds
        for margin, suffix in ((True, ""), (False, "_raw")):
            width = r["width" + suffix] if bounded else float("nan")
            rows[margin].append((pop.name, p, r["coverage" + suffix], width, r["whole" + suffix]))
    return rows


def candidate(
    populations: Sequence[Population],
    kind: str,
    method: str,
    n_edits: int,
    samples: int,
    resamples: int,
    rows: Sequence[CandidateRows] | None = None,
) -> list[CandidateResult]:
    """``method`` for ``kind`` at ``n_edits`` edits over every population and metric of the kind, with the
    unseen-edit margin and without it (``rows``: :func:`candidate_rows` of each population, when computed
    already)."""
    found_rows = (
        rows
        if rows is not None
        else [candidate_rows(pop, kind, method, n_edits, samples, resamples) for pop in populations]
    )
    out = []
    for margin in (True, False):
        found = [row for by_margin in found_rows for row in by_margin[margin]]
        bounded_rows = [r for r in found if r[3] == r[3]]
        unbounded = [r[2] for r in found if r[3] != r[3] and r[2] == r[2]]
        worst = min(bounded_rows, key=lambda r: r[2] if r[2] == r[2] else 2.0)
        wholes = [r[4] for r in bounded_rows if r[4] == r[4]]
        out.append(
            CandidateResult(
                kind,
                method,
                margin,
                n_edits,
                worst[2],
                f"{worst[0]}: {_label(worst[1])}",
                float(np.mean([r[3] for r in bounded_rows])),
                float(np.mean(wholes)) if wholes else float("nan"),
                min(unbounded) if unbounded else float("nan"),
                tuple(found),
                samples,
            )
        )
    return out


def choose(results: Sequence[CandidateResult], edits: int = 26) -> CandidateResult | None:
    """The candidate with the narrowest mean width among those whose interval is continuous in the data
    (:data:`knowgic.intervals.CONTINUOUS_METHODS`) and whose coverage reaches the target on every population
    and bounded metric at ``edits`` edits beyond the simulation's error (:attr:`CandidateResult.certain`);
    ``None`` when none does."""
    meeting = [r for r in results if r.edits == edits and r.certain and r.method in CONTINUOUS_METHODS]
    return min(meeting, key=lambda r: r.width) if meeting else None


def candidates_table(results: Sequence[CandidateResult]) -> list[str]:
    lines = [
        "| kind | method | unseen-edit margin | edits | lowest coverage | where | mean width | whole range | "
        f"reaches {COVERAGE_TARGET} | beyond the simulation's error | IFR (uncapped): lowest coverage |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        chosen = r.method == METHOD_BY_KIND[r.kind] and r.margin == (r.kind in MARGIN_KINDS)
        lines.append(
            f"| {r.kind} | {r.method}{' (chosen)' if chosen else ''} | {'yes' if r.margin else 'no'} | {r.edits} | "
            f"{_fmt(r.worst)} | {r.worst_at} | {_fmt(r.width)} | {_fmt(r.whole)} | "
            f"{'yes' if r.meets else '**no**'} | {'yes' if r.certain else 'no'} | {_fmt(r.worst_unbounded)} |"
        )
    return lines


def coverage_rows(pop: Population, n_edits: int, samples: int, resamples: int) -> list[str]:
    """Markdown rows: each metric of ``pop`` at ``n_edits`` edits, with its kind's interval."""
    lines = []
    for p, r in coverage(pop, n_edits, samples, None, resamples).items():
        spec = benchmark_spec().metric_paths()[p]
        below = r["coverage"] == r["coverage"] and r["coverage"] < COVERAGE_TARGET
        lines.append(
            f"| {pop.name} | {_label(p)} | {spec.kind}, {METHOD_BY_KIND[spec.kind]} | {n_edits} | "
            f"{_fmt(r['coverage'])}{' **below**' if below else ''} | {_fmt(r['width'])} | {_fmt(r['whole'])} | "
            f"{r['with_interval']:.2f} |"
        )
    return lines


def lowest_coverage(
    populations: Sequence[Population],
    kind: str,
    n_edits: int,
    samples: int,
    resamples: int,
    bounded: bool = True,
) -> tuple[float, str]:
    """The lowest coverage of ``kind``'s method over every population and metric bounded on both sides (or,
    ``bounded`` false, unbounded on a side: IFR uncapped), and where; NaN where the kind has none."""
    worst, where = float("nan"), ""
    declared = benchmark_spec().metric_paths()
    for pop in populations:
        paths = [p for p in _kind_paths(pop, kind) if (None not in declared[p].bounds) == bounded]
        if not paths:
            continue
        for p, r in coverage(pop, n_edits, samples, None, resamples, paths=paths).items():
            if r["coverage"] == r["coverage"] and not r["coverage"] >= worst:
                worst, where = r["coverage"], f"{pop.name}: {_label(p)}"
    return worst, where


def _pairs(real: Sequence[Population]) -> list[tuple[Population, Population]]:
    def find(start: str) -> Population | None:
        return next((p for p in real if p.name.startswith(start)), None)

    out = []
    for a, b in NULL_PAIRS:
        pa, pb = find(a), find(b)
        if pa is not None and pb is not None and pa.size == pb.size:
            out.append((pa, pb))
    return out


def _pair_name(a: Population, b: Population) -> str:
    growth = ", growth" if "growth" in a.name else ""
    return f"{a.name.split(' on ')[0]} / {b.name.split(' on ')[0]}{growth}"


PAIRED_METHOD_NAMES = tuple(dict.fromkeys(m for methods in PAIRED_CANDIDATES.values() for m in methods))
"""Every paired method the null table measures, in its order."""


def null_rows(
    a: Population, b: Population, null: str, n_edits: int, samples: int, resamples: int, method: str
) -> dict[str, tuple[float, str]]:
    """Per metric whose kind the paired ``method`` is a candidate for (:data:`PAIRED_CANDIDATES`): the false
    'told apart' rate of the test, and a Markdown row with it, the rate of its interval (they agree for
    every method but the sign-flip test) and the interval's mean width."""
    methods = {kind: (method,) for kind, ms in PAIRED_CANDIDATES.items() if method in ms}
    result = false_told_apart(a, b, n_edits, samples, null, resamples, paths=NULL_METRICS, methods=methods)
    rows = {}
    for p, by_method in result.items():
        r = by_method[method]
        chosen = method == PAIRED_METHOD_BY_KIND[benchmark_spec().metric_paths()[p].kind]
        above = r["test"] == r["test"] and r["test"] > 0.06
        rows[p] = (
            r["test"],
            f"| {_pair_name(a, b)} | {null} | {n_edits} | {_label(p)} | {method}{' (chosen)' if chosen else ''} | "
            f"{_fmt(r['test'])}{' **above**' if above else ''} | {_fmt(r['interval'])} | {_fmt(r['width'])} |",
        )
    return rows


def null_summary(
    found: Mapping[tuple[str, str, int, str, str], float], pair_names: Sequence[str], sizes: Sequence[int]
) -> list[str]:
    """Markdown: per metric, null and size, each paired method's highest false 'told apart' rate over the
    pairs of runs (``found[(pair, null, edits, metric, method)]``), and the pair where it is."""
    lines = [
        "| metric | null | edits | " + " | ".join(PAIRED_METHOD_NAMES) + " |",
        "|---|---|---|" + "---|" * len(PAIRED_METHOD_NAMES),
    ]
    for metric in NULL_METRICS:
        for null in NULLS:
            for n in sizes:
                cells = []
                for method in PAIRED_METHOD_NAMES:
                    rates = [
                        (found[k], k[0])
                        for pair in pair_names
                        if (k := (pair, null, n, metric, method)) in found
                    ]
                    rates = [(r, pair) for r, pair in rates if r == r]
                    if not rates:
                        cells.append("")
                        continue
                    rate, pair = max(rates)
                    chosen = method == PAIRED_METHOD_BY_KIND[benchmark_spec().metric_paths()[metric].kind]
                    text = f"{rate:.3f}{'' if rate <= 0.06 else ' **above**'} ({pair})"
                    cells.append(f"**{text}**" if chosen and rate <= 0.06 else text)
                lines.append(f"| {_label(metric)} | {null} | {n} | " + " | ".join(cells) + " |")
    return lines


# --- the tables, as tasks that run in parallel (one process per task, populations read once per process) ---

_LOADED: dict[str, tuple[list[Population], list[Population]]] = {}


def _populations(path: str) -> tuple[list[Population], list[Population]]:
    """The real populations of ``path`` and every population (real and synthetic), once per process."""
    if path not in _LOADED:
        real = load_populations(Path(path))
        _LOADED[path] = (real, [*real, *synthetic_populations()])
    return _LOADED[path]


def _task(task: tuple[Any, ...]) -> Any:
    what, path, *args = task
    real, everything = _populations(path)
    if what == "candidate":
        index, *rest = args
        return candidate_rows(everything[index], *rest)
    if what == "coverage":
        index, *rest = args
        return coverage_rows(everything[index], *rest)
    if what == "lowest":
        return lowest_coverage(everything, *args)
    index, *rest = args
    a, b = _pairs(real)[index]
    return null_rows(a, b, *rest)


def _run_tasks(tasks: Sequence[tuple[Any, ...]], jobs: int) -> list[Any]:
    """Every task's result, in order, over ``jobs`` processes, with a progress bar."""
    from tqdm import tqdm

    if jobs <= 1:
        return [_task(t) for t in tqdm(tasks, desc="simulating", unit="task", file=sys.stderr)]
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        return list(
            tqdm(pool.imap(_task, tasks), total=len(tasks), desc="simulating", unit="task", file=sys.stderr)
        )


def _populations_command(args: argparse.Namespace) -> int:
    from knowgic.results import read_results

    out: dict[str, Any] = {}
    for folder in args.runs:
        path = Path(folder)
        document = read_results(path / "results.json" if path.is_dir() else path)
        name = population_name(document)
        pop = population_of_document(name, document)
        out[name] = {p: {"a": a.tolist(), "b": b.tolist()} for p, (a, b) in pop.sums.items()}
    text = json.dumps(
        {
            "about": "per-edit sums (a_e, b_e) of each metric, from knowgic evaluate runs (knowgic.coverage)",
            "populations": out,
        },
        indent=None,
    )
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(out)} populations)")
    return 0


def _table_command(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    path = str(args.populations)
    real, everything = _populations(path)
    settings = f"{args.samples} samples per row, {args.resamples} bootstrap resamples per interval"
    tasks: list[tuple[Any, ...]] = []
    wanted = set(args.candidate_methods or (m for ms in CANDIDATES.values() for m in ms))
    candidates = {
        kind: [m for m in methods if m in wanted]
        for kind, methods in CANDIDATES.items()
        if args.kinds is None or kind in args.kinds
    }
    candidates = {kind: methods for kind, methods in candidates.items() if methods}
    if "candidates" in args.tables:
        tasks += [
            ("candidate", path, i, kind, method, n, args.samples, args.resamples)
            for kind, methods in candidates.items()
            for method in methods
            for n in args.sizes
            for i in range(len(everything))
        ]
    if "coverage" in args.tables:
        tasks += [
            ("coverage", path, i, n, args.samples, args.resamples)
            for i in range(len(everything))
            for n in args.sizes
        ]
    if "sizes" in args.tables:
        tasks += [
            ("lowest", path, kind, n, args.samples, args.resamples, bounded)
            for kind, bounded in SIZE_ROWS
            for n in args.met_sizes
        ]
    pairs = _pairs(real)
    if "null" in args.tables:
        tasks += [
            ("null", path, i, null, n, args.samples, args.null_resamples, method)
            for i in range(len(pairs))
            for null in NULLS
            for n in args.sizes
            for method in PAIRED_METHOD_NAMES
        ]
    results = iter(_run_tasks(tasks, args.jobs))
    lines: list[str] = []
    if "candidates" in args.tables:
        found = [
            result
            for kind, methods in candidates.items()
            for method in methods
            for n in args.sizes
            for result in candidate(
                everything, kind, method, n, args.samples, args.resamples, [next(results) for _ in everything]
            )
        ]
        lines += [f"Candidate interval methods per kind ({settings}):", "", *candidates_table(found), ""]
        lines += [
            "Chosen at 26 edits (the narrowest mean width among the methods continuous in the data that reach "
            "the target on every population and bounded metric beyond the simulation's error):"
        ]
        for kind in candidates:
            best = choose([r for r in found if r.kind == kind])
            chosen = (
                "no method reaches the target"
                if best is None
                else (
                    f"{best.method}{'' if best.margin else ' without the margin'} (mean width {best.width:.3f})"
                )
            )
            lines.append(f"- {kind}: {chosen}")
        lines.append("")
    if "coverage" in args.tables:
        lines += [
            f"Coverage of nominal 95% intervals, each kind's method (with the unseen-edit margin where the kind "
            f"holds it) ({settings}):",
            "",
            "| population | metric | kind, method | edits | coverage | mean width | whole range | with an interval |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for _pop in everything:
            for _n in args.sizes:
                lines += next(results)
        lines.append("")
    if "sizes" in args.tables:
        lines += [
            f"Lowest coverage of each kind's method over every population and metric, by edits ({settings}):",
            "",
            "| kind | method | " + " | ".join(f"{n} edits" for n in args.met_sizes) + " |",
            "|---|---|" + "---|" * len(args.met_sizes),
        ]
        for kind, bounded in SIZE_ROWS:
            cells = []
            for _n in args.met_sizes:
                worst, _where = next(results)
                cells.append(_fmt(worst) + ("" if worst >= COVERAGE_TARGET else " (below)"))
            which = "" if bounded else " (unbounded: IFR uncapped)"
            lines.append(f"| {kind}{which} | {METHOD_BY_KIND[kind]} | " + " | ".join(cells) + " |")
        lines.append("")
    if "null" in args.tables:
        lines += [
            f"False 'told apart' rate of the paired comparisons at 5% under three nulls: {args.samples} samples "
            f"per row, {args.null_resamples} bootstrap resamples per paired bootstrap interval, "
            f"{NULL_PERMUTATIONS} random sign flips beyond 12 edits.",
            "",
        ]
        found: dict[tuple[str, str, int, str, str], float] = {}
        full: list[str] = []
        for a, b in pairs:
            for null in NULLS:
                for n in args.sizes:
                    by_method = [next(results) for _ in PAIRED_METHOD_NAMES]
                    for metric in NULL_METRICS:
                        for method, rows in zip(PAIRED_METHOD_NAMES, by_method, strict=True):
                            if metric in rows:
                                found[(_pair_name(a, b), null, n, metric, method)] = rows[metric][0]
                                full.append(rows[metric][1])
        summary = null_summary(found, [_pair_name(a, b) for a, b in pairs], args.sizes)
        lines += [
            "Highest rate over the pairs of runs, per metric, null and paired method (bold: the chosen method "
            "within 0.06):",
            "",
            *summary,
            "",
            "Every pair:",
            "",
            "| runs | null | edits | metric | method | told apart by the test | interval excludes 0 | mean width |",
            "|---|---|---|---|---|---|---|---|",
            *full,
            "",
        ]
    lines.append(f"Simulation time: {time.perf_counter() - start:.0f} s ({args.jobs} processes).")
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m knowgic.coverage", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pops = sub.add_parser("populations", help="derive populations from run folders")
    pops.add_argument("runs", nargs="+", help="run folders or results.json files")
    pops.add_argument("--out", type=Path, default=POPULATIONS_FILE, help="where to write them")
    pops.set_defaults(func=_populations_command)
    table = sub.add_parser("table", help="the coverage and false-positive tables (Markdown)")
    table.add_argument("--populations", type=Path, default=POPULATIONS_FILE, help="populations file")
    table.add_argument("--samples", type=int, default=2000, help="samples per row")
    table.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval")
    table.add_argument(
        "--null-resamples", type=int, default=1000, help="bootstrap resamples of the paired intervals (nulls)"
    )
    table.add_argument("--sizes", type=int, nargs="+", default=[26, 6], help="edits per sample")
    table.add_argument(
        "--met-sizes",
        type=int,
        nargs="+",
        default=[6, 8, 10, 13, 16, 20, 26],
        help="edits per sample of the 'sizes' table",
    )
    table.add_argument(
        "--tables",
        nargs="+",
        choices=("candidates", "coverage", "sizes", "null"),
        default=["candidates", "coverage", "sizes", "null"],
        help="which tables: the candidate methods per kind, the chosen methods' coverage, their lowest coverage "
        "by edits, the paired tests' false 'told apart' rates (default: all)",
    )
    table.add_argument(
        "--candidate-methods",
        nargs="+",
        choices=sorted({m for ms in CANDIDATES.values() for m in ms}),
        default=None,
        help="the interval methods the candidates table compares (default: every candidate of each kind)",
    )
    table.add_argument(
        "--kinds",
        nargs="+",
        choices=list(CANDIDATES),
        default=None,
        help="the metric kinds the candidates table compares methods for (default: every kind)",
    )
    table.add_argument("--jobs", type=int, default=1, help="processes to simulate in (default 1)")
    table.add_argument("--out", type=Path, default=None, help="also write the tables to this file")
    table.set_defaults(func=_table_command)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
