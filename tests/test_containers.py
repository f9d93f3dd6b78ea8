"""The runner end to end on a real Docker engine (marker ``container``): `knowgic runner submit` and
`knowgic runner worker` with the container executor, on knowgic-tiny.

- the README's custom editor, packaged as a submission, is scored in containers, its results land in the
  store, and its metrics equal a plain local `knowgic evaluate` of the same editor;
- hostile submissions (tests/data/submissions/hostile/) are each contained: FAILED with a reason that names
  what happened, or FINISHED with the honest scores, and the host untouched;
- an archive with `../` names is refused at submit;
- a worker killed with SIGKILL mid-job: the next worker re-runs the job, and the store holds it once.

The jobs of the hostile submissions run in one worker process (one per limit setting), so the images are
built once and each case costs one short job.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from knowgic.runner.host.sandbox import run_sandboxed
from knowgic.runner.queue.queue import JobQueue, JobState
from knowgic.runner.store.store import ResultsStore
from tests.container_fixtures import CLI

pytestmark = pytest.mark.container

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "custom_editor"
SUBMISSIONS = Path(__file__).resolve().parent / "data" / "submissions"
LIMIT = 2  # benchmark cases per job: enough for two distinct edits, short enough for CI
# Container limits of these tests (the worker reads them from the environment).
SANDBOX_ENV = {
    "KNOWGIC_SANDBOX_MEMORY": "3G",
    "KNOWGIC_SANDBOX_PIDS": "256",
    "KNOWGIC_SANDBOX_CPUS": "2",
    "KNOWGIC_SANDBOX_TIMEOUT": "300",
    "KNOWGIC_DELTA_QUOTA": "64M",
    "KNOWGIC_DELTA_CAP": "256M",
}


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`knowgic ARGS` in a new process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _start_worker(*args: str, output: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    """`knowgic runner worker ARGS` started in the background, with the sandbox's test limits."""
    return subprocess.Popen(
        [sys.executable, "-c", CLI, "runner", "worker", *args],
        env={**os.environ, **SANDBOX_ENV},
        stdout=output,
        stderr=subprocess.STDOUT if output == subprocess.PIPE else subprocess.DEVNULL,
        text=True,
    )


def _wait_running(store: Path, job_id: str, timeout: float) -> None:
    """Until the job's edit and score containers run."""
    deadline = time.monotonic() + timeout
    while "[runner] running the edit and score stages" not in _queue(store).logs(job_id):
        assert time.monotonic() < deadline, _queue(store).logs(job_id)[-2000:]
        time.sleep(0.5)


def _kill_once_running(store: Path, job_id: str, worker: subprocess.Popen[str], timeout: float) -> None:
    """SIGKILL ``worker`` once its job's containers run (what a crashed host leaves behind)."""
    try:
        _wait_running(store, job_id, timeout)
        time.sleep(2)
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()


def _rank_one_package(folder: Path) -> None:
    shutil.copytree(EXAMPLE / "knowgic_rank_one", folder / "knowgic_rank_one")
    shutil.copy(EXAMPLE / "rank_one_ft.yaml", folder / "rank_one_ft.yaml")


def _honest_submission(root: Path) -> Path:
    """The README's custom editor with its own submission.yaml, submitted as the folder it is."""
    folder = root / "rank-one"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    return folder


def _hostile_submission(
    root: Path, case: str, editor_class: str, hparams: dict[str, Any], requirements: list[str] | None = None
) -> Path:
    """The example package + hostile_editors.py, with a manifest naming ``editor_class``."""
    folder = root / case
    folder.mkdir(parents=True)
    _rank_one_package(folder)
    shutil.copy(SUBMISSIONS / "hostile" / "hostile_editors.py", folder / "hostile_editors.py")
    manifest = {
        "name": f"hostile-{case}",
        "version": "0.0.1",
        "authors": ["A hostile tester"],
        "license": "MIT",
        "editor": f"hostile_editors:{editor_class}",
        "hparams": {"knowgic-tiny": hparams},
        "models": ["knowgic-tiny"],
        "protocols": ["logprob"],
        **({"requirements": requirements} if requirements else {}),
    }
    (folder / "submission.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return folder


def _submit(store: Path, folder: Path) -> str:
    done = _cli("runner", "submit", str(folder), "--store", str(store), "--limit", str(LIMIT))
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "\tPENDING\t" in line]
    return line.split("\t")[0]


