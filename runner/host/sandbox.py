"""Run one command in a locked-down container and say how it ended.

Both runner stages run here. What a container gets:

- no network (``network_mode="none"``), a read-only root file system, a size-capped tmpfs at /tmp;
- bind mounts only as listed, read-only unless a mount says otherwise (the runner makes the job's output
  folder the only writable one);
- a non-root user, every capability dropped, ``no-new-privileges``, an init process that reaps children;
- limits on processes (pids), memory (swap included), CPU time share (nano_cpus), and wall-clock time:
  the host kills the container at ``timeout_seconds``, and the command runs under coreutils ``timeout``
  so that it also dies when the host process that watches it is gone;
- logs bounded on disk (json-file driver, one file of ``log_file_bytes``) and in memory (the result keeps
  at most ``log_bytes``: the beginning and the end);
- every GPU through ``device_requests`` when the host has one, otherwise the CPU; the result says which.

The engine is Docker or Podman (runner/host/engine.py), both through the docker SDK. For Podman the
container also gets the open-files and processes limits this host can set (:func:`podman_rlimits`), and,
rootless, ``userns=keep-id`` so that the writable mounts stay the caller's; GPUs are refused (Podman's
Docker-compatible API does not honour ``device_requests``).

:class:`SandboxResult` names why the container ended: it exited (with its code), it was OOM-killed, it
ran out of time, it hit its process limit, or it was cancelled by the caller.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.errors import KnowgicError
from knowgic.runner.host.engine import engine_of, podman_rlimits

if TYPE_CHECKING:
    import docker

GiB = 1 << 30
# The one writable place every container has (a size-capped tmpfs) besides its writable mounts.
SCRATCH_DIR = "/tmp"
MiB = 1 << 20
# Seconds the in-container `timeout` waits beyond the host's limit: the host kills first when it is alive.
IN_CONTAINER_GRACE_SECONDS = 30
DEFAULT_USER = "10001:10001"  # the image's `knowgic` user (Dockerfile)
PODMAN_GPU_REFUSAL = (
    "GPUs through Podman are not supported: its Docker-compatible API ignores device requests; "
    "run with --gpus none, or with --engine docker and the NVIDIA Container Toolkit"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_FORK_REFUSED = re.compile(
    r"fork: (retry: )?Resource temporarily unavailable|BlockingIOError: \[Errno 11\]|"
    r"can't start new thread|\[Errno 11\] Resource temporarily unavailable"
)


class EndReason(StrEnum):
    EXITED = "exited"
    OOM_KILLED = "oom-killed"
    TIMEOUT = "timeout"
    PIDS_LIMIT = "pids-limit"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one container."""

    memory_bytes: int = 8 * GiB
    cpus: float = 2.0
    pids: int = 512
    timeout_seconds: float = 3600.0
    tmpfs_bytes: int = 1 * GiB
    log_bytes: int = 256 * 1024  # kept in the result: half from the start, half from the end
    log_file_bytes: int = 16 * MiB  # on the engine's disk (json-file max-size, one file)

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "pids", "tmpfs_bytes", "log_bytes", "log_file_bytes"):
            if getattr(self, name) <= 0:
                raise KnowgicError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)}")
        if self.cpus <= 0 or self.timeout_seconds <= 0:
            raise KnowgicError("SandboxLimits: cpus and timeout_seconds must be positive")


