"""``knowgic sweep --executor slurm``: each editor's run one Slurm job, the table as a local sweep makes it.

    sweep_requests (checked here, nothing loaded) --> finished runs in OUT/<editor>/ are reused when they
      are what the jobs would make (hparams from the model's name, device from --slurm-gpus)
      --> jobs recorded in OUT/.slurm/jobs.json: live ones are waited for, ended ones without a run are
          resubmitted when Slurm interrupted them (CANCELLED, PREEMPTED, NODE_FAIL...) and reported when
          they failed (the run raised, TIMEOUT, OUT_OF_MEMORY) unless --resubmit-failed
      --> to submit: [key-statistics job] --afterok--> one held job array, each task renamed
          knowgic-sweep:OUT:EDITOR, then released
      --> wait (a bar of the jobs' states) or return at once (--no-wait; the next call collects)
      --> every run finished: summary.md from the runs, in the editors' order (sweep.sweep_table)

Each job runs :func:`run_editor_job`: the same ``evaluate`` of the same request a local sweep runs, into
the same folder, so the runs, and the table made from them, are the same. The key statistics (C = E[k kᵀ])
of the editors that read them are computed once, by one job before the array, into ``OUT/.slurm/stats``,
which the editors' jobs read through ``$KNOWGIC_STATS_DIR``; a job that finds none computes its own into the
user cache, as a local run does. Everything is kept in the sweep folder: submitit's scripts, pickles and
logs in ``OUT/.slurm/logs``, the job record in ``OUT/.slurm/jobs.json``.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from knowgic.editors.registry import resolve_editor
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate, make_editor
from knowgic.evaluation.outputs import describe_run, write_atomic
from knowgic.evaluation.preflight import check_request
from knowgic.evaluation.sweep import (
    check_same_run,
    finished_run,
    model_settings,
    sweep_requests,
    sweep_table,
)
from knowgic.models.available import check_model, model_family
from knowgic.paths import PROVIDED_STATS_VARIABLE
from knowgic.slurm import (
    LIVE,
    SlurmProfile,
    job_name,
    job_states,
    log_tail,
    release,
    rename_and_release,
    require_slurm,
    slurm_executor,
)

SLURM_FOLDER = ".slurm"
"""The sweep folder's sub-folder of Slurm state: ``jobs.json``, submitit's ``logs/``, the key ``stats/``."""
JOBS_FILE = "jobs.json"
POLL_SECONDS = 5.0
INTERRUPTED = ("CANCELLED", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "UNKNOWN", "COMPLETED")
"""Ended states of a job without a run that the next call resubmits by itself: Slurm stopped it (or it
left no trace). A run that raised, ran out of time or of memory would fail the same way again: those are
resubmitted only with ``--resubmit-failed``."""


def run_editor_job(request: EvaluationRequest, stats_dir: str) -> str:
    """One editor's run, on a Slurm node: ``evaluate`` as a local sweep runs it, reading the key
    statistics the sweep's statistics job computed; returns the results file."""
    if Path(stats_dir).is_dir():
        os.environ[PROVIDED_STATS_VARIABLE] = stats_dir
    log = lambda line: print(line, flush=True)  # noqa: E731 - the job's log, one line per edit
    evaluate(request, progress=False, log=log)
    assert request.out_dir is not None
    return str(request.out_dir / "results.json")


def compute_stats_job(requests: Sequence[EvaluationRequest], stats_dir: str) -> list[str]:
    """The key statistics every request's editor reads, computed once into ``stats_dir`` (a Slurm job that
    runs before the editors' array); the projections computed."""
    from knowgic.editors.key_statistics import compute_key_statistics, key_statistics
    from knowgic.models.loading import load_model

    first = requests[0]
    loaded = load_model(first.model, dtype=first.dtype, device=first.device, progress=False)
    done: list[str] = []
    for request in requests:
        _, hparams, _ = make_editor(request, resolve_editor(request.editor), loaded)
        needed = key_statistics(hparams)
        if needed is not None:
            modules = compute_key_statistics(loaded.model, loaded.tokenizer, needed, Path(stats_dir))
            print(f"{request.editor}: key statistics of {', '.join(modules)} in {stats_dir}", flush=True)
            done += modules
    return done


