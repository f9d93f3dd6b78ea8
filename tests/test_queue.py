"""The job queue on SQLite: states, atomic claims under threads and processes, heartbeats, recovery, logs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowgic.runner.intake.submission import Submission, job_keys
from knowgic.runner.queue.queue import (
    LOG_CAP_BYTES,
    QUEUE_SCHEMA_VERSION,
    Job,
    JobLost,
    JobQueue,
    JobState,
    QueueError,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def fake_submission(tmp_path: Path, models: int = 1, name: str = "demo", sha: str = "ab" * 32) -> Submission:
    """A loaded submission's record (the queue needs only the manifest, name, version and sha256)."""
    manifest = {
        "name": name,
        "version": "1.0.0",
        "authors": ["A"],
        "license": "MIT",
        "editor": "demo:Editor",
        "hparams": {},
        "models": [f"model-{i}" for i in range(models)],
        "protocols": ["logprob"],
        "modes": ["independent"],
        "dataset_version": "1.1.0",
    }
    return Submission(manifest=manifest, root=tmp_path, archive=tmp_path / "x.tar.gz", sha256=sha)


def enqueue(queue: JobQueue, submission: Submission, limit: int | None = None) -> list[Job]:
    """Queue a submission's jobs as ``knowgic runner submit`` does: its keys fanned out by the intake."""
    return queue.enqueue(submission, job_keys(submission, limit))


@pytest.fixture
def queue_url(tmp_path: Path) -> str:
    """The database under test (tests/test_queue_postgres.py runs these tests again on PostgreSQL)."""
    return f"sqlite:///{tmp_path / 'queue.sqlite'}"


@pytest.fixture
def queue(queue_url: str) -> JobQueue:
    return JobQueue(queue_url)


def test_a_job_goes_pending_running_finished(queue: JobQueue, tmp_path: Path) -> None:
    [job] = enqueue(queue, fake_submission(tmp_path), limit=3)
    assert job.state == JobState.PENDING and job.attempts == 0 and job.limit == 3
    time.sleep(0.05)
    claimed = queue.claim("w1", device="cpu")
    assert claimed is not None and claimed.job_id == job.job_id
    assert (claimed.state, claimed.worker, claimed.device) == (JobState.RUNNING, "w1", "cpu")
    assert claimed.heartbeat_at is not None
    assert queue.claim("w2") is None  # nothing else is pending
    queue.heartbeat(job.job_id, "w1")
    with pytest.raises(JobLost):
        queue.heartbeat(job.job_id, "w2")  # not its job
    time.sleep(0.05)
    done = queue.finish(job.job_id, "w1", "cd" * 32)
    assert done.state == JobState.FINISHED and done.results_sha256 == "cd" * 32
    assert done.state_seconds["PENDING"] >= 0.04 and done.state_seconds["RUNNING"] >= 0.04
    assert "FINISHED" not in done.state_seconds  # terminal states do not accumulate
    with pytest.raises(JobLost, match="is FINISHED"):
        queue.finish(job.job_id, "w1", "cd" * 32)
    with pytest.raises(QueueError, match="is FINISHED"):
        queue.requeue(job.job_id)
    with pytest.raises(QueueError, match="already FINISHED"):
        queue.cancel(job.job_id)
    record = done.record()
    assert (
        record["state"] == "FINISHED" and record["created_at"].endswith("+00:00") and "manifest" not in record
    )


def test_fail_requeue_cancel(queue: JobQueue, tmp_path: Path) -> None:
    first, second = enqueue(queue, fake_submission(tmp_path, models=2))
    claimed = queue.claim("w1")
    assert claimed is not None and claimed.job_id == first.job_id  # oldest first
    failed = queue.fail(first.job_id, "w1", "the editor raised ValueError:\n  bad layer 99")
    assert failed.state == JobState.FAILED and failed.reason == "the editor raised ValueError: bad layer 99"
    with pytest.raises(QueueError, match="already PENDING"):
        queue.requeue(second.job_id)
    again = queue.requeue(first.job_id)
    assert again.state == JobState.PENDING and again.reason is None and again.attempts == 0
    assert queue.cancel(second.job_id).state == JobState.CANCELLED
    assert queue.requeue(second.job_id).state == JobState.PENDING
    running = queue.claim("w2")
    assert running is not None
    with pytest.raises(QueueError, match="is RUNNING on worker w2; cancel it first"):
        queue.requeue(running.job_id)
    cancelled = queue.cancel(running.job_id)
    assert cancelled.state == JobState.CANCELLED
    with pytest.raises(JobLost, match="is CANCELLED"):
        queue.heartbeat(running.job_id, "w2")  # the worker learns it at its next heartbeat
    with pytest.raises(QueueError, match="no job 'nope'"):
        queue.get("nope")
    assert queue.counts() == {"PENDING": 1, "RUNNING": 0, "FINISHED": 0, "FAILED": 0, "CANCELLED": 1}
    assert [j.job_id for j in queue.jobs([JobState.CANCELLED])] == [running.job_id]
    assert "requeued from FAILED" in queue.logs(first.job_id)