def _work(store: Path, jobs: int, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    args = ["runner", "worker", "--store", str(store), "--gpus", "none", "--poll", "0.5"]
    args += ["--once"] if jobs == 1 else ["--max-jobs", str(jobs)]
    # Every job costs three container starts and two model loads: allow a loaded machine its time.
    done = _cli(*args, env={**SANDBOX_ENV, **(env or {})}, timeout=max(900, 300 * jobs))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def _queue(store: Path) -> JobQueue:
    return JobQueue(ResultsStore(store).queue_url())


def _metric_values(metrics: Any, prefix: str = "") -> dict[str, float | None]:
    """Every ``value`` in the metrics tree, by its path."""
    values: dict[str, float | None] = {}
    if isinstance(metrics, dict):
        if "value" in metrics and not isinstance(metrics["value"], dict):
            values[prefix] = metrics["value"]
        for key, item in metrics.items():
            if isinstance(item, dict):
                values.update(_metric_values(item, f"{prefix}/{key}"))
    return values


def _assert_same_metrics(found: dict[str, Any], expected: dict[str, Any]) -> None:
    a, b = _metric_values(found), _metric_values(expected)
    assert a.keys() == b.keys() and len(a) > 5
    for key in a:
        if a[key] is None or b[key] is None:
            assert a[key] == b[key], key
        else:
            assert math.isclose(a[key], b[key], rel_tol=0, abs_tol=1e-9), (key, a[key], b[key])


@pytest.fixture(scope="module")
def honest_run(runner_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The README's custom editor through `runner submit` + `runner worker --once`, and the same editor
    with plain `knowgic evaluate`, each timed."""
    root = tmp_path_factory.mktemp("honest")
    store = root / "store"
    folder = _honest_submission(root)
    job_id = _submit(store, folder)
    started = time.monotonic()
    worker = _work(store, 1)
    runner_seconds = time.monotonic() - started

    started = time.monotonic()
    local = _cli(
        "evaluate",
        "--model",
        "knowgic-tiny",
        "--editor",
        "knowgic_rank_one.editor:RankOneFT",
        "--hparams",
        str(folder / "rank_one_ft.yaml"),
        "--limit",
        str(LIMIT),
        "--out",
        str(root / "local"),
        env={"PYTHONPATH": str(folder)},
    )
    local_seconds = time.monotonic() - started
    assert local.returncode == 0, local.stderr[-2000:]
    print(
        f"\nrunner job {runner_seconds:.1f} s (worker process, image cached), local knowgic evaluate "
        f"{local_seconds:.1f} s: ratio {runner_seconds / local_seconds:.2f}"
    )
    return {
        "store": store,
        "job_id": job_id,
        "worker": worker,
        "local": json.loads((root / "local" / "results.json").read_text()),
        "runner_seconds": runner_seconds,
        "local_seconds": local_seconds,
    }


def test_the_custom_editor_runs_end_to_end_and_lands_in_the_store(honest_run: dict[str, Any]) -> None:
    store, job_id = honest_run["store"], honest_run["job_id"]
    job = _queue(store).get(job_id)
    assert job.state == JobState.FINISHED, (job.reason, _queue(store).logs(job_id)[-3000:])
    assert job.device == "cpu"
    scan = ResultsStore(store).scan()
    assert scan.skipped == []
    (entry,) = scan.entries
    assert entry.source == "verified" and entry.results_sha256 == job.results_sha256
    document = entry.document
    assert document["config"]["model"] == "knowgic-tiny" and document["config"]["limit"] == LIMIT
    assert document["submission"]["name"] == "rank-one-ft"
    assert document["submission"]["sha256"] == job.submission_sha256
    assert document["runner"]["stages"] == "edit/score" and document["runner"]["deltas"] >= 1
    log = _queue(store).logs(job_id)
    assert "[runner] edit image knowgic-edit:" in log and "[score]" in log and "[edit]" in log


def test_runner_metrics_equal_a_local_evaluate(honest_run: dict[str, Any]) -> None:
    store = honest_run["store"]
    (entry,) = ResultsStore(store).scan().entries
    runner_doc, local_doc = entry.document, honest_run["local"]
    _assert_same_metrics(runner_doc["metrics"], local_doc["metrics"])
    assert [e["edit_id"] for e in runner_doc["per_edit"]] == [e["edit_id"] for e in local_doc["per_edit"]]


def test_a_second_job_of_the_same_submission_reuses_its_image(
    honest_run: dict[str, Any], tmp_path: Path
) -> None:
    store = honest_run["store"]
    done = _cli("runner", "requeue", honest_run["job_id"], "--store", str(store))
    # A FINISHED job is not requeued; submitting the same folder again gives a job of the same archive.
    if done.returncode != 0:
        folder = _honest_submission(tmp_path)
        done = _cli("runner", "submit", str(folder), "--store", str(store), "--limit", "1")
        assert done.returncode == 0, done.stderr
    _work(store, 1)
    jobs = _queue(store).jobs()
    newest = max(jobs, key=lambda job: job.created_at)
    assert newest.state == JobState.FINISHED, newest.reason
    assert "(cached)" in _queue(store).logs(newest.job_id)


@pytest.mark.podman
def test_a_job_runs_end_to_end_on_podman(
    honest_run: dict[str, Any], podman_runner_image: str, podman_client: Any, tmp_path: Path
) -> None:
    """The same job through Podman's Docker-compatible API: edit image (with a requirement, installed in a
    sandboxed container there), prepare, edit and score stages, stored and verified, and its metrics equal
    the local `knowgic evaluate`'s (as on Docker)."""
    store = tmp_path / "store"
    folder = _honest_submission(tmp_path)
    manifest = yaml.safe_load((folder / "submission.yaml").read_text())
    (folder / "submission.yaml").write_text(
        yaml.safe_dump({**manifest, "requirements": [NETWORK_REQUIREMENT]})
    )
    job_id = _submit(store, folder)
    started = time.monotonic()
    worker = _work(store, 1, env={"KNOWGIC_CONTAINER_ENGINE": "podman"})
    print(f"\nrunner job on Podman {time.monotonic() - started:.1f} s (worker process, edit image built)")
    assert "engine podman" in worker.stdout
    job = _queue(store).get(job_id)
    assert job.state == JobState.FINISHED, (job.reason, _queue(store).logs(job_id)[-3000:])
    (entry,) = ResultsStore(store).scan().entries
    assert entry.source == "verified" and entry.results_sha256 == job.results_sha256
    _assert_same_metrics(entry.document["metrics"], honest_run["local"]["metrics"])
    log = _queue(store).logs(job_id)
    assert "[runner] prepare stage done" in log and "[edit]" in log and "[score]" in log
    assert f"wheels: {NETWORK_REQUIREMENT}" in log
    assert podman_client.containers.list(all=True, filters={"label": f"org.knowgic.job={job_id}"}) == []
    (edit_image,) = re.findall(r"\[runner\] edit image (knowgic-edit:\S+)", log)
    found = run_sandboxed(
        podman_client, edit_image, ["python3", "-c", "import wcwidth; print(wcwidth.__file__)"], gpus="none"
    )
    assert found.ok and found.logs.startswith("/opt/knowgic-submission-packages/"), found.logs


def test_a_sequential_job_equals_a_local_sequential_evaluate(runner_image: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    folder = _honest_submission(tmp_path)
    manifest = yaml.safe_load((folder / "submission.yaml").read_text())
    (folder / "submission.yaml").write_text(yaml.safe_dump({**manifest, "modes": ["sequential"]}))
    job_id = _submit(store, folder)
    _work(store, 1)
    job = _queue(store).get(job_id)
    assert job.state == JobState.FINISHED and job.mode == "sequential", job.reason
    local = _cli(
        "evaluate",
        "--model",
        "knowgic-tiny",
        "--editor",
        "knowgic_rank_one.editor:RankOneFT",
        "--hparams",
        str(folder / "rank_one_ft.yaml"),
        "--mode",
        "sequential",
        "--limit",
        str(LIMIT),
        "--out",
        str(tmp_path / "local"),
        env={"PYTHONPATH": str(folder)},
    )
    assert local.returncode == 0, local.stderr[-2000:]
    (entry,) = ResultsStore(store).scan().entries
    assert entry.document["runner"]["deltas"] == 1  # one cumulative delta after the last edit
    _assert_same_metrics(
        entry.document["metrics"], json.loads((tmp_path / "local" / "results.json").read_text())["metrics"]
    )


# Installed into the network case's edit image while it builds: the network is there then, and only then.
NETWORK_REQUIREMENT = "wcwidth==0.2.13"
HOSTILE_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "network": ("NetworkEgress", {}),
    "write": ("WriteOutside", {}),
    "read": ("ReadHost", {}),
    "fork": ("ForkBomb", {}),
    "memory": ("MemoryBomb", {}),
    "log-flood": ("LogFlood", {"layer": 1, "steps": 40, "lr": 0.5}),
    "patch-scores": ("PatchScores", {"layer": 1, "steps": 40, "lr": 0.5}),
    "delta-shape": ("ForgedDelta", {"forge": "shape"}),
    "delta-nan": ("ForgedDelta", {"forge": "nan"}),
    "delta-unknown": ("ForgedDelta", {"forge": "unknown"}),
    "disk": ("DiskFiller", {}),
}


@pytest.fixture(scope="module")
def hostile_run(runner_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every hostile case submitted to one store and run by one worker."""
    root = tmp_path_factory.mktemp("hostile")
    store = root / "store"
    host_files = root / "host-files"
    host_files.mkdir()
    secret = host_files / "secret.txt"
    secret.write_text("the host's secret\n")
    host_paths = [str(secret), str(store / "queue.sqlite"), str(host_files / "new-file")]
    jobs: dict[str, str] = {}
    for case, (editor_class, hparams) in HOSTILE_CASES.items():
        if case in ("write", "read"):
            hparams = {**hparams, "host_paths": host_paths}
        requirements = [NETWORK_REQUIREMENT] if case == "network" else None
        folder = _hostile_submission(root / "submissions", case, editor_class, hparams, requirements)
        jobs[case] = _submit(store, folder)
    before = {path: path.stat().st_mtime_ns for path in host_files.iterdir()}
    started = time.monotonic()
    _work(store, len(jobs))
    print(f"\n{len(jobs)} hostile jobs in {time.monotonic() - started:.1f} s")
    queue = _queue(store)
    return {
        "store": store,
        "jobs": {case: queue.get(job_id) for case, job_id in jobs.items()},
        "logs": {case: queue.logs(job_id) for case, job_id in jobs.items()},
        "host_files": host_files,
        "host_before": before,
        "secret": secret,
    }


def _failed(hostile_run: dict[str, Any], case: str) -> str:
    job = hostile_run["jobs"][case]
    assert job.state == JobState.FAILED, (case, job.state, hostile_run["logs"][case][-3000:])
    assert job.reason and "\n" not in job.reason
    return str(job.reason)


def test_network_egress_is_blocked(hostile_run: dict[str, Any]) -> None:
    reason = _failed(hostile_run, "network")
    assert "egress blocked: requirement wcwidth 0.2.13 installed" in reason and "no DNS" in reason
    assert "the edit stage (the submitted editor) exited with code" in reason


def test_writes_outside_the_output_folder_are_refused(hostile_run: dict[str, Any]) -> None:
    reason = _failed(hostile_run, "write")  # FAILED: the editor raises only when no write went through
    assert "writes refused" in reason
    refused = next(line for line in hostile_run["logs"]["write"].splitlines() if "writes refused" in line)
    assert refused.count("(Read-only file system)") + refused.count("(Permission denied)") >= 6, refused
    host_files = hostile_run["host_files"]
    assert not (host_files / "new-file").exists()
    assert hostile_run["secret"].read_text() == "the host's secret\n"
    assert "tampered" not in (REPO_ROOT / "knowgic" / "metrics.py").read_text()


def test_host_files_are_out_of_reach(hostile_run: dict[str, Any]) -> None:
    reason = _failed(hostile_run, "read")
    assert "host files unreachable (uid 10001, socket absent)" in reason


def test_a_fork_bomb_is_contained(hostile_run: dict[str, Any]) -> None:
    reason = _failed(hostile_run, "fork")
    assert "hit its limit of 256 processes" in reason


def test_a_memory_bomb_is_contained(hostile_run: dict[str, Any]) -> None:
    reason = _failed(hostile_run, "memory")
    assert "more than its memory limit of 3 GiB" in reason


def test_a_log_flood_is_capped_and_the_run_scored(hostile_run: dict[str, Any]) -> None:
    job = hostile_run["jobs"]["log-flood"]
    assert job.state == JobState.FINISHED, job.reason
    log = hostile_run["logs"]["log-flood"]
    assert "flood" in log
    assert len(log.encode()) <= 300 * 1024  # the queue keeps at most its log cap, however much was printed


def test_patched_metrics_and_a_forged_results_file_do_not_reach_the_scores(
    hostile_run: dict[str, Any], honest_run: dict[str, Any]
) -> None:
    job = hostile_run["jobs"]["patch-scores"]
    assert job.state == JobState.FINISHED, job.reason
    entries = {entry.entry_id: entry for entry in ResultsStore(hostile_run["store"]).scan().entries}
    document = entries[job.job_id].document
    # The same editor and hparams run honestly by plain `knowgic evaluate`: every metric equal.
    _assert_same_metrics(document["metrics"], honest_run["local"]["metrics"])
    assert document["metrics"]["ifr"]["value"] != 1.0


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("delta-shape", ("shape",)),
        ("delta-nan", ("finite", "nan")),
        ("delta-unknown", ("transformer.evil.weight",)),
    ],
)
def test_forged_deltas_are_rejected_by_the_score_stage(
    hostile_run: dict[str, Any], case: str, words: tuple[str, ...]
) -> None:
    reason = _failed(hostile_run, case)
    assert reason.startswith("the score stage rejected the run:"), reason
    assert any(word in reason.lower() for word in words), reason


def test_a_disk_filler_is_stopped_at_the_deltas_cap(hostile_run: dict[str, Any]) -> None:
    reason = _failed(hostile_run, "disk")
    assert "wrote more than 0.25 GiB into its deltas folder (quota 64M) and was stopped" in reason


def test_the_host_is_untouched_and_no_container_is_left(
    hostile_run: dict[str, Any], docker_client: Any
) -> None:
    host_files = hostile_run["host_files"]
    after = {path: path.stat().st_mtime_ns for path in host_files.iterdir()}
    assert after == hostile_run["host_before"]
    assert docker_client.containers.list(all=True, filters={"label": "org.knowgic.job"}) == []
    counted = sum(
        1 for job in hostile_run["jobs"].values() if job.state in (JobState.FAILED, JobState.FINISHED)
    )
    assert counted == len(HOSTILE_CASES)


def test_an_endless_loop_is_killed_at_the_timeout(runner_image: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    job_id = _submit(store, _hostile_submission(tmp_path, "loop", "EndlessLoop", {}))
    started = time.monotonic()
    _work(store, 1, env={"KNOWGIC_SANDBOX_TIMEOUT": "25"})
    assert time.monotonic() - started < 120
    job = _queue(store).get(job_id)
    assert job.state == JobState.FAILED
    assert job.reason is not None and "ran past its wall-clock limit of 25 s" in job.reason


def test_an_archive_with_parent_paths_is_refused_at_submit(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    folder = _honest_submission(tmp_path)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="rank-one")
        tar.add(folder / "submission.yaml", arcname="../escaped.yaml")
    done = _cli("runner", "submit", str(archive), "--store", str(tmp_path / "store"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and ".." in done.stderr
    assert not (tmp_path.parent / "escaped.yaml").exists()
    assert not (tmp_path / "store" / "entries").exists() or not any(
        (tmp_path / "store" / "entries").iterdir()
    )


def test_a_worker_killed_mid_job_is_replaced_without_loss_or_duplicate(
    runner_image: str, tmp_path: Path, docker_client: Any
) -> None:
    store = tmp_path / "store"
    folder = _hostile_submission(
        tmp_path, "slow", "SlowHonest", {"layer": 1, "steps": 40, "lr": 0.5, "sleep": 8}
    )
    job_id = _submit(store, folder)
    args = ["--store", str(store), "--gpus", "none", "--once", "--heartbeat", "1"]
    _kill_once_running(store, job_id, _start_worker(*args), timeout=180)
    assert _queue(store).get(job_id).state == JobState.RUNNING
    assert docker_client.containers.list(all=True, filters={"label": f"org.knowgic.job={job_id}"})

    time.sleep(3)  # past the grace period of the next worker: the dead worker's heartbeats have stopped
    second = _cli("runner", "worker", *args[:-2], "--heartbeat", "1", "--grace", "2", env=SANDBOX_ENV)
    assert second.returncode == 0, second.stderr[-2000:]
    job = _queue(store).get(job_id)
    assert job.state == JobState.FINISHED, (job.reason, _queue(store).logs(job_id)[-2000:])
    assert job.attempts >= 1
    entries = [entry for entry in ResultsStore(store).scan().entries if entry.entry_id == job_id]
    assert len(entries) == 1 and len(list((store / "results").iterdir())) == 1
    # The second worker reaped the dead one's containers and job folder as it started, before claiming.
    assert "reaped 2 container(s) and 1 job folder(s) of dead workers" in second.stdout, second.stdout[-2000:]
    assert docker_client.containers.list(all=True, filters={"label": f"org.knowgic.job={job_id}"}) == []


# -- what the edit stage sees, how requirements are installed, what a dead worker leaves -------------------
def _benchmark_questions() -> list[str]:
    from knowgic.dataset.loading import load_cases
    from knowgic.dataset.versions import available_versions

    questions = {
        q
        for version in available_versions()
        for case in load_cases(version)
        for block in (case.chain, case.broader_context)
        for q in block.questions
        if q
    }
    return sorted(questions)


def test_the_test_set_is_not_readable_in_the_edit_container(
    runner_image: str, honest_run: dict[str, Any], tmp_path: Path
) -> None:
    """A submission greps every readable file of its container for every benchmark question: only the
    control it planted itself is found, and it then scores exactly as the honest editor."""
    import base64

    questions = _benchmark_questions()
    store = tmp_path / "store"
    hparams = {
        "layer": 1,
        "steps": 40,
        "lr": 0.5,
        "questions": "/submission/questions.b64",
        "control": "/submission/control.txt",
    }
    folder = _hostile_submission(tmp_path, "search", "TestSetSearch", hparams)
    (folder / "questions.b64").write_text("\n".join(base64.b64encode(q.encode()).decode() for q in questions))
    (folder / "control.txt").write_text(f"a planted question: {questions[0]}\n")
    job_id = _submit(store, folder)
    _work(store, 1)
    job, log = _queue(store).get(job_id), _queue(store).logs(job_id)
    assert job.state == JobState.FINISHED, (job.reason, log[-3000:])
    line = next(line for line in log.splitlines() if "readable files for" in line)
    assert f"for {len(questions)} questions: only the control found" in line, line
    print(f"\n{line}")
    (entry,) = ResultsStore(store).scan().entries
    _assert_same_metrics(entry.document["metrics"], honest_run["local"]["metrics"])


BUILTIN_WRAPPER = "from knowgic.editors.rome.rome_main import ROMEEditor as ROME\n\n__all__ = ['ROME']\n"


def test_a_builtin_editor_with_key_statistics_equals_a_local_evaluate(
    runner_image: str, tmp_path: Path
) -> None:
    """ROME needs C = E[k kᵀ] over the benchmark's texts, which the edit container does not hold: the
    prepare stage computes it, the edit stage reads it read-only, and the scores equal a local run's."""
    from knowgic.paths import PACKAGE_DIR

    store, folder = tmp_path / "store", tmp_path / "rome"
    folder.mkdir()
    (folder / "builtin_rome.py").write_text(BUILTIN_WRAPPER)
    shutil.copy(PACKAGE_DIR / "editors" / "hparams" / "rome" / "knowgic-tiny.yaml", folder / "rome.yaml")
    manifest = {
        "name": "rome-builtin",
        "version": "1.0.0",
        "authors": ["The KnowGIC developers"],
        "license": "MIT",
        "editor": "builtin_rome:ROME",
        "hparams": {"knowgic-tiny": "rome.yaml"},
        "models": ["knowgic-tiny"],
        "protocols": ["logprob"],
    }
    (folder / "submission.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    job_id = _submit(store, folder)
    _work(store, 1, env={"KNOWGIC_RUNNER_STATS": str(tmp_path / "stats")})
    job, log = _queue(store).get(job_id), _queue(store).logs(job_id)
    assert job.state == JobState.FINISHED, (job.reason, log[-3000:])
    assert "[prepare] prepare stage: key statistics of transformer.h.0.mlp.c_proj (knowgic, 2000" in log
    assert list((tmp_path / "stats").rglob("*.safetensors"))
    local = _cli(
        *("evaluate", "--model", "knowgic-tiny", "--editor", "rome", "--limit", str(LIMIT)),
        *("--out", str(tmp_path / "local")),
    )
    assert local.returncode == 0, local.stderr[-2000:]
    (entry,) = ResultsStore(store).scan().entries
    expected = json.loads((tmp_path / "local" / "results.json").read_text())
    _assert_same_metrics(entry.document["metrics"], expected["metrics"])
    assert entry.document["config"]["hparams"] == expected["config"]["hparams"]


def _probe_wheel(folder: Path, host: str, port: int) -> Path:
    """A wheel whose .pth file opens a socket whenever Python starts where it is installed: it prints why and
    exits 3 when the socket is refused, so that a build that runs Python after installing it fails with the
    reason as its last line."""
    import base64
    import hashlib
    import zipfile

    attempt = (
        f"try:\\n socket.create_connection(('{host}', {port}), 3).close(); print('probe: connected', flush=True)"
        "\\nexcept OSError as e:\\n print('probe: socket refused:', e, flush=True); os._exit(3)"
    )
    code = f'import os, socket; exec("{attempt}")\n'
    files = {
        "knowgic_socket_probe.pth": code,
        "knowgic_socket_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: knowgic-socket-probe\nVersion: 1.0\n",
        "knowgic_socket_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("knowgic_socket_probe-1.0.dist-info/RECORD,,")
    files["knowgic_socket_probe-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "knowgic_socket_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def test_a_build_that_opens_a_socket_fails(engine: str, engine_runner_image: str, tmp_path: Path) -> None:
    """A requirement's wheel runs code at the build's first Python start after the install: the build has no
    network, so its socket is refused, the job fails with that line, and the host's listener hears nothing.
    On both engines (the wheel is fetched in a container with the network, then built without)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(5)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    heard: list[str] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            try:
                connection, peer = listener.accept()
            except OSError:
                continue
            heard.append(str(peer))
            connection.close()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    try:
        _probe_wheel(tmp_path / "wheels", "172.17.0.1", port)
        store = tmp_path / "store"
        folder = _hostile_submission(tmp_path, "socket", "NetworkEgress", {}, ["knowgic-socket-probe==1.0"])
        job_id = _submit(store, folder)
        _work(
            store, 1, env={"KNOWGIC_FIND_LINKS": str(tmp_path / "wheels"), "KNOWGIC_CONTAINER_ENGINE": engine}
        )
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    job = _queue(store).get(job_id)
    assert job.state == JobState.FAILED, (job.state, _queue(store).logs(job_id)[-3000:])
    assert job.reason is not None and job.reason.startswith("building the submission's image failed"), (
        job.reason
    )
    assert "probe: socket refused" in job.reason, job.reason
    assert heard == []
    assert "wheels: knowgic-socket-probe==1.0" in _queue(store).logs(job_id)


def test_a_starting_worker_reaps_what_dead_workers_left_and_spares_live_ones(
    runner_image: str, tmp_path: Path, docker_client: Any
) -> None:
    store, workdirs = tmp_path / "store", tmp_path / "work"
    workdirs.mkdir()
    slow = {"layer": 1, "steps": 40, "lr": 0.5, "sleep": 20}
    dead_job = _submit(store, _hostile_submission(tmp_path, "dead", "SlowHonest", slow))
    args = ["--store", str(store), "--gpus", "none", "--once", "--heartbeat", "1", "--workdir", str(workdirs)]

    def containers(job_id: str) -> list[Any]:
        return docker_client.containers.list(all=True, filters={"label": f"org.knowgic.job={job_id}"})

    _kill_once_running(store, dead_job, _start_worker(*args), timeout=240)
    assert containers(dead_job) and len(list(workdirs.iterdir())) == 1  # left behind by the dead worker
    assert _cli("runner", "cancel", dead_job, "--store", str(store)).returncode == 0

    live_job = _submit(store, _hostile_submission(tmp_path, "live", "SlowHonest", slow))
    second = _start_worker(*args, "--grace", "3", output=subprocess.PIPE)
    try:
        _wait_running(store, live_job, 240)
        # The second worker reaped the dead one's containers and folder as it started.
        assert containers(dead_job) == []
        assert [p.name.startswith(f"knowgic-{live_job}-") for p in workdirs.iterdir()] == [True]
        third = _cli(
            "runner", "worker", *args, "--grace", "3", env=SANDBOX_ENV
        )  # nothing to run: it only looks around
        assert third.returncode == 0, third.stderr[-2000:]
        assert "reaped" not in third.stdout
        assert containers(live_job) and len(list(workdirs.iterdir())) == 1  # the live worker's, untouched
        out, _ = second.communicate(timeout=600)
    finally:
        if second.poll() is None:
            second.kill()
    assert "reaped 2 container(s) and 1 job folder(s) of dead workers" in out, out[-2000:]
    job = _queue(store).get(live_job)
    assert job.state == JobState.FINISHED, (job.reason, _queue(store).logs(live_job)[-2000:])
    assert containers(live_job) == [] and list(workdirs.iterdir()) == []
