"""``knowgic runner``: submit a method, run workers, and look after the queue.

    knowgic runner submit PATH            validate a submission, store it, queue its jobs
          [--accounts token]              as the submitter whose token $KNOWGIC_SUBMITTER_TOKEN holds
          [--dataset-version VERSION]     on that dataset version (e.g. growth) instead of the manifest's
    knowgic runner add-submitter NAME     a submitter token (deployments with --accounts token)
    knowgic runner worker [--gpus auto]   claim and run jobs until stopped (one worker per GPU host)
          [--engine podman]               through Podman's Docker-compatible socket (runner/host/engine.py)
          [--private-dataset PATH]        score a private split too (mounted into the score stage only)
    knowgic runner slurm-workers N        N workers as Slurm jobs, each leaving when the queue is empty
    knowgic runner status [--json]        every job and its state
    knowgic runner logs JOB               a job's log
    knowgic runner requeue JOB            run a FAILED or CANCELLED job again
    knowgic runner cancel JOB             stop a PENDING or RUNNING job
    knowgic runner build-image            build the runner image (--local-base: with no image registry)
          [--engine podman]               into Podman's store

Every queue command takes ``--store PATH`` (default ``$KNOWGIC_STORE``, else ``./knowgic-store``) and ``--db
URL`` (default ``$KNOWGIC_QUEUE_URL``, else the SQLite file beside the store; a
``postgresql+psycopg://`` URL shares one queue between many hosts); both are defined in runner/options.py.

Everything printed that a submission, a manifest or the queue supplied (job ids, models, reasons, logs)
passes :func:`knowgic.printable.printable`: a terminal escape in a job's log is shown, never obeyed.

``build-image`` is a thin layer over runner/host/images.py::

    --local-base:  find_torch_wheel (host's torch) --> build_local_base (debootstrap) --+
                                                                                     +--> build_runner_image
    --base-image IMAGE (default: a CUDA PyTorch image) [--torch-wheel FILE] ----------+
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from tqdm import tqdm

from knowgic.argtypes import add_dataset_version_argument, add_subcommands, positive_int, positive_seconds
from knowgic.dataset.private import read_private_split
from knowgic.errors import KnowgicError
from knowgic.paths import cache_dir
from knowgic.printable import printable, printable_json
from knowgic.runner.host import images
from knowgic.runner.host.engine import add_engine_option, connect, engine_name
from knowgic.runner.host.images import LOCAL_BASE_IMAGE, BuiltImage, ImageBuildError, find_torch_wheel
from knowgic.runner.intake.accounts import add_submitter, identify
from knowgic.runner.intake.submission import submit
from knowgic.runner.options import (
    SUBMITTER_TOKEN_ENV,
    add_queue_option,
    add_store_option,
    add_submit_policy_options,
    add_tokens_option,
    default_tokens_file,
    queue_url,
    store_root,
    submit_policy,
)
from knowgic.runner.queue.states import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_POLL_SECONDS,
    JobState,
)
from knowgic.runner.store.signing import add_signing_key_option, load_signer
from knowgic.runner.store.store import ResultsStore
from knowgic.slurm import add_slurm_options, require_slurm, slurm_profile

# Imported where a command runs, not here: SQLAlchemy (the queue, the worker) and docker (the containers)
# are the runner extra, and `knowgic --help` builds this parser without it; torch, only to name the host's
# release, is never imported by the worker host.
if TYPE_CHECKING:
    from knowgic.runner.queue.queue import Job, JobQueue
    from knowgic.runner.stages.contract import JobExecutor


def _common(parser: argparse.ArgumentParser) -> None:
    add_store_option(parser)
    add_queue_option(parser)


def _store(args: argparse.Namespace) -> ResultsStore:

    return ResultsStore(store_root(args.store))


def _queue_url(args: argparse.Namespace, store: ResultsStore) -> str:
    return queue_url(args.db, store.root)


def _open_queue(args: argparse.Namespace, store: ResultsStore, *, create: bool) -> JobQueue:
    """The queue; for commands that only read or change existing jobs, a missing SQLite file is an error
    (rather than an empty queue created by a typo in --store)."""
    from knowgic.runner.queue.queue import JobQueue

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
    cells = (
        job.job_id,
        f"{job.state}{where}",
        job.model,
        job.protocol,
        job.mode,
        f"dataset {job.dataset_version}{limit}",
        f"lost runs {job.attempts}/{job.max_attempts}{reason}",
    )
    return "\t".join(printable(cell) for cell in cells)


def _submit(args: argparse.Namespace) -> int:
    policy = submit_policy(args)
    submitter = identify(policy, token=os.environ.get(SUBMITTER_TOKEN_ENV))  # before the upload is read
    store = _store(args)
    from knowgic.runner.queue.queue import check_queue_url

    check_queue_url(_queue_url(args, store))  # a mistyped --db fails before the upload is read
    submission, jobs = submit(
        args.path,
        store,
        lambda: _open_queue(args, store, create=True),  # once the submission is valid: a refusal leaves none
        limit=args.limit,
        submitter=submitter,
        policy=policy,
        dataset_version=args.dataset_version,
    )
    by = f" by {submitter.id}" if submitter is not None else ""
    print(
        f"submission {submission.name} {submission.version}{by}: archive {submission.sha256[:12]}… stored in "
        f"{store.root}; {len(jobs)} job(s)"
    )
    for job in jobs:
        print(_job_line(job))
    return 0


def default_executor(
    gpus: str, queue_id: str = "", private_dataset: Path | None = None, engine: str | None = None
) -> JobExecutor:
    """The container executor (the only one a real worker uses); ``gpus`` is "all" or "none"; its
    containers carry ``queue_id``, so that workers of other queues on this engine leave them alone;
    ``private_dataset``: a private split folder for the score stage alone; ``engine``: docker or podman
    (default ``$KNOWGIC_CONTAINER_ENGINE``, else docker)."""
    try:
        from knowgic.runner.host.containers import ContainerExecutor
    except ImportError as exc:
        raise KnowgicError(
            f"the container executor is not available ({exc}); install knowgic[runner]"
        ) from None
    return ContainerExecutor(gpus=gpus, queue_id=queue_id, private_dataset=private_dataset, engine=engine)


def _worker(args: argparse.Namespace) -> int:
    from knowgic.runner.host import worker as worker_module

    signer = load_signer(args.signing_key)  # before anything else: a worker without a key stores nothing
    gpus = worker_module.resolve_gpus(args.gpus)
    if args.grace <= args.heartbeat:
        raise KnowgicError(f"--grace {args.grace:g} must be longer than --heartbeat {args.heartbeat:g}")
    if args.workdir is not None and not args.workdir.is_dir():
        raise KnowgicError(f"--workdir {args.workdir} is not a folder")
    engine = engine_name(args.engine)  # a wrong $KNOWGIC_CONTAINER_ENGINE is one line, before anything
    private = None
    if args.private_dataset is not None:  # the operator's mistake fails here, before a store is made
        private = read_private_split(args.private_dataset)
    store = _store(args)
    queue = _open_queue(args, store, create=True)
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    # The worker always runs submitted code through an executor that isolates it (the container executor),
    # never in this process.
    executor = default_executor(gpus, queue.queue_id, private_dataset=args.private_dataset, engine=engine)
    device = worker_module.device_label(gpus)
    print(
        f"worker {worker_id}: queue {queue!r}, store {store.root}, engine {engine}, device {device}, signing key "
        f"{signer.fingerprint}",
        flush=True,
    )
    if private is None:
        # Where no private split exists (knowgic-tiny: every fact it knows is on a published chain), the
        # public figures rank, and a submission that learned the published chains can buy its rank.
        print(f"worker {worker_id}: no private split: jobs are ranked on the public data", flush=True)
    else:
        scope = f"jobs on {private.model}" if private.ranks else f"jobs on {private.based_on} (a drill)"
        print(f"worker {worker_id}: {private.describe()}, scored with {scope}", flush=True)

    def report(line: str) -> None:
        print(printable(f"{time.strftime('%H:%M:%S')} {line}"), flush=True)

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
        signer=signer,
    )
    report(f"worker {worker_id} ran {handled} job(s)")
    return 0


def _slurm_workers(args: argparse.Namespace) -> int:
    from knowgic.runner.slurm_workers import submit_workers

    profile = slurm_profile(args)
    require_slurm()
    signer = load_signer(args.signing_key)  # the nodes read the same path: a shared file system
    if args.grace <= args.heartbeat:
        raise KnowgicError(f"--grace {args.grace:g} must be longer than --heartbeat {args.heartbeat:g}")
    store = _store(args)
    url = _queue_url(args, store)
    from knowgic.runner.queue.queue import check_queue_url

    check_queue_url(url)
    worker_args = [
        *("--store", str(store.root.absolute()), "--db", url, "--gpus", args.gpus),
        *("--heartbeat", f"{args.heartbeat:g}", "--grace", f"{args.grace:g}", "--poll", f"{args.poll:g}"),
        *("--signing-key", str(signer.path.absolute())),
    ]
    if args.private_dataset is not None:
        worker_args += ["--private-dataset", str(args.private_dataset.absolute())]
    folder = store.root / "slurm-workers"
    jobs = submit_workers(args.count, worker_args, profile, folder)
    print(f"submitted {len(jobs)} worker job(s) ({profile.describe()}): {', '.join(jobs)}")
    print(f"queue {url.split('@')[-1]}, store {store.root}; logs in {folder}")
    return 0


def _status(args: argparse.Namespace) -> int:
    store = _store(args)
    queue = _open_queue(args, store, create=False)
    states = [JobState(s) for s in args.state] if args.state else None
    jobs = queue.jobs(states)
    if args.json:
        print(printable_json([job.record() for job in jobs], indent=2))
        return 0
    for job in jobs:
        print(_job_line(job, times=True))
    counts = queue.counts()
    print(", ".join(f"{count} {state}" for state, count in counts.items()) + f" in {queue!r}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    store = _store(args)
    queue = _open_queue(args, store, create=False)
    sys.stdout.write(printable(queue.logs(args.job), newlines=True))  # the stages' output: shown, not obeyed
    return 0


def _add_submitter(args: argparse.Namespace) -> int:
    tokens = args.submitter_tokens or default_tokens_file()
    token = add_submitter(tokens, args.name)
    print(f"submitter token:{args.name}: its token's sha256 added to {tokens}")
    print(
        f"token (shown once; the submitter sets ${SUBMITTER_TOKEN_ENV} to it, or gives it to the form): {token}"
    )
    return 0


def _requeue(args: argparse.Namespace) -> int:
    store = _store(args)
    job = _open_queue(args, store, create=False).requeue(args.job)
    print(printable(f"{job.job_id}: {job.state}"))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    store = _store(args)
    job = _open_queue(args, store, create=False).cancel(args.job)
    print(printable(f"{job.job_id}: {job.state}"))
    return 0


def _say(line: str) -> None:
    """A progress line on stderr that leaves the images' progress bars in place."""
    tqdm.write(line, file=sys.stderr)