def test_release_hands_the_job_back_without_counting_an_attempt(queue: JobQueue, tmp_path: Path) -> None:
    [job] = enqueue(queue, fake_submission(tmp_path))
    queue.claim("w1")
    released = queue.release(job.job_id, "w1", "SIGTERM")
    assert released.state == JobState.PENDING and released.attempts == 0 and released.worker is None
    assert "released by worker w1: SIGTERM" in queue.logs(job.job_id)


def test_retry_counts_the_attempt_of_a_host_fault(queue_url: str, tmp_path: Path) -> None:
    queue = JobQueue(queue_url, max_attempts=2)
    [job] = enqueue(queue, fake_submission(tmp_path))
    queue.claim("w1")
    back = queue.retry(job.job_id, "w1", "disk full")
    assert (back.state, back.attempts, back.worker) == (JobState.PENDING, 1, None)
    with pytest.raises(JobLost):
        queue.retry(job.job_id, "w1", "disk full")  # no longer its job
    queue.claim("w2")
    failed = queue.retry(job.job_id, "w2", "engine gone")
    assert (failed.state, failed.attempts) == (JobState.FAILED, 2)
    assert failed.reason.startswith("engine gone (attempt 2 of 2, so the job is failed")


def test_stale_jobs_go_back_to_pending_then_fail_after_max_attempts(queue_url: str, tmp_path: Path) -> None:
    queue = JobQueue(queue_url, max_attempts=2)
    [job] = enqueue(queue, fake_submission(tmp_path))
    queue.claim("dead-1")
    assert queue.recover_stale(grace_seconds=5) == []  # its heartbeat is fresh
    time.sleep(0.3)
    [recovered] = queue.recover_stale(grace_seconds=0.2)
    assert recovered.state == JobState.PENDING and recovered.attempts == 1 and recovered.worker is None
    with pytest.raises(JobLost):
        queue.heartbeat(job.job_id, "dead-1")  # the dead worker, if it wakes up, no longer owns it
    assert queue.claim("dead-2") is not None
    queue.heartbeat(job.job_id, "dead-2")
    time.sleep(0.3)
    [failed] = queue.recover_stale(grace_seconds=0.2)
    assert failed.state == JobState.FAILED and failed.attempts == 2
    assert "worker dead-2 stopped sending heartbeats" in failed.reason
    assert "attempt 2 of 2" in failed.reason and f"knowgic runner requeue {job.job_id}" in failed.reason
    assert queue.claim("w3") is None
    log = queue.logs(job.job_id)
    assert "attempt 1 of 2" in log and "attempt 2 of 2" in log


def test_heartbeats_keep_a_job(queue: JobQueue, tmp_path: Path) -> None:
    [job] = enqueue(queue, fake_submission(tmp_path))
    queue.claim("alive")
    for _ in range(4):
        time.sleep(0.1)
        queue.heartbeat(job.job_id, "alive")
        assert queue.recover_stale(grace_seconds=0.25) == []
    assert queue.get(job.job_id).state == JobState.RUNNING


def test_claims_never_double_under_threads(queue_url: str, tmp_path: Path) -> None:
    url = queue_url
    seed = JobQueue(url)
    jobs = enqueue(seed, fake_submission(tmp_path, models=40))
    claimed: list[tuple[str, str]] = []
    lock = threading.Lock()

    def work(worker: str) -> None:
        queue = JobQueue(url)  # each thread its own engine, as separate workers would have
        while (job := queue.claim(worker)) is not None:
            with lock:
                claimed.append((job.job_id, worker))
            time.sleep(0.005)  # a job takes a moment, so the others get their turn
            queue.finish(job.job_id, worker, "0" * 64)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [job_id for job_id, _ in claimed]
    assert sorted(ids) == sorted(j.job_id for j in jobs)  # every job once: none twice, none lost
    assert len({worker for _, worker in claimed}) > 1
    assert all(j.state == JobState.FINISHED for j in seed.jobs())
    assert {j.job_id: j.worker for j in seed.jobs()} == dict(claimed)


CLAIMER = textwrap.dedent(
    """
    import pathlib, sys, time
    from knowgic.runner.queue.queue import JobQueue
    url, name, barrier, workers = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), int(sys.argv[4])
    queue = JobQueue(url)
    (barrier / name).touch()
    while len(list(barrier.iterdir())) < workers:  # start together, once every process is ready
        time.sleep(0.01)
    while (job := queue.claim(name)) is not None:
        print(job.job_id, flush=True)
        queue.append_log(job.job_id, name)
        time.sleep(0.02)  # a job takes a moment, so the others get their turn
        queue.finish(job.job_id, name, "0" * 64)
    """
)


def claim_in_processes(url: str, workers: int, barrier: Path) -> list[list[str]]:
    """Run ``workers`` processes that claim and finish jobs until the queue is empty; their claimed ids."""
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, url, f"p{i}", str(barrier), str(workers)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        for i in range(workers)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(out.split())
    return outputs


