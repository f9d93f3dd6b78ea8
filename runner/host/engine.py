"""The container engine that runs the sandbox: Docker, or Podman through its Docker-compatible API.

    --engine {docker,podman}   else $KNOWGIC_CONTAINER_ENGINE, else docker

Both engines are driven by the one docker SDK client, so the sandbox (runner/host/sandbox.py), the images
(runner/host/images.py) and the executor (runner/host/containers.py) have one code path; what Podman does
differently is decided here, once, and named in docs/cluster.md ("Podman")::

    connect(engine)
      docker  ensure_docker(): $DOCKER_HOST or /var/run/docker.sock, dockerd started when root
      podman  podman_socket(): $CONTAINER_HOST, else /run/podman/podman.sock (root) or
              $XDG_RUNTIME_DIR/podman/podman.sock (a user: rootless)
              answers? -> client; else `podman system service --time=0 unix://SOCKET` started in the
              background (its log in a temporary file) and waited for
              -> check_limits(): the engine must be able to enforce memory, pids and cpu limits
                 (rootless Podman needs cgroups v2 with those controllers delegated to the user);
                 otherwise one line, and nothing runs without its limits

Every failure is one line: Podman not installed, the socket not reachable (with the service's log), or
limits the engine cannot enforce.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.errors import KnowgicError

if TYPE_CHECKING:
    import docker

ENGINE_ENV = "KNOWGIC_CONTAINER_ENGINE"
ENGINES = ("docker", "podman")
DEFAULT_ENGINE = "docker"
# Podman's own variable for its API socket (``unix:///PATH``); honoured before the default paths.
PODMAN_HOST_ENV = "CONTAINER_HOST"
ROOT_PODMAN_SOCKET = Path("/run/podman/podman.sock")
# The cgroup controllers the sandbox's limits need: memory (and swap), pids, and cpu (nano_cpus).
REQUIRED_CONTROLLERS = ("memory", "pids", "cpu")
PODMAN_PACKAGES = "apt-get install podman catatonit uidmap slirp4netns"
_ENGINE_ATTRIBUTE = "knowgic_engine"


class EngineUnavailable(KnowgicError):
    """The container engine cannot be reached, started, or trusted with the sandbox's limits."""


class DockerUnavailable(EngineUnavailable):
    """The Docker engine cannot be reached or started."""


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    """``--engine {docker,podman}``; resolved by :func:`engine_name`."""
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help=f"container engine: docker, or podman through its Docker-compatible API socket (default: "
        f"${ENGINE_ENV}, else {DEFAULT_ENGINE})",
    )


def engine_name(given: str | None = None) -> str:
    """``given``, else ``$KNOWGIC_CONTAINER_ENGINE``, else ``docker``; a wrong variable is one line."""
    if given:
        return given
    value = os.environ.get(ENGINE_ENV)
    if not value:
        return DEFAULT_ENGINE
    if value not in ENGINES:
        raise EngineUnavailable(f"${ENGINE_ENV} is {value!r}; expected one of {', '.join(ENGINES)}")
    return value


def podman_socket() -> Path:
    """Where Podman's API socket is: ``$CONTAINER_HOST`` (``unix://PATH``), else the root socket for root,
    else the user's (``$XDG_RUNTIME_DIR/podman/podman.sock``)."""
    named = os.environ.get(PODMAN_HOST_ENV)
    if named:
        if not named.startswith("unix://"):
            raise EngineUnavailable(
                f"${PODMAN_HOST_ENV}={named}: the runner reaches Podman through a local unix:// socket only"
            )
        return Path(named.removeprefix("unix://"))
    if os.geteuid() == 0:
        return ROOT_PODMAN_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return Path(runtime) / "podman" / "podman.sock"


def docker_sdk() -> Any:
    """The docker SDK module (the runner extra), or one line saying how to install it."""
    try:
        import docker
    except ImportError as error:  # the runner extra is not installed
        raise EngineUnavailable("the docker SDK is not installed: pip install 'knowgic[runner]'") from error
    return docker


