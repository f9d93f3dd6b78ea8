"""Sweeps and runner workers as jobs of a real one-node Slurm cluster (marker ``slurm``; the cluster comes
from :mod:`tests.slurm_cluster`).

- a two-editor sweep of knowgic-tiny (``none``, ``rome``: the key statistics are computed by a job of their
  own) through Slurm: its runs' metrics and its table equal a local sweep's, digit for digit (the table
  without its timing column and wall time);
- its finished runs are not reused for a request on another device or with other hparams;
- that sweep's folder without ``rome``'s run, submitted with ``--no-wait`` (no second statistics job), its
  ``rome`` job cancelled mid-run (``scancel``): the next call resubmits it, reuses the finished run, and
  the table again equals the local one;
- two ``runner slurm-workers`` jobs against PostgreSQL drain a queue, one of them cancelled mid-job: every
  job is run and stored once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from knowgic.errors import KnowgicError
from knowgic.evaluation.slurm_sweep import run_slurm_sweep
from knowgic.evaluation.sweep import run_sweep
from knowgic.runner.queue.queue import JobState
from knowgic.slurm import SlurmProfile, job_states
from tests.slurm_cluster import SlurmCluster
from tests.test_queue_postgres import (  # noqa: F401 - the private PostgreSQL server
    postgres_server,
    queue_url,
    queued_jobs,
)

pytestmark = pytest.mark.slurm
REPO_ROOT = Path(__file__).resolve().parent.parent
EDITORS = ("none", "rome")
SLURM_OPTIONS = ("--executor", "slurm", "--slurm-cpus", "1", "--slurm-mem", "3G", "--slurm-time", "20")


def _sweep(out: Path, *extra: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """``knowgic sweep`` of the two editors, first two edits, as a user runs it (the Slurm tests' cache)."""
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


@pytest.fixture(scope="module")
def slurm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user cache of the Slurm tests' sweeps (and their jobs): the first sweep's jobs fill it with the
    unedited model's scores, the later tests' jobs read them. Not the local sweep's: the first Slurm sweep
    computes every number it is compared on."""
    return tmp_path_factory.mktemp("slurm-cache")


@pytest.fixture(scope="module")
def slurm_sweep(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory, slurm_cache: Path
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The first Slurm sweep's folder and its call: a statistics job, then the editors' jobs."""
    out = tmp_path_factory.mktemp("slurm") / "sweep"
    return out, _sweep(out, *SLURM_OPTIONS, cache=slurm_cache)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_slurm_sweep_equals_the_local_one(
    slurm_cluster: SlurmCluster,
    slurm_sweep: tuple[Path, subprocess.CompletedProcess[str]],
    local_sweep: Path,
    slurm_cache: Path,
) -> None:
    out, done = slurm_sweep
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
    again = _sweep(out, *SLURM_OPTIONS, cache=slurm_cache)  # every run reused, nothing submitted
    assert again.returncode == 0 and "job(s) (" not in again.stderr, again.stderr
    assert "2 of 2 editors' runs reused" in again.stderr


def test_a_finished_run_of_another_request_is_not_reused(
    slurm_sweep: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """As a local sweep does, from the runs' results.json, nothing loaded and nothing submitted: a run on
    another device than the jobs would use, or with other hparams, is refused in one line."""
    out, done = slurm_sweep
    assert done.returncode == 0, done.stderr
    profile = SlurmProfile(cpus=1, mem="3G", time=20)
    sweep = lambda **kw: run_slurm_sweep(  # noqa: E731
        "knowgic-tiny", list(EDITORS), out, limit=2, progress=False, report=lambda _: None, **kw
    )
    jobs = (out / ".slurm" / "jobs.json").read_text()
    with pytest.raises(
        KnowgicError,
        match=r"none holds a finished run of another request \(device 'cpu' "
        r"there, 'cuda:0' asked\)",
    ):
        sweep(profile=replace(profile, gpus=1), device="auto")
    with pytest.raises(KnowgicError, match=r"rome holds a finished run of another request \(hparams sha256"):
        sweep(profile=profile, stats_samples=7)
    assert (out / ".slurm" / "jobs.json").read_text() == jobs  # nothing submitted


def test_a_cancelled_job_is_rerun_by_the_next_call(
    slurm_cluster: SlurmCluster,
    slurm_sweep: tuple[Path, subprocess.CompletedProcess[str]],
    local_sweep: Path,
    slurm_cache: Path,
    tmp_path: Path,
) -> None:
    """The first sweep's folder without rome's run: its job is submitted again, without a statistics job
    (the first one's are in the folder), cancelled while it runs, and rerun by the next call."""
    out = tmp_path / "sweep"
    shutil.copytree(slurm_sweep[0], out)
    shutil.rmtree(out / "rome")
    (out / "summary.md").unlink()
    first = _sweep(out, *SLURM_OPTIONS, "--no-wait", cache=slurm_cache)
    assert first.returncode == 0, first.stderr
    assert "key statistics of rome: computed by job" in first.stderr, first.stderr
    assert "not waiting (--no-wait)" in first.stderr and not (out / "summary.md").exists()
    job = json.loads((out / ".slurm" / "jobs.json").read_text())["jobs"]["rome"]
    wait_for(lambda: job_states([job])[job] == "RUNNING", 300, "rome's job to run")
    slurm_cluster.run("scancel", job)
    wait_for(lambda: job_states([job])[job] not in ("RUNNING", "COMPLETING"), 60, "the job to end")
    assert not (out / "rome" / "results.json").exists()  # cancelled before its run was written
    second = _sweep(out, *SLURM_OPTIONS, cache=slurm_cache)
    assert second.returncode == 0, second.stderr + slurm_cluster.logs()
    assert f"rome: job {job} ended CANCELLED without its run: resubmitting it" in second.stderr
    assert _metrics(out) == _metrics(local_sweep)
    assert _without_timing((out / "summary.md").read_text()) == _without_timing(
        (local_sweep / "summary.md").read_text()
    )


def test_a_failed_job_is_reported_and_resubmitted_only_on_request(
    slurm_cluster: SlurmCluster, slurm_cache: Path, tmp_path: Path
) -> None:
    """A key-statistics job that fails on its node (a corpus it cannot read offline) is reported with its
    state and log's tail, with the editor that needed it; the next call resubmits nothing without
    --resubmit-failed."""
    out = tmp_path / "sweep"
    corpus = ("--stats-corpus", "wikitext:wikitext-103-raw-v1")
    first = _sweep(out, *SLURM_OPTIONS, *corpus, cache=slurm_cache)
    assert first.returncode != 0
    assert "1 of 2 editors' jobs ended without their run" in first.stderr, first.stderr
    assert "rome: job" in first.stderr and "its key-statistics job" in first.stderr
    assert "--resubmit-failed" in first.stderr and "OfflineModeIsEnabled" in first.stderr  # the log's tail
    assert (out / "none" / "results.json").is_file()  # the other editor's run is kept
    again = _sweep(out, *SLURM_OPTIONS, *corpus, "--no-wait", cache=slurm_cache)
    assert again.returncode != 0 and "submitted 1 job" not in again.stderr, again.stderr


def test_slurm_workers_drain_a_postgres_queue(
    slurm_cluster: SlurmCluster,
    queue_url: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    evaluated_results: Path,
) -> None:
    """Two worker jobs drain one PostgreSQL queue; the one cancelled mid-job loses nothing."""
    from knowgic.runner.slurm_workers import submit_workers

    store, shared, jobs, env = queued_jobs(queue_url, tmp_path, evaluated_results, count=4, sleep=4)
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
