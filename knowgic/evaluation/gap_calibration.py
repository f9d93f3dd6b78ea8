r"""How often the private split's flag (:mod:`knowgic.measure.gap`) is raised: a simulation on real runs.

A *population* is a set of edits with every run's own IFR on each edit (the flag's metric, IFR per edit),
and each edit's fact family (:func:`knowgic.dataset.tracks.fact_families`: the connected component of the
fact graph its edited subject lies in). A *split* cuts the edits into a private part of ``m`` edits and a
public part (the rest). Each run in turn is the run tested; the reference runs are the others that
:func:`knowgic.measure.gap.is_reference_editor` allows (every editor but ``none``: all of them, or a random
three, :data:`knowgic.measure.gap.MIN_REFERENCE_RUNS`). The flag is decided by the module's own code
(:func:`~knowgic.measure.gap.edit_gap`, :func:`~knowgic.measure.gap.flag_record`)::

    populations: the nine baselines on knowgic-tiny's growth track (161 edits) and on 1.1.0 (26 edits)
      ── S splits per (population, m, kind) ──> every run's gap ──> each run tested against the others
      kinds:  random      edits drawn at random (an honest null: the two parts are alike)
              families    whole fact families drawn until m edits (a null hostile to the test: the private
                          split shares no fact with the public one, so the parts differ systematically,
                          and differently for each editor, as a real private split does)
              cheat s     families, and the tested run memorised the published chains: its IFR is 0 on a
                          share s of the public edits, the private part as it was (power)
      ──> share of tests flagged, per method: the flag (calibrated) and Welch's test of the gap alone

A cheat is simulated on runs whose mean IFR per edit is at least :data:`CHEAT_FLOOR` (a run that already
recovers nothing has nothing to memorise away). Run ``python -m knowgic.evaluation.gap_calibration
populations NAME VERSION RUN...`` to add a population from comparable runs (``tests/data/gap_populations.json``)
and ``python -m knowgic.evaluation.gap_calibration table`` for the table of docs/metrics.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from knowgic.evaluation.rank_coverage import print_table
from knowgic.evaluation.sweep import results_paths
from knowgic.intervals import Ratio
from knowgic.measure.compare import paired_resamples
from knowgic.measure.gap import (
    MIN_REFERENCE_RUNS,
    NO_EDIT_EDITORS,
    Calibration,
    calibration,
    edit_gap,
    flag_record,
    gap_metric,
)
from knowgic.measure.registry import EditSums
from knowgic.results import read_results
from knowgic.spec import benchmark_spec

POPULATIONS_FILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "gap_populations.json"
CHEAT_FLOOR = 0.05
"""The lowest mean IFR per edit of a run a cheat is simulated on."""
KINDS = ("random", "families", "cheat 0.5", "cheat 1")
"""The splits of the module docstring; ``cheat s``: a share s of the public edits memorised."""
METHODS = ("calibrated", "calibrated, 3 references", "Welch, not calibrated")
"""The flag with every reference run, with :data:`MIN_REFERENCE_RUNS` of them, and the gap alone."""


@dataclass(frozen=True)
class GapPopulation:
    """Runs on a population of edits: ``values`` (runs, edits) each edit's own IFR (NaN where the edit has
    none), ``families`` each edit's fact family."""

    name: str
    runs: tuple[str, ...]
    values: np.ndarray
    families: tuple[str, ...]

    @property
    def size(self) -> int:
        return int(self.values.shape[1])

    def sums(self, run: int, edits: np.ndarray, values: np.ndarray | None = None) -> EditSums:
        """Run ``run``'s per-edit sums on ``edits`` (``values``: its values in place of the population's)."""
        x = (self.values[run] if values is None else values)[edits]
        defined = ~np.isnan(x)
        return EditSums(Ratio(np.where(defined, x, 0.0), defined.astype(float)), int(defined.sum()))