@dataclass(frozen=True)
class Mount:
    """A host folder or file seen inside the container at ``target``; read-only unless ``writable``."""

    source: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class SandboxResult:
    """How a sandboxed command ended."""

    reason: EndReason
    exit_code: int | None
    device: str  # "cuda:all" or "cpu"
    seconds: float
    logs: str
    logs_truncated: bool
    oom_killed: bool = False
    pids_limit_hit: bool = False
    container_id: str = ""
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    @property
    def ok(self) -> bool:
        return self.reason == EndReason.EXITED and self.exit_code == 0

    def describe(self) -> str:
        """One line a person can act on."""
        limits = self.limits
        if self.reason == EndReason.TIMEOUT:
            return f"ran past its wall-clock limit of {limits.timeout_seconds:g} s and was killed"
        if self.reason == EndReason.OOM_KILLED:
            return f"was killed for using more than its memory limit of {limits.memory_bytes / GiB:g} GiB"
        if self.reason == EndReason.PIDS_LIMIT:
            return (
                f"hit its limit of {limits.pids} processes (exit code {self.exit_code}); "
                "a fork bomb or an unbounded worker pool"
            )
        if self.reason == EndReason.CANCELLED:
            return "was stopped because the other stage of the job failed"
        return f"exited with code {self.exit_code}"


def host_has_gpu() -> bool:
    """Whether an NVIDIA GPU is visible here (the engine needs the NVIDIA container toolkit to pass it on)."""
    if not Path("/dev/nvidiactl").exists() and shutil.which("nvidia-smi") is None:
        return False
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Path("/dev/nvidia0").exists()
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def resolve_gpus(gpus: str) -> bool:
    """``all`` | ``none`` | ``auto`` (all when the host has a GPU) -> whether to ask for every GPU."""
    if gpus not in ("all", "none", "auto"):
        raise KnowgicError(f"--gpus must be all, none or auto, got {gpus!r}")
    if gpus == "auto":
        return host_has_gpu()
    return gpus == "all"


class _LogReader:
    """Follows a container's output in a thread, keeping the first half of ``cap`` bytes and passing
    whole lines to ``on_line``; it stops reading (the engine keeps a bounded file) once the cap is reached."""

    def __init__(self, container: Any, cap: int, on_line: Callable[[str], None] | None) -> None:
        self.head = bytearray()
        self.cap = cap // 2
        self.truncated = False
        self._container = container
        self._on_line = on_line
        self._pending = b""
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            stream = self._container.logs(stream=True, follow=True, stdout=True, stderr=True)
            for chunk in stream:
                room = self.cap - len(self.head)
                self.head += chunk[:room]
                self._emit(chunk[:room])
                if len(chunk) > room:
                    self.truncated = True
                    stream.close()
                    return
        except Exception:  # the container went away; what was read is kept
            return

    def _emit(self, data: bytes) -> None:
        if self._on_line is None:
            return
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            with contextlib.suppress(Exception):  # a failing log sink must not stop the reading
                # NUL and other control bytes would break a database's text column; a line is text.
                self._on_line(_CONTROL.sub("", line.decode("utf-8", "replace")))

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class _PeakWatcher:
    """Follows the container's peak memory in a thread, every 10 ms while its cgroup exists.

    A SIGKILL (137) with the engine's OOM flag unset is the kernel's OOM killer hitting a child process,
    which the engines do not always report (Podman 4.3 at times not even for the main one): it counts as
    OOM when memory reached the limit. Podman removes the cgroup as soon as the container exits, so the
    peak is read while it runs, often enough to see a process that fills its limit in a tenth of a second."""

    def __init__(self, container_id: str) -> None:
        self.peak = 0
        self._candidates = _memory_peak_files(container_id)
        self._file: Path | None = None  # the candidate that exists, once found: one read per tick after that
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for path in (self._file,) if self._file is not None else self._candidates:
            value = _read_bytes_count(path)
            if value is not None:
                self._file, self.peak = path, max(self.peak, value)
                return

    def _run(self) -> None:
        while not self._stopped.wait(0.01):
            self._read()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(1)
        self._read()


