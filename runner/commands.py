"""``knowgic runner``: submit a method, run workers, and look after the queue.

    knowgic runner submit PATH            validate a submission, store it, queue its jobs
    knowgic runner worker [--gpus auto]   claim and run jobs until stopped (one worker per GPU host)
    knowgic runner status [--json]        every job and its state
    knowgic runner logs JOB               a job's log
    knowgic runner requeue JOB            run a FAILED or CANCELLED job again
    knowgic runner cancel JOB             stop a PENDING or RUNNING job

Every command takes ``--store PATH`` (default ``$KNOWGIC_STORE``, else ``./knowgic-store``) and ``--db
URL`` (default ``$KNOWGIC_QUEUE_URL``, else the SQLite file beside the store; a
``postgresql+psycopg://`` URL shares one queue between many hosts).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from knowgic.argtypes import add_subcommands, positive_int, positive_seconds
from knowgic.errors import KnowgicError
from runner.states import DEFAULT_GRACE_SECONDS, DEFAULT_HEARTBEAT_SECONDS, DEFAULT_POLL_SECONDS, JobState

if TYPE_CHECKING:
    from runner.queue import Job, JobQueue
    from runner.store import ResultsStore


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="PATH",
        help="results store folder (default: $KNOWGIC_STORE, else ./knowgic-store)",
    )
    parser.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="queue database: sqlite:///FILE or postgresql+psycopg://USER@HOST/DB (default: "
        "$KNOWGIC_QUEUE_URL, else queue.sqlite in the store)",
    )


def _store(args: argparse.Namespace) -> ResultsStore:
    from runner.store import ResultsStore, default_store_root

    return ResultsStore(args.store or default_store_root())


def _queue_url(args: argparse.Namespace, store: ResultsStore) -> str:
    from runner.queue import default_queue_url

    return args.db or default_queue_url(store)


def _open_queue(args: argparse.Namespace, store: ResultsStore, *, create: bool) -> JobQueue:
    """The queue; for commands that only read or change existing jobs, a missing SQLite file is an error
    (rather than an empty queue created by a typo in --store)."""
    from runner.queue import JobQueue

    url = _queue_url(args, store)
    if not create and url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise KnowgicError(f"no queue database at {path} (submit something first, or pass --store/--db)")
    return JobQueue(url)


def _job_line(job: Job, *, times: bool = False) -> str:
    """Tab-separated (scripts split it): id, state (and where), model, protocol, mode, dataset, runs lost
    to dead workers."""
    where = f" on {job.worker} ({job.device})" if job.state == "RUNNING" else ""
    if times and job.state in ("PENDING", "RUNNING"):
        where += f" for {job.state_seconds.get(str(job.state), 0.0):.0f} s"
    reason = f": {job.reason}" if job.reason and job.state != "FINISHED" else ""
    limit = f", limit {job.limit}" if job.limit else ""
    return (
        f"{job.job_id}\t{job.state}{where}\t{job.model}\t{job.protocol}\t{job.mode}\t"
        f"dataset {job.dataset_version}{limit}\tlost runs {job.attempts}/{job.max_attempts}{reason}"
    )


def _submit(args: argparse.Namespace) -> int:
    from runner.submission import submit

    store = _store(args)
    queue = _open_queue(args, store, create=True)
    submission, jobs = submit(args.path, store, queue, limit=args.limit)
    print(
        f"submission {submission.name} {submission.version}: archive {submission.sha256[:12]}… stored in "
        f"{store.root}; {len(jobs)} job(s)"
    )
    for job in jobs:
        print(_job_line(job))
    return 0


def _worker(args: argparse.Namespace) -> int:
    from runner import worker as worker_module

    store = _store(args)
    queue = _open_queue(args, store, create=True)
    gpus = worker_module.resolve_gpus(args.gpus)
    if args.grace <= args.heartbeat:
        raise KnowgicError(f"--grace {args.grace:g} must be longer than --heartbeat {args.heartbeat:g}")
    if args.workdir is not None and not args.workdir.is_dir():
        raise KnowgicError(f"--workdir {args.workdir} is not a folder")
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    # Looked up on the module at call time: the worker always runs submitted code through an executor
    # that isolates it (the container executor), never in this process.
    executor = worker_module.default_executor(gpus)
    device = worker_module.device_label(gpus)
    print(f"worker {worker_id}: queue {queue!r}, store {store.root}, device {device}", flush=True)

    def report(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    handled = worker_module.run_worker(
        queue,
        store,
        executor,
        worker_id=worker_id,
        once=args.once,
        drain=args.drain,
        heartbeat_seconds=args.heartbeat,
        poll_seconds=args.poll,
        grace_seconds=args.grace,
        device=device,
        workdir_root=args.workdir,
        max_jobs=args.max_jobs,
        report=report,
    )
    report(f"worker {worker_id} ran {handled} job(s)")
    return 0


def _status(args: argparse.Namespace) -> int:
    store = _store(args)
    queue = _open_queue(args, store, create=False)
    states = [JobState(s) for s in args.state] if args.state else None
    jobs = queue.jobs(states)
    if args.json:
        json.dump([job.record() for job in jobs], sys.stdout, indent=2)
        print()
        return 0
    for job in jobs:
        print(_job_line(job, times=True))
    counts = queue.counts()
    print(", ".join(f"{count} {state}" for state, count in counts.items()) + f" in {queue!r}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    store = _store(args)
    queue = _open_queue(args, store, create=False)
    sys.stdout.write(queue.logs(args.job))
    return 0


def _requeue(args: argparse.Namespace) -> int:
    store = _store(args)
    job = _open_queue(args, store, create=False).requeue(args.job)
    print(f"{job.job_id}: {job.state}")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    store = _store(args)
    job = _open_queue(args, store, create=False).cancel(args.job)
    print(f"{job.job_id}: {job.state}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:

    p = subparsers.add_parser(
        "runner",
        help="submit a method and run it sandboxed; workers, queue status, logs",
        description="The runner: submitted editors run in sandboxed containers and are scored by the "
        "project's own code; jobs wait in a queue (SQLite beside the store, or PostgreSQL for many hosts).",
    )
    sub = add_subcommands(p, "runner_command", "what to do")

    s = sub.add_parser(
        "submit",
        help="validate a submission folder or archive, store it and queue its jobs",
        description="Validate PATH (a folder, .tar.gz or .zip with submission.yaml), store its normalised "
        "archive and queue one job per model x protocol x mode. Prints the job ids.",
    )
    s.add_argument("path", metavar="PATH", help="submission folder, .tar.gz or .zip with submission.yaml")
    s.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        metavar="N",
        help="score only the first N edits (smoke runs; the results record the limit)",
    )
    _common(s)
    s.set_defaults(func=_submit)

    w = sub.add_parser(
        "worker",
        help="claim and run jobs until stopped (SIGTERM/Ctrl-C hands the current job back)",
        description="Claim PENDING jobs and run each in sandboxed containers: the edit stage with the "
        "submission's code, the score stage with the project's image only. Run one worker per GPU host.",
    )
    _common(w)
    w.add_argument(
        "--gpus",
        choices=("auto", "all", "none"),
        default="auto",
        help="give the containers every GPU of this host (all), none (CPU), or all when there is one (auto, "
        "the default)",
    )
    w.add_argument("--once", action="store_true", help="run at most one job, and stop when none is waiting")
    w.add_argument("--drain", action="store_true", help="run jobs until none is waiting, then stop")
    w.add_argument(
        "--worker-id", default=None, metavar="ID", help="name shown in status and logs (default: HOST-PID)"
    )
    w.add_argument(
        "--heartbeat",
        type=positive_seconds,
        default=DEFAULT_HEARTBEAT_SECONDS,
        metavar="SECONDS",
        help=f"seconds between heartbeats (default {DEFAULT_HEARTBEAT_SECONDS:g})",
    )
    w.add_argument(
        "--grace",
        type=positive_seconds,
        default=DEFAULT_GRACE_SECONDS,
        metavar="SECONDS",
        help="seconds without a heartbeat after which a RUNNING job is taken back from its worker "
        f"(default {DEFAULT_GRACE_SECONDS:g})",
    )
    w.add_argument(
        "--poll",
        type=positive_seconds,
        default=DEFAULT_POLL_SECONDS,
        metavar="SECONDS",
        help=f"seconds between looks at an empty queue (default {DEFAULT_POLL_SECONDS:g})",
    )
    w.add_argument(
        "--max-jobs", type=positive_int, default=None, metavar="N", help="stop after running N jobs"
    )
    w.add_argument(
        "--workdir",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder for the jobs' working folders (default: the system's temporary folder)",
    )
    w.set_defaults(func=_worker)

    st = sub.add_parser(
        "status", help="list the jobs and their states", description="One line per job, then counts."
    )
    _common(st)
    st.add_argument("--json", action="store_true", help="print the job records as JSON")
    st.add_argument(
        "--state",
        action="append",
        choices=[str(s) for s in JobState],
        default=None,
        help="only jobs in this state (repeatable)",
    )
    st.set_defaults(func=_status)

    lg = sub.add_parser("logs", help="print a job's log", description="The job's log (the newest part).")
    lg.add_argument("job", metavar="JOB", help="job id (see `knowgic runner status`)")
    _common(lg)
    lg.set_defaults(func=_logs)

    rq = sub.add_parser(
        "requeue",
        help="put a FAILED or CANCELLED job back in the queue",
        description="Set a FAILED or CANCELLED job to PENDING again with its attempts reset.",
    )
    rq.add_argument("job", metavar="JOB", help="job id (see `knowgic runner status`)")
    _common(rq)
    rq.set_defaults(func=_requeue)

    cn = sub.add_parser(
        "cancel",
        help="cancel a PENDING or RUNNING job",
        description="Cancel a job. A RUNNING job's worker learns it at its next heartbeat and discards "
        "the results.",
    )
    cn.add_argument("job", metavar="JOB", help="job id (see `knowgic runner status`)")
    _common(cn)
    cn.set_defaults(func=_cancel)
