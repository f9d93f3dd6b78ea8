r"""How often the intervals and paired tests of :mod:`knowgic.intervals` and :mod:`knowgic.paired` are right: a simulation.

A *population* is a set of edits with their per-edit sums :math:`(a_e, b_e)` for each metric (the
sufficient statistics of :func:`knowgic.measure.compute.metric_sums`). Its true value of a metric is
:math:`\theta = \sum_e a_e / \sum_e b_e` over the whole population (a composite: of its parts' true values).
A *sample* draws E edits from it with replacement, as a run draws its edits from all the edits one could
write; the interval of the sample is computed by :func:`knowgic.intervals.batch_intervals`, the function
every results document's intervals come from (:func:`knowgic.recompute.recompute_metrics`)::

    populations (real per-edit records of knowgic-tiny runs; synthetic skewed ones)
        └─ S samples of E edits ─> batch_intervals(method by kind) ─> covered?  ─> coverage table
        └─ S paired samples under a null ─> batch_differences ─> told apart?   ─> false-positive table

Two nulls for the paired test: *exchangeable*, each edit's two records (two methods' runs on the same
edit) randomly assigned to A and B; and *same value, other spread*, B's per-edit ratio pulled half-way to
the population's value, so that A and B share the population value but not the spread (ratio kinds only).

Run ``python -m knowgic.coverage populations results/pop/rome results/pop/memit results/pop/ice`` to
derive the real populations from run folders (``tests/data/coverage_populations.json``), and
``python -m knowgic.coverage table`` for the tables of docs/metrics.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from knowgic.intervals import (
    BOUNDARY,
    CONSTANT,
    FROM_PARTS,
    METHOD_BY_KIND,
    OK,
    BootstrapSettings,
    batch_intervals,
)
from knowgic.measure.compute import metric_sums
from knowgic.measure.records import Records
from knowgic.paired import batch_differences, sign_flips
from knowgic.spec import MetricSpec, benchmark_spec

POPULATIONS_FILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "coverage_populations.json"
HAS_INTERVAL = (OK, BOUNDARY, CONSTANT, FROM_PARTS)

Sums = dict[str, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Population:
    name: str
    sums: dict[str, tuple[np.ndarray, np.ndarray]]  # path -> (a, b), each (N,)

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


def population_of_document(name: str, document: Mapping[str, Any]) -> Population:
    sums = metric_sums(Records.from_document(document), benchmark_spec())
    return Population(
        name, {p: (s.ratio.numerator.copy(), s.ratio.denominator.copy()) for p, s in sums.items()}
    )


def synthetic_populations(n: int = 2000, seed: int = 12) -> list[Population]:
    """Skewed populations: IFR-like weights concentrated in a few edits, Preservation near 1 with a long
    tail, Specificity near 1 (most edits keep every neighbour), Efficacy at 0.85 and 0.96."""
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 1.2, n)
    ifr = rng.beta(0.5, 0.5, n) * weights, weights
    items = 1 + rng.poisson(6, n)
    keep = rng.binomial(items, rng.beta(6.0, 0.3, n)).astype(float), items.astype(float)
    pres_items = 1 + rng.poisson(4, n)
    pres = rng.beta(4.0, 0.4, n) * pres_items, pres_items.astype(float)
    ones = np.ones(n)
    out = []
    for p in (0.85, 0.96):
        eff = (rng.random(n) < p).astype(float), ones
        macro = rng.beta(3.0, 0.5, n), ones
        out.append(
            Population(
                f"synthetic, Efficacy {p}",
                {
                    "ifr": ifr,
                    "preservation": pres,
                    "preservation_macro": macro,
                    "efficacy": eff,
                    "generalization": eff,
                    "specificity": keep,
                },
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


def coverage(
    pop: Population,
    n_edits: int,
    samples: int,
    methods: Mapping[str, str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    chunk: int = 40,
) -> dict[str, dict[str, float]]:
    """Per metric: ``coverage`` (share of samples with an interval that hold the true value), ``with_interval``
    (share of samples that have one), ``width`` (mean) and ``method``, for ``samples`` samples of ``n_edits``."""
    declared = pop.declared()
    size = next(iter(pop.sums.values()))[0].size
    rng = np.random.default_rng(seed)
    settings = BootstrapSettings(resamples=resamples, seed=seed)
    hits = {p: 0 for p in declared}
    have = {p: 0 for p in declared}
    width = {p: 0.0 for p in declared}
    method_names: dict[str, str] = {}
    for start in range(0, samples, chunk):
        idx = rng.integers(0, size, size=(min(chunk, samples - start), n_edits))
        batch = batch_intervals(_draw(pop, idx, declared), settings, declared, methods)
        for p, result in batch.items():
            ok = np.isin(result.status, HAS_INTERVAL)
            truth = pop.truth(p)
            inside = (result.low <= truth + 1e-12) & (truth - 1e-12 <= result.high)
            hits[p] += int((ok & inside).sum())
            have[p] += int(ok.sum())
            width[p] += float((result.high - result.low)[ok].sum())
            method_names[p] = result.method
    return {
        p: {
            "coverage": hits[p] / have[p] if have[p] else float("nan"),
            "with_interval": have[p] / samples,
            "width": width[p] / have[p] if have[p] else float("nan"),
            "truth": pop.truth(p),
        }
        for p in declared
    }


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
) -> dict[str, dict[str, float]]:
    """Per metric, under a null (``exchangeable`` or ``spread``; see the module docstring): the share of
    samples the paired test tells apart (``test``) and the share whose interval excludes 0 (``interval``)."""
    declared = {
        p: m for p, m in pop_a.declared().items() if p in pop_b.declared() and (paths is None or p in paths)
    }
    if null == "spread":
        declared = {p: m for p, m in declared.items() if m.kind not in ("edit_outcome",)}
    size = next(iter(pop_a.sums.values()))[0].size
    rng = np.random.default_rng(seed)
    settings = BootstrapSettings(resamples=resamples, seed=seed)
    flips = sign_flips(n_edits, seed)
    told = {p: 0 for p in declared}
    excluded = {p: 0 for p in declared}
    counted = {p: 0 for p in declared}
    for start in range(0, samples, chunk):
        s = min(chunk, samples - start)
        idx = rng.integers(0, size, size=(s, n_edits))
        sa, sb = _draw(pop_a, idx, declared), _draw(pop_b if null == "exchangeable" else pop_a, idx, declared)
        if null == "exchangeable":
            swap = rng.random((s, n_edits)) < 0.5
            sa, sb = (
                {p: (np.where(swap, sb[p][0], sa[p][0]), np.where(swap, sb[p][1], sa[p][1])) for p in sa},
                {p: (np.where(swap, sa[p][0], sb[p][0]), np.where(swap, sa[p][1], sb[p][1])) for p in sa},
            )
        else:
            shrunk = {}
            for p, (a, b) in sa.items():
                theta = pop_a.truth(p)
                shrunk[p] = (theta * b + 0.5 * (a - theta * b), b)
            sb = shrunk
        for p in declared:
            result = batch_differences(p, benchmark_spec().metric_paths(), sa, sb, settings, flips)
            ok = result.status == OK
            counted[p] += int(ok.sum())
            told[p] += int((ok & (result.p_value < 1 - settings.level)).sum())
            excluded[p] += int((ok & ((result.low > 0) | (result.high < 0))).sum())
    return {
        p: {
            "test": told[p] / counted[p] if counted[p] else float("nan"),
            "interval": excluded[p] / counted[p] if counted[p] else float("nan"),
            "compared": counted[p] / samples,
        }
        for p in declared
    }


CANDIDATES = ("percentile", "bca", "t", "studentized", "effective_binomial", "bernoulli_bound")
"""Every method the simulation can compare (``coverage(..., methods={kind: method})``)."""


def _fmt(x: float) -> str:
    return "–" if x != x else f"{x:.3f}"


def coverage_table(
    populations: Sequence[Population], sizes: Sequence[int], samples: int, resamples: int
) -> list[str]:
    """Markdown: per population, metric and size, the coverage of the method its kind gets."""
    lines = [
        "| population | metric | kind, method | edits | coverage | mean width | samples with an interval |",
        "|---|---|---|---|---|---|---|",
    ]
    for pop in populations:
        for n in sizes:
            result = coverage(pop, n, samples, None, resamples)
            for p, spec in pop.declared().items():
                r = result[p]
                label = spec.label if "." not in p else f"IFR, n = {p.split('.')[1]}"
                lines.append(
                    f"| {pop.name} | {label} | {spec.kind}, {METHOD_BY_KIND[spec.kind]} | {n} | "
                    f"{_fmt(r['coverage'])} | {_fmt(r['width'])} | {r['with_interval']:.2f} |"
                )
            print(f"coverage: {pop.name}, {n} edits done", file=sys.stderr)
    return lines


NULL_METRICS = ("ifr", "preservation", "efficacy", "generalization", "specificity", "deep_editing_score")
"""The metrics whose paired test the null simulation measures (the summary tables' headline columns)."""


def null_table(
    pairs: Sequence[tuple[Population, Population]], sizes: Sequence[int], samples: int, resamples: int
) -> list[str]:
    lines = [
        "| runs | null | metric | edits | told apart by the test | interval excludes 0 |",
        "|---|---|---|---|---|---|",
    ]
    for a, b in pairs:
        for null in ("exchangeable", "spread"):
            for n in sizes:
                result = false_told_apart(a, b, n, samples, null, resamples, paths=NULL_METRICS)
                for p, r in result.items():
                    label = benchmark_spec().path_label(p) if "." not in p else p
                    lines.append(
                        f"| {a.name} / {b.name if null == 'exchangeable' else a.name + ' (pulled in)'} | {null} | "
                        f"{label} | {n} | {_fmt(r['test'])} | {_fmt(r['interval'])} |"
                    )
                print(f"null: {a.name}/{b.name} {null} {n} edits done", file=sys.stderr)
    return lines


def _populations_command(args: argparse.Namespace) -> int:
    from knowgic.results import read_results

    out: dict[str, Any] = {}
    for folder in args.runs:
        path = Path(folder)
        document = read_results(path / "results.json" if path.is_dir() else path)
        name = f"{document['config']['editor']} on {document['config']['model']}"
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
    real = load_populations(args.populations)
    pops = [*real, *synthetic_populations()]
    lines: list[str] = []
    if "coverage" in args.tables:
        lines += [
            f"Coverage of nominal 95% intervals: {args.samples} samples per row, {args.resamples} bootstrap "
            "resamples per interval (`python -m knowgic.coverage table`).",
            "",
            *coverage_table(pops, args.sizes, args.samples, args.resamples),
            "",
        ]
    if "null" in args.tables:
        lines += [
            f"False 'told apart' rate of the paired comparison at 5% under two nulls: {args.samples} samples "
            f"per row, {args.null_resamples} bootstrap resamples per paired interval.",
            "",
            *null_table(
                [(real[i], real[j]) for i in range(len(real)) for j in range(i + 1, len(real))],
                args.sizes,
                args.samples,
                args.null_resamples,
            ),
            "",
        ]
    lines += [
        f"Simulation time: {time.perf_counter() - start:.0f} s.",
    ]
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
        "--tables",
        nargs="+",
        choices=("coverage", "null"),
        default=["coverage", "null"],
        help="which tables: the intervals' coverage, the paired tests' false 'told apart' rate (default: both)",
    )
    table.add_argument("--out", type=Path, default=None, help="also write the tables to this file")
    table.set_defaults(func=_table_command)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
