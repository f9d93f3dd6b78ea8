"""The container executor: one job as three sandboxed containers over one job folder and one deltas folder.

::

    workdir/
      .knowgic-owner.json  queue, job and worker ids (a later worker reaps the folder of a dead one)
      submission/   the stored archive unpacked again (knowgic.runner.intake.submission checks it as on submit)
      job/job.json  knowgic.runner.stages.contract.JobSpec, written here    -> /job: writable for the prepare stage only
      job/requests.json  the edit requests (prepare)    -> read-only for the edit and score stages
      deltas/       written by the edit stage           -> /deltas: the edit container's only writable mount;
                    read (and emptied) by the score stage
      out/          results.json and plots              -> /out: written by the score container only
    STATS (host)    key statistics, kept across jobs    -> /stats: writable for prepare, read-only for edit

    prepare container  the runner image          python -m knowgic.runner.stages prepare (trusted; reads the dataset)
    edit container     knowgic-edit:<sub>-<run>  python -m knowgic.runner.stages edit    (the submitted code; an
                       image without any benchmark text, see runner/host/edit_base.py)
    score container    the runner image          python -m knowgic.runner.stages score   (trusted)

The prepare stage runs first; then the edit and score stages run at once under
:func:`knowgic.runner.host.sandbox.run_sandboxed`: the score stage scores each delta as it appears and deletes it, the
edit stage waits while the folder is over its quota. The edit container never sees /out nor the dataset,
and the score container runs no submitted file, so what the submission does in its own process (patching
the metrics, writing a results.json of its own, reading the test set) cannot reach the scores.

When one stage fails the other is stopped, and the job fails with one line saying which stage, how it
ended (exit code, memory, time, processes) and the stage's own last error line. Every container carries the
queue's, the job's and the worker's ids as labels: :meth:`ContainerExecutor.reap` removes those of dead
workers when a worker starts.
"""

from __future__ import annotations

import argparse
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.argtypes import parse_size
from knowgic.dataset.private import read_private_split
from knowgic.errors import KnowgicError
from knowgic.paths import PROVIDED_STATS_VARIABLE, cache_dir
from knowgic.runner.host.engine import connect, engine_name
from knowgic.runner.host.images import (
    SUBMISSION_DIR,
    BuiltImage,
    ImageBuildError,
    build_edit_image,
    default_runner_image,
    image_exists,
    image_id,
    remove_stale_edit_images,
)
from knowgic.runner.host.sandbox import (
    PODMAN_GPU_REFUSAL,
    SCRATCH_DIR,
    EndReason,
    GiB,
    Mount,
    SandboxLimits,
    SandboxResult,
    resolve_gpus,
    run_sandboxed,
)
from knowgic.runner.intake.archive import SubmissionError
from knowgic.runner.intake.submission import Submission, unpack_stored_archive
from knowgic.runner.stages.contract import (
    DONE_MARKER,
    FAILED_MARKER,
    JOB_FILE,
    REQUESTS_FILE,
    JobFailure,
    JobSpec,
    one_line,
)

if TYPE_CHECKING:
    from knowgic.runner.queue.queue import Job

STAGE_COMMAND = ("python3", "-m", "knowgic.runner.stages")
JOB_LABEL = "org.knowgic.job"
STAGE_LABEL = "org.knowgic.stage"
QUEUE_LABEL = "org.knowgic.queue"
WORKER_LABEL = "org.knowgic.worker"
STATS_MOUNT = "/stats"
# Seconds the score stage may keep running once the edit stage has failed (it sees the `failed` marker and
# stops by itself), and seconds the edit stage may take to exit once the score stage has ended (the
# editor's process may still be winding down after it wrote its marker): past these, the stage is killed.
SCORE_GRACE_SECONDS = 60.0
# Where the score container sees the operator's private split (read-only).
PRIVATE_DIR = "/private"
EDIT_GRACE_SECONDS = 30.0
_ERROR_LINE = re.compile(r"^(error: .*|[A-Za-z_.]*(Error|Exception|Interrupt)\b.*)$")


