"""Workers as real processes running ``knowgic runner worker``: killed mid-job (SIGKILL), stopped (SIGTERM).

The worker processes run this file as a script: it swaps the container executor for a slow executor that
copies a real results.json (see the end of the file), then hands its arguments to the ``knowgic`` command
line. Only these tests can select it; the installed command has no way to.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from knowgic.runner.intake.submission import submit
from knowgic.runner.queue.queue import Job, JobQueue, JobState
from knowgic.runner.store.store import ResultsStore
from tests.test_submission import MANIFEST, make_submission

THIS_FILE = Path(__file__).resolve()
REPO_ROOT = THIS_FILE.parent.parent


def start_worker(store: Path, worker_id: str, results: Path, sleep: float, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "TEST_RESULTS": str(results), "TEST_SLEEP": str(sleep), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [
            *(sys.executable, str(THIS_FILE), "--store", str(store), "--worker-id", worker_id),
            *("--gpus", "none", "--heartbeat", "0.2", "--poll", "0.2", *extra),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def queued(tmp_path: Path) -> tuple[ResultsStore, JobQueue, Job]:
    folder = make_submission(tmp_path / "sub", {**MANIFEST, "protocols": ["logprob"]})
    store = ResultsStore(tmp_path / "store")
    queue = JobQueue(store.queue_url())
    _, [job] = submit(folder, store, queue, limit=1)
    return store, queue, job


def test_a_worker_killed_mid_job_loses_nothing(queued, evaluated_results: Path, tmp_path: Path) -> None:
    store, queue, job = queued
    first = start_worker(store.root, "doomed", evaluated_results, 60.0, "--grace", "1.5", "--once")
    try:
        wait_for(
            lambda: "[test] executing" in queue.logs(job.job_id), 60, "the first worker to start the job"
        )
        assert queue.get(job.job_id).worker == "doomed"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    assert queue.get(job.job_id).state == JobState.RUNNING  # nobody told the queue
    second = start_worker(store.root, "rescuer", evaluated_results, 0.0, "--grace", "1.5", "--max-jobs", "1")
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0, out
    assert "recovered " in out
    done = queue.get(job.job_id)
    assert (done.state, done.worker, done.attempts) == (JobState.FINISHED, "rescuer", 1), done.reason
    assert done.results_sha256 == json.loads(evaluated_results.read_text())["sha256"]
    [entry] = store.scan().entries  # stored once
    assert entry.entry_id == job.job_id and entry.job["worker"] == "rescuer"
    assert len(list(store.results_dir.iterdir())) == 1
    log = queue.logs(job.job_id)
    assert "worker doomed stopped sending heartbeats" in log and "rescuer runs attempt 2 of 3" in log


def test_sigterm_hands_the_job_back(queued, evaluated_results: Path) -> None:
    store, queue, job = queued
    worker = start_worker(store.root, "polite", evaluated_results, 60.0, "--once")
    try:
        wait_for(lambda: "[test] executing" in queue.logs(job.job_id), 60, "the worker to start the job")
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, out
    back = queue.get(job.job_id)
    assert (back.state, back.attempts, back.worker) == (JobState.PENDING, 0, None)
    assert "released by worker polite: worker stopped by SIGTERM" in queue.logs(job.job_id)
    assert "stopped (SIGTERM)" in out
    assert store.scan().entries == []


class SlowCopyExecutor:
    """Logs that it runs, sleeps ``TEST_SLEEP`` seconds, then copies ``TEST_RESULTS`` as the run's output."""

    def execute(self, job: Job, submission_archive: Path, workdir: Path, log: Callable[[str], None]) -> Path:
        log("[test] executing")
        deadline = time.monotonic() + float(os.environ["TEST_SLEEP"])
        while time.monotonic() < deadline:
            time.sleep(0.05)
        target = workdir / "results.json"
        shutil.copyfile(os.environ["TEST_RESULTS"], target)
        return target


if __name__ == "__main__":
    import knowgic.runner.commands
    from knowgic.cli import main

    knowgic.runner.commands.default_executor = lambda *args, **kwargs: SlowCopyExecutor()  # type: ignore[assignment]
    sys.exit(main(["runner", "worker", *sys.argv[1:]]))
