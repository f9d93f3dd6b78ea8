"""The worker: claims jobs, has an executor run them, checks and stores what comes back.

The worker is trusted host code, and light: it imports no torch and no executor. The command line hands it
the executor that runs the submission (:class:`knowgic.runner.host.containers.ContainerExecutor`: the prepare and
score stages in the project's own image, the edit stage in a sandboxed container with the submission's
code); the contract between them is :mod:`knowgic.runner.stages.contract`. Submitted code never runs in this process: there
is deliberately no executor that imports a submission here.

For each claimed job::

    heartbeat thread: queue.heartbeat(job) every heartbeat_seconds
    results.json = executor.execute(job, archive, workdir, log)     # JobFailure(reason) -> FAILED
    check: results schema and content hash, and that it names the job's
           model, protocol, mode, dataset version and case limit  # else FAILED with what differs
    store.put_results + store.add_verified(job record, archive)    # entry id = job id: stored once,
                                                                   # signed with this worker's key
    queue.finish(job, results sha256)

An executor raises :class:`JobFailure` when the submission is at fault: the job is FAILED with that
reason. Any other exception is a fault of this host (the container engine went away, the disk is full):
the attempt counts, the job goes back to PENDING for another worker (FAILED after ``max_attempts``), and
this worker stops with :class:`WorkerFault` rather than failing job after job.

A worker that starts first reaps what dead workers of its queue left on this host
(:func:`reap_dead`): their containers (by label) and job folders (by owner record), judged dead by the
queue's heartbeats; a live worker's stay.

SIGTERM or SIGINT stops the worker: the current job goes back to PENDING (no attempt counted) and the
worker exits. A worker killed outright (SIGKILL, power loss) stops sending heartbeats; another worker's
:meth:`~knowgic.runner.queue.queue.JobQueue.recover_stale` gives the job back after the grace period. When the dead
worker had already stored the results, the next one finds the entry and finishes the job with it, so a
result is never stored twice.
"""

from __future__ import annotations

import _thread
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from knowgic.errors import FailedCheck, KnowgicError
from knowgic.runner.host.sandbox import host_has_gpu
from knowgic.runner.queue.queue import Job, JobLost, JobQueue
from knowgic.runner.queue.states import DEFAULT_GRACE_SECONDS, DEFAULT_HEARTBEAT_SECONDS, DEFAULT_POLL_SECONDS
from knowgic.runner.stages.contract import JOB_FOLDER_OWNER, JOB_FOLDER_PREFIX, JobExecutor, JobFailure
from knowgic.runner.store.signing import Signer, load_signer
from knowgic.runner.store.store import ResultsStore, StoreFileError, verify_results


