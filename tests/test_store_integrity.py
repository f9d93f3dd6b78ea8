"""Integrity on read: a person with write access to a store swaps the archive behind a verified run, or
edits its results file in place (same size, modification time put back), against a reader whose cache is
warm. Each change shows the run as local, with the reason, in ``store list`` and in what the leaderboard
reads, and a replaced archive is never served. Real results (``evaluate`` on knowgic-tiny), real
signatures, the store on disk."""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from knowgic.cli import main
from knowgic.results import content_sha256
from knowgic.runner.store import store as store_module
from knowgic.runner.store.signing import TrustedKeys, load_signer
from knowgic.runner.store.store import ResultsStore, StoreEntry, StoreFileError


@pytest.fixture(scope="module")
def runs(knowgic_tiny, tmp_path_factory) -> dict[str, Path]:
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

    out = tmp_path_factory.mktemp("integrity-runs")
    return {
        editor: evaluate(
            EvaluationRequest(model="knowgic-tiny", editor=editor, limit=2, out_dir=out / editor),
            progress=False,
            loaded=knowgic_tiny,
        ).results_path
        for editor in ("rome", "none")
    }


def _archive(folder: Path, name: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission.yaml").write_text(f"name: {name}\n{extra}", encoding="utf-8")
    archive = folder / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder / "submission.yaml", arcname="submission.yaml")
    return archive


def _verified(store: ResultsStore, results: Path, tmp_path: Path, job_id: str) -> StoreEntry:
    archive = _archive(tmp_path / job_id, job_id)
    return store.add_verified(
        results, archive_path=archive, manifest={"name": job_id}, job={"job_id": job_id}, signer=load_signer()
    )


def _settled() -> None:
    """Past the store's racy window, so that the reader remembers each hash by its stat key alone (what
    a long-running reader does): the detection below then rests on the stat key, not on a fresh hash."""
    time.sleep(store_module.RACY_SECONDS + 0.2)