def test_claims_never_double_across_processes(queue_url: str, tmp_path: Path) -> None:
    url = queue_url
    queue = JobQueue(url)
    jobs = enqueue(queue, fake_submission(tmp_path, models=60))
    outputs = claim_in_processes(url, workers=4, barrier=tmp_path / "barrier")
    claimed = [job_id for out in outputs for job_id in out]
    assert sorted(claimed) == sorted(j.job_id for j in jobs)
    assert sum(1 for out in outputs if out) > 1  # the processes really competed
    for i, out in enumerate(outputs):
        for job_id in out:
            assert queue.get(job_id).worker == f"p{i}" and queue.logs(job_id) == f"p{i}"


OPENER = textwrap.dedent(
    """
    import pathlib, sys, time
    from knowgic.runner.queue.queue import JobQueue
    barrier, workers = pathlib.Path(sys.argv[2]), int(sys.argv[3])
    (barrier / sys.argv[4]).touch()
    while len(list(barrier.iterdir())) < workers:
        time.sleep(0.01)
    JobQueue(sys.argv[1])  # creates the tables, or finds them
    """
)


def test_many_processes_open_a_new_database_at_once(queue_url: str, tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, queue_url, str(barrier), "4", f"p{i}"],
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        for i in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    queue = JobQueue(queue_url)
    assert queue.counts()["PENDING"] == 0
    enqueue(queue, fake_submission(tmp_path))
    assert queue.counts()["PENDING"] == 1


def test_logs_are_capped_keeping_the_newest(queue: JobQueue, tmp_path: Path) -> None:
    [job] = enqueue(queue, fake_submission(tmp_path))
    block = ("x" * 99 + "\n") * 1000
    for _ in range(LOG_CAP_BYTES // len(block) + 2):
        queue.append_log(job.job_id, block)
    queue.append_log(job.job_id, "the last line\n")
    log = queue.logs(job.job_id)
    assert log.startswith("[… ") and "earlier characters dropped" in log.splitlines()[0]
    assert log.endswith("the last line\n")
    assert len(log) <= LOG_CAP_BYTES + 100


def test_tables_carry_a_schema_version(queue_url: str) -> None:
    url = queue_url
    first = JobQueue(url)
    again = JobQueue(url)  # opening again keeps the tables, the version and the queue's id
    assert len(first.queue_id) == 32 and again.queue_id == first.queue_id
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        rows = connection.exec_driver_sql("SELECT key, value FROM knowgic_queue_meta ORDER BY key").all()
        assert rows == [("queue_id", first.queue_id), ("schema_version", str(QUEUE_SCHEMA_VERSION))]
        connection.exec_driver_sql("UPDATE knowgic_queue_meta SET value = '99' WHERE key = 'schema_version'")
    engine.dispose()
    with pytest.raises(QueueError, match=f"has schema version 99; this knowgic uses {QUEUE_SCHEMA_VERSION}"):
        JobQueue(url)


def test_a_version_1_queue_is_upgraded_in_place(queue_url: str, tmp_path: Path) -> None:
    """A queue made before jobs had submitters keeps its jobs; they read as queued without an account."""
    [old] = enqueue(JobQueue(queue_url), fake_submission(tmp_path))
    engine = sa.create_engine(queue_url)
    with engine.begin() as connection:  # the tables as version 1 made them
        connection.exec_driver_sql("DROP INDEX ix_knowgic_jobs_submitter")
        connection.exec_driver_sql("ALTER TABLE knowgic_jobs DROP COLUMN submitter")
        connection.exec_driver_sql("DROP TABLE knowgic_submitters")
        connection.exec_driver_sql("UPDATE knowgic_queue_meta SET value = '1' WHERE key = 'schema_version'")
    engine.dispose()
    queue = JobQueue(queue_url)
    assert queue.get(old.job_id).submitter is None
    [new] = queue.enqueue(
        fake_submission(tmp_path, sha="cd" * 32),
        job_keys(fake_submission(tmp_path, sha="cd" * 32)),
        submitter="token:alice",
    )
    assert queue.get(new.job_id).submitter == "token:alice" and new.record()["submitter"] == "token:alice"
    assert JobQueue(queue_url).get(old.job_id).state == JobState.PENDING  # opened again: nothing to do


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "is not a database URL"),
        ("mysql://localhost/q", "only sqlite:/// and postgresql"),
        ("sqlite:////proc/no/such/folder/q.sqlite", "cannot create the queue folder"),
    ],
)
def test_bad_urls_are_one_clear_line(url: str, expected: str) -> None:
    with pytest.raises(QueueError, match=expected):
        JobQueue(url)


def test_enqueue_refuses_a_bad_limit(queue: JobQueue, tmp_path: Path) -> None:
    with pytest.raises(QueueError, match="positive number of cases"):
        enqueue(queue, fake_submission(tmp_path), limit=0)