def random_split(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """A private part of ``m`` of ``n`` edits drawn at random (a boolean mask)."""
    private = np.zeros(n, dtype=bool)
    private[rng.choice(n, m, replace=False)] = True
    return private


def family_split(families: Sequence[str], m: int, rng: np.random.Generator) -> np.ndarray:
    """A private part of whole fact families: the families in random order, each taken while the part stays
    at or below ``m`` edits (the rule ``knowgic dataset track`` reserves a part by)."""
    names = np.asarray(families)
    private = np.zeros(len(names), dtype=bool)
    for family in rng.permutation(np.unique(names)):
        members = names == family
        if private.sum() + members.sum() <= m:
            private |= members
    return private


def _flagged(gap_sums: tuple[EditSums, EditSums], found: Calibration | str, metric: str) -> bool:
    return bool(flag_record(edit_gap(*gap_sums), metric, found)["flagged"])


def flag_rates(
    pop: GapPopulation, m: int, kind: str, samples: int, seed: int = 0
) -> dict[str, tuple[float, float, str]]:
    """Per method of :data:`METHODS`: the share of tests flagged, the highest share of one tested run and
    that run, over ``samples`` splits of kind ``kind`` (:data:`KINDS`) with ``m`` private edits."""
    rng = np.random.default_rng(seed)
    metric = gap_metric(benchmark_spec())
    references = [i for i, r in enumerate(pop.runs) if r not in NO_EDIT_EDITORS]
    cheat = float(kind.split()[1]) if kind.startswith("cheat") else 0.0
    tested = [i for i in references if not cheat or np.nanmean(pop.values[i]) >= CHEAT_FLOOR]
    hits = {method: np.zeros(len(tested)) for method in METHODS}
    used = 0
    for _ in range(samples):
        private = random_split(pop.size, m, rng) if kind == "random" else family_split(pop.families, m, rng)
        if private.sum() < 2 or (~private).sum() < 2:
            continue
        used += 1
        p_edits, q_edits = np.flatnonzero(private), np.flatnonzero(~private)
        gaps = {
            i: edit_gap(pop.sums(i, q_edits), pop.sums(i, p_edits)).gap
            for i in references  # honest gaps on this split
        }
        for k, i in enumerate(tested):
            values = pop.values[i].copy()
            if cheat:  # memorised: IFR 0 on a share of the public edits
                values[rng.choice(q_edits, round(cheat * q_edits.size), replace=False)] = 0.0
            sums = (pop.sums(i, q_edits, values), pop.sums(i, p_edits, values))
            others = [gaps[j] for j in references if j != i and gaps[j] is not None]
            three = list(rng.choice(others, MIN_REFERENCE_RUNS, replace=False))
            found = {
                "calibrated": calibration(others, "simulation"),
                "calibrated, 3 references": calibration(three, "simulation"),
                "Welch, not calibrated": Calibration("none", len(others), 0.0, 0.0),
            }
            for method in METHODS:
                hits[method][k] += _flagged(sums, found[method], metric)
    out = {}
    for method in METHODS:
        rates = hits[method] / max(used, 1)
        worst = int(np.argmax(rates))
        out[method] = (float(rates.mean()), float(rates[worst]), pop.runs[tested[worst]])
    return out


TABLE_HEADER = (
    "| population | private edits | split | flag (calibrated) | highest run | with 3 references "
    "| Welch, not calibrated | highest run |\n| --- | ---: | --- | ---: | --- | ---: | ---: | --- |"
)


def table_lines(
    populations: Sequence[GapPopulation], sizes: dict[str, Sequence[int]], samples: int
) -> Iterator[str]:
    """The lines of the Markdown table of docs/metrics.md (after :data:`TABLE_HEADER`), as measured."""
    for pop in populations:
        for m in sizes.get(pop.name, ()):
            for kind in KINDS:
                found = flag_rates(pop, m, kind, samples)
                cal, three, welch = (found[method] for method in METHODS)
                yield (
                    f"| {pop.name} ({pop.size} edits, {len(pop.runs)} runs) | {m} | {kind} | {cal[0]:.3f} | {cal[2]} {cal[1]:.2f} | {three[0]:.3f} | "
                    f"{welch[0]:.3f} | {welch[2]} {welch[1]:.2f} |"
                )


def population_of_runs(name: str, version: str, paths: Sequence[str | Path]) -> GapPopulation:
    """The runs in ``paths`` (results files, run or sweep folders; comparable, on dataset ``version``) as a
    population, each edit with its fact family in that version's chains."""
    from knowgic.dataset.derive import edit_id
    from knowgic.dataset.loading import load_rows
    from knowgic.dataset.tracks import fact_families, row_family

    documents = [read_results(p) for p in results_paths(paths)]
    paired = paired_resamples(documents)
    metric = gap_metric(benchmark_spec())
    values = []
    for sums in paired.sums:
        a, b = sums[metric].ratio.numerator, sums[metric].ratio.denominator
        values.append(np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan))
    rows = load_rows("chains", version)
    family_of = fact_families(rows)
    by_edit = {str(row.get("edit_id") or edit_id(row)): row_family(row, family_of) for row in rows}
    order = [r["edit_id"] for r in documents[0]["per_edit"]]
    runs = tuple(str(d["config"]["editor"]) for d in documents)
    return GapPopulation(name, runs, np.stack(values), tuple(by_edit[e] for e in order))


def load_populations(path: Path = POPULATIONS_FILE) -> list[GapPopulation]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        GapPopulation(
            p["name"],
            tuple(p["runs"]),
            np.array([[np.nan if v is None else v for v in row] for row in p["values"]], dtype=float),
            tuple(p["families"]),
        )
        for p in data["populations"]
    ]


def write_population(pop: GapPopulation, path: Path = POPULATIONS_FILE) -> None:
    """Add ``pop`` to the populations file (replacing one of the same name)."""
    kept = [p for p in load_populations(path) if p.name != pop.name] if path.exists() else []
    data = {
        "about": "each run's own IFR on each edit (null: none) and each edit's fact family, from knowgic "
        "sweep runs (knowgic.evaluation.gap_calibration)",
        "populations": [
            {
                "name": p.name,
                "runs": list(p.runs),
                "families": list(p.families),
                "values": [[None if np.isnan(v) else float(v) for v in row] for row in p.values],
            }
            for p in [*kept, pop]
        ],
    }
    path.write_text(json.dumps(data, indent=None) + "\n", encoding="utf-8")


SIZES = {"growth-1.0.0": (20, 40), "1.1.0": (8, 13)}
"""Private edits per population in the table (1.1.0 has 26 edits in all)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowgic.evaluation.gap_calibration", description=(__doc__ or "").split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("populations", help="add a population from comparable runs")
    p.add_argument("name", help="the population's name (its dataset version, as in the table)")
    p.add_argument("version", help="the dataset version the runs were made on (its fact families)")
    p.add_argument("runs", nargs="+", type=Path, help="results files, run folders or a sweep folder")
    p.add_argument("--out", type=Path, default=POPULATIONS_FILE, help=f"default: {POPULATIONS_FILE}")
    t = sub.add_parser("table", help="print the flag-rate table")
    t.add_argument("--samples", type=int, default=1000, help="splits per line (default 1000)")
    args = parser.parse_args(argv)
    if args.command == "populations":
        write_population(population_of_runs(args.name, args.version, args.runs), args.out)
        print(f"wrote {args.out}")
        return 0
    start = time.perf_counter()
    print_table(TABLE_HEADER, table_lines(load_populations(), SIZES, args.samples), start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