def _torch_release() -> str:
    import torch

    return str(torch.__version__).split("+")[0]


def _wheel_hint(version: str) -> str:
    return (
        f"get a CPU build of torch {version} where the package index is reachable with `pip download "
        f"torch=={version} --no-deps -d DIR --index-url https://download.pytorch.org/whl/cpu` and pass "
        "--torch-wheel DIR"
    )


def _named_torch_wheel(given: Path, *, local_base: bool) -> Path:
    """``--torch-wheel``: a torch wheel file, or a folder holding exactly one (``pip download -d DIR``)."""
    if given.is_dir():
        found = sorted(given.glob("torch-*.whl"))
        if len(found) != 1:
            held = ", ".join(p.name for p in found) or "none"
            raise KnowgicError(
                f"--torch-wheel {given}: a folder must hold exactly one torch wheel (holds {held}); "
                + _wheel_hint(_torch_release())
            )
        given = found[0]
    if not given.is_file():
        raise KnowgicError(f"--torch-wheel {given}: no such file; " + _wheel_hint(_torch_release()))
    try:
        name, _, _, tags = parse_wheel_filename(given.name)
    except InvalidWheelFilename:
        name, tags = "", frozenset()
    if name != "torch":
        raise KnowgicError(f"--torch-wheel {given}: not a torch wheel (torch-VERSION-TAGS.whl)")
    # The local base is Debian bookworm's Python 3.11 on this machine's architecture.
    if local_base and not any(t.interpreter == "cp311" and "linux" in t.platform for t in tags):
        raise KnowgicError(
            f"--torch-wheel {given.name}: the local base {LOCAL_BASE_IMAGE} runs CPython 3.11 on Linux, so it "
            "needs a cp311 linux wheel; " + _wheel_hint(_torch_release())
        )
    return given


