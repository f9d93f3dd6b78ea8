"""The queue on a real PostgreSQL server (marker ``postgres``): the SQLite scenarios again, then several
``knowgic runner worker`` processes draining one database.

The set-up starts a private server from Debian's packages: ``initdb`` in a temporary folder (as the
``postgres`` system user when the tests run as root, since the server refuses root), listening on a free
port of 127.0.0.1 and on a unix socket in that folder; it is stopped and removed at the end. Each test
gets a database of its own.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowgic.runner.intake.submission import submit
from knowgic.runner.queue.queue import JobQueue, JobState
from knowgic.runner.store.store import ResultsStore
from tests.test_accounts import (  # noqa: F401 - quotas under concurrent submissions, on PostgreSQL
    test_concurrent_submissions_cannot_pass_a_quota_together,
)
from tests.test_queue import (  # noqa: F401 - the SQLite scenarios (and their queue fixture), run again here
    queue,
    test_a_job_goes_pending_running_finished,
    test_a_version_1_queue_is_upgraded_in_place,
    test_claims_never_double_across_processes,
    test_claims_never_double_under_threads,
    test_fail_requeue_cancel,
    test_heartbeats_keep_a_job,
    test_logs_are_capped_keeping_the_newest,
    test_many_processes_open_a_new_database_at_once,
    test_release_hands_the_job_back_without_counting_an_attempt,
    test_retry_counts_the_attempt_of_a_host_fault,
    test_stale_jobs_go_back_to_pending_then_fail_after_max_attempts,
    test_tables_carry_a_schema_version,
)
from tests.test_submission import MANIFEST, make_submission

pytestmark = pytest.mark.postgres
REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER_SCRIPT = REPO_ROOT / "tests" / "test_worker_kill.py"


def _server_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        pytest.fail("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: apt-get install postgresql")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_server_user(command: list[str]) -> list[str]:
    """The command as the ``postgres`` user when we are root (the server refuses to run as root)."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[dict[str, str]]:
    binaries = _server_binaries()
    folder = Path(tempfile.mkdtemp(prefix="knowgic-pg-"))
    data, sockets, log = folder / "data", folder / "sockets", folder / "server.log"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
    port = _free_port()
    run = {"check": True, "capture_output": True, "text": True}
    subprocess.run(
        _as_server_user(
            [
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-U",
                "knowgic",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        **run,
    )
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    subprocess.run(
        _as_server_user(
            [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]
        ),
        **run,
    )
    try:
        yield {"host": str(sockets), "port": str(port)}
    finally:
        # Immediate: the data is thrown away, so there is nothing to checkpoint.
        subprocess.run(
            _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def queue_url(postgres_server: dict[str, str]) -> str:
    """A fresh database on the private server, reached through its unix socket."""
    import psycopg

    name = f"q_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(
        host=postgres_server["host"],
        port=postgres_server["port"],
        user="knowgic",
        dbname="postgres",
        autocommit=True,
    ) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return (
        f"postgresql+psycopg://knowgic@/{name}?host={postgres_server['host']}&port={postgres_server['port']}"
    )


def test_the_server_is_postgresql(queue_url: str) -> None:
    on_postgres = JobQueue(queue_url)
    assert on_postgres.engine.dialect.name == "postgresql"
    with on_postgres.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT version()").scalar_one().startswith("PostgreSQL")


def queued_jobs(
    queue_url: str, tmp_path: Path, results: Path, count: int, sleep: float
) -> tuple[ResultsStore, JobQueue, list[str], dict[str, str]]:
    """A store, ``count`` jobs of ``count`` submissions queued at ``queue_url``, and the environment of the
    test workers that hand back ``results`` after ``sleep`` seconds (``tests/test_worker_kill.py``)."""
    store = ResultsStore(tmp_path / "store")
    shared = JobQueue(queue_url)
    jobs = []
    for i in range(count):
        folder = make_submission(
            tmp_path / f"sub{i}", {**MANIFEST, "name": f"method-{i}", "protocols": ["logprob"]}
        )
        jobs += submit(folder, store, shared, limit=1)[1]
    env = {**os.environ, "TEST_RESULTS": str(results), "TEST_SLEEP": str(sleep), "PYTHONPATH": str(REPO_ROOT)}
    return store, shared, jobs, env


def test_worker_processes_drain_one_database(
    queue_url: str,
    tmp_path: Path,
    evaluated_results: Path,
) -> None:
    """Several ``knowgic runner worker --drain`` processes on one database: every job run once, none lost."""
    store, shared, jobs, env = queued_jobs(queue_url, tmp_path, evaluated_results, count=12, sleep=0.3)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER_SCRIPT),
                "--db",
                queue_url,
                "--store",
                str(store.root),
                "--worker-id",
                f"host{i}",
                "--gpus",
                "none",
                "--drain",
                "--heartbeat",
                "0.5",
                "--poll",
                "0.2",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO_ROOT,
        )
        for i in range(3)
    ]
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), outputs
    done = shared.jobs()
    assert sorted(j.job_id for j in done) == sorted(j.job_id for j in jobs)
    assert all(j.state == JobState.FINISHED and j.attempts == 0 for j in done), [
        (j.job_id, j.reason) for j in done
    ]
    runs = {j.job_id: shared.logs(j.job_id).count("runs attempt") for j in done}
    assert set(runs.values()) == {1}  # none claimed twice
    ran = [sum(1 for j in done if j.worker == f"host{i}") for i in range(3)]
    assert sum(ran) == 12
    for i, out in enumerate(outputs):
        assert f"worker host{i} ran {ran[i]} job(s)" in out
    entries = store.scan().entries
    assert sorted(e.entry_id for e in entries) == sorted(j.job_id for j in jobs)
    assert {e.results_sha256 for e in entries} == {json.loads(evaluated_results.read_text())["sha256"]}
