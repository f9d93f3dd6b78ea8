"""What the edit/score split costs against a plain ``knowgic evaluate`` of the same editor, measured in one run.

Every variant runs as fresh processes, as the runner runs them (minus containers), so each pays its own
model load:

- ``plain``: ``knowgic evaluate --no-cache`` (the score stage trusts no cache, so neither does the baseline);
- ``split, edit then score``: the edit stage to completion, then the score stage (the deltas pile up);
- ``split, streaming``: both stages at once over one folder, the edit stage held to ``--quota``.

It checks that the three runs agree on every metric (1e-9) and prints times, ratios against ``plain``, the
bytes of deltas written, and the peak bytes the deltas folder held (sampled every 10 ms by this process)::

    python -m knowgic.runner.stages.timing_split --editor rome --model knowgic-tiny [--limit N] [--mode sequential] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.argtypes import parse_size
from knowgic.editors.hparams import load_hparams
from knowgic.errors import KnowgicError
from knowgic.models.loading import load_model
from knowgic.results import read_results
from knowgic.runner.stages.contract import REQUESTS_FILE, JobSpec
from knowgic.runner.stages.deltas import folder_bytes
from knowgic.spec import benchmark_spec


@dataclass
class Measured:
    seconds: float
    results: Path
    peak_bytes: int = 0
    written_bytes: int = 0
    deltas: int = 0
    quota_waits: int = 0


class _PeakSampler:
    """Polls a folder's size in a thread and keeps the largest value seen."""

    def __init__(self, folder: Path, interval: float = 0.01) -> None:
        self.folder, self.interval, self.peak = folder, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.folder.is_dir():
                self.peak = max(self.peak, folder_bytes(self.folder))
            time.sleep(self.interval)

    def __enter__(self) -> _PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _check(process: subprocess.CompletedProcess[str] | subprocess.Popen[str], what: str, err: str) -> None:
    if process.returncode != 0:
        last = err.strip().splitlines()[-1:] or ["(no output)"]
        raise KnowgicError(f"{what} failed (exit {process.returncode}): {last[0]}")