def _overwrite_in_place(path: Path, data: bytes) -> None:
    """Write ``data`` over ``path`` (same inode) and put its modification time back."""
    stat = path.stat()
    assert len(data) == stat.st_size  # same size: only the content differs
    with path.open("r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _same_size(document: dict[str, Any], size: int) -> bytes:
    """A valid results file of exactly ``size`` bytes: compact JSON padded with trailing whitespace."""
    data = json.dumps(document, separators=(",", ":")).encode("utf-8")
    assert len(data) <= size
    return data + b" " * (size - len(data))


def _listed(capsys, root: Path) -> str:
    assert main(["store", "list", "--store", str(root)]) == 0
    return capsys.readouterr().out


def test_a_swapped_archive_makes_its_run_local_and_is_never_served(runs, tmp_path, capsys):
    store = ResultsStore(
        tmp_path / "store", verified_cache=tmp_path / "cache", trusted_keys=TrustedKeys.load()
    )
    entry = _verified(store, runs["rome"], tmp_path, "job-rome")
    archive = store.submission_path(entry.submission_sha256)
    assert archive is not None
    _settled()
    assert [e.source for e in store.scan().entries] == ["verified"]  # warm: every hash remembered
    assert store._known_digest(archive) == entry.submission_sha256

    # Another archive of the same size, written over the signed one, its modification time put back.
    other = _archive(tmp_path / "other", "job-rome", extra="#" * 8).read_bytes()
    original = archive.read_bytes()
    other = other[: len(original)] + b"\0" * (len(original) - len(other))
    _overwrite_in_place(archive, other)

    for reader in (store, ResultsStore(store.root, verified_cache=tmp_path / "cache")):
        for scan in (reader.scan(), reader.scan(verify=False)):  # store list, and the leaderboard's read
            [listed] = scan.entries
            assert listed.source == "local", listed.trust
            assert listed.warning is not None and "holds other bytes" in listed.warning
            assert "replaced after it was stored" in listed.trust
    assert store.submission_path(entry.submission_sha256) is None  # the result page serves nothing
    problem = store.submission_problem(entry.submission_sha256)
    assert problem is not None and entry.submission_sha256[:12] in problem

    out = _listed(capsys, store.root)
    assert "job-rome\tlocal\t" in out
    assert "note: job-rome: shown as local: it claims to be verified, but its submission archive" in out
    assert "1 run(s) (0 verified)" in out

    # A worker storing the same submission again refuses the damaged file instead of signing it.
    with pytest.raises(Exception, match="damaged file under this name"):
        store.put_submission(tmp_path / "job-rome" / "job-rome.tar.gz")

    # Put back, the run is verified again.
    _overwrite_in_place(archive, original)
    assert [e.source for e in store.scan().entries] == ["verified"]


def test_edited_results_make_their_run_local_or_skipped_even_from_a_warm_cache(runs, tmp_path, capsys):
    store = ResultsStore(
        tmp_path / "store", verified_cache=tmp_path / "cache", trusted_keys=TrustedKeys.load()
    )
    entry = _verified(store, runs["rome"], tmp_path, "job-rome")
    results = store.results_path(entry.results_sha256)
    original = results.read_bytes()
    _settled()
    assert [e.source for e in store.scan().entries] == ["verified"]

    # 1. Other valid results (another run, its own hash) in the file, same size, mtime put back.
    other = json.loads(runs["none"].read_text(encoding="utf-8"))
    assert other["sha256"] == content_sha256(other)
    _overwrite_in_place(results, _same_size(other, len(original)))
    fresh = ResultsStore(store.root, verified_cache=tmp_path / "cache")  # another process, same cache
    for reader in (store, fresh):
        for scan in (reader.scan(), reader.scan(verify=False)):
            [listed] = scan.entries
            assert listed.source == "local" and listed.results_sha256 == other["sha256"]
            assert listed.warning is not None and "holds other results" in listed.warning
    out = _listed(capsys, store.root)
    assert "job-rome\tlocal\t" in out and "holds other results" in out

    # 2. A number edited without its hash: skipped, with the reason, though the cache knew the file.
    _overwrite_in_place(results, original)
    assert [e.source for e in store.scan().entries] == ["verified"]
    edited = original.replace(b'"value": 0.', b'"value": 1.', 1)
    assert edited != original and len(edited) == len(original)
    _overwrite_in_place(results, edited)
    scan = store.scan()
    assert scan.entries == [] and "does not match its content" in scan.skipped[0].reason
    assert "does not match its content" in _listed(capsys, store.root)

    # 3. The page's full read hashes the file again: a change after the listing is caught when served.
    _overwrite_in_place(results, original)
    [listed] = store.scan().entries
    _overwrite_in_place(results, _same_size(other, len(original)))
    with pytest.raises(StoreFileError, match="is not the one its name/entry gives"):
        listed.document  # noqa: B018


def test_listing_hashes_each_file_once_per_change(runs, tmp_path):
    """A warm reader stats its files and hashes one again only when its stat key changed."""
    store = ResultsStore(
        tmp_path / "store", verified_cache=tmp_path / "cache", trusted_keys=TrustedKeys.load()
    )
    entry = _verified(store, runs["none"], tmp_path, "job-none")
    results = store.results_path(entry.results_sha256)
    archive = store.submission_path(entry.submission_sha256)
    assert archive is not None
    _settled()
    store.scan()
    hashed = {path: store._digests[str(path)] for path in (results, archive)}
    store.scan()
    assert all(store._digests[str(path)] is hashed[path] for path in hashed)  # not hashed again
    os.utime(results)  # only its times change: hashed again, same content, still verified
    assert [e.source for e in store.scan().entries] == ["verified"]
    assert store._digests.get(str(results)) is not hashed[results]
    assert store._digests[str(archive)] is hashed[archive]


def test_the_result_page_shows_a_swapped_archive_as_local_and_serves_only_the_results(runs, tmp_path):
    """What the leaderboard reads: the row is local with the reason, and its page offers the results file
    but not the archive that replaced the signed one."""
    from tests.test_leaderboard import wait_verified
    from tests.test_leaderboard_trust import _serve

    store = ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")
    entry = _verified(store, runs["rome"], tmp_path, "job-rome")
    archive = store.submission_path(entry.submission_sha256)
    assert archive is not None
    other = _archive(tmp_path / "other", "job-rome", extra="#" * 8).read_bytes()
    size = archive.stat().st_size
    _overwrite_in_place(archive, other[:size] + b"\0" * (size - len(other)))
    app, client = _serve(store.root, tmp_path / "app-cache")
    try:
        wait_verified(app)
        outputs = client.predict("job-rome", api_name="/detail")
        header, downloads = outputs[0], outputs[-1]
        assert "local: shown as local: it claims to be verified, but its submission archive" in header
        assert "replaced after it was stored" in header
        names = [Path(d if isinstance(d, str) else d["path"]).name for d in downloads]
        assert len(names) == 1 and names[0].startswith("results-"), names
    finally:
        app.close()