def _host_torch_wheel() -> Path:
    """The host's torch release as a wheel: ``$KNOWGIC_TORCH_WHEEL``, one cached, or ``pip download``."""
    version, cache = _torch_release(), cache_dir() / "wheels"
    _say(f"torch wheel: torch {version} from $KNOWGIC_TORCH_WHEEL, {cache}, else `pip download` (~200 MB)")
    try:
        return find_torch_wheel(cache, version)
    except ImageBuildError as exc:
        raise KnowgicError(f"no torch wheel for the image ({exc}); {_wheel_hint(version)}") from None


def build_image(
    client: Any,
    *,
    tag: str | None = None,
    base_image: str | None = None,
    local_base: bool = False,
    rebuild_base: bool = False,
    torch_wheel: Path | None = None,
    log: Callable[[str], None] = _say,
) -> BuiltImage:
    """What ``knowgic runner build-image`` builds (the container tests' fixtures run the command itself).

    ``local_base``: the debootstrap base (kept when it exists, unless ``rebuild_base``) with the host's torch
    release as a wheel (``torch_wheel``, else :func:`_host_torch_wheel`); otherwise FROM ``base_image``
    (default: a CUDA PyTorch image that brings torch), with ``torch_wheel`` only when that base has none.
    """
    if local_base:
        wheel = torch_wheel or _host_torch_wheel()
        existed = images.image_exists(client, images.LOCAL_BASE_IMAGE) and not rebuild_base
        log(
            f"local base {images.LOCAL_BASE_IMAGE}: " + ("kept" if existed else "debootstrap (a few minutes)")
        )
        started = time.monotonic()
        base = images.build_local_base(client, rebuild=rebuild_base, log=log)
        if not existed:
            log(f"local base {base}: built in {time.monotonic() - started:.0f} s")
    else:
        wheel, base = torch_wheel, base_image or images.DEFAULT_BASE_IMAGE
    return images.build_runner_image(client, tag=tag, base_image=base, torch_wheel=wheel, log=log)


