"""The sandbox against plain hostile commands, on a real Docker engine and on Podman (marker ``container``;
the Podman case also ``podman``), and the runner's image and sandbox helpers that need no engine (default
suite).

Each engine case runs a short Python program in the locally made Debian base image under run_sandboxed
and checks that it was contained (the result says why it ended) and that the host was not touched.
"""

from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest

from knowgic.runner.host.sandbox import EndReason, Mount, SandboxLimits, SandboxResult, run_sandboxed

SMALL = SandboxLimits(memory_bytes=256 << 20, cpus=1.0, pids=64, timeout_seconds=30, log_bytes=64 * 1024)


def _python(client: Any, image: str, program: str, **kwargs: Any) -> SandboxResult:
    return run_sandboxed(
        client, image, ["python3", "-c", textwrap.dedent(program)], gpus="none", **{"limits": SMALL, **kwargs}
    )


def _shared_dir(path: Path) -> Path:
    """A folder the container's user may read (pytest's tmp folders are private to their owner)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


@pytest.mark.container
def test_a_plain_command_runs_non_root_without_capabilities(
    engine_client: Any, engine_base_image: str
) -> None:
    result = _python(
        engine_client,
        engine_base_image,
        """
        import os
        status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
        print("uid", os.getuid(), "caps", status["CapEff"].strip(), "nnp", status["NoNewPrivs"].strip())
        """,
    )
    assert result.ok, result.logs
    assert result.device == "cpu"
    assert "uid 10001 caps 0000000000000000 nnp 1" in result.logs


@pytest.mark.container
def test_network_egress_is_impossible(engine_client: Any, engine_base_image: str) -> None:
    result = _python(
        engine_client,
        engine_base_image,
        """
        import socket, sys
        print("interfaces", sorted(name for _, name in socket.if_nameindex()))
        for host, port in (("1.1.1.1", 53), ("151.101.0.223", 443), ("172.17.0.1", 2375)):
            try:
                socket.create_connection((host, port), timeout=3).close()
                print("CONNECTED", host); sys.exit(0)
            except OSError as error:
                print("refused", host, error.errno)
        try:
            socket.getaddrinfo("pypi.org", 443)
            print("RESOLVED")
        except OSError:
            print("no dns")
        sys.exit(3)
        """,
    )
    assert result.reason == EndReason.EXITED and result.exit_code == 3, result.logs
    assert "interfaces ['lo']" in result.logs
    assert "CONNECTED" not in result.logs and "RESOLVED" not in result.logs


@pytest.mark.container
def test_writes_land_only_in_the_writable_mount(
    engine_client: Any, engine_base_image: str, tmp_path: Path
) -> None:
    out = _shared_dir(tmp_path / "out")
    readonly = _shared_dir(tmp_path / "inputs")
    (readonly / "job.json").write_text("{}")
    (readonly / "job.json").chmod(0o644)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = _python(
        engine_client,
        engine_base_image,
        """
        import os
        for path in ("/etc/evil", "/usr/lib/python3/evil.py", "/inputs/job.json", "/inputs/new", "/evil", "/home/evil"):
            try:
                with open(path, "w") as handle:
                    handle.write("x")
                print("WROTE", path)
            except OSError as error:
                print("denied", path, error.strerror)
        open("/tmp/scratch", "w").write("scratch is fine")
        open("/out/result.txt", "w").write("ok")
        """,
        mounts=[Mount(out, "/out", writable=True), Mount(readonly, "/inputs")],
    )
    assert result.ok, result.logs
    assert "WROTE" not in result.logs
    assert result.logs.count("Read-only file system") >= 4
    assert (out / "result.txt").read_text() == "ok"
    assert (readonly / "job.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/evil").exists()


@pytest.mark.container
def test_host_files_are_out_of_reach(engine_client: Any, engine_base_image: str, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("the host's secret")
    result = _python(
        engine_client,
        engine_base_image,
        f"""
        import glob, os
        hits = []
        for path in ({str(secret)!r}, "/proc/1/root{secret}", "/etc/shadow", "/var/run/docker.sock", "/root/.bashrc"):
            try:
                data = open(path).read()
                hits.append((path, "host's secret" in data))
                print("READ", path)
            except OSError as error:
                print("denied", path, error.strerror)
        print("docker socket", os.path.exists("/var/run/docker.sock"))
        print("secret visible", any(secret for _, secret in hits))
        """,
    )
    assert result.ok, result.logs
    assert "secret visible False" in result.logs
    assert "docker socket False" in result.logs
    assert "READ /etc/shadow" not in result.logs  # the image's own shadow file, and even that is root's only


@pytest.mark.container
def test_a_fork_bomb_hits_the_pids_limit(engine_client: Any, engine_base_image: str) -> None:
    result = _python(
        engine_client,
        engine_base_image,
        """
        import os, time
        children = 0
        while True:
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                children += 1
            except OSError as error:
                print("fork refused after", children, "children:", error)
                raise SystemExit(5)
        """,
    )
    assert result.reason == EndReason.PIDS_LIMIT, (result.reason, result.logs)
    assert result.pids_limit_hit and result.exit_code == 5
    assert "processes" in result.describe()
    assert "fork refused after" in result.logs


@pytest.mark.container
def test_a_shell_fork_bomb_is_killed_at_the_timeout(engine_client: Any, engine_base_image: str) -> None:
    limits = SandboxLimits(memory_bytes=256 << 20, cpus=0.5, pids=64, timeout_seconds=8)
    result = run_sandboxed(
        engine_client,
        engine_base_image,
        ["bash", "-c", "bomb() { bomb | bomb & }; bomb; wait"],
        limits=limits,
        gpus="none",
    )
    # It ends at the timeout, or earlier when the first shell's `wait` returns; either way forks were refused.
    assert result.pids_limit_hit, (result.reason, result.logs[-500:])
    assert result.seconds < 40
    assert _engine_is_healthy(engine_client)


@pytest.mark.container
def test_a_memory_bomb_is_oom_killed(engine_client: Any, engine_base_image: str) -> None:
    result = _python(
        engine_client,
        engine_base_image,
        """
        blocks = []
        while True:
            blocks.append(bytearray(16 << 20))
            if len(blocks) % 8 == 0:
                print("allocated", 16 * len(blocks), "MiB", flush=True)
        """,
    )
    assert result.reason == EndReason.OOM_KILLED, (result.reason, result.exit_code, result.logs[-500:])
    assert result.oom_killed
    assert "memory limit of 0.25 GiB" in result.describe()


@pytest.mark.container
def test_an_endless_loop_is_killed_at_the_timeout(engine_client: Any, engine_base_image: str) -> None:
    limits = SandboxLimits(timeout_seconds=3, cpus=0.5)
    result = run_sandboxed(
        engine_client, engine_base_image, ["python3", "-c", "while True: pass"], limits=limits, gpus="none"
    )
    assert result.reason == EndReason.TIMEOUT
    assert 3 <= result.seconds < 15
    assert "wall-clock limit of 3 s" in result.describe()


@pytest.mark.container
def test_a_log_flood_is_capped_and_keeps_the_end(engine_client: Any, engine_base_image: str) -> None:
    lines: list[str] = []
    result = _python(
        engine_client,
        engine_base_image,
        """
        import sys
        line = "x" * 1023 + "\\n"
        for _ in range(64 * 1024):  # 64 MiB
            sys.stdout.write(line)
        print("THE LAST LINE", flush=True)
        """,
        on_output=lines.append,
    )
    assert result.ok, result.describe()
    assert result.logs_truncated
    assert len(result.logs.encode()) <= SMALL.log_bytes + 100
    assert result.logs.rstrip().endswith("THE LAST LINE")
    assert 0 < sum(len(line) + 1 for line in lines) <= SMALL.log_bytes // 2


@pytest.mark.container
def test_a_cancelled_run_is_killed(engine_client: Any, engine_base_image: str) -> None:
    import threading

    cancel = threading.Event()
    timer = threading.Timer(2.0, cancel.set)
    timer.start()
    result = run_sandboxed(
        engine_client,
        engine_base_image,
        ["sleep", "600"],
        limits=SandboxLimits(timeout_seconds=60),
        gpus="none",
        cancel=cancel,
    )
    assert result.reason == EndReason.CANCELLED
    assert result.seconds < 20


@pytest.mark.container
def test_no_container_is_left_behind(engine_client: Any, engine_base_image: str) -> None:
    result = run_sandboxed(
        engine_client, engine_base_image, ["true"], gpus="none", labels={"org.knowgic.test": "leftover"}
    )
    assert result.ok
    assert engine_client.containers.list(all=True, filters={"label": "org.knowgic.test=leftover"}) == []


@pytest.mark.container
def test_root_is_refused(engine_client: Any, engine_base_image: str) -> None:
    from knowgic.errors import KnowgicError

    with pytest.raises(KnowgicError, match="root"):
        run_sandboxed(engine_client, engine_base_image, ["true"], user="0:0", gpus="none")


def _engine_is_healthy(client: Any) -> bool:
    return bool(client.ping()) and os.path.exists("/") and socket.gethostname() != ""


# -- no engine needed ---------------------------------------------------------------------------------


def test_limits_refuse_nonsense() -> None:
    from knowgic.errors import KnowgicError

    with pytest.raises(KnowgicError, match="pids"):
        SandboxLimits(pids=0)
    with pytest.raises(KnowgicError, match="timeout_seconds"):
        SandboxLimits(timeout_seconds=0)


def test_limits_come_from_the_environment() -> None:
    from knowgic.errors import KnowgicError
    from knowgic.runner.host.containers import default_limits

    limits = default_limits(
        {"KNOWGIC_SANDBOX_MEMORY": "3G", "KNOWGIC_SANDBOX_PIDS": "64", "KNOWGIC_SANDBOX_TIMEOUT": "90"}
    )
    assert (limits.memory_bytes, limits.pids, limits.timeout_seconds) == (3 << 30, 64, 90.0)
    assert default_limits({}).memory_bytes == 16 << 30
    with pytest.raises(KnowgicError, match=r"KNOWGIC_SANDBOX_CPUS='many': expected a number of CPUs"):
        default_limits({"KNOWGIC_SANDBOX_CPUS": "many"})


def test_gpus_choice() -> None:
    from knowgic.errors import KnowgicError
    from knowgic.runner.host.sandbox import resolve_gpus

    assert resolve_gpus("none") is False
    assert resolve_gpus("all") is True
    with pytest.raises(KnowgicError, match="all, none or auto"):
        resolve_gpus("some")


@pytest.mark.parametrize(
    ("reason", "exit_code", "words"),
    [
        (EndReason.TIMEOUT, 137, "wall-clock limit of 30 s"),
        (EndReason.OOM_KILLED, 137, "memory limit of 0.25 GiB"),
        (EndReason.PIDS_LIMIT, 1, "limit of 64 processes (exit code 1)"),
        (EndReason.EXITED, 3, "exited with code 3"),
        (EndReason.CANCELLED, 137, "other stage"),
    ],
)
def test_a_result_says_why_it_ended(reason: EndReason, exit_code: int, words: str) -> None:
    result = SandboxResult(reason, exit_code, "cpu", 1.0, "", False, limits=SMALL)
    assert words in result.describe()
    assert result.ok is False


def test_a_job_failure_quotes_the_stage_s_last_error_line() -> None:
    from knowgic.runner.host.containers import _last_error_line

    logs = "loading\nTraceback (most recent call last):\n  File x\nValueError: bad hparams\nbye\n"
    assert _last_error_line(logs) == "ValueError: bad hparams"
    assert (
        _last_error_line("error: delta edit-0001: tensor has NaN\n")
        == "error: delta edit-0001: tensor has NaN"
    )
    assert _last_error_line("all fine\n") is None


def test_edit_images_are_tagged_by_submission_and_runner_image() -> None:
    from knowgic.runner.host.images import _edit_dockerfile, edit_image_tag

    sha = "ab" * 32
    first, second = edit_image_tag("sha256:" + "1" * 64, sha), edit_image_tag("sha256:" + "2" * 64, sha)
    assert first.startswith("knowgic-edit:" + sha[:24]) and first != second
    with_requirements = _edit_dockerfile("knowgic-runner:test", has_requirements=True).splitlines()
    assert with_requirements[0] == "FROM knowgic-runner:test" and with_requirements[-1] == "USER knowgic"
    # The benchmark's text is removed before any file of the submission enters the image.
    assert with_requirements.index("RUN python3 -m knowgic.runner.host.edit_base") < next(
        i for i, line in enumerate(with_requirements) if line.startswith("COPY submission/")
    )
    # Requirements come from the wheelhouse only, installed by the non-root user: no index, no builds.
    install = next(i for i, line in enumerate(with_requirements) if "pip install" in line)
    assert with_requirements[install - 1] == "USER knowgic"
    assert "--no-index" in with_requirements[install] and "--only-binary :all:" in with_requirements[install]
    without = _edit_dockerfile("knowgic-runner:test", has_requirements=False)
    assert "pip install" not in without and "chmod -R a+rX,go-w /submission" in without


def test_the_build_context_leaves_data_out() -> None:
    import docker.utils.build

    from knowgic.runner.host.images import _read_dockerignore, repository_root

    root = repository_root()
    names = set(docker.utils.build.exclude_paths(str(root), _read_dockerignore(root), "Dockerfile"))
    assert {
        "Dockerfile",
        "pyproject.toml",
        "README.md",
        "knowgic/__init__.py",
        "docker/requirements.lock",
    } <= names
    # an allow-list: whatever else a user keeps in the checkout (my-store/, data/, runs/) stays out
    allowed = {".dockerignore", "Dockerfile", "pyproject.toml", "setup.py", "README.md", "docker", "spec",
               "knowgic", "runner", "leaderboard"}  # fmt: skip
    for name in names:
        assert name.split("/")[0] in allowed, name
        assert "__pycache__" not in name and not name.endswith(".sqlite"), name


def test_the_lock_pins_every_dependency_exactly() -> None:
    from knowgic.runner.host.images import repository_root

    lines = [
        line.strip()
        for line in (repository_root() / "docker" / "requirements.lock").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(lines) > 40 and all("==" in line for line in lines)
    names = {line.split("==")[0] for line in lines}
    assert {
        "transformers",
        "datasets",
        "docker",
        "sqlalchemy",
        "setuptools",
    } <= names and "torch" not in names