# The edit stage keeps its deltas folder under the quota (the score stage empties it); the host stops an
# edit stage whose folder grows past the cap anyway (by default 4 x quota + 1 GiB), so that a submission
# cannot fill the host's disk through its one writable mount.
DEFAULT_DELTA_QUOTA = "2G"
# Operators size the containers to their hosts through these variables (sizes as 512M, 16G).
LIMIT_VARIABLES = {
    "KNOWGIC_SANDBOX_MEMORY": "memory_bytes",
    "KNOWGIC_SANDBOX_CPUS": "cpus",
    "KNOWGIC_SANDBOX_PIDS": "pids",
    "KNOWGIC_SANDBOX_TIMEOUT": "timeout_seconds",
}


_LIMIT_FORMS = {
    "memory_bytes": "a size such as 512M or 16G",
    "cpus": "a number of CPUs such as 4 or 0.5",
    "pids": "a whole number of processes",
    "timeout_seconds": "a number of seconds",
}


def default_limits(environ: Mapping[str, str] | None = None) -> SandboxLimits:
    """16 GiB, every CPU, 1024 processes and 4 hours per stage, each overridden by its variable in
    :data:`LIMIT_VARIABLES`; a malformed value is one line naming the variable."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {
        "memory_bytes": 16 * GiB,
        "cpus": float(os.cpu_count() or 2),
        "pids": 1024,
        "timeout_seconds": 4 * 3600.0,
    }
    for variable, name in LIMIT_VARIABLES.items():
        text = environ.get(variable)
        if not text:
            continue
        try:
            if name == "memory_bytes":
                values[name] = parse_size(text)
            elif name == "pids":
                values[name] = int(text)
            else:
                values[name] = float(text)
        except (ValueError, argparse.ArgumentTypeError):
            raise KnowgicError(f"{variable}={text!r}: expected {_LIMIT_FORMS[name]}") from None
    return SandboxLimits(**values)


def _env_path(variable: str) -> Path | None:
    value = os.environ.get(variable)
    return Path(value) if value else None


def _disk_bytes(folder: Path) -> int:
    """Disk space used under ``folder``, subfolders included (allocated blocks, so sparse files count
    what they occupy)."""
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except FileNotFoundError:  # consumed meanwhile
                continue
    return total


def _last_error_line(logs: str) -> str | None:
    """The last line that reads as an error (``error: ...`` from knowgic.runner.stages, or a traceback's last line)."""
    for line in reversed(logs.splitlines()):
        if _ERROR_LINE.match(line.strip()):
            return one_line(line.strip(), 500)
    return None


def _private_folder(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def _check_model_cache(folder: Path) -> None:
    """The model cache is mounted into the edit stage: it must hold models only, no dataset (a cached copy
    of the benchmark would hand the test set to the submission)."""
    if not folder.is_dir():
        raise KnowgicError(f"model cache {folder} (KNOWGIC_MODEL_CACHE) is not a folder")
    datasets = sorted(
        [*(folder / "hub").glob("datasets--*"), *folder.glob("datasets--*"), *folder.glob("datasets")]
    )
    if datasets:
        raise KnowgicError(
            f"model cache {folder} (KNOWGIC_MODEL_CACHE) holds datasets ({datasets[0].name}); the edit stage "
            "sees this folder, so it must hold models only: point the variable at a cache of models"
        )


def _remove_container(container: Any) -> int:
    docker = _docker_errors()
    try:
        container.remove(force=True, v=True)
    except docker.NotFound:  # gone meanwhile (its own run removed it)
        return 0
    return 1


def _docker_errors() -> Any:
    import docker.errors  # the runner extra, imported only where a container engine is used

    return docker.errors


@dataclass
class _JobRun:
    """One job's folders, mounts and labels, and what its two running stages tell each other through the
    supervisor (when each ended, whether the deltas folder overflowed, the events that stop them)."""

    job_dir: Path
    deltas: Path
    out: Path
    models: list[Mount]
    labels: dict[str, str]
    environment: dict[str, str]
    edit_cancel: threading.Event = field(default_factory=threading.Event)
    score_cancel: threading.Event = field(default_factory=threading.Event)
    edit_ended: list[float] = field(default_factory=list)
    score_ended: list[float] = field(default_factory=list)
    overfull: list[int] = field(default_factory=list)
    # Whether the operator's private split is scored with this job (it was built for the job's model).
    private: bool = False

    @property
    def shared(self) -> list[Mount]:
        """What both the edit and the score stage see: the job folder and the model cache, read-only."""
        return [Mount(self.job_dir, "/job"), *self.models]


@dataclass
class ContainerExecutor:
    """:class:`knowgic.runner.host.worker.JobExecutor` that runs each stage in a sandboxed container.

    ``gpus``: "all", "none" or "auto". ``runner_image``: the trusted image (default
    ``$KNOWGIC_RUNNER_IMAGE`` or ``knowgic-runner:<version>``). ``model_cache`` (default
    ``$KNOWGIC_MODEL_CACHE``): a host Hugging Face cache folder (what ``HF_HOME`` names) with the models
    the jobs ask for, mounted read-only at /cache/huggingface in both containers, which never download.
    ``private_dataset``: a private split folder (:mod:`knowgic.dataset.private`), mounted read-only at
    /private into the trusted stages only, for the jobs it applies to (its model's; a drill, its version's):
    the prepare stage appends its edit requests as a second group, the score stage scores its chains.
    ``engine``: ``docker`` or ``podman`` (default ``$KNOWGIC_CONTAINER_ENGINE``, else docker;
    :mod:`knowgic.runner.host.engine`), used when no ``client`` is given.
    """

    gpus: str = "auto"
    runner_image: str | None = None
    edit_limits: SandboxLimits = field(default_factory=default_limits)
    score_limits: SandboxLimits = field(default_factory=default_limits)
    quota: str = field(default_factory=lambda: os.environ.get("KNOWGIC_DELTA_QUOTA") or DEFAULT_DELTA_QUOTA)
    deltas_cap: str | None = field(default_factory=lambda: os.environ.get("KNOWGIC_DELTA_CAP"))
    model_cache: Path | None = field(default_factory=lambda: _env_path("KNOWGIC_MODEL_CACHE"))
    stats_cache: Path = field(
        default_factory=lambda: _env_path("KNOWGIC_RUNNER_STATS") or cache_dir() / "runner-stats"
    )
    queue_id: str = ""
    private_dataset: Path | None = None
    engine: str | None = None
    client: Any = None

    def __post_init__(self) -> None:
        try:
            self.quota_bytes = parse_size(self.quota)
            cap = parse_size(self.deltas_cap) if self.deltas_cap else 4 * self.quota_bytes + GiB
        except argparse.ArgumentTypeError as error:
            raise KnowgicError(
                f"delta quota or cap (KNOWGIC_DELTA_QUOTA, KNOWGIC_DELTA_CAP): {error}"
            ) from None
        self.deltas_cap_bytes = max(cap, self.quota_bytes)
        self.engine = engine_name(self.engine)
        self.use_gpus = resolve_gpus(self.gpus)
        if self.use_gpus and self.engine == "podman":  # before any image or job is touched
            raise KnowgicError(PODMAN_GPU_REFUSAL)
        self.runner_image = self.runner_image or default_runner_image()
        if self.model_cache is not None:
            _check_model_cache(Path(self.model_cache))
        _private_folder(Path(self.stats_cache))
        self.private_split = None
        if self.private_dataset is not None:
            self.private_split = read_private_split(self.private_dataset)
            self.private_dataset = self.private_split.folder.resolve()
        if self.client is None:
            self.client = connect(self.engine)
        self.runner_image_id = image_id(self.client, self.runner_image)  # fails now, with how to build it
        remove_stale_edit_images(self.client, self.runner_image_id)

    @property
    def device(self) -> str:
        return "cuda:all" if self.use_gpus else "cpu"

    def job_spec(self, job: Job, manifest: dict[str, Any], hparams: dict[str, Any]) -> JobSpec:
        return JobSpec(
            model=job.model,
            editor=str(manifest["editor"]),
            hparams=hparams,
            protocol=job.protocol,
            mode=job.mode,
            dataset_version=job.dataset_version,
            limit=job.limit,
            device="cuda" if self.use_gpus else "cpu",
            submission_name=job.submission_name,
            submission_version=job.submission_version,
            submission_sha256=job.submission_sha256,
        )

    def remove_leftovers(self, job_id: str) -> int:
        """Remove containers of an earlier attempt of ``job_id`` of this queue (a worker killed while they
        ran); another queue's job of the same id is not this one."""
        labels = [f"{JOB_LABEL}={job_id}", f"{QUEUE_LABEL}={self.queue_id}"]
        leftovers = self.client.containers.list(all=True, filters={"label": labels})
        for container in leftovers:
            _remove_container(container)
        return len(leftovers)

    def reap(self, queue_id: str, alive: Callable[[str, str], bool]) -> int:
        """Remove the containers of queue ``queue_id`` whose worker is no longer alive for their job
        (:func:`knowgic.runner.host.worker.reap_dead`); returns how many."""
        removed = 0
        for container in self.client.containers.list(
            all=True, filters={"label": f"{QUEUE_LABEL}={queue_id}"}
        ):
            labels = container.labels or {}
            if not alive(labels.get(JOB_LABEL, ""), labels.get(WORKER_LABEL, "")):
                removed += _remove_container(container)
        return removed

    def execute(self, job: Job, submission_archive: Path, workdir: Path, log: Callable[[str], None]) -> Path:
        workdir = Path(workdir)
        if self.remove_leftovers(job.job_id):
            log("[runner] removed the containers of an earlier attempt of this job")
        submission, hparams = self._unpack(job, submission_archive, workdir)
        edit_image = self._edit_image(submission, log)
        log(
            f"[runner] edit image {edit_image.tag} "
            + (f"built in {edit_image.seconds:.1f} s" if edit_image.built else "(cached)")
        )
        run = self._prepare(job, submission, hparams, workdir, log)
        if not image_exists(self.client, edit_image.tag):  # removed meanwhile by a cleanup: build it again
            edit_image = self._edit_image(submission, log)
        started = time.monotonic()
        log(f"[runner] running the edit and score stages on {self.device}")
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"job-{job.job_id[:12]}") as pool:
            try:
                edit_future, score_future = self._start(pool, run, edit_image, log)
                self._supervise(run, edit_future, score_future)
                edit_result, score_result = edit_future.result(), score_future.result()
            finally:  # also when the worker is stopped: both containers go
                run.edit_cancel.set()
                run.score_cancel.set()
        log(
            f"[runner] edit stage {edit_result.reason} ({edit_result.seconds:.1f} s), "
            f"score stage {score_result.reason} ({score_result.seconds:.1f} s), {time.monotonic() - started:.1f} s"
        )
        return self._verdict(run, edit_result, score_result)

    def _unpack(self, job: Job, submission_archive: Path, workdir: Path) -> tuple[Submission, dict[str, Any]]:
        """The stored archive unpacked again (checked as on submit), and its hparams for the job's model."""
        try:
            submission = unpack_stored_archive(submission_archive, workdir / "submission")
        except SubmissionError as error:
            raise JobFailure(f"the stored submission is not valid: {error}") from None
        try:
            hparams = submission.hparams_for(job.model)
        except KnowgicError as error:
            raise JobFailure(f"the submission's hparams for {job.model}: {error}") from None
        return submission, hparams

    def _prepare(
        self,
        job: Job,
        submission: Submission,
        hparams: dict[str, Any],
        workdir: Path,
        log: Callable[[str], None],
    ) -> _JobRun:
        """The job's folders and ``job.json``, then the trusted prepare stage (:meth:`_run_prepare_stage`)."""
        spec = self.job_spec(job, submission.manifest, hparams)
        job_dir = _private_folder(workdir / "job")
        (job_dir / JOB_FILE).write_text(spec.to_json(), encoding="utf-8")
        (job_dir / JOB_FILE).chmod(0o644)
        run = _JobRun(
            job_dir=job_dir,
            deltas=_private_folder(workdir / "deltas"),
            out=_private_folder(workdir / "out"),
            models=[Mount(self.model_cache, "/cache/huggingface")] if self.model_cache is not None else [],
            labels={JOB_LABEL: job.job_id, QUEUE_LABEL: self.queue_id, WORKER_LABEL: job.worker or ""},
            # The model's caches (hashes, converted files) go to the tmpfs; downloaded models come read-only.
            environment={"KNOWGIC_CACHE": f"{SCRATCH_DIR}/knowgic-cache", "HF_HOME": "/cache/huggingface"},
        )
        if self.private_split is not None:
            problem = self.private_split.problem_for(job.model, job.dataset_version)
            run.private = problem is None
            log(
                f"[runner] {self.private_split.describe()}: "
                + ("scored with this job" if run.private else f"not scored with this job ({problem})")
            )
        self._run_prepare_stage(run, log)
        return run

    def _start(
        self, pool: ThreadPoolExecutor, run: _JobRun, edit_image: BuiltImage, log: Callable[[str], None]
    ) -> tuple[Future[SandboxResult], Future[SandboxResult]]:
        """The edit and the score container, started at once over the one deltas folder."""
        return (
            pool.submit(self._run_edit_stage, run, edit_image, log),
            pool.submit(self._run_score_stage, run, log),
        )

    def _run_edit_stage(
        self, run: _JobRun, edit_image: BuiltImage, log: Callable[[str], None]
    ) -> SandboxResult:
        try:
            return run_sandboxed(
                self.client,
                edit_image.tag,
                [
                    *STAGE_COMMAND,
                    "edit",
                    "--job",
                    f"/job/{JOB_FILE}",
                    "--requests",
                    f"/job/{REQUESTS_FILE}",
                    "--submission",
                    SUBMISSION_DIR,
                    "--out",
                    "/deltas",
                    "--quota",
                    self.quota,
                ],
                mounts=[
                    *run.shared,
                    Mount(self.stats_cache, STATS_MOUNT),
                    Mount(run.deltas, "/deltas", writable=True),
                ],
                limits=self.edit_limits,
                gpus="all" if self.use_gpus else "none",
                environment={**run.environment, PROVIDED_STATS_VARIABLE: STATS_MOUNT},
                labels={**run.labels, STAGE_LABEL: "edit"},
                on_output=lambda line: log(f"[edit] {line}"),
                cancel=run.edit_cancel,
            )
        finally:
            # The score stage waits for deltas until a marker says the edit stage is over.
            if not (run.deltas / DONE_MARKER).exists() and not (run.deltas / FAILED_MARKER).exists():
                (run.deltas / FAILED_MARKER).write_text("the edit stage ended without finishing\n")
            run.edit_ended.append(time.monotonic())

    def _run_score_stage(self, run: _JobRun, log: Callable[[str], None]) -> SandboxResult:
        # The score stage waits for the edit stage, so its clock covers both: the edit stage always reaches
        # its own limit first, and the job's reason names the stage that ran out of time.
        score_limits = replace(
            self.score_limits,
            timeout_seconds=self.edit_limits.timeout_seconds + self.score_limits.timeout_seconds,
        )
        try:
            return run_sandboxed(
                self.client,
                str(self.runner_image),
                [
                    *STAGE_COMMAND,
                    "score",
                    "--job",
                    f"/job/{JOB_FILE}",
                    "--deltas",
                    "/deltas",
                    "--out",
                    "/out",
                    "--timeout",
                    f"{self.edit_limits.timeout_seconds + SCORE_GRACE_SECONDS:g}",
                    *self._private_arguments(run),
                ],
                mounts=[
                    *run.shared,
                    Mount(run.deltas, "/deltas", writable=True),
                    Mount(run.out, "/out", writable=True),
                    *self._private_mounts(run),
                ],
                limits=score_limits,
                gpus="all" if self.use_gpus else "none",
                environment=run.environment,
                labels={**run.labels, STAGE_LABEL: "score"},
                on_output=lambda line: log(f"[score] {line}"),
                cancel=run.score_cancel,
            )
        finally:
            run.score_ended.append(time.monotonic())

    def _supervise(
        self, run: _JobRun, edit_future: Future[SandboxResult], score_future: Future[SandboxResult]
    ) -> None:
        """Watch both stages until both have ended, stopping the one that has no reason to go on."""
        while not (score_future.done() and edit_future.done()):
            now = time.monotonic()
            if (
                run.edit_ended
                and now > run.edit_ended[0] + SCORE_GRACE_SECONDS
                and not score_future.done()
                and (edit_future.exception() is not None or not edit_future.result().ok)
            ):
                run.score_cancel.set()  # the edit stage failed; the score stage has had its grace
            if (
                not edit_future.done()
                and not run.overfull
                and _disk_bytes(run.deltas) > self.deltas_cap_bytes
            ):
                run.overfull.append(_disk_bytes(run.deltas))
                run.edit_cancel.set()  # it ignores its quota: stop it before it fills the disk
            if run.score_ended and now > run.score_ended[0] + EDIT_GRACE_SECONDS and not edit_future.done():
                run.edit_cancel.set()  # the scores are final (or failed): the editor has nothing left to do
            time.sleep(0.2)

    def _verdict(self, run: _JobRun, edit_result: SandboxResult, score_result: SandboxResult) -> Path:
        """``results.json``, or the job's failure with the stage that caused it."""
        if run.overfull:
            raise JobFailure(
                f"the edit stage (the submitted editor) wrote more than {self.deltas_cap_bytes / GiB:.2g} GiB "
                f"into its deltas folder (quota {self.quota}) and was stopped; only the runner's delta writer "
                "may write there"
            )
        # A cancelled edit stage was stopped because the score stage had ended: the score stage's outcome
        # decides. Any other edit failure is the cause of whatever the score stage then did.
        if not edit_result.ok and edit_result.reason != EndReason.CANCELLED:
            raise JobFailure(self._edit_reason(edit_result, run.deltas))
        if not score_result.ok:
            raise JobFailure(self._score_reason(score_result))
        results = run.out / "results.json"
        if not results.is_file():
            raise JobFailure("the score stage ended without writing results.json")
        return results

    def _edit_image(self, submission: Submission, log: Callable[[str], None]) -> BuiltImage:
        try:
            return build_edit_image(self.client, str(self.runner_image), submission, log=log)
        except ImageBuildError as error:
            raise JobFailure(f"building the submission's image failed (its requirements?): {error}") from None

    def _private_arguments(self, run: _JobRun) -> list[str]:
        return ["--private-dataset", PRIVATE_DIR] if run.private else []

    def _private_mounts(self, run: _JobRun) -> list[Mount]:
        # The private split: the trusted stages' alone, never mounted where submitted code runs.
        return [Mount(self.private_dataset, PRIVATE_DIR)] if run.private and self.private_dataset else []

    def _run_prepare_stage(self, run: _JobRun, log: Callable[[str], None]) -> None:
        """The trusted prepare stage (runner image): requests.json into the job folder (with the private
        split's edit requests as a second group, when it applies), and the key statistics the hparams name
        into the host's statistics folder, which the edit stage reads."""
        job_dir = run.job_dir
        result = run_sandboxed(
            self.client,
            str(self.runner_image),
            [
                *STAGE_COMMAND,
                "prepare",
                "--job",
                f"/job/{JOB_FILE}",
                "--out",
                "/job",
                "--stats",
                STATS_MOUNT,
                *self._private_arguments(run),
            ],
            mounts=[
                Mount(job_dir, "/job", writable=True),
                Mount(self.stats_cache, STATS_MOUNT, writable=True),
                *run.models,
                *self._private_mounts(run),
            ],
            limits=self.score_limits,
            gpus="all" if self.use_gpus else "none",
            environment=run.environment,
            labels={**run.labels, STAGE_LABEL: "prepare"},
            on_output=lambda line: log(f"[prepare] {line}"),
        )
        if not result.ok or not (job_dir / REQUESTS_FILE).is_file():
            detail = _last_error_line(result.logs)
            reason = f"the prepare stage {result.describe()}"
            raise JobFailure(f"{reason}: {detail.removeprefix('error: ')}" if detail else reason)
        log(f"[runner] prepare stage done ({result.seconds:.1f} s)")

    def _edit_reason(self, result: SandboxResult, deltas: Path) -> str:
        reason = f"the edit stage (the submitted editor) {result.describe()}"
        detail = _last_error_line(result.logs)
        marker = deltas / FAILED_MARKER
        if detail is None and marker.is_file() and not marker.is_symlink():
            detail = one_line(marker.read_text(encoding="utf-8", errors="replace")[:2000], 500)
        return f"{reason}: {detail}" if detail else reason

    def _score_reason(self, result: SandboxResult) -> str:
        detail = _last_error_line(result.logs)
        if result.ok or detail is None:
            return f"the score stage {result.describe()}"
        return f"the score stage rejected the run: {detail.removeprefix('error: ')}"
