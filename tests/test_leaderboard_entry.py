"""The two ways to start the leaderboard, ``knowgic leaderboard`` and a Space's ``python leaderboard/app.py``,
read the same store and queue and refuse the same way, each run as its own process as a person starts it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from knowgic.runner.queue.queue import JobQueue, JobState

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "custom_editor"
CLI = "import sys; from knowgic.cli import main; sys.exit(main())"  # `knowgic`, with this interpreter
STARTS = {
    "knowgic leaderboard": [sys.executable, "-c", CLI, "leaderboard"],
    "python leaderboard/app.py": [sys.executable, str(REPO_ROOT / "leaderboard" / "app.py")],
}
STARTUP_SECONDS = 240  # importing gradio on a loaded 2-core machine


def _env(**changes: str | None) -> dict[str, str]:
    """This process's environment without the store variables, the repository importable, plus ``changes``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KNOWGIC_STORE", "KNOWGIC_STORE_REPO", "KNOWGIC_QUEUE_URL")
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["HF_HUB_OFFLINE"] = "1"
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _example_archive(target: Path) -> Path:
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(EXAMPLE.rglob("*")):
            if "__pycache__" not in path.parts:
                tar.add(path, arcname=path.relative_to(EXAMPLE).as_posix(), recursive=False)
    return target


@pytest.mark.parametrize("start", list(STARTS))
def test_the_submit_form_queues_where_knowgic_queue_url_points(start: str, tmp_path: Path) -> None:
    from gradio_client import Client, handle_file

    store = tmp_path / "store"
    store.mkdir()
    url = f"sqlite:///{tmp_path / 'shared' / 'queue.sqlite'}"  # where the workers read, not in the store
    port = _free_port()
    process = subprocess.Popen(
        [*STARTS[start], "--store", str(store), "--port", str(port)],
        env=_env(KNOWGIC_QUEUE_URL=url),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl+C as a terminal sends it: a test run started in the background of a script ignores SIGINT,
        # and a child would inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"{start} exited {process.returncode}: {process.stdout.read()[-2000:]}")  # type: ignore[union-attr]
            try:
                client = Client(f"http://127.0.0.1:{port}/", verbose=False)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        message = client.predict(
            handle_file(str(_example_archive(tmp_path / "rank-one.tar.gz"))), api_name="/submit"
        )
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl+C
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()  # never leave a server behind
            output, _ = process.communicate()
            pytest.fail(f"{start} did not stop on Ctrl+C within 60 s: {output[-2000:]}")
    # One line says where the page is: none of Gradio's launch hints (a share link), nothing on Ctrl+C.
    assert output.splitlines() == [f"KnowGIC leaderboard at http://127.0.0.1:{port}/ (Ctrl+C stops it)"], (
        output
    )
    assert process.returncode == 0, output
    assert message.startswith("queued 1 job(s) for rank-one-ft 1.0.0"), message
    (job,) = JobQueue(url).jobs()
    assert job.state == JobState.PENDING and job.submission_name == "rank-one-ft"
    assert not (store / "queue.sqlite").exists()


@pytest.mark.parametrize("start", list(STARTS))
def test_a_missing_store_is_one_line_and_creates_nothing(start: str, tmp_path: Path) -> None:
    done = subprocess.run(
        STARTS[start], env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("error: results store knowgic-store does not exist")
    assert "\n" not in done.stderr.strip() and done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no ./knowgic-store, no queue.sqlite


@pytest.mark.parametrize(
    ("start", "repo", "reason"),
    [
        # offline (HF_HUB_OFFLINE=1, an empty hub cache): as a Space meets a repository it cannot reach
        ("python leaderboard/app.py", "knowgic-nobody/no-such-store", "LocalEntryNotFoundError"),
        ("knowgic leaderboard", "not//a valid id", "HFValidationError"),
    ],
)
def test_an_unreachable_store_repo_is_one_line(start: str, repo: str, reason: str, tmp_path: Path) -> None:
    done = subprocess.run(
        STARTS[start],
        env=_env(KNOWGIC_STORE_REPO=repo, HF_HOME=str(tmp_path / "hf")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(
        f"error: cannot fetch the results store {repo!r} ($KNOWGIC_STORE_REPO) from the hub: {reason}"
    )
