"""The worker loop with real executors written here: a real results.json is checked, stored once, finished.

The executors below stand in for the container executor (whose own tests need a Docker engine): one hands
back a real ``results.json`` made by ``knowgic evaluate --limit 1`` on knowgic-tiny (``evaluated_results``
in conftest.py, run once per session), the others fail in the ways a worker must handle.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from knowgic.errors import KnowgicError
from knowgic.results import content_sha256
from knowgic.runner.host.worker import JobFailure, WorkerFault, check_results, run_worker
from knowgic.runner.intake.submission import submit
from knowgic.runner.queue.queue import Job, JobQueue, JobState
from knowgic.runner.store.signing import load_signer
from knowgic.runner.store.store import ResultsStore
from tests.test_submission import MANIFEST, make_submission


class CopyResultsExecutor:
    """Hands back the session's results.json as the run's output, like an honest executor."""

    def __init__(self, results: Path, rewrite: Callable[[dict], dict] | None = None) -> None:
        self.results = results
        self.rewrite = rewrite
        self.calls: list[str] = []

    def execute(self, job: Job, submission_archive: Path, workdir: Path, log: Callable[[str], None]) -> Path:
        assert submission_archive.is_file() and submission_archive.name.startswith(job.submission_sha256)
        self.calls.append(job.job_id)
        log(f"[test] running {job.job_id} in {workdir}")
        target = workdir / "out" / "results.json"
        target.parent.mkdir(parents=True)
        if self.rewrite is None:
            shutil.copyfile(self.results, target)
        else:
            target.write_text(
                json.dumps(self.rewrite(json.loads(self.results.read_text()))), encoding="utf-8"
            )
        return target


class FailingExecutor:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def execute(self, job: Job, submission_archive: Path, workdir: Path, log: Callable[[str], None]) -> Path:
        log("[test] about to fail")
        raise self.error


class SlowExecutor:
    """Runs until told to stop, logging as it goes (a long edit stage)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.finished = False

    def execute(self, job: Job, submission_archive: Path, workdir: Path, log: Callable[[str], None]) -> Path:
        self.started.set()
        for i in range(200):
            log(f"[test] step {i}")
            time.sleep(0.05)
        self.finished = True
        raise JobFailure("ran too long")


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ResultsStore, JobQueue, Job]:
    """A store and queue holding the example submission's one job (knowgic-tiny, logprob, limit 1)."""
    folder = make_submission(tmp_path / "sub", {**MANIFEST, "protocols": ["logprob"]})
    store = ResultsStore(tmp_path / "store")
    queue = JobQueue(store.queue_url())
    _, [job] = submit(folder, store, queue, limit=1)
    return store, queue, job


def _run(store: ResultsStore, queue: JobQueue, executor: object, **kwargs: object) -> int:
    options = {"worker_id": "w1", "once": True, "heartbeat_seconds": 0.1, "grace_seconds": 5.0, **kwargs}
    return run_worker(queue, store, executor, **options)  # type: ignore[arg-type]


def test_a_job_runs_and_its_results_are_stored_once(setup, evaluated_results: Path) -> None:
    store, queue, job = setup
    executor = CopyResultsExecutor(evaluated_results)
    assert _run(store, queue, executor, device="cpu") == 1
    done = queue.get(job.job_id)
    assert done.state == JobState.FINISHED, done.reason
    document = json.loads(evaluated_results.read_text())
    assert done.results_sha256 == document["sha256"]
    [entry] = store.scan().entries
    assert (entry.entry_id, entry.source, entry.results_sha256) == (
        job.job_id,
        "verified",
        document["sha256"],
    )
    assert entry.submission_sha256 == job.submission_sha256 and entry.manifest == job.manifest
    assert entry.job["job_id"] == job.job_id and entry.job["worker"] == "w1" and entry.job["device"] == "cpu"
    assert entry.job["model"] == "knowgic-tiny" and entry.job["limit"] == 1
    log = queue.logs(job.job_id)
    assert "[worker] w1 runs attempt 1 of 3 on cpu" in log and f"[test] running {job.job_id}" in log
    assert f"results stored: {document['sha256']}" in log
    # Nothing left to do: a second worker finds no job.
    assert _run(store, queue, executor) == 0 and executor.calls == [job.job_id]


def test_a_stored_result_of_an_earlier_attempt_is_reused(setup, evaluated_results: Path) -> None:
    """The worker died after storing and before finishing: the next attempt finishes with that result."""
    store, queue, job = setup
    claimed = queue.claim("dead")
    store.add_verified(
        evaluated_results,
        archive_path=store.submission_path(job.submission_sha256),
        manifest={},
        job=claimed.record(),
        signer=load_signer(),
    )
    time.sleep(0.3)
    [recovered] = queue.recover_stale(0.2)
    assert recovered.state == JobState.PENDING and recovered.attempts == 1
    executor = FailingExecutor(AssertionError("the job must not run again"))
    _run(store, queue, executor)
    done = queue.get(job.job_id)
    assert (
        done.state == JobState.FINISHED
        and done.results_sha256 == json.loads(evaluated_results.read_text())["sha256"]
    )
    assert len(store.scan().entries) == 1 and len(list(store.results_dir.iterdir())) == 1
    assert "results of an earlier attempt are already stored" in queue.logs(job.job_id)


