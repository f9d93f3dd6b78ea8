"""The container engine (runner/host/engine.py): which one, where Podman's socket is, and the one-line
errors when it cannot be had. The errors that come before any engine run in the default suite; the
socket found, started and refused run against a real Podman (markers ``container`` and ``podman``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.runner.host.engine import (
    ENGINE_ENV,
    ROOT_PODMAN_SOCKET,
    EngineUnavailable,
    connect,
    engine_name,
    engine_of,
    podman_rlimits,
    podman_socket,
)

GOOD_WHEEL = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"  # named right; never installed here


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``knowgic ARGV`` must exit 2 with one error line; that line."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    _, err = capsys.readouterr()
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.fixture
def no_podman(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No Podman to reach or start: its socket variable names a path nobody listens on, PATH is empty."""
    socket = tmp_path / "no-podman.sock"
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{socket}")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    return socket


def test_the_engine_is_the_option_else_the_variable_else_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert engine_name(None) == "docker"
    monkeypatch.setenv(ENGINE_ENV, "podman")
    assert engine_name(None) == "podman"
    assert engine_name("docker") == "docker"
    monkeypatch.setenv(ENGINE_ENV, "lxc")
    with pytest.raises(
        EngineUnavailable, match=r"\$KNOWGIC_CONTAINER_ENGINE is 'lxc'; expected one of docker, podman"
    ):
        engine_name(None)


def test_podman_s_socket_is_the_variable_else_root_s_else_the_user_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path}/podman.sock")
    assert podman_socket() == tmp_path / "podman.sock"
    monkeypatch.setenv("CONTAINER_HOST", "tcp://10.0.0.1:8080")
    with pytest.raises(EngineUnavailable, match="through a local unix:// socket only"):
        podman_socket()
    monkeypatch.delenv("CONTAINER_HOST")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    expected = ROOT_PODMAN_SOCKET if os.geteuid() == 0 else tmp_path / "podman" / "podman.sock"
    assert podman_socket() == expected


def test_podman_s_container_rlimits_are_ones_this_host_can_set() -> None:
    import resource

    limits = podman_rlimits()
    assert set(limits) == {"nofile", "nproc"}
    for name, kind in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(kind)[1]
        assert limits[name] > 0 and (hard == resource.RLIM_INFINITY or limits[name] <= hard)
    assert limits["nproc"] <= int(Path("/proc/sys/kernel/pid_max").read_text())


def test_no_podman_is_one_line(capsys, no_podman: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match=r"Podman is not installed \(no `podman` on PATH\)"):
        connect("podman")
    wheel = tmp_path / GOOD_WHEEL
    wheel.write_bytes(b"")
    line = refused(
        capsys, "runner", "build-image", "--engine", "podman", "--local-base", "--torch-wheel", str(wheel)
    )
    assert (
        "Podman is not installed" in line and "apt-get install podman" in line and "--engine docker" in line
    )


def test_a_wrong_engine_variable_is_one_line(capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENGINE_ENV, "lxc")
    line = refused(capsys, "runner", "worker", "--once", "--store", str(tmp_path / "store"))
    assert "$KNOWGIC_CONTAINER_ENGINE is 'lxc'" in line
    assert not (tmp_path / "store").exists()  # refused before anything was made


def test_gpus_through_podman_are_refused_before_any_engine(no_podman: Path, tmp_path: Path) -> None:
    """A worker on a GPU host (``--gpus all``, or ``auto`` there) with Podman stops as it starts."""
    from knowgic.runner.host.containers import ContainerExecutor

    with pytest.raises(KnowgicError, match=r"GPUs through Podman are not supported.*--gpus none"):
        ContainerExecutor(gpus="all", engine="podman", stats_cache=tmp_path / "stats")


# -- with a real Podman ------------------------------------------------------------------------------------


def _stop_service(socket: Path) -> None:
    """Stop the `podman system service` this test started, known by its own socket's path."""
    wanted = f"unix://{socket}".encode()
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"service" in command and wanted in command:
            os.kill(int(entry.name), signal.SIGTERM)


@pytest.mark.container
@pytest.mark.podman
def test_podman_s_service_is_started_when_its_socket_is_silent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    socket = tmp_path / "run" / "podman.sock"
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{socket}")
    with pytest.raises(
        EngineUnavailable, match=rf"cannot reach Podman's API socket {socket} .*podman system service"
    ):
        connect("podman", start=False)
    said: list[str] = []
    try:
        client = connect("podman", log=said.append)
        assert client.ping() and engine_of(client) == "podman"
        assert said and "starting `podman system service`" in said[0]
        client.close()
    finally:
        _stop_service(socket)
