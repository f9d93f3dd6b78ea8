"""The stages' command line, run by the worker's containers (``python -m knowgic.runner.stages``)::

    python -m knowgic.runner.stages prepare --job JOB.json --out JOB_DIR [--stats STATS_DIR]
                                  [--private-dataset DIR]
    python -m knowgic.runner.stages edit  --job JOB.json --requests REQUESTS.json --submission DIR --out DELTAS_DIR [--quota 2G]
    python -m knowgic.runner.stages score --job JOB.json --deltas DELTAS_DIR --out RESULTS_DIR [--timeout 3600]
                                  [--private-dataset DIR]

Both the edit and the score stage may run at once over one deltas folder: the edit stage waits while the
folder is over its quota, the score stage consumes deltas in plan order and deletes each once scored. Every
stage exits 2 with one ``error:`` line on bad input or a failed job.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from knowgic.argtypes import parse_size, positive_seconds
from knowgic.errors import KnowgicError
from knowgic.runner.stages.contract import EditRequests, JobSpec, one_line
from knowgic.runner.stages.edit import DEFAULT_QUOTA_BYTES, mark_failed, run_edit_stage
from knowgic.runner.stages.prepare import run_prepare_stage
from knowgic.runner.stages.score import DEFAULT_TIMEOUT_SECONDS, run_score_stage


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: one line, exit 2
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m knowgic.runner.stages",
        description="The runner's stages: 'prepare' (trusted) writes the edit requests and the key "
        "statistics the edit stage may read; 'edit' runs a submission's editor and writes what each edit "
        "changed; 'score' (trusted, no submission code) applies those deltas to the pristine model and "
        "writes results.json.",
    )
    sub = parser.add_subparsers(dest="stage", metavar="STAGE", parser_class=_Parser)
    sub.required = True
    prepare = sub.add_parser(
        "prepare", help="write requests.json and the key statistics for the edit stage (trusted)"
    )
    prepare.add_argument("--job", required=True, help="JOB.json (knowgic.runner.stages.contract.JobSpec)")
    prepare.add_argument("--out", required=True, help="folder that receives requests.json")
    prepare.add_argument("--stats", default=None, help="folder of key statistics (computed when missing)")
    prepare.add_argument(
        "--private-dataset",
        default=None,
        metavar="DIR",
        help="a private split whose edit requests follow the public ones, as a group of their own",
    )
    edit = sub.add_parser("edit", help="run the submission's editor; write deltas (untrusted stage)")
    edit.add_argument("--job", required=True, help="JOB.json (knowgic.runner.stages.contract.JobSpec)")
    edit.add_argument("--requests", required=True, help="requests.json of the prepare stage")
    edit.add_argument("--submission", default=None, help="the submission's folder (put first on sys.path)")
    edit.add_argument("--out", required=True, help="deltas folder (created when missing)")
    edit.add_argument(
        "--quota",
        type=parse_size,
        default=DEFAULT_QUOTA_BYTES,
        help="wait while the deltas folder holds more than this (bytes, or 512M, 2G; default 2G)",
    )
    score = sub.add_parser(
        "score", help="score the deltas on the pristine model; write results.json (trusted)"
    )
    score.add_argument("--job", required=True, help="JOB.json (knowgic.runner.stages.contract.JobSpec)")
    score.add_argument("--deltas", required=True, help="the edit stage's deltas folder")
    score.add_argument("--out", required=True, help="output folder for results.json and plots")
    score.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_SECONDS,
        help="seconds to wait for each delta of the edit stage (default 3600)",
    )
    score.add_argument(
        "--private-dataset",
        default=None,
        metavar="DIR",
        help="a private split (dataset folder, same schemas): its edits, the second group of the edit "
        "requests, scored on its chains",
    )
    score.add_argument("--no-plots", action="store_true", help="write results.json only")
    score.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    return parser


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a stopped container's stage still writes its ``failed`` marker


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _run_stage(args)
    previous = signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    try:
        return _run_stage(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_stage(args: argparse.Namespace) -> int:
    interactive = sys.stderr.isatty()
    log = None if interactive else _stderr_log
    try:
        if args.stage == "prepare":
            spec = JobSpec.read(args.job)
            requests = run_prepare_stage(
                spec,
                args.out,
                args.stats,
                progress=interactive,
                log=log,
                private_dataset=args.private_dataset,
            )
            print(f"{len(requests.edits)} edit requests")
        elif args.stage == "edit":
            try:
                spec = JobSpec.read(args.job)
                requests = EditRequests.read(args.requests)
                if args.submission is not None and not Path(args.submission).is_dir():
                    raise KnowgicError(f"submission folder {args.submission} does not exist")
            except KnowgicError as exc:  # the score stage, waiting on the folder, must learn it too
                mark_failed(Path(args.out), str(exc))
                raise
            summary = run_edit_stage(
                spec, requests, args.submission, args.out, args.quota, progress=interactive, log=log
            )
            print(json.dumps(asdict(summary)))
        else:
            spec = JobSpec.read(args.job)
            path = run_score_stage(
                spec,
                args.deltas,
                args.out,
                timeout_seconds=args.timeout,
                progress=interactive,
                log=log,
                plots=not args.no_plots,
                overwrite=args.overwrite,
                private_dataset=args.private_dataset,
            )
            print(path)
    except KnowgicError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
