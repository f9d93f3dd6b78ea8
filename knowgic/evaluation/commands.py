"""``knowgic evaluate`` and ``knowgic bench``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from knowgic.errors import KnowgicError
from knowgic.evaluation import BASELINES

if TYPE_CHECKING:
    from knowgic.evaluation.spec import EvaluationSpec


def _spec_default(attribute: str) -> str:
    """A default from the benchmark spec for help texts; a broken spec is reported when a command runs."""
    from knowgic.evaluation.spec import load_evaluation_spec

    try:
        return str(getattr(load_evaluation_spec(), attribute))
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


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
        type=_positive_int,
        metavar="N",
        help=f"texts of that corpus to use; replaces the hparams' mom2_n_samples ({scope})",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="edit a model with an editor and score IFR, Preservation, Efficacy, Specificity",
        description="Evaluate an editing method on KnowGIC. Writes results.json and plots to --out.",
    )
    p.add_argument(
        "--model",
        required=True,
        help="offline name (knowgic-tiny, gemma3-270m, smollm2-135m), hub id or path",
    )
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
    p.add_argument(
        "--protocol-param",
        action="append",
        default=[],
        type=_protocol_param,
        metavar="KEY=VALUE",
        help="override a protocol parameter from spec/benchmark.yaml, e.g. k=10 (repeatable)",
    )
    p.add_argument(
        "--mode", help=f"independent or sequential (default: {_spec_default('default_mode')}, the spec's)"
    )
    p.add_argument("--dataset-version", help="KnowGIC version (default: the latest)")
    p.add_argument("--limit", type=_positive_int, help="evaluate only the first N distinct edits")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    p.add_argument(
        "--device", default="auto", help="auto (default: cuda when available), cpu, cuda, cuda:1, ..."
    )
    p.add_argument("--out", type=Path, help="output folder for results.json and plots")
    p.add_argument(
        "--no-cache", action="store_true", help="recompute pre-edit scores instead of reading the cache"
    )
    p.add_argument("--json", action="store_true", help="print the results document instead of the table")
    _add_stats_arguments(p, "an error for editors without key statistics")
    p.set_defaults(func=run_evaluate)

    s = subparsers.add_parser(
        "sweep",
        help="run several editors on one model and print a Markdown table of their metrics",
        description="Evaluate several editors on one model (loaded once); writes DIR/<editor>/ and DIR/summary.md.",
    )
    s.add_argument("--model", default="knowgic-tiny")
    s.add_argument(
        "--editors",
        default=",".join(BASELINES),
        help=f"comma-separated editors (default: {','.join(BASELINES)})",
    )
    s.add_argument("--protocol", help="scoring protocol (default: the spec's default_protocol)")
    s.add_argument("--mode", help="independent or sequential (default: the spec's default_mode)")
    s.add_argument("--dataset-version")
    s.add_argument("--limit", type=_positive_int)
    s.add_argument("--dtype", default="float32")
    s.add_argument("--device", default="auto")
    s.add_argument("--out", type=Path, required=True)
    _add_stats_arguments(s, "applied to the editors with key statistics, the others run as they are")
    s.set_defaults(func=run_sweep_command)

    m = subparsers.add_parser(
        "summarize",
        help="print the Markdown table of runs written separately",
        description="One Markdown table (as `knowgic sweep` writes) from existing runs: results.json files, "
        "run folders or sweep folders. The runs must share model, dataset version, protocol, mode, limit, dtype, "
        "device and seed.",
    )
    m.add_argument("results", nargs="+", type=Path, metavar="RESULTS")
    m.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    m.set_defaults(func=run_summarize)

    q = subparsers.add_parser(
        "probe",
        help="apply one benchmark edit and show how chosen facts move (logprob, before and after)",
        description="Apply one edit of the benchmark, score the rewrite prompt, the question form, the "
        "subject's other facts and any facts you name before and after it, then restore the model.",
    )
    q.add_argument("--model", default="knowgic-tiny")
    q.add_argument("--editor", required=True)
    q.add_argument("--hparams", type=Path)
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
    q.add_argument("--dataset-version")
    q.add_argument("--dtype", default="float32")
    q.add_argument("--device", default="auto")
    q.add_argument("--json", action="store_true", help="print JSON instead of the table")
    q.set_defaults(func=run_probe_command)

    b = subparsers.add_parser(
        "bench",
        help="measure evaluation speed and memory against the naive per-row protocol",
        description="Speed and memory benchmark; prints one JSON line of measured ratios.",
    )
    b.add_argument("--model", default="knowgic-tiny")
    b.add_argument("--editor", default="rome")
    b.add_argument(
        "--naive-rows",
        type=_positive_int,
        help="time the naive protocol on a seeded sample of this many rows and extrapolate "
        "(default: 100; the row count or more: every row, no extrapolation)",
    )
    b.add_argument("--limit", type=_positive_int, help="benchmark only the first N distinct edits")
    b.add_argument(
        "--repeats", type=_positive_int, default=3, help="best of this many scorer/forward timings"
    )
    b.add_argument("--dataset-version")
    b.set_defaults(func=run_bench)


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
    return 0


def _log_line(line: str) -> None:
    """One progress line on stderr, flushed (read from logs while the run goes on)."""
    print(line, file=sys.stderr, flush=True)


def _fmt(value: float | None) -> str:
    return "null" if value is None else f"{value:.4f}"


def print_results(
    document: Mapping[str, Any],
    results_path: Path | None = None,
    plots: list[Path] | None = None,
    spec: EvaluationSpec | None = None,
) -> None:
    """Print the results table; labels and directions come from ``spec`` (default: the benchmark spec)."""
    from rich.console import Console
    from rich.table import Table

    from knowgic.evaluation.spec import load_evaluation_spec

    metrics_spec = (spec or load_evaluation_spec()).metrics
    console = Console(soft_wrap=True)
    c, d, m, n = document["config"], document["dataset"], document["metrics"], document["counts"]
    table = Table(
        title=(
            f"KnowGIC {d['version']} | {c['model']} | editor {c['editor']} | {c['protocol']} | {c['mode']}"
        ),
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("n", justify="right")
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
            table.add_row(label, _fmt(entry["value"]), str(entry["n"]), direction, entry.get("reason", ""))
            continue
        for part, sub in entry.items():  # ifr_by_length: one row per chain length
            table.add_row(
                f"  {label}, n = {part}", _fmt(sub["value"]), str(sub["n"]), direction, sub.get("reason", "")
            )
    console.print(table)
    console.print(
        f"chains {n['chains']} (active {n['active_chains']}, still recoverable {n['recoverable_chains']}), "
        f"edits {n['edits']}, broader-context facts {n['preservation_facts']} "
        f"(known {n.get('preservation_facts_known', '?')}), neighbourhood facts {n['specificity_facts']} "
        f"(known {n.get('specificity_facts_known', '?')})"
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
    from knowgic.evaluation.sweep import run_sweep

    editors = [e.strip() for e in args.editors.split(",") if e.strip()]
    _, table = run_sweep(
        model=args.model,
        editors=editors,
        out_dir=args.out,
        protocol=args.protocol,
        mode=args.mode,
        dataset_version=args.dataset_version,
        limit=args.limit,
        dtype=args.dtype,
        device=args.device,
        progress=sys.stderr.isatty(),
        stats_corpus=args.stats_corpus,
        stats_samples=args.stats_samples,
        report=_log_line,
        log=None if sys.stderr.isatty() else _log_line,
    )
    print(table)
    return 0


def run_summarize(args: argparse.Namespace) -> int:
    from knowgic.evaluation.results import write_atomic
    from knowgic.evaluation.sweep import summarize

    table = summarize(args.results)
    if args.out is not None:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(args.out, table.encode("utf-8"))
        except OSError as exc:
            raise KnowgicError(f"cannot write {args.out}: {exc}") from None
    print(table)
    return 0


def run_probe_command(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from rich.console import Console
    from rich.table import Table

    from knowgic.evaluation.probe import parse_fact, read_facts_file, run_probe

    facts = [parse_fact(text, f"--fact {i + 1}") for i, text in enumerate(args.fact)]
    if args.facts_file is not None:
        facts += read_facts_file(args.facts_file)
    request, rows, info = run_probe(
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
        print(json.dumps({"edit": asdict(request), "rows": [asdict(r) for r in rows], "info": info}))
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
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from knowgic.evaluation.bench import run_benchmark

    try:
        run_benchmark(
            model=args.model,
            editor=args.editor,
            naive_rows_measured=args.naive_rows,
            dataset_version=args.dataset_version,
            limit=args.limit,
            repeats=args.repeats,
        )
    except MemoryError as exc:
        raise KnowgicError(f"out of memory during the benchmark: {exc}") from None
    return 0