def job_device(device: str, gpus: int) -> str:
    """The device a run asked on ``device`` records on a node that gives its job ``gpus`` GPUs (a job sees
    its GPUs from index 0): ``auto`` is the first GPU where the job has one, else the CPU."""
    if device == "auto":
        return "cuda:0" if gpus else "cpu"
    import torch

    resolved = torch.device(device)
    return str(resolved) if resolved.type == "cpu" or resolved.index is not None else f"{resolved.type}:0"


def _stats_key(request: EvaluationRequest) -> str:
    """What decides the key statistics a request's editor reads: model, dtype, editor, corpus, samples."""
    parts = (request.model, request.dtype, request.editor, request.stats_corpus, request.stats_samples)
    return json.dumps(parts)


@dataclass(frozen=True)
class Ended:
    """A job that ended without its run: the editor, job id, Slurm state, why, and its log's tail."""

    editor: str
    job: str
    state: str
    why: str
    tail: str

    @property
    def interrupted(self) -> bool:
        return self.why == "" and self.state in INTERRUPTED

    def describe(self) -> str:
        what = self.why or ("stopped by Slurm" if self.interrupted else "failed")
        return f"{self.editor}: job {self.job} {self.state}, {what}\n{self.tail}"


class SlurmSweep:
    """The sweep folder's Slurm state: the jobs of its editors (``jobs.json``) and submitit's folder."""

    def __init__(self, out_dir: Path) -> None:
        self.root = out_dir / SLURM_FOLDER
        self.logs = self.root / "logs"
        self.stats = self.root / "stats"
        self.record_path = self.root / JOBS_FILE
        self.jobs: dict[str, str] = {}  # editor -> Slurm job id (ARRAY_INDEX)
        self.stats_job: str | None = None
        self.stats_for: list[str] = []  # the _stats_key of each request the statistics job computed for
        if self.record_path.is_file():
            try:
                data = json.loads(self.record_path.read_text(encoding="utf-8"))
                self.jobs = {str(k): str(v) for k, v in data["jobs"].items()}
                self.stats_job = data.get("stats_job")
                self.stats_for = [str(k) for k in data.get("stats_for", [])]
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                raise KnowgicError(
                    f"{self.record_path} cannot be read ({exc}); remove it to start anew"
                ) from None

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        record = {"jobs": self.jobs, "stats_job": self.stats_job, "stats_for": self.stats_for}
        write_atomic(self.record_path, json.dumps(record, indent=1, sort_keys=True).encode("utf-8"))

    def _paths(self, job: str) -> Any:
        from submitit.core.utils import JobPaths

        return JobPaths(self.logs, job_id=job, task_id=0)

    def stats_computed(self, requests: Sequence[EvaluationRequest]) -> bool:
        """Whether the recorded statistics job finished (its result, kept in the sweep folder, says so)
        having computed the key statistics of every one of ``requests``."""
        if self.stats_job is None or not {_stats_key(r) for r in requests} <= set(self.stats_for):
            return False
        try:
            with self._paths(self.stats_job).result_pickle.open("rb") as fh:
                outcome, _ = pickle.load(fh)
        except Exception:  # none, or half-written: not known to have finished
            return False
        return bool(outcome == "success")

    def ended(self, editor: str, job: str, state: str) -> Ended:
        """What became of ``editor``'s job that ended without its run: its outcome and the log's tail."""
        paths = self._paths(job)
        why = ""
        if paths.result_pickle.is_file():
            try:
                with paths.result_pickle.open("rb") as fh:
                    outcome, value = pickle.load(fh)
            except Exception as exc:  # a half-written pickle: the job died writing it
                outcome, value = "error", f"unreadable result ({exc})"
            if outcome == "error":
                last = [line for line in str(value).splitlines() if line.strip()]
                why = f"the run raised: {last[-1] if last else value}"
        if not why and state not in INTERRUPTED:
            why = {
                "TIMEOUT": "out of time (--slurm-time)",
                "OUT_OF_MEMORY": "out of memory (--slurm-mem)",
            }.get(state, "failed")
        if not why and self.stats_job is not None and not self.stats_computed([]):
            stats_state = job_states([self.stats_job])[self.stats_job]
            if stats_state not in (*LIVE, "COMPLETED"):
                why = f"its key-statistics job {self.stats_job} ended {stats_state}"
                paths = self._paths(self.stats_job)
        return Ended(editor, job, state, why, log_tail([paths.stderr, paths.stdout]))


