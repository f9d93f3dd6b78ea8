"""How many pairs of runs the paired tests tell apart, per headline metric, in each sweep given.

    python docs/told_apart.py SWEEP [SWEEP ...]

A SWEEP is a sweep folder (``knowgic sweep --out``), or run folders and results.json files given as one
comma-separated argument. Every pair of its runs is compared edit by edit exactly as ``knowgic compare``
compares two runs (``knowgic.measure.compare.compare_results``, its default level); a
pair counts as told apart when that verdict says so, with no adjustment for the number of pairs. Prints a
Markdown table: a row per headline metric, in the form that ranks and compares it (``ifr_per_edit`` for
IFR; the paper's pooled IFR and Preservation have no verdict of their own); a column per sweep with "k of N" over all pairs of editors, and over the
pairs of the five locate-and-edit editors (ROME, MEMIT, AlphaEdit, PRUNE, RECT).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.evaluation.sweep import summarized_runs
from knowgic.measure.compare import compare_results
from knowgic.spec import benchmark_spec

LOCATE_AND_EDIT = ("rome", "memit", "alphaedit", "prune", "rect")


def _documents(argument: str) -> list[dict[str, Any]]:
    documents, _folders = summarized_runs([Path(p) for p in argument.split(",")])
    return list(documents)


def metrics() -> list[str]:
    """The headline metrics by the path that ranks and compares them."""
    spec = benchmark_spec()
    return list(dict.fromkeys(m.ranked_by for m in spec.metrics.values() if m.headline))


def told_apart(documents: list[dict[str, Any]]) -> dict[str, tuple[int, int, int, int]]:
    """Metric -> (pairs told apart, pairs, locate-and-edit pairs told apart, locate-and-edit pairs)."""
    wanted = metrics()
    counts = {m: [0, 0, 0, 0] for m in wanted}
    for a, b in itertools.combinations(documents, 2):
        editors = {a["config"]["editor"], b["config"]["editor"]}
        local = editors <= set(LOCATE_AND_EDIT)
        for difference in compare_results(a, b):
            if difference.metric not in counts:
                continue
            c = counts[difference.metric]
            c[0] += bool(difference.told_apart)
            c[1] += 1
            if local:
                c[2] += bool(difference.told_apart)
                c[3] += 1
    return {m: (c[0], c[1], c[2], c[3]) for m, c in counts.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/told_apart.py", description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", metavar="SWEEP", help="a sweep folder, or runs joined by commas")
    args = parser.parse_args(argv)
    spec = benchmark_spec()
    try:
        columns = []
        for argument in args.sweeps:
            documents = _documents(argument)
            first = documents[0]
            label = f"{first['dataset']['version']}, {len(first['per_edit'])} edits"
            columns.append((label, told_apart(documents)))
    except KnowgicError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    header = ["metric (form compared)"]
    for label, _ in columns:
        header += [f"{label}: all pairs", f"{label}: locate-and-edit pairs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in metrics():
        row = [f"{spec.path_label(metric)} (`{metric}`)"]
        for _, counts in columns:
            k, n, k_local, n_local = counts[metric]
            row += [f"{k} of {n}", f"{k_local} of {n_local}"]
        lines.append("| " + " | ".join(row) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