def _pids_events(container_id: str) -> int | None:
    """How many forks the pids cgroup refused so far (cgroup v1 or v2, cgroupfs or systemd driver)."""
    candidates = (
        f"/sys/fs/cgroup/pids/docker/{container_id}/pids.events",
        f"/sys/fs/cgroup/pids/system.slice/docker-{container_id}.scope/pids.events",
        f"/sys/fs/cgroup/docker/{container_id}/pids.events",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/pids.events",
        # Podman's cgroupfs and systemd managers
        f"/sys/fs/cgroup/pids/libpod_parent/libpod-{container_id}/pids.events",
        f"/sys/fs/cgroup/pids/machine.slice/libpod-{container_id}.scope/pids.events",
        f"/sys/fs/cgroup/machine.slice/libpod-{container_id}.scope/container/pids.events",
        f"/sys/fs/cgroup/machine.slice/libpod-{container_id}.scope/pids.events",
    )
    for candidate in candidates:
        try:
            text = Path(candidate).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
    return None


def _docker() -> Any:
    import docker

    return docker


def run_sandboxed(
    client: docker.DockerClient,
    image: str,
    command: Sequence[str],
    *,
    mounts: Sequence[Mount] = (),
    limits: SandboxLimits | None = None,
    gpus: str = "auto",
    environment: Mapping[str, str] | None = None,
    user: str | None = None,
    labels: Mapping[str, str] | None = None,
    name: str | None = None,
    on_output: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
    network: bool = False,
) -> SandboxResult:
    """Run ``command`` in ``image`` under the sandbox described in the module docstring; never raises for
    what the command does (the result says how it ended), only when the engine refuses to start it.

    ``user`` defaults to the image's non-root user (uid 10001); a root caller's writable mounts are handed
    to that user for the run. ``cancel``, when set by another thread, kills the container. ``network``
    gives the container the engine's default network: only for trusted commands of the project's image
    (fetching wheels), never for a stage that runs submitted code.
    """
    docker = _docker()
    limits = limits or SandboxLimits()
    use_gpus = resolve_gpus(gpus)
    podman = engine_of(client) == "podman"
    if podman and use_gpus:
        raise KnowgicError(PODMAN_GPU_REFUSAL)
    if user is None:
        user = DEFAULT_USER if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}"
    if user.split(":")[0] in ("0", "root"):
        raise KnowgicError("run_sandboxed never runs a container as root")
    if os.geteuid() == 0:  # the container user must be able to write its output folders
        uid, _, gid = user.partition(":")
        for mount in mounts:
            if mount.writable:
                os.chown(mount.source, int(uid), int(gid or uid))
    env = {"HOME": SCRATCH_DIR, "TMPDIR": SCRATCH_DIR, "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"}
    env.update(environment or {})
    if not use_gpus:
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    docker_mounts = [
        docker.types.Mount(
            target=mount.target,
            source=str(Path(mount.source).resolve()),
            type="bind",
            read_only=not mount.writable,
        )
        for mount in mounts
    ]
    device_requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if use_gpus else None
    engine_specific: dict[str, Any] = {}
    if podman:
        engine_specific["ulimits"] = [
            docker.types.Ulimit(name=name, soft=value, hard=value) for name, value in podman_rlimits().items()
        ]
        if os.geteuid() != 0:  # rootless: the caller's uid is the same inside, so its folders stay writable
            engine_specific["userns_mode"] = "keep-id"
    hard_limit = int(limits.timeout_seconds) + IN_CONTAINER_GRACE_SECONDS
    container = client.containers.create(
        image,
        command=list(command),
        entrypoint=["timeout", "--signal=KILL", str(hard_limit)],
        name=name,
        user=user,
        environment=env,
        labels=dict(labels or {}),
        mounts=docker_mounts,
        network_mode="bridge" if network else "none",
        read_only=True,
        tmpfs={SCRATCH_DIR: f"rw,nosuid,nodev,size={limits.tmpfs_bytes}"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        init=True,
        pids_limit=limits.pids,
        mem_limit=limits.memory_bytes,
        memswap_limit=limits.memory_bytes,  # no swap beyond the memory limit
        nano_cpus=int(limits.cpus * 1e9),
        device_requests=device_requests,
        log_config=docker.types.LogConfig(
            type="json-file", config={"max-size": str(limits.log_file_bytes), "max-file": "1"}
        ),
        ipc_mode="private",
        **engine_specific,
    )
    started = time.monotonic()
    reason: EndReason | None = None
    pids_hit = False
    peaks: _PeakWatcher | None = None
    reader: _LogReader | None = None
    try:
        container.start()
        peaks = _PeakWatcher(str(container.id))
        reader = _LogReader(container, limits.log_bytes, on_output)
        deadline = started + limits.timeout_seconds
        while True:
            container.reload()
            if container.status not in ("created", "running", "restarting"):
                break
            refused = _pids_events(str(container.id))
            pids_hit = pids_hit or bool(refused)
            if cancel is not None and cancel.is_set():
                reason = EndReason.CANCELLED
            elif time.monotonic() >= deadline:
                reason = EndReason.TIMEOUT
            if reason is not None:
                container.kill()
                container.wait(timeout=60)
                break
            time.sleep(0.1)
        seconds = time.monotonic() - started
        container.reload()
        state = container.attrs.get("State", {})
        exit_code = state.get("ExitCode")
        oom = bool(state.get("OOMKilled"))
        if reason is None:
            peaks.stop()
            if oom or (exit_code == 137 and peaks.peak >= 0.95 * limits.memory_bytes):
                reason = EndReason.OOM_KILLED
            elif pids_hit and exit_code != 0:
                reason = EndReason.PIDS_LIMIT
            elif exit_code == 137 and seconds >= hard_limit:
                reason = EndReason.TIMEOUT
            else:
                reason = EndReason.EXITED
        reader.join(timeout=5)
        logs, truncated = _collect_logs(container, reader, limits.log_bytes)
        if _FORK_REFUSED.search(logs):
            # The cgroup is gone once the container exits, so a process that ends right after its fork was
            # refused is known by its error: with no ulimit on processes, only the pids limit refuses forks.
            pids_hit = True
            if reason == EndReason.EXITED and exit_code != 0:
                reason = EndReason.PIDS_LIMIT
        return SandboxResult(
            reason=reason,
            exit_code=exit_code,
            device="cuda:all" if use_gpus else "cpu",
            seconds=seconds,
            logs=logs,
            logs_truncated=truncated,
            oom_killed=oom or reason == EndReason.OOM_KILLED,
            pids_limit_hit=pids_hit,
            container_id=str(container.id),
            limits=limits,
        )
    finally:
        if peaks is not None:
            peaks.stop()
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True, v=True)