def _build_image(args: argparse.Namespace) -> int:
    if args.rebuild_base and not args.local_base:
        raise KnowgicError("--rebuild-base goes with --local-base")
    wheel = _named_torch_wheel(args.torch_wheel, local_base=args.local_base) if args.torch_wheel else None
    if args.local_base and wheel is None:
        wheel = _host_torch_wheel()  # before debootstrap: a missing wheel fails now, not minutes later
    tag = args.tag or images.default_runner_image()
    client = connect(args.engine, log=_say)
    built = build_image(
        client,
        tag=tag,
        base_image=args.base_image,
        local_base=args.local_base,
        rebuild_base=args.rebuild_base,
        torch_wheel=wheel,
    )
    labels = built.labels
    print(
        f"built {built.tag} ({built.image_id.removeprefix('sha256:')[:12]}) in {built.seconds:.0f} s: knowgic "
        f"{labels.get('org.opencontainers.image.version', '?')}, dataset versions "
        f"{labels.get('org.knowgic.dataset-versions', '?')}, commit "
        f"{labels.get('org.opencontainers.image.revision', '?')[:12]}"
    )
    if built.tag == images.default_runner_image():
        print(f"`knowgic runner worker` runs it (the default image, {built.tag})")
    else:
        print(f"run workers on it with KNOWGIC_RUNNER_IMAGE={built.tag} knowgic runner worker")
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
    add_dataset_version_argument(s, folders=False, default="the manifest's dataset_version")
    _common(s)
    add_submit_policy_options(s)
    s.set_defaults(func=_submit)

    a = sub.add_parser(
        "add-submitter",
        help="make a submitter token (for a deployment with --accounts token)",
        description="Make a random token for NAME, add its sha256 to the submitter tokens file (the token "
        "itself is printed once and kept nowhere) and print it. Submissions with it are queued as "
        "token:NAME, within NAME's quotas. Delete the line from the file to revoke the token.",
    )
    a.add_argument("name", metavar="NAME", help="the submitter's name (letters, digits, . _ -)")
    add_tokens_option(a)
    a.set_defaults(func=_add_submitter)

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
    w.add_argument(
        "--private-dataset",
        type=Path,
        default=None,
        metavar="PATH",
        help="a private split (knowgic dataset holdout writes one) that only the trusted stages see, scored with "
        "the jobs it applies to (its model's): its edits follow the public ones, its figures rank",
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
    add_engine_option(w)
    add_signing_key_option(w)
    w.set_defaults(func=_worker)

    sw = sub.add_parser(
        "slurm-workers",
        help="submit N workers as Slurm jobs; each runs jobs until none is waiting, or its time is up",
        description="Submit N Slurm jobs (one array, through submitit), each running `knowgic runner worker "
        "--drain` against the queue: it leaves when no job is waiting, and hands its job back when Slurm stops "
        "it (scancel, the time limit). The queue must be reachable from every node (PostgreSQL), the store "
        "and the signing key on a shared file system.",
    )
    sw.add_argument("count", type=positive_int, metavar="N", help="how many worker jobs")
    _common(sw)
    sw.add_argument(
        "--gpus", choices=("auto", "all", "none"), default="auto", help="the workers' --gpus (default auto)"
    )
    sw.add_argument(
        "--private-dataset", type=Path, default=None, metavar="PATH", help="the workers' --private-dataset"
    )
    sw.add_argument(
        "--heartbeat",
        type=positive_seconds,
        default=DEFAULT_HEARTBEAT_SECONDS,
        metavar="SECONDS",
        help=f"the workers' --heartbeat (default {DEFAULT_HEARTBEAT_SECONDS:g})",
    )
    sw.add_argument(
        "--grace",
        type=positive_seconds,
        default=DEFAULT_GRACE_SECONDS,
        metavar="SECONDS",
        help=f"the workers' --grace (default {DEFAULT_GRACE_SECONDS:g})",
    )
    sw.add_argument(
        "--poll",
        type=positive_seconds,
        default=DEFAULT_POLL_SECONDS,
        metavar="SECONDS",
        help=f"the workers' --poll (default {DEFAULT_POLL_SECONDS:g})",
    )
    add_signing_key_option(sw)
    add_slurm_options(sw.add_argument_group("Slurm", "each worker job's resources"))
    sw.set_defaults(func=_slurm_workers)

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

    bi = sub.add_parser(
        "build-image",
        help="build the runner image (--local-base: where no image registry is reachable)",
        description="Build the runner image from the top-level Dockerfile of this checkout. By default it "
        "starts FROM a CUDA PyTorch image pulled from Docker Hub; --local-base makes a Debian base with "
        "debootstrap instead (root, Debian's mirror) and gives it the host's torch release as a wheel, so no "
        "image registry is needed. Shows the build's steps; reruns reuse the engine's layer cache.",
    )
    bi.add_argument(
        "--tag",
        default=None,
        metavar="TAG",
        help="image tag (default: $KNOWGIC_RUNNER_IMAGE, else knowgic-runner:VERSION, the tag workers run)",
    )
    base = bi.add_mutually_exclusive_group()
    base.add_argument(
        "--base-image",
        default=None,
        metavar="IMAGE",
        help="base image with python3.11+ and pip (default: a CUDA PyTorch runtime image from Docker Hub)",
    )
    base.add_argument(
        "--local-base",
        action="store_true",
        help="build FROM a Debian bookworm base made here with debootstrap (kept once built; needs root)",
    )
    bi.add_argument(
        "--rebuild-base",
        action="store_true",
        help="with --local-base: make the Debian base again (fresh packages) even when it exists",
    )
    bi.add_argument(
        "--torch-wheel",
        type=Path,
        default=None,
        metavar="PATH",
        help="torch wheel (or a folder holding one) for a base without torch (default with --local-base: "
        "$KNOWGIC_TORCH_WHEEL, else the host's torch release from pip download)",
    )
    add_engine_option(bi)
    bi.set_defaults(func=_build_image)
