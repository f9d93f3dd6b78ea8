r"""How often a rank range holds the true rank: a simulation of :mod:`knowgic.measure.ranks`.

A *population* is a set of edits with every run's per-edit sums :math:`(a_e, b_e)` of the ranked metrics
(the same edit in every run). A run's true value is its value over the whole population, its true rank
:math:`1 + |\{j : \theta_j \text{ better than } \theta_i\}|` (values equal to 1e-9 share a rank). A
*sample* draws E edits with replacement, the same edits for every run (a ranking's runs share their edits),
and :func:`knowgic.measure.ranks.rank_bounds` gives every run's range, which *covers* when it holds the
true rank::

    populations: the nine baselines on knowgic-tiny 1.1.0 (real), and hostile ones
        └─ S samples of E edits ─> linearize ─> rank_bounds(method) ─> covered? width? ─> the table

Hostile populations (2,000 edits, or more, one per-edit value each, every edit weighing the same):

- *equal values, other spreads*: five runs with exactly the same value and very different spreads, two
  of them on one pattern of edits, three on patterns of their own: every true rank is 1;
- *exchangeable runs*: five runs whose values on each edit are the five locate-and-edit baselines' real
  per-edit IFRs on that edit, in every one of the 120 orders: the runs are interchangeable edit by edit;
- *near ties, one noisy run*: five runs 0.02 apart, the middle one spread over the whole range (as
  ROME's per-edit IFR), the others narrow: true ranks 1 to 5, where a noisy run's range meets precise ones.

Run ``python -m knowgic.evaluation.rank_coverage populations RUN_FOLDER...`` to derive the real population
from the runs (``tests/data/rank_populations.json``) and ``python -m knowgic.evaluation.rank_coverage
table`` for the table of docs/metrics.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from knowgic.evaluation.sweep import results_paths
from knowgic.intervals import resample_counts
from knowgic.measure.compare import paired_resamples
from knowgic.measure.ranks import RANK_METHODS, linearize, rank_bounds, ranked_forms
from knowgic.results import read_results
from knowgic.spec import MetricSpec, benchmark_spec

POPULATIONS_FILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "rank_populations.json"
TIE = 1e-9
"""True values closer than this share a rank (a population's values are sums in different orders)."""


@dataclass(frozen=True)
class RankPopulation:
    """Runs on a population of edits: ``sums[path] = (a, b)``, each of shape (runs, edits)."""

    name: str
    runs: tuple[str, ...]
    sums: dict[str, tuple[np.ndarray, np.ndarray]]

    @property
    def size(self) -> int:
        return int(next(iter(self.sums.values()))[0].shape[1])

    def metrics(self) -> dict[str, MetricSpec]:
        """The ranked metrics this population has every sum of (a composite: all its parts)."""
        declared = benchmark_spec().metric_paths()
        wanted = dict.fromkeys(ranked_forms().values())
        return {
            p: declared[p]
            for p in wanted
            if (
                p in self.sums
                if declared[p].kind != "composite"
                else all(q in self.sums for q in declared[p].of)
            )
        }

    def values(self, path: str, idx: np.ndarray | None = None, resamples: int = 0, seed: int = 0) -> Any:
        """Every run's value on the edits ``idx`` (default: all), with ``resamples`` joint resamples of them:
        ``theta`` (runs, 1 + resamples) and ``z`` (runs, edits) of :func:`knowgic.measure.ranks.linearize`."""
        n = self.size if idx is None else len(idx)
        weights = np.ones((1, n))
        if resamples:
            weights = np.vstack([weights, resample_counts(n, resamples, seed)])
        return self.weighted(path, weights, idx)

    def weighted(self, path: str, weights: np.ndarray, idx: np.ndarray | None = None) -> Any:
        """:meth:`values` for given weights of the edits ``idx`` (row 0: the sample itself)."""
        declared = benchmark_spec().metric_paths()
        spec = declared[path]
        parts = spec.of if spec.kind == "composite" else (path,)
        take = slice(None) if idx is None else idx
        sums = {p: (self.sums[p][0][:, take], self.sums[p][1][:, take]) for p in parts}
        return linearize(sums, spec, path, declared, weights)

    def true_ranks(self, path: str) -> np.ndarray:
        values = self.values(path).theta[:, 0]
        return competition_ranks(values, benchmark_spec().metric_paths()[path].lower_is_better)


def competition_ranks(values: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """1 + the number of better values, values within :data:`TIE` of each other sharing a rank."""
    score = (-1.0 if lower_is_better else 1.0) * np.asarray(values, dtype=float)
    return 1 + (score[None, :] > score[:, None] + TIE).sum(axis=1)


def population_of_runs(name: str, paths: Sequence[str | Path]) -> RankPopulation:
    """The runs in ``paths`` (results files, run or sweep folders; comparable) as a population."""
    documents = [read_results(p) for p in results_paths(paths)]
    paired = paired_resamples(documents)
    declared = benchmark_spec().metric_paths()
    needed = [q for p in dict.fromkeys(ranked_forms().values()) for q in (declared[p].of or (p,))]
    sums = {
        p: (
            np.stack([s[p].ratio.numerator for s in paired.sums]),
            np.stack([s[p].ratio.denominator for s in paired.sums]),
        )
        for p in dict.fromkeys(needed)
    }
    runs = tuple(str(d["config"]["editor"]) for d in documents)
    return RankPopulation(name, runs, sums)


def _centred(x: np.ndarray, value: float, spread: float) -> np.ndarray:
    """``x`` moved to mean ``value`` and scaled by ``spread`` of the most it can be while staying in [0, 1]."""
    d = x - x.mean()
    room = min(value / max(-d.min(), 1e-12), (1.0 - value) / max(d.max(), 1e-12))
    return value + spread * room * d


def _one_per_edit(name: str, runs: Sequence[str], values: np.ndarray) -> RankPopulation:
    ones = np.ones_like(values)
    return RankPopulation(name, tuple(runs), {"ifr_per_edit": (values, ones)})


def hostile_populations(
    real: RankPopulation | None = None, n: int = 2000, seed: int = 30
) -> list[RankPopulation]:
    """The hostile populations of the module docstring (the exchangeable one needs the real runs)."""
    rng = np.random.default_rng(seed)
    shared, own = rng.beta(0.5, 0.5, n), [rng.beta(0.5, 0.5, n) for _ in range(3)]
    equal = np.stack(
        [
            _centred(shared, 0.45, 1.0),
            _centred(shared, 0.45, 0.3),
            _centred(own[0], 0.45, 0.6),
            _centred(own[1], 0.45, 0.1),
            _centred(own[2], 0.45, 0.02),
        ]
    )
    out = [_one_per_edit("equal values, other spreads", ["wide", "narrow", "mid", "tight", "flat"], equal)]
    noisy = [0.40, 0.42, 0.44, 0.46, 0.48]
    near = np.stack(
        [_centred(rng.beta(0.3, 0.3, n), v, 1.0 if k == 2 else 0.15) for k, v in enumerate(noisy)]
    )
    if real is not None and "ifr_per_edit" in real.sums:
        picked = [
            real.runs.index(r) for r in ("rome", "memit", "alphaedit", "prune", "rect") if r in real.runs
        ]
        base = real.sums["ifr_per_edit"][0][picked]  # (5, edits): each edit's five real values
        orders = list(itertools.permutations(range(len(picked))))
        swapped = np.concatenate([base[list(order)] for order in orders], axis=1)
        out.append(
            _one_per_edit(
                "exchangeable runs (real per-edit IFRs)", [f"run {k}" for k in range(len(picked))], swapped
            )
        )
    out.append(_one_per_edit("near ties, one noisy run", [f"{v:.2f}" for v in noisy], near))
    return out


def rank_coverage(
    pop: RankPopulation,
    n_edits: int,
    samples: int,
    methods: Sequence[str] = ("simultaneous",),
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[tuple[str, str], dict[str, float]]:
    """Per ranked metric and method, over ``samples`` samples of ``n_edits`` edits (the same samples and
    resamples for every method): ``coverage`` (share of run ranges that hold the true rank), ``worst`` (that
    share for the worst-covered run), ``joint`` (share of samples where every run's range holds it),
    ``width`` (mean high - low + 1, in ranks) and ``inverted`` (share of samples where a better value shows
    a worse end: 0 by construction)."""
    rng = np.random.default_rng(seed)
    metrics = pop.metrics()
    truths = {path: pop.true_ranks(path) for path in metrics}
    keys = [(path, method) for path in metrics for method in methods]
    hits = {k: np.zeros(truths[k[0]].size) for k in keys}
    tally = {k: {"joint": 0.0, "width": 0.0, "inverted": 0.0, "used": 0} for k in keys}
    for k in range(samples):
        idx = rng.integers(0, pop.size, size=n_edits)
        weights = np.vstack([np.ones((1, n_edits)), resample_counts(n_edits, resamples, seed + k)])
        for path, spec in metrics.items():
            lin = pop.weighted(path, weights, idx)
            values = lin.theta[:, 0]
            if np.isnan(values).any():
                continue  # a sample where a run's metric is undefined: a ranking would leave the run out
            score = (-1.0 if spec.lower_is_better else 1.0) * values
            better = score[:, None] > score[None, :]
            for method in methods:
                low, high = rank_bounds(lin, values, spec.lower_is_better, level, method)
                inside = (low <= truths[path]) & (truths[path] <= high)
                hits[path, method] += inside
                row = tally[path, method]
                row["joint"] += bool(inside.all())
                row["width"] += float((high - low + 1).mean())
                row["inverted"] += bool(
                    (better & ((low[:, None] > low[None, :]) | (high[:, None] > high[None, :]))).any()
                )
                row["used"] += 1
    out = {}
    for key in keys:
        row, used, runs = tally[key], tally[key]["used"], truths[key[0]].size
        out[key] = {
            "coverage": float(hits[key].sum() / (used * runs)) if used else float("nan"),
            "worst": float(hits[key].min() / used) if used else float("nan"),
            "joint": row["joint"] / used if used else float("nan"),
            "width": row["width"] / used if used else float("nan"),
            "inverted": row["inverted"] / used if used else float("nan"),
            "samples": used,
            "runs": runs,
        }
    return out


TABLE_HEADER = (
    "| population | metric | edits | method | coverage | worst run | all runs at once | mean width (ranks) "
    "| inverted |\n| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
)


def coverage_lines(
    populations: Sequence[RankPopulation],
    sizes: Sequence[int],
    samples: int,
    methods: Sequence[str] = tuple(RANK_METHODS),
    resamples: int = 1000,
) -> Iterator[str]:
    """The lines of the Markdown table of docs/metrics.md (after :data:`TABLE_HEADER`), one per population,
    metric, edits and method, as they are measured."""
    declared = benchmark_spec().metric_paths()
    for pop in populations:
        for size in sizes:
            for (path, method), row in rank_coverage(pop, size, samples, methods, resamples).items():
                yield (
                    f"| {pop.name} ({row['runs']} runs) | {declared[path].label} | {size} | {method} | "
                    f"{row['coverage']:.3f} | {row['worst']:.3f} | {row['joint']:.3f} | "
                    f"{row['width']:.2f} | {row['inverted']:.3f} |"
                )


def write_populations(pop: RankPopulation, path: Path = POPULATIONS_FILE) -> None:
    data = {
        "about": "per-edit sums (a_e, b_e) of every run, edit by edit, from knowgic sweep runs "
        "(knowgic.evaluation.rank_coverage)",
        "name": pop.name,
        "runs": list(pop.runs),
        "sums": {p: {"a": a.tolist(), "b": b.tolist()} for p, (a, b) in pop.sums.items()},
    }
    path.write_text(json.dumps(data, indent=None) + "\n", encoding="utf-8")


def load_population(path: Path = POPULATIONS_FILE) -> RankPopulation:
    data = json.loads(path.read_text(encoding="utf-8"))
    sums = {
        p: (np.array(v["a"], dtype=float), np.array(v["b"], dtype=float)) for p, v in data["sums"].items()
    }
    return RankPopulation(data["name"], tuple(data["runs"]), sums)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowgic.evaluation.rank_coverage", description=(__doc__ or "").split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("populations", help="write the real population from comparable runs")
    p.add_argument("runs", nargs="+", type=Path, help="results files, run folders or a sweep folder")
    p.add_argument("--name", default="nine baselines on knowgic-tiny 1.1.0", help="the population's name")
    p.add_argument("--out", type=Path, default=POPULATIONS_FILE, help=f"default: {POPULATIONS_FILE}")
    t = sub.add_parser("table", help="print the coverage table")
    t.add_argument("--samples", type=int, default=1000, help="samples per line (default 1000)")
    t.add_argument(
        "--resamples", type=int, default=1000, help="bootstrap resamples per sample (default 1000)"
    )
    t.add_argument("--edits", default="26,6", help="sample sizes, comma-separated (default 26,6)")
    t.add_argument("--methods", default=",".join(RANK_METHODS), help="rank methods, comma-separated")
    args = parser.parse_args(argv)
    if args.command == "populations":
        write_populations(population_of_runs(args.name, args.runs), args.out)
        print(f"wrote {args.out}")
        return 0
    start = time.perf_counter()
    real = load_population()
    populations = [real, *hostile_populations(real)]
    sizes = [int(s) for s in args.edits.split(",") if s.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    print_table(
        TABLE_HEADER, coverage_lines(populations, sizes, args.samples, methods, args.resamples), start
    )
    return 0


def print_table(header: str, lines: Iterable[str], start: float) -> None:
    """A simulation's Markdown table, each line as soon as it is simulated, then the time since ``start``."""
    print(header, flush=True)
    for line in lines:
        print(line, flush=True)
    print()
    print(f"Simulation time: {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    sys.exit(main())