def _memory_peak_files(container_id: str) -> tuple[Path, ...]:
    """Where a container's peak memory is kept, by engine and cgroup version (v1 memory.max_usage_in_bytes,
    v2 memory.peak; Docker's and Podman's paths): one of them exists while its cgroup does."""
    return tuple(
        Path(candidate)
        for candidate in (
            f"/sys/fs/cgroup/memory/docker/{container_id}/memory.max_usage_in_bytes",
            f"/sys/fs/cgroup/docker/{container_id}/memory.peak",
            f"/sys/fs/cgroup/memory/libpod_parent/libpod-{container_id}/memory.max_usage_in_bytes",
            f"/sys/fs/cgroup/memory/machine.slice/libpod-{container_id}.scope/memory.max_usage_in_bytes",
            f"/sys/fs/cgroup/machine.slice/libpod-{container_id}.scope/container/memory.peak",
        )
    )


def _read_bytes_count(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _collect_logs(container: Any, reader: _LogReader, cap: int) -> tuple[str, bool]:
    """The first half of ``cap`` bytes as read live, and when there was more, the last half."""
    head = bytes(reader.head)
    if not reader.truncated:
        return head.decode("utf-8", "replace"), False
    try:
        tail = container.logs(stdout=True, stderr=True, tail=400)[-(cap // 2) :]
    except Exception:
        tail = b""
    text = (
        head.decode("utf-8", "replace") + "\n[... output truncated ...]\n" + tail.decode("utf-8", "replace")
    )
    return text, True