class WorkerStopped(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT while a job runs or the worker waits.

    A BaseException, so that an executor's ``except Exception`` does not swallow it."""


class WorkerFault(FailedCheck):
    """This worker's host failed while running a job (not the submission): the job was handed back
    (the attempt counts) and the worker stops, so that a broken host does not fail the whole queue."""


class JobTakenAway(BaseException):
    """Raised in the main thread while a job runs when the heartbeat learns that the worker no longer owns
    it (cancelled, or recovered by another worker): the run is abandoned rather than finished for nothing."""


def detect_gpus() -> bool:
    """True when this host has an NVIDIA GPU the container engine can hand on (``nvidia-smi -L``); the
    worker host needs no torch to know it."""
    return host_has_gpu()


def resolve_gpus(gpus: str) -> str:
    """``auto`` -> ``all`` when the host has a GPU, else ``none``; ``all`` needs one."""
    if gpus not in ("auto", "all", "none"):
        raise KnowgicError(f"--gpus {gpus!r}: expected auto, all or none")
    if gpus == "auto":
        return "all" if detect_gpus() else "none"
    if gpus == "all" and not detect_gpus():
        raise KnowgicError("--gpus all: this host has no CUDA GPU (use --gpus none or auto)")
    return gpus


def device_label(gpus: str) -> str:
    """What the job record says the job ran on: ``cuda:all`` or ``cpu``."""
    return "cuda:all" if gpus == "all" else "cpu"


# -- checking what the executor returned ----------------------------------------------------------------
def check_results(path: Path, job: Job) -> dict[str, Any]:
    """The results document at ``path`` when it is valid and is the run the job asked for.

    Raises :class:`JobFailure` naming the first problem.
    """
    import json

    try:
        document = json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise JobFailure(f"the run wrote no results file ({path} is missing)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JobFailure(f"the results file is not readable JSON: {exc}") from None
    try:
        verify_results(document, "results.json")
    except StoreFileError as exc:
        raise JobFailure(f"the results are not valid: {exc}") from None
    config, dataset = document["config"], document["dataset"]
    expected = {
        "config.model": (config.get("model"), job.model),
        "config.protocol": (config.get("protocol"), job.protocol),
        "config.mode": (config.get("mode"), job.mode),
        "dataset.version": (dataset.get("version"), job.dataset_version),
        "config.limit": (config.get("limit"), job.limit),
    }
    submission = document.get("submission")
    if submission is not None:  # a runner's results name the submission they scored: it must be this one
        expected["submission.sha256"] = (submission.get("sha256"), job.submission_sha256)
        expected["submission.name"] = (submission.get("name"), job.submission_name)
    for field, (found, wanted) in expected.items():
        if found != wanted:
            raise JobFailure(
                f"the results are for another run: {field} is {found!r}, the job asked for {wanted!r}"
            )
    return document


# -- the job's log --------------------------------------------------------------------------------------
class _JobLog:
    """The ``log`` callable handed to the executor: thread-safe, buffered (a flood of lines costs one
    database write per ``flush_bytes`` or ``flush_seconds``), capped by the queue."""

    def __init__(self, queue: JobQueue, job_id: str, worker_id: str, *, flush_seconds: float = 1.0) -> None:
        self.queue, self.job_id, self.worker_id = queue, job_id, worker_id
        self.flush_seconds = flush_seconds
        self.flush_bytes = 64 * 1024
        self._parts: list[str] = []
        self._size = 0
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, text: str) -> None:
        text = text if text.endswith("\n") else text + "\n"
        with self._lock:
            self._parts.append(text)
            self._size += len(text)
            if self._size >= self.flush_bytes or time.monotonic() - self._last >= self.flush_seconds:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last = time.monotonic()
        if not self._parts:
            return
        text, self._parts, self._size = "".join(self._parts), [], 0
        try:
            self.queue.append_log(self.job_id, text)
        except KnowgicError as exc:
            print(f"[{self.worker_id}] cannot write the log of {self.job_id}: {exc}", file=sys.stderr)


# -- the heartbeat ----------------------------------------------------------------------------------------
class _Heartbeat:
    """Sends heartbeats from a thread; when the job was taken away (cancelled or recovered) it remembers
    why and interrupts the main thread (SIGUSR1 simulated there, see :func:`_stop_signals`)."""

    def __init__(
        self, queue: JobQueue, job: Job, worker_id: str, every: float, flag: _StopFlag, log: _JobLog
    ):
        self.queue, self.job, self.worker_id, self.every, self.flag = queue, job, worker_id, every, flag
        self.log = log
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job.job_id}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.log.flush()
            try:
                self.queue.heartbeat(self.job.job_id, self.worker_id)
            except JobLost as exc:
                self.lost = str(exc)
                if self.flag.handlers_installed:
                    _thread.interrupt_main(signal.SIGUSR1)
                return
            except Exception as exc:  # a database hiccup: try again at the next beat
                print(f"[{self.worker_id}] heartbeat failed: {exc}", file=sys.stderr)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, self.every * 2))


# -- signals ----------------------------------------------------------------------------------------------
@dataclass
class _StopFlag:
    requested: bool = False
    interruptible: bool = False  # raise WorkerStopped now (executing or waiting) rather than at the next step
    handlers_installed: bool = False
    job_lost: bool = False


@contextmanager
def _stop_signals(flag: _StopFlag, install: bool) -> Iterator[None]:
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        flag.requested = True
        if flag.interruptible:
            flag.interruptible = False
            raise WorkerStopped(signal.Signals(signum).name)

    def taken_away(_signum: int, _frame: FrameType | None) -> None:
        if flag.interruptible:
            flag.interruptible = False
            raise JobTakenAway()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, taken_away)
    flag.handlers_installed = True
    try:
        yield
    finally:
        flag.handlers_installed = False
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def _interruptible(flag: _StopFlag) -> Iterator[None]:
    if flag.requested:
        raise WorkerStopped("stop requested")
    flag.interruptible = True
    try:
        yield
    finally:
        flag.interruptible = False


