"""The About page: what each metric measures and which way is better (from the metric declarations in
``spec/benchmark.yaml``), how intervals and ranks are computed, what the sources mean, how to submit, and
how to cite the paper and the benchmark.
"""

from __future__ import annotations

from knowgic import __version__
from knowgic.dataset.versions import latest_version, version_dir
from knowgic.formatting import FEW_EDITS_MARK, direction_text
from knowgic.intervals import DEFAULT_LEVEL, FEW_EDITS, METHOD_BY_KIND, METHODS, methods_for
from knowgic.leaderboard.columns import Columns, leaderboard_columns

BENCHMARK_BIBTEX = """@software{{knowgic_benchmark,
  title   = {{{{KnowGIC}}: a benchmark of deep knowledge editing in language models}},
  author  = {{{{The KnowGIC developers}}}},
  year    = {{2026}},
  version = {{{version}}},
  note    = {{Dataset version {dataset}; metrics as declared in spec/benchmark.yaml}}
}}"""


def paper_bibtex() -> str:
    """The paper's BibTeX, as the dataset folder of the latest version ships it (CITATION.bib)."""
    return (version_dir(latest_version()) / "CITATION.bib").read_text(encoding="utf-8").strip()


def _metric_lines(columns: Columns) -> list[str]:
    """The table's metrics, from their declarations: the compact view first, then the other headline
    metrics, then the parts of IFR by chain length as one line ("IFR n=1…5"), then each optional metric
    with its parts ("RippleEdits accuracy (LG, CI, …): optional columns")."""
    shown = [(c.label, c) for c in dict.fromkeys((*columns.default, *columns.metrics))]
    if columns.parts:
        first, last = columns.parts[0], columns.parts[-1]
        shown.append((f"{first.label}…{last.part}", first))
    optional = {c.metric.name: c for c in columns.optional}
    for name, column in optional.items():
        parts = ", ".join(c.part for c in columns.optional if c.metric.name == name and c.part)
        label = f"{column.metric.label} ({parts})" if parts else column.metric.label
        shown.append((f"{label}, optional columns", column))
    lines = ["| Metric | Better | What it measures |", "| --- | --- | --- |"]
    for label, column in shown:
        lines.append(
            f"| {label} | {direction_text(column.direction)} | {' '.join(column.description.split())} |"
        )
    return lines


def _interval_lines(columns: Columns) -> list[str]:
    """One line per interval method, with the table's metrics it is used for."""
    declared = {
        c.path: c.metric for c in (*columns.default, *columns.metrics, *columns.parts, *columns.optional)
    }
    return [
        f"- {', '.join(labels)}: {METHODS[method]}."
        for method, labels in methods_for(declared, METHOD_BY_KIND)
    ]


def _paper_lines(columns: Columns) -> list[str]:
    """Which figures are the paper's and which rank (from the declarations' ``ranked_by``)."""
    papers = columns.papers()
    if not papers:
        return []
    pairs = "; ".join(f"{paper.label} by {form.label}" for paper, form in papers)
    return [
        "The paper's pooled figures are shown as the paper defines them, marked (paper); what ranks is each "
        f"one's per-edit form, every edit weighing the same: {pairs} (the pooled IFR puts most of its "
        "weight on a few edits with many chains; docs/metrics.md).",
        "",
    ]


def about_markdown(columns: Columns | None = None) -> str:
    """The About page for ``columns`` (default: the shipped spec's)."""
    columns = columns or leaderboard_columns()
    level = f"{DEFAULT_LEVEL * 100:g}%"
    parts = [
        "## What the leaderboard shows",
        "KnowGIC measures *deep* knowledge editing: after an edit, can the old fact still be deduced "
        "through chains of related facts the model knows? Each row is one run of an editing method on one "
        "model, scored on the KnowGIC chains. Runs of different models are never ranked together: choose "
        "the model above the ranking.",
        "",
        *_metric_lines(columns),
        "",
        "Every value is shown with its n (on hover) and its interval; “–” means undefined, with the reason "
        "on hover (for example, no chain of that length is active), never 0.",
        "## Intervals",
        f"Each value carries a {level} interval over edits (the edit is the unit, because an edit's chains "
        "share its fate), by a method chosen for the metric's kind in `spec/benchmark.yaml`:",
        "",
        *_interval_lines(columns),
        "",
        f"A value resting on fewer than {FEW_EDITS:g} effective edits is marked {FEW_EDITS_MARK} (few edits): "
        "its interval covers less than it says. Each results file records every metric's method and edits.",
        "## Ranks",
        "A ranking holds the runs of one model on one edit set, scored one way: the same dataset version "
        "and content hash, the same edits (a run made with `--limit` is never ranked with full runs), the "
        "same protocol with its parameters and known rule, and the same mode. Each such set of runs is a "
        "ranking of its own, chosen above the table and named in the line over it; the default is the "
        "full runs'.",
        "",
        f"Rows are ordered by the {columns.rank.label.lower()}"
        + (
            f" (ranked by {columns[columns.ranked_by].label})"
            if columns.ranked_by != columns.rank.path
            else ""
        )
        + f". Each run's rank is a {level} range (“2–5”), from one paired bootstrap of the edits the runs "
        "share: for each run, its differences with every other run are held at once, so the range "
        "[1 + the runs better beyond doubt, n − the runs worse beyond doubt] holds its true rank with at "
        f"least {level} probability (measured by simulation in docs/metrics.md). A better value never shows a "
        "worse rank: where a noisy run would, the ranges are widened. Equal values share a range, and runs "
        "whose ranges overlap are not told apart; several runs can have rank 1 in their range.",
        "",
        *_paper_lines(columns),
        "The deep-editing score (harmonic mean of its parts) is a summary for sorting, never a replacement "
        "for them.",
        "## Sources",
        "- **verified**: run by the leaderboard's runner from a submitted archive: the submission's code edits "
        "the model in a sandbox, the project's own code scores the edits in another container, and the "
        "stored results are checked against their schema and content hash.",
        "- **local**: a `results.json` someone ran with `knowgic evaluate` and added with `knowgic store "
        "add`; checked against its schema and hash, but not re-run here.",
        "- **reported**: the IFR and Preservation published by the KnowGIC paper's authors (GPT2-XL, "
        "Llama-3-8B, Qwen2.5-7B), shown apart from the ranking: protocol and mode are not stated, and there "
        "are no per-edit records to compare them with.",
        "## How to submit",
        "Write one editor class (`knowgic.editors.base.Editor`) and an hparams file, run `knowgic evaluate "
        "--editor module:Class` on your own machine, then pack the folder with its `submission.yaml` (name, "
        "version, authors, license, editor entry point, hparams per model, requirements, models and "
        "protocols) into a `.tar.gz` or `.zip` and upload it on the **Submit** tab, or run `knowgic runner "
        "submit`. Its jobs appear on the **Queue** tab; finished runs join the ranking as *verified*.",
        "## How to cite",
        "The KnowGIC data and the IFR and Preservation metrics come from the ThinkEval paper:",
        f"```bibtex\n{paper_bibtex()}\n```",
        "The benchmark (dataset versions, protocols, metrics, runner and this leaderboard):",
        f"```bibtex\n{BENCHMARK_BIBTEX.format(version=__version__, dataset=latest_version())}\n```",
    ]
    return "\n".join(parts)
