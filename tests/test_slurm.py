"""Sweeps and runner workers as jobs of a real one-node Slurm cluster (marker ``slurm``; the cluster comes
from :mod:`tests.slurm_cluster`).

- a two-editor sweep of knowgic-tiny (``none``, ``rome``: the key statistics are computed by a job of their
  own) through Slurm: its runs' metrics and its table equal a local sweep's, digit for digit (the table
  without its timing column and wall time);
- a sweep submitted with ``--no-wait`` whose ``rome`` job is cancelled mid-run (``scancel``): the next call
  resubmits it, reuses the finished run, and the table again equals the local one;
- two ``runner slurm-workers`` jobs against PostgreSQL drain a queue, one of them cancelled mid-job: every
  job is run and stored once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from knowgic.evaluation.sweep import run_sweep
from knowgic.runner.intake.submission import submit
from knowgic.runner.queue.queue import JobQueue, JobState
from knowgic.runner.store.store import ResultsStore
from knowgic.slurm import SlurmProfile, job_states
from tests.slurm_cluster import SlurmCluster
from tests.test_queue_postgres import postgres_server, queue_url  # noqa: F401 - the private PostgreSQL server
from tests.test_submission import MANIFEST, make_submission

pytestmark = pytest.mark.slurm
REPO_ROOT = Path(__file__).resolve().parent.parent
EDITORS = ("none", "rome")
SLURM_OPTIONS = ("--executor", "slurm", "--slurm-cpus", "1", "--slurm-mem", "3G", "--slurm-time", "20")


def _sweep(out: Path, *extra: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """``knowgic sweep`` of the two editors, first two edits, as a user runs it (its own cache)."""
    import os

    return subprocess.run(
        [
            *(sys.executable, "-m", "knowgic.cli", "sweep", "--editors", ",".join(EDITORS), "--limit", "2"),
            *("--out", str(out), *extra),
        ],
        env={**os.environ, "KNOWGIC_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _without_timing(table: str) -> str:
    """The table without its ``s/edit`` column and wall time: everything a run's numbers decide."""
    lines = []
    column = None
    for line in table.splitlines():
        if line.startswith("Sweep wall time"):
            continue
        cells = line.split("|")
        if "s/edit" in [c.strip() for c in cells]:
            column = [c.strip() for c in cells].index("s/edit")
        elif not line.startswith("|"):
            column = None
        if column is not None and line.startswith("|"):
            del cells[column]
        lines.append("|".join(cells))
    return "\n".join(lines)