def _other_submission(document: dict) -> dict:
    """A runner's submission block naming another archive."""
    hparams_sha = document["config"]["hparams_sha256"]
    return {
        "name": "rank-one-ft",
        "version": "0.1.0",
        "sha256": "0" * 64,
        "editor": "x:Y",
        "hparams_sha256": hparams_sha,
    }


def _rehashed(change: Callable[[dict], None]) -> Callable[[dict], dict]:
    def rewrite(document: dict) -> dict:
        change(document)
        document["sha256"] = content_sha256(document)
        return document

    return rewrite


@pytest.mark.parametrize(
    ("rewrite", "reason"),
    [
        (
            _rehashed(lambda d: d["config"].update(protocol="generate")),
            "config.protocol is 'generate', the job asked for 'logprob'",
        ),
        (_rehashed(lambda d: d["config"].update(model="gpt2")), "config.model is 'gpt2'"),
        (_rehashed(lambda d: d["config"].update(limit=None)), "config.limit is None, the job asked for 1"),
        (_rehashed(lambda d: d["dataset"].update(version="1.0.0")), "dataset.version is '1.0.0'"),
        (
            _rehashed(lambda d: d.update(schema_version="1.2", submission=_other_submission(d))),
            "submission.sha256 is '" + "0" * 64,
        ),
        (lambda d: {**d, "metrics": {**d["metrics"], "ifr": 1.0}}, "the results are not valid"),
        (lambda d: {k: v for k, v in d.items() if k != "counts"}, "does not follow results.schema.json"),
    ],
)
def test_results_that_are_not_the_jobs_run_fail_it(
    setup, evaluated_results: Path, rewrite, reason: str
) -> None:
    store, queue, job = setup
    _run(store, queue, CopyResultsExecutor(evaluated_results, rewrite))
    failed = queue.get(job.job_id)
    assert failed.state == JobState.FAILED and reason in failed.reason
    assert store.scan().entries == [] and not store.results_dir.exists()


def test_a_job_failure_is_recorded_with_its_reason(setup) -> None:
    store, queue, job = setup
    _run(
        store,
        queue,
        FailingExecutor(JobFailure("the edit stage ran out of memory (16 GiB): lower batch_size")),
    )
    failed = queue.get(job.job_id)
    assert failed.state == JobState.FAILED
    assert failed.reason == "the edit stage ran out of memory (16 GiB): lower batch_size"
    assert "[test] about to fail" in queue.logs(job.job_id)


def test_a_fault_of_the_host_hands_the_job_back_and_stops_the_worker(setup) -> None:
    store, queue, job = setup
    broken = FailingExecutor(RuntimeError("docker daemon went away"))
    for attempt in (1, 2):
        with pytest.raises(WorkerFault, match=f"job {job.job_id} is now PENDING and this worker stops"):
            _run(store, queue, broken)
        back = queue.get(job.job_id)
        assert (back.state, back.attempts, back.worker) == (JobState.PENDING, attempt, None)
    with pytest.raises(WorkerFault, match="is now FAILED"):
        _run(store, queue, broken)
    failed = queue.get(job.job_id)
    assert failed.state == JobState.FAILED and failed.attempts == 3
    assert failed.reason.startswith(
        "worker w1 failed while handling the job: RuntimeError: docker daemon went away"
    )
    assert "attempt 3 of 3" in failed.reason and "knowgic runner requeue" in failed.reason
    assert queue.logs(job.job_id).count("Traceback") == 3


def test_a_missing_results_file_fails_the_job(setup, tmp_path: Path) -> None:
    store, queue, job = setup

    class NoResults:
        def execute(
            self, job: Job, submission_archive: Path, workdir: Path, log: Callable[[str], None]
        ) -> Path:
            return workdir / "out" / "results.json"

    _run(store, queue, NoResults())
    assert "wrote no results file" in queue.get(job.job_id).reason


def test_cancelling_a_running_job_abandons_the_run(setup) -> None:
    store, queue, job = setup
    executor = SlowExecutor()
    canceller = threading.Thread(
        target=lambda: (executor.started.wait(10), time.sleep(0.3), queue.cancel(job.job_id))
    )
    canceller.start()
    started = time.monotonic()
    _run(store, queue, executor)
    canceller.join()
    assert time.monotonic() - started < 5 and not executor.finished  # interrupted, not run to its end
    cancelled = queue.get(job.job_id)
    assert cancelled.state == JobState.CANCELLED and cancelled.reason == "cancelled by a maintainer"
    log = queue.logs(job.job_id)
    assert "[test] step 0" in log and "run abandoned: job" in log
    assert store.scan().entries == []


def test_check_results_accepts_the_real_run(setup, evaluated_results: Path, tmp_path: Path) -> None:
    _, _, job = setup
    assert check_results(evaluated_results, job)["config"]["model"] == "knowgic-tiny"
    document = json.loads(evaluated_results.read_text())
    named = {**_other_submission(document), "sha256": job.submission_sha256}
    document = _rehashed(lambda d: d.update(schema_version="1.2", submission=named))(document)
    (tmp_path / "named.json").write_text(json.dumps(document))
    assert check_results(tmp_path / "named.json", job)["submission"]["sha256"] == job.submission_sha256


def test_grace_must_exceed_the_heartbeat(setup) -> None:
    store, queue, _ = setup
    with pytest.raises(KnowgicError, match="grace period 1 s must be longer than the heartbeat interval 2 s"):
        run_worker(
            queue, store, FailingExecutor(RuntimeError()), worker_id="w", heartbeat_seconds=2, grace_seconds=1
        )