# -- the loop ---------------------------------------------------------------------------------------------
def _existing_entry_sha(store: ResultsStore, job: Job, log: Callable[[str], None]) -> str | None:
    """The results sha256 of a verified entry already stored for this job (a previous attempt stored it
    and then died before finishing), or None."""
    path = store.entry_path(job.job_id)
    if not path.exists():
        return None
    try:
        entry = store.load_entry(path)
    except StoreFileError as exc:
        raise JobFailure(f"the store holds a damaged entry for this job: {exc}") from None
    check_results(entry.results_file, job)
    log(f"[worker] results of an earlier attempt are already stored ({entry.results_sha256[:12]}…)\n")
    return entry.results_sha256


def _store(
    store: ResultsStore, job: Job, results: Path, archive: Path, signer: Signer, log: Callable[[str], None]
) -> str:
    try:
        return store.add_verified(
            results, archive_path=archive, manifest=job.manifest or {}, job=job.record(), signer=signer
        ).results_sha256
    except KnowgicError:
        # Another attempt of this job stored its results first (this worker was thought dead): keep those.
        existing = _existing_entry_sha(store, job, log)
        if existing is None:
            raise
        return existing


def run_job(
    queue: JobQueue,
    store: ResultsStore,
    executor: JobExecutor,
    job: Job,
    *,
    worker_id: str,
    heartbeat_seconds: float,
    workdir_root: Path | None,
    flag: _StopFlag,
    keep_workdir: bool = False,
    signer: Signer | None = None,
) -> Job:
    """Run one claimed job to FINISHED or FAILED (or back to PENDING when the worker is stopped).

    ``signer``: the worker's key that signs the stored entry (default: :func:`knowgic.runner.store.signing.load_signer`)."""
    signer = signer or load_signer()

    log = _JobLog(queue, job.job_id, worker_id)
    log(
        f"[worker] {worker_id} runs attempt {job.attempts + 1} of {job.max_attempts} on {job.device or 'cpu'}"
    )
    workdir = Path(tempfile.mkdtemp(prefix=f"{JOB_FOLDER_PREFIX}{job.job_id}-", dir=workdir_root))
    owner = {"queue": queue.queue_id, "job": job.job_id, "worker": worker_id}
    (workdir / JOB_FOLDER_OWNER).write_text(json.dumps(owner), encoding="utf-8")
    heartbeat = _Heartbeat(queue, job, worker_id, heartbeat_seconds, flag, log)
    try:
        with heartbeat:
            try:
                sha = _existing_entry_sha(store, job, log)
                if sha is None:
                    archive = store.submission_path(job.submission_sha256)
                    if archive is None:
                        problem = store.submission_problem(job.submission_sha256) or "it is missing"
                        raise JobFailure(
                            f"the store {store.root} cannot run this job: {problem}; submit it again"
                        )
                    started = time.monotonic()
                    with _interruptible(flag):
                        results = executor.execute(job, archive, workdir, log)
                    log(f"[worker] the run took {time.monotonic() - started:.1f} s")
                    if heartbeat.lost:
                        log(f"[worker] results discarded: {heartbeat.lost}")
                        return queue.get(job.job_id)
                    check_results(results, job)
                    sha = _store(store, job, results, archive, signer, log)
                    log(f"[worker] results stored: {sha}")
                return queue.finish(job.job_id, worker_id, sha)
            except JobFailure as failure:
                log(f"[worker] failed: {failure.reason}")
                return queue.fail(job.job_id, worker_id, failure.reason)
            except WorkerStopped as stop:
                log(f"[worker] stopped by {stop}")
                queue.release(job.job_id, worker_id, f"worker stopped by {stop}")
                raise
            except JobLost as lost:
                log(f"[worker] {lost}")
                return queue.get(job.job_id)
            except JobTakenAway:
                log(f"[worker] run abandoned: {heartbeat.lost}")
                return queue.get(job.job_id)
            except Exception as exc:  # a fault of this host: the job goes back, this worker stops
                log(traceback.format_exc())
                reason = f"worker {worker_id} failed while handling the job: {type(exc).__name__}: {exc}"
                try:
                    state = queue.retry(job.job_id, worker_id, reason).state
                except JobLost:
                    state = queue.get(job.job_id).state
                raise WorkerFault(
                    f"{reason}; job {job.job_id} is now {state} and this worker stops: fix this host "
                    "(`knowgic runner logs` has the traceback), then start the worker again"
                ) from exc
    finally:
        log.flush()
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def reap_dead(
    queue: JobQueue,
    executor: JobExecutor,
    grace_seconds: float,
    workdir_root: Path | None,
    report: Callable[[str], None] = print,
) -> tuple[int, int]:
    """Remove what workers of this queue that are no longer alive left on this host: the executor's
    containers (``executor.reap``, when it has one) and job folders under ``workdir_root`` (default: the
    temporary folder). A worker is alive for a job while the queue says it runs it and its heartbeat is
    younger than ``grace_seconds``; what live workers left stays. Returns (containers, folders) removed."""

    def alive(job_id: str, worker_id: str) -> bool:
        return queue.running_on(job_id, worker_id, grace_seconds)

    reap = getattr(executor, "reap", None)
    containers = int(reap(queue.queue_id, alive)) if callable(reap) else 0
    folders = 0
    root = Path(workdir_root) if workdir_root is not None else Path(tempfile.gettempdir())
    for folder in sorted(root.glob(f"{JOB_FOLDER_PREFIX}*")):
        try:
            owner = json.loads((folder / JOB_FOLDER_OWNER).read_text(encoding="utf-8"))
            ours = isinstance(owner, dict) and owner.get("queue") == queue.queue_id
        except (OSError, ValueError):
            continue  # not a job folder, or one that is being made: not ours to judge
        if ours and not alive(str(owner.get("job")), str(owner.get("worker"))):
            shutil.rmtree(folder, ignore_errors=True)
            folders += 1
    if containers or folders:
        report(f"reaped {containers} container(s) and {folders} job folder(s) of dead workers")
    return containers, folders


