"""``knowgic evaluate`` and ``knowgic timing``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from knowgic.argtypes import (
    add_dataset_version_argument,
    add_model_argument,
    open_unit_fraction,
    positive_int,
)
from knowgic.errors import KnowgicError
from knowgic.evaluation import BASELINES
from knowgic.intervals import BOOTSTRAP_METHODS, DEFAULT_LEVEL, METHODS
from knowgic.slurm import add_slurm_options, given_slurm_options, slurm_profile

EXECUTORS = ("local", "slurm")
"""Where ``knowgic sweep`` runs its editors; the first is the default."""

if TYPE_CHECKING:
    from knowgic.paired import MetricDifference
    from knowgic.spec import BenchmarkSpec, MetricSpec


def _spec_default(attribute: str) -> str:
    """A default from the benchmark spec for help texts; a broken spec is reported when a command runs."""
    from knowgic.spec import benchmark_spec

    try:
        return str(getattr(benchmark_spec(), attribute))
    except KnowgicError:
        return "from spec/benchmark.yaml"


def _protocol_param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError:
        return key, value


def _add_stats_arguments(parser: argparse.ArgumentParser, scope: str) -> None:
    """``--stats-corpus`` and ``--stats-samples``: key statistics of ROME, MEMIT and the methods on them."""
    parser.add_argument(
        "--stats-corpus",
        metavar="CORPUS",
        help="corpus of the key statistics C = E[k k^T]: 'knowgic' (offline, the benchmark's own texts) or "
        "a datasets text corpus 'path[:config][@split]', e.g. 'wikimedia/wikipedia:20231101.en' (needs "
        f"network); replaces the hparams' mom2_dataset ({scope})",
    )
    parser.add_argument(
        "--stats-samples",
        type=positive_int,
        metavar="N",
        help=f"texts of that corpus to use; replaces the hparams' mom2_n_samples ({scope})",
    )


def _add_protocol_param_argument(parser: argparse.ArgumentParser) -> None:
    """``--protocol-param KEY=VALUE``, the same for ``evaluate`` and ``sweep``."""
    parser.add_argument(
        "--protocol-param",
        action="append",
        default=[],
        type=_protocol_param,
        metavar="KEY=VALUE",
        help="override a protocol parameter from spec/benchmark.yaml, e.g. k=10 (repeatable)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="edit a model with an editor and score IFR, Preservation, Efficacy, Specificity",
        description="Evaluate an editing method on KnowGIC and print the table of its metrics; results.json "
        "and plots are written to --out (without --out nothing is saved).",
    )
    add_model_argument(p)
    p.add_argument(
        "--editor",
        required=True,
        help="built-in (none, ice, rome, memit, ...), entry-point name, or module:Class",
    )
    p.add_argument("--hparams", help="hparams YAML (default: the shipped file for this editor and model)")
    p.add_argument(
        "--protocol",
        help=f"logprob, generate or greedy (default: {_spec_default('default_protocol')}, the spec's)",
    )
    _add_protocol_param_argument(p)
    p.add_argument(
        "--mode", help=f"independent or sequential (default: {_spec_default('default_mode')}, the spec's)"
    )
    add_dataset_version_argument(p)
    p.add_argument("--limit", type=positive_int, help="evaluate only the first N distinct edits")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the editor's and the generate protocol's randomness"
    )
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    p.add_argument(
        "--device", default="auto", help="auto (default: cuda when available), cpu, cuda, cuda:1, ..."
    )
    p.add_argument(
        "--out",
        type=Path,
        help="output folder for results.json and plots; without --out nothing is saved, the table is only "
        "printed. A folder that already holds a run is refused unless --overwrite is given",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the run already in --out (as a whole, atomically)"
    )
    p.add_argument(
        "--no-cache", action="store_true", help="recompute pre-edit scores instead of reading the cache"
    )
    p.add_argument("--json", action="store_true", help="print the results document instead of the table")
    _add_stats_arguments(p, "an error for editors without key statistics")
    p.set_defaults(func=run_evaluate)

    s = subparsers.add_parser(
        "sweep",
        help="run several editors on one model and print a Markdown table of their metrics",
        description="Evaluate several editors on one model (loaded once); writes OUT/<editor>/ and OUT/summary.md "
        "and prints the table. Run again after an interruption, it reuses the editors' finished runs.",
    )
    add_model_argument(s, ", loaded once for every editor")
    s.add_argument(
        "--editors",
        default=",".join(BASELINES),
        help=f"comma-separated editors (default: {','.join(BASELINES)})",
    )
    s.add_argument("--protocol", help="scoring protocol (default: the spec's default_protocol)")
    _add_protocol_param_argument(s)
    s.add_argument(
        "--seed", type=int, default=0, help="seed of the editors' and the generate protocol's randomness"
    )
    s.add_argument("--mode", help="independent or sequential (default: the spec's default_mode)")
    add_dataset_version_argument(s)
    s.add_argument("--limit", type=positive_int, help="evaluate only the first N distinct edits")
    s.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    s.add_argument(
        "--device", default="auto", help="auto (default: cuda when available), cpu, cuda, cuda:1, ..."
    )
    s.add_argument(
        "--out",
        type=Path,
        required=True,
        help="output folder: one sub-folder of results per editor, and summary.md (the table). A sweep "
        "resumes: an editor whose folder holds a finished run of the same request is not run again; a run "
        "of another request there is refused unless --overwrite is given",
    )
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="run every editor anew, replacing the runs already in --out (each atomically) and summary.md",
    )
    s.add_argument(
        "--json",
        action="store_true",
        help="print the runs (editor, folder, every metric, its rank range per headline metric) as JSON "
        "instead of the table",
    )
    _add_stats_arguments(s, "applied to the editors with key statistics, the others run as they are")
    cluster = s.add_argument_group(
        "Slurm", "--executor slurm: each editor's run is one Slurm job (submitit; docs/cluster.md)"
    )
    cluster.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=EXECUTORS[0],
        help="where the editors run: one after another in this process (local, the default), or as Slurm "
        "jobs (slurm: one job array, the key statistics first; state in OUT/.slurm)",
    )
    cluster.add_argument(
        "--no-wait",
        action="store_true",
        help="submit and return at once; the same command run again collects the finished runs",
    )
    cluster.add_argument(
        "--resubmit-failed",
        action="store_true",
        help="resubmit the jobs that failed (the run raised, ran out of time or memory); jobs Slurm stopped "
        "(cancelled, preempted, node failure) are resubmitted without it",
    )
    add_slurm_options(cluster)
    s.set_defaults(func=run_sweep_command)

    m = subparsers.add_parser(
        "summarize",
        help="print the Markdown table of runs written separately",
        description="One Markdown table (as `knowgic sweep` writes) from existing runs: results.json files, "
        "run folders or sweep folders. The runs must share one ranking (model and revision, dataset version and "
        "hash, limit and edits, protocol and its parameters, mode), dtype, device and seed. Rows come in sweep "
        "order; each value carries its 95% interval and each ranked column its 95% rank range among the rows "
        "(#2-4), from one paired bootstrap of the edits; the paper's pooled IFR and Preservation sit beside the "
        "per-edit forms that rank them.",
    )
    m.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS",
        help="a results.json file, a run folder holding one, or a sweep folder of run folders (repeatable)",
    )
    m.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    m.add_argument("--overwrite", action="store_true", help="replace the file --out names when it exists")
    m.add_argument(
        "--recompute",
        action="store_true",
        help="show every metric and interval recomputed from the runs' records with this package's methods "
        "and metric versions (runs made before a method changed), instead of the values the files state",
    )
    m.add_argument(
        "--json",
        action="store_true",
        help="print the runs (editor, file, every metric, its rank range per headline metric) as JSON instead",
    )
    m.set_defaults(func=run_summarize)

    q = subparsers.add_parser(
        "probe",
        help="apply one benchmark edit and show how chosen facts move (logprob, before and after)",
        description="Apply one edit of the benchmark, score the rewrite prompt, the question form, the "
        "subject's other facts and any facts you name before and after it, then restore the model.",
    )
    add_model_argument(q)
    q.add_argument("--editor", required=True, help="built-in, entry-point name, or module:Class")
    q.add_argument(
        "--hparams", type=Path, help="hparams YAML (default: the shipped file for this editor and model)"
    )
    which = q.add_mutually_exclusive_group(required=True)
    which.add_argument("--subject", help="the edit's subject (case-insensitive), e.g. 'Harry Potter'")
    which.add_argument("--edit-id", help="the edit's id (results.json per_edit[].edit_id)")
    q.add_argument(
        "--fact",
        action="append",
        default=[],
        metavar="PROMPT|SUBJECT|ANSWER",
        help="another fact to probe, e.g. '{} belongs to|Gryffindor|Hogwarts School of Witchcraft and "
        "Wizardry' (repeatable)",
    )
    q.add_argument("--facts-file", type=Path, help="YAML list of {prompt, subject, answer} to probe")
    add_dataset_version_argument(q, folders=False)
    q.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    q.add_argument(
        "--device", default="auto", help="auto (default: cuda when available), cpu, cuda, cuda:1, ..."
    )
    q.add_argument("--json", action="store_true", help="print JSON instead of the table")
    q.set_defaults(func=run_probe_command)

    b = subparsers.add_parser(
        "timing",
        help="measure evaluation speed and memory against the naive per-row protocol",
        description="Speed and memory timing; prints one JSON line of measured ratios.",
    )
    b.add_argument("--model", default="knowgic-tiny", help="model to time (default: knowgic-tiny)")
    b.add_argument("--editor", default="rome", help="editor to time (default: rome)")
    b.add_argument(
        "--naive-rows",
        type=positive_int,
        help="time the naive protocol on a seeded sample of this many rows and extrapolate "
        "(default: 100; the row count or more: every row, no extrapolation)",
    )
    b.add_argument("--limit", type=positive_int, help="time only the first N distinct edits")
    b.add_argument("--repeats", type=positive_int, default=3, help="best of this many scorer/forward timings")
    add_dataset_version_argument(b, folders=False)
    b.set_defaults(func=run_timing)

    c = subparsers.add_parser(
        "compare",
        help="run B minus run A on every metric, with a paired interval and p-value",
        description="Compare two runs of the same model, dataset version and hash, protocol and mode, edit by "
        "edit: per metric the difference B - A with the interval and p-value of one paired method "
        "(McNemar's exact test, inverted for its interval, for 0/1 metrics; a paired t over the edits with "
        "Satterthwaite's degrees of freedom for the others), so that the verdict and the interval never "
        "disagree, and which run is better in words. Runs that differ in any of those are refused.",
    )
    c.add_argument("run_a", type=Path, metavar="RUN_A", help="results.json file, or a run folder holding one")
    c.add_argument("run_b", type=Path, metavar="RUN_B", help="results.json file, or a run folder holding one")
    c.add_argument(
        "--level",
        type=open_unit_fraction,
        default=DEFAULT_LEVEL,
        help=f"interval level, between 0 and 1 (default: {DEFAULT_LEVEL})",
    )
    c.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the table")
    c.set_defaults(func=run_compare)


def run_evaluate(args: argparse.Namespace) -> int:
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

    overrides = dict(args.protocol_param)
    # Protocol and mode left out take the spec's defaults (EvaluationRequest's field defaults).
    chosen = {k: v for k, v in (("protocol", args.protocol), ("mode", args.mode)) if v is not None}
    request = EvaluationRequest(
        model=args.model,
        editor=args.editor,
        hparams_path=args.hparams,
        protocol_overrides=overrides,
        **chosen,
        dataset_version=args.dataset_version,
        limit=args.limit,
        seed=args.seed,
        dtype=args.dtype,
        device=args.device,
        out_dir=args.out,
        overwrite=args.overwrite,
        use_cache=not args.no_cache,
        stats_corpus=args.stats_corpus,
        stats_samples=args.stats_samples,
    )
    run = evaluate(request, progress=sys.stderr.isatty(), log=None if sys.stderr.isatty() else _log_line)
    if args.json:
        import json

        print(json.dumps(run.document, indent=2, ensure_ascii=False))
    else:
        print_results(run.document, run.results_path, run.plot_paths)
    if args.out is None:  # on stderr with --json, so stdout stays one JSON document
        print(
            "not saved: no --out given (pass --out DIR to keep results.json and the plots)",
            file=sys.stderr if args.json else sys.stdout,
        )
    return 0


def _log_line(line: str) -> None:
    """One progress line on stderr, flushed (read from logs while the run goes on)."""
    print(line, file=sys.stderr, flush=True)


def _fmt(value: float | None) -> str:
    from knowgic.formatting import format_number

    return format_number(value, 4, undefined="null")


def _value_cells(entry: Mapping[str, Any]) -> tuple[str, str]:
    """The value and its interval (``[0.2593, 0.5808]``; ``–`` where there is none)."""
    from knowgic.formatting import format_interval

    return _fmt(entry["value"]), format_interval(entry.get("interval"))


def _note(entry: Mapping[str, Any]) -> str:
    """Why the value is null, else why its interval is, or what to know about it (few edits, every edit
    the same value); documents of schema 1.0 have none of these."""
    from knowgic.formatting import entry_note
    from knowgic.intervals import FEW_EDITS

    return entry_note(entry, FEW_EDITS)


def _edits_cell(entry: Mapping[str, Any]) -> str:
    """``26 (9.6)``: the edits a metric rests on and their effective number (schema 1.3), else ``–``."""
    if "edits" not in entry:
        return "–"
    return f"{entry['edits']} ({entry['effective_edits']:.1f})"


def print_results(
    document: Mapping[str, Any],
    results_path: Path | None = None,
    plots: list[Path] | None = None,
    spec: BenchmarkSpec | None = None,
) -> None:
    """Print the results table; labels and directions come from ``spec`` (default: the benchmark spec)."""
    from rich.console import Console
    from rich.table import Table

    from knowgic.spec import benchmark_spec, part_label

    metrics_spec = (spec or benchmark_spec()).metrics
    # Piped or logged output gets whole lines rather than a table folded to 80 columns.
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    from knowgic.dataset.loading import dataset_label

    c, d, m, n = document["config"], document["dataset"], document["metrics"], document["counts"]
    table = Table(
        title=(f"{dataset_label(d)} | {c['model']} | editor {c['editor']} | {c['protocol']} | {c['mode']}"),
        title_justify="left",
    )
    uncertainty = document.get("uncertainty")
    level = f"{round(100 * uncertainty['level'])}%" if uncertainty else "95%"
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column(f"{level} interval", justify="right")
    table.add_column("n", justify="right")
    table.add_column("edits (eff.)", justify="right")
    table.add_column("better")
    table.add_column("note")
    # Labels, order and directions come from the spec; a metric of the document the spec does not
    # declare (a results file from another version) is still shown, without a direction.
    for key in [*metrics_spec, *(k for k in m if k not in metrics_spec)]:
        if key not in m:
            continue
        declared = metrics_spec.get(key)
        label, direction = (declared.label, declared.direction) if declared else (key, "")
        entry = m[key]
        if "value" in entry:
            table.add_row(
                label, *_value_cells(entry), str(entry["n"]), _edits_cell(entry), direction, _note(entry)
            )
            continue
        for part, sub in entry.items():  # ifr_by_length: one row per chain length
            table.add_row(
                f"  {part_label(label, part)}",
                *_value_cells(sub),
                str(sub["n"]),
                _edits_cell(sub),
                direction,
                _note(sub),
            )
    console.print(table)
    ifr = metrics_spec.get("ifr")
    if ifr is not None:  # the headline metric in words, from its declaration
        console.print(f"{ifr.label} ({ifr.direction} is better) = {ifr.description}")
    console.print(
        f"chains {n['chains']} (active {n['active_chains']}, still recoverable {n['recoverable_chains']}), "
        f"edits {n['edits']}, broader-context facts {n['preservation_facts']} "
        f"(known {n.get('preservation_facts_known', '?')}), neighbourhood facts {n['specificity_facts']} "
        f"(known {n.get('specificity_facts_known', '?')})"
    )
    if uncertainty:
        how = (
            "each metric's method chosen by its kind (interval_method in results.json)"
            if uncertainty.get("methods_by_kind")
            else uncertainty["method"]
        )
        entries = [e for m in document["metrics"].values() for e in ([m] if "value" in m else m.values())]
        methods = {e.get("interval_method") for e in entries}
        resampled = any(METHODS[b] in methods for b in BOOTSTRAP_METHODS)
        drawn = f", {uncertainty['resamples']} resamples, seed {uncertainty['seed']}" if resampled else ""
        console.print(
            f"intervals: {level}, {how}, {n['edits']} edits{drawn}; † few edits: below 10 effective edits "
            "(docs/metrics.md)"
        )
    t = document["timing"]
    pre = "from cache" if t.get("pre_scores_cached") else f"{t.get('pre_scoring_seconds', 0.0):.1f} s"
    console.print(
        f"time {t['total_seconds']:.1f} s (editing {t['edit_seconds']:.1f} s, "
        f"scoring {t['scoring_seconds']:.1f} s, pre-edit scores {pre})"
    )
    if results_path is not None:
        console.print(f"results: {results_path}")
    for plot in plots or []:
        console.print(f"plot: {plot}")


def run_sweep_command(args: argparse.Namespace) -> int:
    from knowgic.evaluation.sweep import run_folder, run_sweep

    editors = [e.strip() for e in args.editors.split(",") if e.strip()]
    settings: dict[str, Any] = {
        "protocol": args.protocol,
        "mode": args.mode,
        "dataset_version": args.dataset_version,
        "limit": args.limit,
        "dtype": args.dtype,
        "device": args.device,
        "stats_corpus": args.stats_corpus,
        "stats_samples": args.stats_samples,
        "overwrite": args.overwrite,
        "seed": args.seed,
        "protocol_overrides": dict(args.protocol_param),
    }
    if args.executor == "local":
        given = given_slurm_options(args) + [
            flag
            for flag, on in (("--no-wait", args.no_wait), ("--resubmit-failed", args.resubmit_failed))
            if on
        ]
        if given:
            raise KnowgicError(f"{', '.join(given)}: for --executor slurm only")
        documents, table = run_sweep(
            model=args.model,
            editors=editors,
            out_dir=args.out,
            progress=sys.stderr.isatty(),
            report=_log_line,
            log=None if sys.stderr.isatty() else _log_line,
            **settings,
        )
    else:
        from knowgic.evaluation.slurm_sweep import run_slurm_sweep

        collected = run_slurm_sweep(
            args.model,
            editors,
            args.out,
            profile=slurm_profile(args),
            wait=not args.no_wait,
            resubmit_failed=args.resubmit_failed,
            progress=sys.stderr.isatty(),
            report=_log_line,
            **settings,
        )
        if collected is None:
            return 0
        documents, table = collected
    summary = args.out / "summary.md"
    if args.json:
        paths = [run_folder(args.out, d["config"]["editor"]) / "results.json" for d in documents]
        _print_runs_json(documents, paths, summary=summary)
        print(f"summary: {summary}", file=sys.stderr)
        return 0
    print(table)
    print(f"summary: {summary}")
    return 0


def _print_runs_json(
    documents: list[dict[str, Any]], paths: list[Path], summary: Path | None = None, ranks: Any = None
) -> None:
    """Runs as JSON: each run's editor, results file, sha256, config, every metric (value, n, interval) and
    its rank range per headline metric among these runs (``ranks``: their
    :class:`~knowgic.evaluation.sweep.SummaryRanks`, computed here when not given); ``ranking`` says how."""
    from knowgic.evaluation.sweep import summary_ranks
    from knowgic.printable import printable_json
    from knowgic.spec import benchmark_spec

    spec = benchmark_spec()
    ranks = ranks if ranks is not None else summary_ranks(documents, spec)
    runs = [
        {
            "editor": d["config"]["editor"],
            "results": str(path),
            "sha256": d["sha256"],
            "config": d["config"],
            "dataset": d["dataset"],
            "counts": d["counts"],
            "metrics": d["metrics"],
            "ranks": ranks.run(i, spec),
        }
        for i, (d, path) in enumerate(zip(documents, paths, strict=True))
    ]
    report: dict[str, Any] = {"ranking": ranks.report(spec), "runs": runs}
    if summary is not None:
        report["summary"] = str(summary)
    print(printable_json(report, indent=2))


def run_summarize(args: argparse.Namespace) -> int:
    from knowgic.evaluation.outputs import write_atomic
    from knowgic.evaluation.sweep import row_labels, summarized_runs, summary_ranks, summary_table
    from knowgic.printable import printable

    if args.out is not None and args.out.exists() and not args.overwrite:
        raise KnowgicError(f"{args.out} exists; pass --overwrite to replace it, or choose another file")
    documents, folders = summarized_runs(args.results)
    if args.recompute:
        from knowgic.recompute import recomputed_view

        documents = [recomputed_view(d) for d in documents]
    ranks = summary_ranks(documents, names=row_labels(documents, folders))
    table = summary_table(documents, sources=folders, ranks=ranks)
    if args.out is not None:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(args.out, table.encode("utf-8"))
        except OSError as exc:
            raise KnowgicError(f"cannot write {args.out}: {exc}") from None
    if args.json:
        _print_runs_json(documents, [f / "results.json" if f.is_dir() else f for f in folders], ranks=ranks)
    else:
        print(printable(table, newlines=True))  # names from results files: shown, never obeyed
    return 0


def _run_document(path: Path) -> dict[str, Any]:
    """The verified results document of ``path`` (a results.json file or a run folder holding one)."""
    from knowgic.results import read_results

    if path.is_dir():
        if not (path / "results.json").is_file():
            raise KnowgicError(f"{path} holds no results.json")
        path = path / "results.json"
    elif not path.exists():
        raise KnowgicError(f"{path} does not exist")
    return read_results(path)


def run_compare(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from rich.console import Console
    from rich.table import Table

    from knowgic.dataset.loading import dataset_label
    from knowgic.formatting import FEW_EDITS_MARK, format_interval, format_number, verdict_meaning
    from knowgic.intervals import FEW_EDITS, listing, methods_for
    from knowgic.measure.compare import compare_private, compare_results
    from knowgic.paired import PAIRED_TEST_BY_KIND
    from knowgic.printable import plain_cell, printable_json
    from knowgic.spec import benchmark_spec

    a, b = _run_document(args.run_a), _run_document(args.run_b)
    differences = compare_results(a, b, level=args.level)
    # Where both runs were scored on one private split, its differences are the verdicts that count.
    private, basis = compare_private(a, b, level=args.level)
    level = f"{round(100 * args.level)}%"
    if args.json:
        report = {
            "a": {"path": str(args.run_a), "editor": a["config"]["editor"], "sha256": a["sha256"]},
            "b": {"path": str(args.run_b), "editor": b["config"]["editor"], "sha256": b["sha256"]},
            "paired": {
                "tests_by_kind": PAIRED_TEST_BY_KIND,
                "level": args.level,
                "edits": len(a["per_edit"]),
                "few_edits_below": FEW_EDITS,
            },
            "differences": [{**asdict(d), "verdict": _verdict(d, None)} for d in differences],
            "basis": basis.note,
            "private_differences": None
            if private is None
            else [{**asdict(d), "verdict": _verdict(d, None)} for d in private],
        }
        print(printable_json(report, indent=2))
        return 0
    spec = benchmark_spec()
    c = a["config"]
    # Piped or logged output gets whole lines rather than a table folded to 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 160)
    tables = (
        [("", differences)]
        if private is None
        else [(" | private split", private), (" | public", differences)]
    )
    for where, found in tables:
        table = Table(  # names from the results files: text, never rich markup or terminal escapes
            title=plain_cell(
                f"B - A | {c['model']} | {dataset_label(a['dataset'])} | {c['protocol']} | {c['mode']}{where}"
            ),
            caption=plain_cell(
                f"A = {c['editor']} ({args.run_a}), B = {b['config']['editor']} ({args.run_b})"
            ),
            title_justify="left",
            caption_justify="left",
        )
        table.add_column("metric")
        for column in ("A", "B", "B - A", f"{level} interval", "p"):
            table.add_column(column, justify="right")
        table.add_column("verdict")
        for d in found:
            interval = format_interval((d.low, d.high), signed=True)
            difference = format_number(d.difference, signed=True)
            p = "–" if d.p_value is None else f"{d.p_value:.3g}"
            table.add_row(
                spec.path_label(d.metric),
                _fmt(d.a),
                _fmt(d.b),
                difference,
                interval,
                p,
                _verdict(d, spec.metric_at(d.metric)),
            )
        console.print(table)
    console.print(plain_cell(f"Verdicts: {basis.note.replace('ranked on', 'on')}."))
    tests = "; ".join(
        f"{test} for {listing(labels)}"
        for test, labels in methods_for(spec.metric_paths(), PAIRED_TEST_BY_KIND)
    )
    console.print(
        f"Paired over the {len(a['per_edit'])} edits: {tests}; each interval is its test's. "
        f"{verdict_meaning(args.level)}. "
        f"{FEW_EDITS_MARK} few edits: fewer than {FEW_EDITS:g} effective edits, where the "
        "measured false-positive rate and coverage miss their levels (docs/metrics.md)."
    )
    return 0


def _verdict(difference: MetricDifference, declared: MetricSpec | None) -> str:
    """In words: which run the paired test finds better, or that these edits cannot tell them apart."""
    from knowgic.formatting import verdict_text

    return verdict_text(difference.told_apart, difference.better, difference.few_edits, difference.reason)


def run_probe_command(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from rich.console import Console
    from rich.table import Table

    from knowgic.evaluation.probe import parse_fact, read_facts_file, run_probe

    facts = [parse_fact(text, f"--fact {i + 1}") for i, text in enumerate(args.fact)]
    if args.facts_file is not None:
        facts += read_facts_file(args.facts_file)
    request, rows, info, restore = run_probe(
        model=args.model,
        editor=args.editor,
        subject=args.subject,
        edit_id=args.edit_id,
        user_facts=facts,
        hparams_path=args.hparams,
        dataset_version=args.dataset_version,
        dtype=args.dtype,
        device=args.device,
        progress=sys.stderr.isatty(),
    )
    if args.json:
        rows_json = [asdict(r) for r in rows]
        print(
            json.dumps({"edit": asdict(request), "rows": rows_json, "info": info, "restore": asdict(restore)})
        )
        return 0
    table = Table(
        title=f"{args.editor} on {args.model}: {request.prompt.format(request.subject)} "
        f"{request.target_true} -> {request.target_new}"
    )
    for column in ("", "query", "answer", "p before", "p after", "known"):
        table.add_column(column, overflow="fold")
    for r in rows:
        known = f"{'yes' if r.known_pre else 'no'} -> {'yes' if r.known_post else 'no'}"
        table.add_row(r.role, repr(r.text), r.answer, f"{r.p_pre:.4f}", f"{r.p_post:.4f}", known)
    # Piped or logged output gets whole lines rather than a table folded to 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    console.print(restore.line())
    return 0


def run_timing(args: argparse.Namespace) -> int:
    from knowgic.evaluation.timing import run_timing

    try:
        run_timing(
            model=args.model,
            editor=args.editor,
            naive_rows_measured=args.naive_rows,
            dataset_version=args.dataset_version,
            limit=args.limit,
            repeats=args.repeats,
        )
    except MemoryError as exc:
        raise KnowgicError(f"out of memory during the timing run: {exc}") from None
    return 0