def ensure_docker(
    *, start: bool = True, timeout: float = 90.0, log: Callable[[str], None] = lambda _: None
) -> docker.DockerClient:
    """A client of a running Docker engine; starts ``dockerd`` in the background when none answers.

    Starting needs root and ``dockerd`` on PATH (Debian's docker.io); its log goes to a temporary file
    whose path is in the error message when the engine does not come up within ``timeout`` seconds.
    """
    docker = docker_sdk()
    try:
        client = docker.from_env(timeout=600)
        client.ping()
        return client
    except Exception as first_error:
        reason = str(first_error).splitlines()[0][:200]
        dockerd = shutil.which("dockerd")
        if not start or dockerd is None or os.geteuid() != 0:
            how = "start it (`sudo dockerd &` or `sudo systemctl start docker`)"
            if dockerd is None:
                how = "install Docker (Debian: apt-get install docker.io) and start it"
            raise DockerUnavailable(f"cannot reach the Docker engine ({reason}): {how}") from first_error
    log_file = Path(tempfile.mkstemp(prefix="dockerd-", suffix=".log")[1])
    log(f"starting dockerd (log: {log_file})")
    with log_file.open("ab") as handle:
        subprocess.Popen(
            [dockerd],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client = docker.from_env(timeout=600)
            client.ping()
            return client
        except Exception:
            time.sleep(0.5)
    raise DockerUnavailable(f"dockerd did not answer within {timeout:.0f} s; see its log {log_file}")


def _ping(docker: Any, socket: Path) -> Any:
    client = docker.DockerClient(base_url=f"unix://{socket}", timeout=600)
    try:
        client.ping()
    except Exception:
        client.close()
        raise
    return client


def ensure_podman(
    *, start: bool = True, timeout: float = 60.0, log: Callable[[str], None] = lambda _: None
) -> docker.DockerClient:
    """A docker SDK client of Podman's API socket (:func:`podman_socket`); starts ``podman system service``
    when the socket does not answer, and checks that the engine can enforce the sandbox's limits."""
    docker = docker_sdk()
    socket = podman_socket()
    try:
        client = _ping(docker, socket)
    except Exception as first_error:
        reason = str(first_error).splitlines()[0][:160] if str(first_error) else type(first_error).__name__
        podman = shutil.which("podman")
        if podman is None:
            raise EngineUnavailable(
                f"Podman is not installed (no `podman` on PATH): install it (Debian: {PODMAN_PACKAGES}), "
                "or use --engine docker"
            ) from first_error
        if not start:
            raise EngineUnavailable(
                f"cannot reach Podman's API socket {socket} ({reason}): start it with "
                f"`podman system service --time=0 unix://{socket} &`"
            ) from first_error
        client = _start_service(docker, podman, socket, timeout, log)
    check_limits(client)
    setattr(client, _ENGINE_ATTRIBUTE, "podman")
    return client


def _start_service(
    docker: Any, podman: str, socket: Path, timeout: float, log: Callable[[str], None]
) -> docker.DockerClient:
    socket.parent.mkdir(parents=True, exist_ok=True)
    log_file = Path(tempfile.mkstemp(prefix="podman-service-", suffix=".log")[1])
    log(f"starting `podman system service` on {socket} (log: {log_file})")
    # Podman reads $CONTAINER_HOST as the address of a remote engine to talk to, not one to serve.
    env = {k: v for k, v in os.environ.items() if k != PODMAN_HOST_ENV}
    with log_file.open("ab") as handle:
        # --time=0: the service stays up (a worker may wait longer than Podman's 5 s idle default between jobs).
        service = subprocess.Popen(
            [podman, "system", "service", "--time=0", f"unix://{socket}"],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and service.poll() is None:
        try:
            return _ping(docker, socket)
        except Exception:
            time.sleep(0.3)
    last = (log_file.read_text(errors="replace").strip().splitlines() or ["no output"])[-1][:200]
    how = (
        f"exited with {service.returncode}"
        if service.poll() is not None
        else f"did not answer within {timeout:.0f} s"
    )
    raise EngineUnavailable(
        f"cannot reach Podman's API socket {socket}: `podman system service` {how} ({last}); its log: {log_file}"
    )


@dataclass(frozen=True)
class PodmanHost:
    """What Podman's own ``/libpod/info`` says about the host, as far as the sandbox cares."""

    version: str
    rootless: bool
    cgroup_version: str
    controllers: tuple[str, ...]
    storage_driver: str

    @property
    def missing_controllers(self) -> list[str]:
        return [name for name in REQUIRED_CONTROLLERS if name not in self.controllers]


def podman_host(client: docker.DockerClient) -> PodmanHost:
    api = client.api
    info = api._result(api._get(api._url("/libpod/info")), json=True)
    host = info.get("host", {})
    return PodmanHost(
        version=str(info.get("version", {}).get("Version", "?")),
        rootless=bool(host.get("security", {}).get("rootless")),
        cgroup_version=str(host.get("cgroupVersion", "?")),
        controllers=tuple(host.get("cgroupControllers") or ()),
        storage_driver=str(info.get("store", {}).get("graphDriverName", "?")),
    )


def check_limits(client: docker.DockerClient) -> PodmanHost:
    """Refuse a Podman that cannot enforce the sandbox's memory, pids and cpu limits (it would ignore
    them with a warning, and a submission would run unbounded)."""
    host = podman_host(client)
    missing = host.missing_controllers
    if missing:
        who = "rootless Podman" if host.rootless else "Podman"
        need = (
            "cgroups v2 with the memory, pids and cpu controllers delegated to this user (systemd: "
            "Delegate=memory pids cpu in user@.service), or rootful Podman"
            if host.rootless
            else "the memory, pids and cpu cgroup controllers"
        )
        raise EngineUnavailable(
            f"{who} {host.version} on this host (cgroups {host.cgroup_version}) cannot limit "
            f"{', '.join(missing)}; the sandbox never runs a submission without its limits: it needs {need}"
        )
    return host


def connect(
    engine: str | None = None, *, start: bool = True, log: Callable[[str], None] = lambda _: None
) -> docker.DockerClient:
    """A client of ``engine`` (:func:`engine_name`), found or started; raises :class:`EngineUnavailable`
    with one line."""
    name = engine_name(engine)
    if name == "podman":
        return ensure_podman(start=start, log=log)
    client = ensure_docker(start=start, log=log)
    setattr(client, _ENGINE_ATTRIBUTE, "docker")
    return client


def engine_of(client: Any) -> str:
    """``docker`` or ``podman``: what :func:`connect` recorded, else what the engine says it is."""
    known = getattr(client, _ENGINE_ATTRIBUTE, None)
    if known is None:
        try:
            components = client.version().get("Components") or []
        except Exception:
            components = []
        podman = any("podman" in str(c.get("Name", "")).lower() for c in components)
        known = "podman" if podman else "docker"
        setattr(client, _ENGINE_ATTRIBUTE, known)
    return str(known)


def podman_rlimits() -> dict[str, int]:
    """The open-files and processes limits a Podman container is given: this process's hard limits (the
    processes one no higher than the kernel's pid_max, above which it limits nothing).

    Rootful Podman asks the OCI runtime for 1,048,576 open files and 4,194,304 processes by default, which
    it cannot set where the service's own hard limits are lower (`error setting rlimit type 7: operation not
    permitted`); Docker hands its daemon's limits on by itself. The sandbox's process limit is the pids
    cgroup's, as with Docker; these are only what the runtime can set."""

    def hard(kind: int) -> int:
        value = resource.getrlimit(kind)[1]
        return 1 << 22 if value == resource.RLIM_INFINITY else int(value)

    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text().strip())
    except (OSError, ValueError):
        pid_max = 1 << 22
    return {"nofile": hard(resource.RLIMIT_NOFILE), "nproc": min(hard(resource.RLIMIT_NPROC), pid_max)}