def _submit(
    sweep: SlurmSweep,
    requests: Sequence[EvaluationRequest],
    with_stats: Sequence[EvaluationRequest],
    profile: SlurmProfile,
    name: str,
    report: Callable[[str], None],
) -> None:
    """The statistics job (when an editor reads key statistics), then one held array, named, released."""
    sweep.logs.mkdir(parents=True, exist_ok=True)
    extra: dict[str, Any] = {}
    if with_stats and sweep.stats_computed(with_stats):
        report(
            f"key statistics of {', '.join(r.editor for r in with_stats)}: computed by job {sweep.stats_job}"
        )
    elif with_stats:
        executor = slurm_executor(sweep.logs, profile, job_name("knowgic-sweep", name, "key-statistics"))
        stats = executor.submit(compute_stats_job, list(with_stats), str(sweep.stats))
        sweep.stats_job = str(stats.job_id)
        sweep.stats_for = [_stats_key(r) for r in with_stats]
        extra = {"dependency": f"afterok:{sweep.stats_job}", "kill-on-invalid-dep": "yes"}
        report(
            f"key statistics of {', '.join(r.editor for r in with_stats)}: job {sweep.stats_job} "
            f"({profile.describe()}); the editors' jobs start after it"
        )
    # One array; two where some editors wait for the statistics and others need not.
    later = {r.editor for r in with_stats}
    for group, dependency in (
        ([r for r in requests if r.editor not in later], {}),
        ([r for r in requests if r.editor in later], extra),
    ):
        if group:
            _submit_array(sweep, group, profile, name, dependency, report)


def _submit_array(
    sweep: SlurmSweep,
    requests: Sequence[EvaluationRequest],
    profile: SlurmProfile,
    name: str,
    extra: Mapping[str, Any],
    report: Callable[[str], None],
) -> None:
    """One held array of the editors' jobs, recorded, each task renamed after its editor, released."""
    executor = slurm_executor(sweep.logs, profile, job_name("knowgic-sweep", name), hold=True, **extra)
    with executor.batch():
        jobs = [executor.submit(run_editor_job, request, str(sweep.stats)) for request in requests]
    for request, job in zip(requests, jobs, strict=True):
        sweep.jobs[request.editor] = str(job.job_id)
    sweep.save()  # before the release: a call stopped here finds its jobs, and releases them
    names = {
        str(j.job_id): job_name("knowgic-sweep", name, r.editor) for r, j in zip(requests, jobs, strict=True)
    }
    rename_and_release(names, str(jobs[0].job_id).partition("_")[0])
    listed = ", ".join(f"{r.editor} {j.job_id}" for r, j in zip(requests, jobs, strict=True))
    report(f"submitted {len(jobs)} job(s) ({profile.describe()}): {listed}")