def run_plain(args: argparse.Namespace, hparams_file: Path | None, out: Path) -> Measured:
    command = [
        sys.executable,
        "-m",
        "knowgic.cli",
        "evaluate",
        "--model",
        args.model,
        "--editor",
        args.editor,
    ]
    command += ["--mode", args.mode, "--no-cache", "--out", str(out)]
    if args.limit is not None:
        command += ["--limit", str(args.limit)]
    if hparams_file is not None:
        command += ["--hparams", str(hparams_file)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    _check(done, "knowgic evaluate", done.stderr)
    return Measured(seconds, out / "results.json")


def _stage(*args: str) -> list[str]:
    return [sys.executable, "-m", "knowgic.runner.stages", *args]


def run_split(job: Path, work: Path, quota: int, streaming: bool) -> Measured:
    """The edit and score stages of ``job``, whose folder holds the prepare stage's requests.json."""
    deltas, out = work / "deltas", work / "results"
    requests = job.parent / REQUESTS_FILE
    edit_cmd = _stage(
        "edit", "--job", str(job), "--requests", str(requests), "--out", str(deltas), "--quota", str(quota)
    )
    score_cmd = _stage("score", "--job", str(job), "--deltas", str(deltas), "--out", str(out))
    deltas.mkdir(parents=True)  # as the runner does: the score stage may start before the edit stage writes
    with _PeakSampler(deltas) as sampler:
        start = time.perf_counter()
        edit = subprocess.Popen(edit_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if streaming:
            score = subprocess.Popen(score_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            score_out, score_err = score.communicate()
            if score.returncode != 0:  # nobody will consume deltas: the edit stage would wait for ever
                edit.terminate()
            edit_out, edit_err = edit.communicate()
            _check(score, "score stage", score_err)
        else:
            edit_out, edit_err = edit.communicate()
            _check(edit, "edit stage", edit_err)
            score = subprocess.Popen(score_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            score_out, score_err = score.communicate()
        seconds = time.perf_counter() - start
    _check(edit, "edit stage", edit_err)
    _check(score, "score stage", score_err)
    summary = json.loads(edit_out)
    return Measured(
        seconds,
        Path(score_out.strip()),
        peak_bytes=sampler.peak,
        written_bytes=summary["delta_bytes"],
        deltas=summary["deltas"],
        quota_waits=summary["quota_waits"],
    )


def _metrics_agree(a: dict[str, Any], b: dict[str, Any], tolerance: float = 1e-9) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_metrics_agree(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tolerance
    return a == b


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m knowgic.runner.stages.timing_split",
        description="Time the runner's edit/score split against a plain knowgic evaluate of the same editor.",
    )
    parser.add_argument("--model", default="knowgic-tiny", help="model (default knowgic-tiny)")
    parser.add_argument("--editor", default="rome", help="built-in editor or module:Class (default rome)")
    parser.add_argument("--hparams", default=None, help="hparams YAML (default: the shipped file)")
    parser.add_argument("--mode", help="independent or sequential (default: the benchmark spec's)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N edits (default: all)")
    parser.add_argument(
        "--quota",
        type=parse_size,
        default=1,
        help="the streaming run's deltas quota (default 1 byte: one delta)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the three variants this many times, interleaved, and keep each one's fastest (default 1)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    try:
        return _measure(args)
    except KnowgicError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def _measure(args: argparse.Namespace) -> int:
    args.mode = args.mode or benchmark_spec().default_mode
    loaded = load_model(args.model, progress=False)
    hparams, source = load_hparams(
        args.editor, loaded.model_id, loaded.family, path=args.hparams, required=False
    )
    model_bytes = sum(t.numel() * t.element_size() for t in loaded.model.state_dict().values())
    del loaded
    spec = JobSpec(model=args.model, editor=args.editor, hparams=hparams, mode=args.mode, limit=args.limit)
    with tempfile.TemporaryDirectory(prefix="knowgic-timing-split-") as tmp:
        work = Path(tmp)
        job = work / "job.json"
        job.write_text(spec.to_json(), encoding="utf-8")
        prepare = subprocess.run(
            _stage("prepare", "--job", str(job), "--out", str(work)), capture_output=True, text=True
        )
        _check(prepare, "prepare stage", prepare.stderr)
        runs: list[tuple[Measured, Measured, Measured]] = []
        documents = []
        for repeat in range(args.repeats):
            # Interleaved, so that a change of the machine's load during the run touches every variant.
            round_dir = work / f"round-{repeat}"
            runs.append(
                (
                    run_plain(args, Path(source) if source else None, round_dir / "plain"),
                    run_split(job, round_dir / "after", quota=1 << 62, streaming=False),
                    run_split(job, round_dir / "streaming", quota=args.quota, streaming=True),
                )
            )
            documents += [read_results(m.results) for m in runs[-1]]
        plain, after, streaming = (min((r[i] for r in runs), key=lambda m: m.seconds) for i in range(3))
    agree = all(_metrics_agree(documents[0]["metrics"], d["metrics"]) for d in documents[1:])
    figures = {
        "model": args.model,
        "editor": args.editor,
        "mode": args.mode,
        "edits": len(documents[0]["per_edit"]),
        "cpu_count": os.cpu_count(),
        "repeats": args.repeats,
        "load_average_1min": os.getloadavg()[0],
        "model_bytes": model_bytes,
        "plain_seconds": plain.seconds,
        "split_then_seconds": after.seconds,
        "split_streaming_seconds": streaming.seconds,
        "split_then_ratio": after.seconds / plain.seconds,
        "split_streaming_ratio": streaming.seconds / plain.seconds,
        "deltas": after.deltas,
        "delta_bytes_written": after.written_bytes,
        "peak_bytes_split_then": after.peak_bytes,
        "peak_bytes_streaming": streaming.peak_bytes,
        "streaming_quota_bytes": args.quota,
        "streaming_quota_waits": streaming.quota_waits,
        "metrics_agree": agree,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"{args.editor} on {args.model}, {figures['edits']} edits, {args.mode} mode "
            f"({figures['cpu_count']} CPUs, load average {figures['load_average_1min']:.1f} at the end; model "
            f"{_megabytes(model_bytes)}); fastest of {args.repeats} interleaved run(s) each, fresh processes"
        )
        print(f"  plain knowgic evaluate --no-cache : {plain.seconds:7.1f} s")
        print(
            f"  split, edit then score            : {after.seconds:7.1f} s  ({figures['split_then_ratio']:.2f}x)"
        )
        print(
            f"  split, streaming (both at once)   : {streaming.seconds:7.1f} s  "
            f"({figures['split_streaming_ratio']:.2f}x)"
        )
        print(f"  deltas: {after.deltas} written, {_megabytes(after.written_bytes)} in all")
        print(
            f"  peak deltas on disk: {_megabytes(after.peak_bytes)} (edit then score), "
            f"{_megabytes(streaming.peak_bytes)} (streaming, quota {args.quota} B, "
            f"edit stage waited {streaming.quota_waits} times)"
        )
        print(f"  metrics of all {len(documents)} runs equal to 1e-9: {'yes' if agree else 'NO'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