def run_worker(
    queue: JobQueue,
    store: ResultsStore,
    executor: JobExecutor,
    *,
    worker_id: str,
    once: bool = False,
    drain: bool = False,
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    device: str | None = None,
    workdir_root: Path | None = None,
    max_jobs: int | None = None,
    install_signal_handlers: bool = True,
    report: Callable[[str], None] = print,
    signer: Signer | None = None,
) -> int:
    """Claim and run jobs until stopped; return how many jobs this worker ran.

    ``once``: run at most one job, and return at once when none is PENDING. ``drain``: run jobs until none
    is PENDING, then return (batch runs). ``grace_seconds``: how long a
    RUNNING job may go without a heartbeat before it is recovered (keep it several heartbeats long).
    ``signer``: this worker's key (default: :func:`knowgic.runner.store.signing.load_signer`); the worker refuses to
    start without one, because what it stores would not read as verified.
    """
    signer = signer or load_signer()
    if grace_seconds <= heartbeat_seconds:
        raise KnowgicError(
            f"grace period {grace_seconds:g} s must be longer than the heartbeat interval {heartbeat_seconds:g} s"
        )
    flag = _StopFlag()
    handled = 0
    reap_dead(queue, executor, grace_seconds, workdir_root, report)
    with _stop_signals(flag, install_signal_handlers):
        try:
            while not flag.requested:
                for recovered in queue.recover_stale(grace_seconds):
                    report(
                        f"recovered {recovered.job_id}: now {recovered.state} (attempt {recovered.attempts})"
                    )
                job = queue.claim(worker_id, device=device)
                if job is None:
                    if once or drain:
                        break
                    with _interruptible(flag):
                        time.sleep(poll_seconds)
                    continue
                report(f"running {job.job_id} ({job.model}, {job.protocol}, {job.mode}) on {device or 'cpu'}")
                done = run_job(
                    queue,
                    store,
                    executor,
                    job,
                    worker_id=worker_id,
                    heartbeat_seconds=heartbeat_seconds,
                    workdir_root=workdir_root,
                    flag=flag,
                    signer=signer,
                )
                handled += 1
                detail = f": {done.reason}" if done.reason else ""
                report(f"{done.job_id}: {done.state}{detail}")
                if once or (max_jobs is not None and handled >= max_jobs):
                    break
        except WorkerStopped as stop:
            report(f"worker {worker_id} stopped ({stop}); its job, if any, is PENDING again")
    return handled