def run_slurm_sweep(
    model: str,
    editors: Sequence[str],
    out_dir: Path,
    *,
    profile: SlurmProfile,
    wait: bool = True,
    resubmit_failed: bool = False,
    progress: bool = True,
    report: Callable[[str], None] = print,
    poll_seconds: float = POLL_SECONDS,
    **settings: Any,
) -> tuple[list[dict[str, Any]], str] | None:
    """The sweep of ``editors`` on ``model`` as Slurm jobs; ``settings``: :func:`sweep_requests`'s.

    Returns the runs and summary.md's text once every run finished; None with ``wait`` False while some
    jobs are still queued or running (the next call collects them). A job that failed is reported (its
    Slurm state and log tail) in the error this raises, and resubmitted only with ``resubmit_failed``."""
    started = time.perf_counter()
    require_slurm()
    requests = sweep_requests(model, editors, out_dir, **settings)
    overwrite = bool(settings.get("overwrite"))
    finished: dict[str, dict[str, Any]] = {}
    for request in requests:  # every editor and every folder is checked before anything is submitted
        assert request.out_dir is not None
        if not overwrite and describe_run(request.out_dir) is not None:
            finished[request.editor] = finished_run(request)
        else:
            check_request(request, model=False, here=False)
    source = check_model(model)
    if str(settings.get("device", "auto")).startswith("cuda") and profile.gpus == 0:
        raise KnowgicError(f"--device {settings['device']}: the jobs ask for no GPU; add --slurm-gpus 1")
    family = model_family(source)
    for request in requests:  # what a local sweep checks once the model is loaded, from the model's name
        if request.editor in finished:
            device = job_device(request.device, profile.gpus)
            if family is None:  # a GGUF file's family is known once it is read: its hparams are not
                expected: dict[str, Any] = {"device": device}
            else:
                expected = model_settings(request, source.name, family, device)
            check_same_run(finished[request.editor], request, expected)
    sweep = SlurmSweep(out_dir)
    pending = [r for r in requests if r.editor not in finished]
    recorded = {r.editor: sweep.jobs[r.editor] for r in pending if r.editor in sweep.jobs}
    states = job_states(recorded.values())
    live = [job for job in recorded.values() if states[job] in LIVE]
    if overwrite and live:
        raise KnowgicError(
            f"--overwrite: jobs {', '.join(live)} of this sweep are still queued or running; scancel them "
            "first, or wait for them"
        )
    release(live)  # a call stopped between submitting and releasing left them held
    failed: list[Ended] = []
    to_submit = []
    for request in pending:
        job = recorded.get(request.editor)
        if job is not None and states[job] in LIVE and not overwrite:
            continue
        if job is not None and not overwrite:
            ended = sweep.ended(request.editor, job, states[job])
            if not ended.interrupted and not resubmit_failed:
                failed.append(ended)
                continue
            report(f"{request.editor}: job {job} ended {ended.state} without its run: resubmitting it")
        to_submit.append(request)
    if to_submit:
        with_stats = [r for r in to_submit if resolve_editor(r.editor).uses_key_statistics]
        _submit(sweep, to_submit, with_stats, profile, out_dir.name, report)
    if finished:
        report(f"{len(finished)} of {len(requests)} editors' runs reused: {', '.join(finished)}")
    waiting = {r.editor: sweep.jobs[r.editor] for r in pending if r.editor not in {e.editor for e in failed}}
    if not wait and waiting:
        report(
            f"not waiting (--no-wait): {len(waiting)} job(s) queued or running; run the same command again "
            "to collect them"
        )
        return None
    failed += _wait(sweep, requests, waiting, finished, progress, poll_seconds)
    if failed:
        for ended in failed:
            report(ended.describe())
        raise KnowgicError(
            f"{len(failed)} of {len(requests)} editors' jobs ended without their run (above); run the same "
            "command again to resubmit the jobs Slurm stopped, with --resubmit-failed the failed ones too"
        )
    documents = [finished[r.editor] for r in requests]
    reused = len(requests) - len(waiting) if wait else 0
    table = sweep_table(documents, time.perf_counter() - started, reused)
    write_atomic(out_dir / "summary.md", table.encode("utf-8"))
    return documents, table


def _wait(
    sweep: SlurmSweep,
    requests: Sequence[EvaluationRequest],
    waiting: Mapping[str, str],
    finished: dict[str, dict[str, Any]],
    progress: bool,
    poll_seconds: float,
) -> list[Ended]:
    """Wait for the jobs ``waiting`` (editor -> job), with a bar of their states; each run that finishes
    goes into ``finished``; the jobs that ended without their run are returned."""
    by_editor = {r.editor: r for r in requests}
    open_jobs = dict(waiting)
    failed: list[Ended] = []
    bar = tqdm(total=len(open_jobs), desc="Slurm jobs", unit="job", disable=not progress, file=sys.stderr)
    try:
        while open_jobs:
            states = job_states(open_jobs.values())
            for editor, job in list(open_jobs.items()):
                if states[job] in LIVE:
                    continue
                request = by_editor[editor]
                assert request.out_dir is not None
                if (request.out_dir / "results.json").is_file():  # written last, atomically: the run finished
                    finished[editor] = finished_run(request)
                else:
                    failed.append(sweep.ended(editor, job, states[job]))
                del open_jobs[editor]
                bar.update(1)
            counts: dict[str, int] = {}
            for job in open_jobs.values():
                counts[states[job]] = counts.get(states[job], 0) + 1
            bar.set_postfix_str(
                ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {len(failed)} failed"
            )
            if open_jobs:
                time.sleep(poll_seconds)
    finally:
        bar.close()
    return failed
