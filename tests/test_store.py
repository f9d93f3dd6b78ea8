"""The results store: content-addressed, never overwritten, and a reader that skips bad files with reasons."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.results import content_sha256
from knowgic.runner.store.signing import load_signer
from knowgic.runner.store.store import STORE_VERSION, ResultsStore, local_entry_id


@pytest.fixture(scope="module")
def tiny_runs(knowgic_tiny, tmp_path_factory) -> dict[str, Path]:
    """Two real runs on knowgic-tiny (results.json files written by ``evaluate``)."""
    out = tmp_path_factory.mktemp("runs")
    paths = {}
    for editor in ("none", "ice"):
        request = EvaluationRequest(model="knowgic-tiny", editor=editor, limit=2, out_dir=out / editor)
        paths[editor] = evaluate(request, progress=False, loaded=knowgic_tiny).results_path
    return paths


@pytest.fixture
def store(tmp_path) -> ResultsStore:
    return ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")


def _archive(tmp_path: Path) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "submission.yaml").write_text("name: demo\n", encoding="utf-8")
    archive = tmp_path / "demo.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="demo")
    return archive


def test_local_run_is_stored_by_its_content_hash_and_read_back(store, tiny_runs):
    document = json.loads(tiny_runs["ice"].read_text(encoding="utf-8"))
    entry = store.add_local(tiny_runs["ice"], label="first try")

    assert entry.results_sha256 == document["sha256"] == content_sha256(document)
    assert store.results_path(entry.results_sha256).read_bytes() == tiny_runs["ice"].read_bytes()
    assert entry.entry_id == local_entry_id(document["sha256"])
    assert entry.source == "local" and entry.label == "first try"
    assert "per_edit" not in entry.summary and "chains" not in entry.summary
    assert entry.summary["metrics"] == document["metrics"]
    assert entry.document == document

    scan = store.scan()
    assert [e.entry_id for e in scan.entries] == [entry.entry_id]
    assert scan.skipped == []


def test_adding_the_same_run_twice_keeps_one_entry(store, tiny_runs):
    first = store.add_local(tiny_runs["none"])
    data = first.path.read_bytes()
    second = store.add_local(tiny_runs["none"], label="again")
    assert second.entry_id == first.entry_id
    assert first.path.read_bytes() == data  # not overwritten, not even the label
    assert len(store.scan().entries) == 1


def test_an_entry_is_never_overwritten_by_other_results(store, tiny_runs):
    archive = _archive(store.root.parent)
    job = {"job_id": "job-1", "model": "knowgic-tiny"}
    entry = store.add_verified(
        tiny_runs["none"], archive_path=archive, manifest={"name": "demo"}, job=job, signer=load_signer()
    )
    assert entry.source == "verified" and entry.job == job and entry.manifest == {"name": "demo"}
    assert store.submission_path(entry.submission_sha256).read_bytes() == archive.read_bytes()
    with pytest.raises(KnowgicError, match="never overwritten"):
        store.add_verified(
            tiny_runs["ice"], archive_path=archive, manifest={"name": "demo"}, job=job, signer=load_signer()
        )
    assert store.load_entry(entry.path).results_sha256 == entry.results_sha256


def test_invalid_results_are_refused_before_anything_is_written(store, tiny_runs, tmp_path):
    document = json.loads(tiny_runs["none"].read_text(encoding="utf-8"))
    document["metrics"]["efficacy"]["value"] = 1.0  # a forged number under the original hash
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(KnowgicError, match="does not match its content"):
        store.add_local(forged)
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(KnowgicError, match="not valid JSON"):
        store.add_local(broken)
    assert not store.root.exists()


def _skipped_reasons(store: ResultsStore) -> dict[str, str]:
    return {s.path.name: s.reason for s in store.scan().skipped}


def test_scan_skips_bad_files_with_reasons_and_never_raises(store, tiny_runs):
    good = store.add_local(tiny_runs["ice"])
    entries = store.entries_dir

    (entries / "broken.json").write_text("{", encoding="utf-8")
    (entries / "notes.txt").write_text("hello", encoding="utf-8")
    record = json.loads(good.path.read_text(encoding="utf-8"))
    (entries / "dangling.json").write_text(
        json.dumps({**record, "entry_id": "dangling", "results_sha256": "0" * 64}), encoding="utf-8"
    )
    (entries / "future.json").write_text(
        json.dumps({**record, "entry_id": "future", "store_version": STORE_VERSION + 1}), encoding="utf-8"
    )
    (entries / "renamed.json").write_text(json.dumps(record), encoding="utf-8")
    (entries / "noarchive.json").write_text(
        json.dumps({**record, "entry_id": "noarchive", "source": "verified", "submission_sha256": "1" * 64}),
        encoding="utf-8",
    )
    # A results file stored under another document's name.
    other = json.loads(tiny_runs["none"].read_text(encoding="utf-8"))
    wrong_name = "2" * 64
    store.results_path(wrong_name).write_text(json.dumps(other), encoding="utf-8")
    (entries / "misnamed.json").write_text(
        json.dumps({**record, "entry_id": "misnamed", "results_sha256": wrong_name}), encoding="utf-8"
    )

    scan = store.scan()
    # A valid results document under another document's name is shown, as local, with the reason.
    assert [e.entry_id for e in scan.entries] == [good.entry_id, "misnamed"]
    misnamed = scan.entries[1]
    assert misnamed.source == "local" and misnamed.results_sha256 == other["sha256"]
    assert misnamed.warning is not None and "holds other results" in misnamed.warning
    reasons = _skipped_reasons(store)
    assert set(reasons) == {
        "broken.json",
        "notes.txt",
        "dangling.json",
        "future.json",
        "renamed.json",
        "noarchive.json",
    }
    assert "not valid JSON" in reasons["broken.json"]
    assert "is missing" in reasons["dangling.json"]
    assert "store_version" in reasons["future.json"]
    assert "names itself" in reasons["renamed.json"]
    assert "submission archive" in reasons["noarchive.json"]


def test_a_results_file_changed_after_it_was_verified_is_skipped(store, tiny_runs):
    entry = store.add_local(tiny_runs["ice"])
    assert store.scan().skipped == []  # verified and remembered

    path = store.results_path(entry.results_sha256)
    document = json.loads(path.read_text(encoding="utf-8"))
    document["metrics"]["ifr"]["value"] = 0.0
    path.write_text(json.dumps(document), encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))

    scan = store.scan()
    assert scan.entries == []
    assert "does not match its content" in scan.skipped[0].reason
    # A new reader (another process) sees the same: the shared summary cache is keyed by the file's stat.
    fresh = ResultsStore(store.root, verified_cache=store.root.parent / "cache")
    assert "does not match its content" in fresh.scan().skipped[0].reason


def test_store_commands_add_and_list(tmp_path, tiny_runs, capsys, monkeypatch):
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "store"
    sweep = tiny_runs["none"].parent.parent  # a folder of run folders, as `knowgic sweep` writes
    assert main(["store", "add", str(sweep), "--store", str(root)]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 run(s) added" in out
    assert main(["store", "add", str(tiny_runs["ice"]), "--store", str(root)]) == 0
    assert "already in the store" in capsys.readouterr().out
    (root / "entries" / "broken.json").write_text("[]", encoding="utf-8")
    assert main(["store", "list", "--store", str(root)]) == 0
    out = capsys.readouterr().out
    assert "2 run(s) (0 verified), 1 skipped file(s)" in out and "broken.json" in out

    assert main(["store", "add", str(tmp_path / "missing"), "--store", str(root)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["store", "list", "--store", str(tmp_path / "nowhere")]) == 2