def _metrics(out: Path) -> dict[str, object]:
    return {e: json.loads((out / e / "results.json").read_text())["metrics"] for e in EDITORS}


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("local") / "sweep"
    run_sweep("knowgic-tiny", list(EDITORS), out, limit=2, progress=False)
    return out


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_slurm_sweep_equals_the_local_one(
    slurm_cluster: SlurmCluster, local_sweep: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    done = _sweep(out, *SLURM_OPTIONS, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr + slurm_cluster.logs()
    assert "key statistics of rome: job" in done.stderr
    assert _metrics(out) == _metrics(local_sweep)
    slurm_table = (out / "summary.md").read_text()
    assert _without_timing(slurm_table) == _without_timing((local_sweep / "summary.md").read_text())
    assert "s/edit" in slurm_table and "s/edit" not in _without_timing(slurm_table)
    # Computed once, by the statistics job, into the sweep folder; each task named after its editor.
    assert list((out / ".slurm" / "stats").rglob("*.safetensors"))
    record = json.loads((out / ".slurm" / "jobs.json").read_text())
    for editor, job in record["jobs"].items():
        shown = slurm_cluster.run("scontrol", "-o", "show", "job", job)
        assert f"JobName=knowgic-sweep:sweep:{editor} " in shown
    again = _sweep(out, *SLURM_OPTIONS, cache=tmp_path / "cache")  # every run reused, nothing submitted
    assert again.returncode == 0 and "job(s) (" not in again.stderr, again.stderr
    assert "2 of 2 editors' runs reused" in again.stderr


def test_a_cancelled_job_is_rerun_by_the_next_call(
    slurm_cluster: SlurmCluster, local_sweep: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    first = _sweep(out, *SLURM_OPTIONS, "--no-wait", cache=tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    assert "not waiting (--no-wait)" in first.stderr and not (out / "summary.md").exists()
    job = json.loads((out / ".slurm" / "jobs.json").read_text())["jobs"]["rome"]
    wait_for(lambda: job_states([job])[job] == "RUNNING", 300, "rome's job to run")
    slurm_cluster.run("scancel", job)
    wait_for(lambda: job_states([job])[job] not in ("RUNNING", "COMPLETING"), 60, "the job to end")
    assert not (out / "rome" / "results.json").exists()  # cancelled before its run was written
    second = _sweep(out, *SLURM_OPTIONS, cache=tmp_path / "cache")
    assert second.returncode == 0, second.stderr + slurm_cluster.logs()
    assert f"rome: job {job} ended CANCELLED without its run: resubmitting it" in second.stderr
    assert _metrics(out) == _metrics(local_sweep)
    assert _without_timing((out / "summary.md").read_text()) == _without_timing(
        (local_sweep / "summary.md").read_text()
    )


def test_a_failed_job_is_reported_and_resubmitted_only_on_request(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A key-statistics job that fails on its node (a corpus it cannot read offline) is reported with its
    state and log's tail, with the editor that needed it; the next call resubmits nothing without
    --resubmit-failed."""
    out = tmp_path / "sweep"
    corpus = ("--stats-corpus", "wikitext:wikitext-103-raw-v1")
    first = _sweep(out, *SLURM_OPTIONS, *corpus, cache=tmp_path / "cache")
    assert first.returncode != 0
    assert "1 of 2 editors' jobs ended without their run" in first.stderr, first.stderr
    assert "rome: job" in first.stderr and "its key-statistics job" in first.stderr
    assert "--resubmit-failed" in first.stderr and "OfflineModeIsEnabled" in first.stderr  # the log's tail
    assert (out / "none" / "results.json").is_file()  # the other editor's run is kept
    again = _sweep(out, *SLURM_OPTIONS, *corpus, "--no-wait", cache=tmp_path / "cache")
    assert again.returncode != 0 and "submitted 1 job" not in again.stderr, again.stderr


def test_slurm_workers_drain_a_postgres_queue(
    slurm_cluster: SlurmCluster,
    queue_url: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    evaluated_results: Path,
) -> None:
    """Two worker jobs drain one PostgreSQL queue; the one cancelled mid-job loses nothing."""
    import os

    from knowgic.runner.slurm_workers import submit_workers

    store = ResultsStore(tmp_path / "store")
    shared = JobQueue(queue_url)
    jobs = []
    for i in range(4):
        folder = make_submission(
            tmp_path / f"sub{i}", {**MANIFEST, "name": f"method-{i}", "protocols": ["logprob"]}
        )
        jobs += submit(folder, store, shared, limit=1)[1]
    env = {
        **os.environ,
        "TEST_RESULTS": str(evaluated_results),
        "TEST_SLEEP": "4",
        "PYTHONPATH": str(REPO_ROOT),
    }
    worker_args = ["--db", queue_url, "--store", str(store.root), "--gpus", "none", "--heartbeat", "0.5"]
    worker_args += ["--grace", "3", "--poll", "0.2"]
    workers = submit_workers(
        2,
        worker_args,
        SlurmProfile(cpus=1, mem="1G", time=10),
        tmp_path / "slurm",
        command=(sys.executable, str(REPO_ROOT / "tests" / "test_worker_kill.py")),
        env=env,
    )

    def running() -> list[str]:
        return [j.worker or "" for j in shared.jobs([JobState.RUNNING])]

    wait_for(lambda: len(running()) == 2, 120, "both workers to run a job")
    doomed = next(w for w in workers if any(r.endswith(f"slurm{w}") for r in running()))
    slurm_cluster.run("scancel", doomed)
    wait_for(
        lambda: all(job_states(workers)[w] not in ("PENDING", "RUNNING", "COMPLETING") for w in workers),
        180,
        "the workers to leave",
    )
    done = shared.jobs()
    assert all(j.state == JobState.FINISHED for j in done), [(j.job_id, j.state, j.reason) for j in done]
    assert sorted(e.entry_id for e in store.scan().entries) == sorted(j.job_id for j in jobs)
    states = job_states(workers)
    assert states[doomed] == "CANCELLED" and [states[w] for w in workers if w != doomed] == ["COMPLETED"]
    attempts = sorted(shared.logs(j.job_id).count("runs attempt") for j in done)
    assert attempts == [1, 1, 1, 2], attempts  # the cancelled worker's job, run again by the other
