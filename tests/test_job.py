"""The job contract (runner/stages/contract.py) and what the worker host does without torch or a container engine:
the edit requests tell an editor nothing of the test set, the worker's modules import no torch and not each
other, and a starting worker reaps the job folders of dead workers only."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from knowgic.errors import KnowgicError
from knowgic.runner.host.worker import reap_dead
from knowgic.runner.intake.submission import submit
from knowgic.runner.queue.queue import JobQueue
from knowgic.runner.stages.contract import JOB_FOLDER_OWNER, EditRequests, JobSpec
from knowgic.runner.store.store import ResultsStore
from tests.test_submission import MANIFEST, make_submission

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_the_worker_host_imports_no_torch() -> None:
    """The worker's modules and the whole command line's parser, in a fresh interpreter."""
    code = (
        "import sys\n"
        "from knowgic.cli import build_parser\n"
        "args = build_parser().parse_args(['runner', 'worker', '--store', 'nowhere', '--once'])\n"
        "import knowgic.runner.host.worker, knowgic.runner.host.containers, knowgic.runner.commands, knowgic.runner.host.images, knowgic.runner.stages.contract, knowgic.runner.intake.wheels\n"
        "assert args.func.__module__ == 'knowgic.runner.commands'\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_containers_and_worker_meet_only_in_the_job_contract() -> None:
    containers, worker = (
        _imports(REPO_ROOT / "runner" / "host" / "containers.py"),
        _imports(REPO_ROOT / "runner" / "host" / "worker.py"),
    )
    assert "knowgic.runner.host.worker" not in containers and "knowgic.runner.host.containers" not in worker
    assert "knowgic.runner.stages.contract" in containers and "knowgic.runner.stages.contract" in worker
    stage_code = {f"knowgic.runner.stages.{name}" for name in ("prepare", "edit", "score", "cli", "deltas")}
    assert not (stage_code | {"knowgic.runner.stages", "torch"}) & (containers | worker)


def test_edit_requests_carry_the_edits_and_nothing_of_the_chains() -> None:
    from knowgic.dataset.loading import load_cases
    from knowgic.dataset.versions import latest_version
    from knowgic.runner.stages.prepare import edit_requests

    spec = JobSpec(model="knowgic-tiny", editor="none", mode="sequential", limit=5)
    requests = edit_requests(spec)
    document = requests.to_document()
    assert EditRequests.from_document(json.loads(json.dumps(document))) == requests
    assert [e.position for e in requests.edits] == list(range(5)) and requests.mode == "sequential"
    text = json.dumps(document, ensure_ascii=False)
    cases = load_cases(latest_version())
    questions = {q for case in cases for block in (case.chain, case.broader_context) for q in block.questions}
    assert questions and not [q for q in questions if q in text]
    assert set(document["edits"][0]) == {"position", "edit_id", "request"}
    assert set(document["edits"][0]["request"]) == {"prompt", "subject", "target_true", "target_new"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["edits"][0].update(edit_id="x"),
            "at /edits/0/edit_id: expected the request's id: the first 12 hex digits",
        ),
        (lambda d: d["edits"][1].update(position=7), "at /edits/1/position: expected 1, got 7"),
        (
            lambda d: d["edits"][0].update(chain={"questions": []}),
            "at /edits/0: unknown field 'chain' \\(allowed: edit_id, position, request\\)",
        ),
        (
            lambda d: d.update(mode="shuffled"),
            'at /mode: expected one of "independent", "sequential", got \'shuffled\'',
        ),
    ],
)
def test_a_malformed_requests_file_is_one_line(change: Any, message: str) -> None:
    from knowgic.runner.stages.prepare import edit_requests

    document = edit_requests(JobSpec(model="knowgic-tiny", editor="none", limit=2)).to_document()
    change(document)
    with pytest.raises(KnowgicError, match=message) as info:
        EditRequests.from_document(document, where="requests.json")
    assert str(info.value).startswith("requests.json at /") and "\n" not in str(info.value)


class _NoContainers:
    def execute(self, *args: Any) -> Path:  # pragma: no cover - never called here
        raise AssertionError


def _job_folder(root: Path, name: str, owner: dict[str, str] | None) -> Path:
    folder = root / f"knowgic-{name}-abc"
    (folder / "out").mkdir(parents=True)
    (folder / "out" / "results.json").write_text("{}")
    if owner is not None:
        (folder / JOB_FOLDER_OWNER).write_text(json.dumps(owner))
    return folder


def test_a_starting_worker_reaps_dead_workers_job_folders_only(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "store")
    queue = JobQueue(store.queue_url())
    _, [job] = submit(
        make_submission(tmp_path / "sub", {**MANIFEST, "protocols": ["logprob"]}), store, queue, limit=1
    )
    claimed = queue.claim("live-worker")
    assert claimed is not None and claimed.job_id == job.job_id
    root = tmp_path / "work"
    live = _job_folder(root, "live", {"queue": queue.queue_id, "job": job.job_id, "worker": "live-worker"})
    dead = _job_folder(root, "dead", {"queue": queue.queue_id, "job": job.job_id, "worker": "dead-worker"})
    gone = _job_folder(root, "gone", {"queue": queue.queue_id, "job": "no-such-job", "worker": "w"})
    other = _job_folder(root, "other", {"queue": "another-queue", "job": job.job_id, "worker": "dead-worker"})
    unmarked = _job_folder(root, "unmarked", None)
    reaped: list[str] = []
    calls: list[tuple[str, list[bool]]] = []

    class Executor(_NoContainers):
        def reap(self, queue_id: str, alive: Any) -> int:
            calls.append((queue_id, [alive(job.job_id, "live-worker"), alive(job.job_id, "dead-worker")]))
            return 2

    assert reap_dead(queue, Executor(), 60.0, root, reaped.append) == (2, 2)
    assert calls == [(queue.queue_id, [True, False])]
    assert reaped == ["reaped 2 container(s) and 2 job folder(s) of dead workers"]
    assert live.is_dir() and other.is_dir() and unmarked.is_dir()
    assert not dead.exists() and not gone.exists()
    # Past the grace period without a heartbeat, the live worker counts as dead too.
    assert reap_dead(queue, _NoContainers(), 0.0, root, reaped.append) == (0, 1)
    assert not live.exists()


def test_the_tiny_model_and_the_key_statistics_without_the_dataset(monkeypatch, tmp_path: Path) -> None:
    """As in the edit image: the shipped tiny model loads; the benchmark's texts are refused in one line,
    and statistics provided by trusted code are read without them."""
    import knowgic.dataset.versions as versions
    import knowgic.editors.layer_stats as layer_stats
    from knowgic.models.tiny.build import PREBUILT_DIR, ensure_tiny_model

    monkeypatch.setattr(versions, "HUB_DIR", tmp_path / "no-hub")
    monkeypatch.setattr(layer_stats, "PACKAGE_DIR", tmp_path / "no-package")
    assert not versions.dataset_installed()
    assert ensure_tiny_model() == PREBUILT_DIR
    with pytest.raises(
        KnowgicError, match=r"corpus 'knowgic'\) are not readable here: no dataset is installed"
    ):
        layer_stats.load_corpus("knowgic", 10)
