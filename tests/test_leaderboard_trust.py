"""The leaderboard believes only signatures and checks: hostile store files through a real served app
(gradio_client), a cold store that answers at once and verifies in the background, bounded detail pages."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.leaderboard import views
from knowgic.leaderboard.table import ALL_MODELS
from knowgic.leaderboard.timing import fill_store
from knowgic.results import content_sha256
from knowgic.runner.store.signing import generate_key, load_signer
from knowgic.runner.store.store import ResultsStore, local_entry_id
from tests.test_leaderboard import ALL_COLUMNS, free_port, table, wait_verified, write_submission


def _serve(root: Path, cache: Path, **kwargs: Any):
    from gradio_client import Client

    from knowgic.leaderboard.app import build_app, launch_app

    app = build_app(root, refresh_seconds=1.0, verified_cache=cache, include_reported=False, **kwargs)
    port = free_port()
    launch_app(app, host="127.0.0.1", port=port, block=False, quiet=True)
    return app, Client(f"http://127.0.0.1:{port}/", verbose=False)


@pytest.fixture(scope="module")
def hostile(knowgic_tiny, tmp_path_factory):
    """A store with one honest signed run and the files a person with write access to it could add."""
    root = tmp_path_factory.mktemp("trust")
    run = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="rome", limit=2, out_dir=root / "runs" / "rome"),
        progress=False,
        loaded=knowgic_tiny,
    ).results_path
    store = ResultsStore(root / "store", verified_cache=root / "cache")
    archive = write_submission(root / "submission")
    job = {"job_id": "job-honest", "model": "knowgic-tiny"}
    honest = store.add_verified(
        run, archive_path=archive, manifest={"name": "honest"}, job=job, signer=load_signer()
    )
    record = json.loads(honest.path.read_text(encoding="utf-8"))

    unsigned = {k: v for k, v in record.items() if k != "signature"}
    store.entry_path("job-handmade").write_text(json.dumps({**unsigned, "entry_id": "job-handmade"}), "utf-8")
    stranger = generate_key(root / "stranger-key").sign({**record, "entry_id": "job-stranger"})
    store.entry_path("job-stranger").write_text(json.dumps(stranger), "utf-8")
    store.entry_path("job-copied").write_text(
        json.dumps({**record, "entry_id": "job-copied", "label": "x"}), "utf-8"
    )

    # A run with a very long subject (within the store's limit): the browser gets a clipped cell.
    document = json.loads(run.read_text(encoding="utf-8"))
    document["per_edit"][0]["subject"] = "S" * 100_000
    document["config"]["seed"] = 11
    document["sha256"] = content_sha256(document)
    long_file = root / "long.json"
    long_file.write_text(json.dumps(document), encoding="utf-8")
    long_entry = store.add_local(long_file).entry_id

    # Edited headline metrics with a recomputed hash, and a results file with no entry.
    forged = json.loads(run.read_text(encoding="utf-8"))
    forged["metrics"]["ifr"]["value"] = 1.5
    forged["sha256"] = content_sha256(forged)
    store.results_path(forged["sha256"]).write_text(json.dumps(forged), encoding="utf-8")
    forged_entry = local_entry_id(forged["sha256"])
    local_record = json.loads(store.entry_path(long_entry).read_text(encoding="utf-8"))
    store.entry_path(forged_entry).write_text(
        json.dumps({**local_record, "entry_id": forged_entry, "results_sha256": forged["sha256"]}), "utf-8"
    )
    orphan = json.loads(run.read_text(encoding="utf-8"))
    orphan["config"]["seed"] = 12
    orphan["sha256"] = content_sha256(orphan)
    store.results_path(orphan["sha256"]).write_text(json.dumps(orphan), encoding="utf-8")
    return {
        "root": root,
        "store": store,
        "long": long_entry,
        "forged": forged_entry,
        "orphan": orphan["sha256"],
    }


@pytest.fixture(scope="module")
def hostile_served(hostile):
    app, client = _serve(hostile["store"].root, hostile["root"] / "app-cache")
    wait_verified(app)
    try:
        yield app, client
    finally:
        app.close()


def test_only_a_trusted_signature_ranks_as_verified(hostile_served, hostile) -> None:
    _app, client = hostile_served
    headers, rows, status = table(client, columns=["source", "row_id"])
    source, row_id = headers.index("Source"), headers.index("Id")
    sources = {re.search(r">([^<]+)</a>", r[row_id]).group(1): r[source] for r in rows}
    assert sources == {
        "job-honest": "verified",
        "job-handmade": "local",
        "job-stranger": "local",
        "job-copied": "local",
        hostile["long"]: "local",
    }
    assert "verifying" not in status
    header = client.predict("job-handmade", api_name="/detail")[0]
    assert "local: shown as local: it claims to be verified, but it carries no signature" in header
    header = client.predict("job-honest", api_name="/detail")[0]
    assert "verified: signed by SHA256:" in header


def test_edited_metrics_and_entryless_files_are_listed_as_skipped(hostile_served, hostile) -> None:
    _app, client = hostile_served
    result = client.predict(
        "", [], [], [], [], [], [], "deep_editing_score", "descending", ALL_COLUMNS, 1, api_name="/reload"
    )
    skipped = next(r for r in result if isinstance(r, dict) and r.get("headers") == ["File", "Reason"])
    reasons = {row[0]: row[1] for row in skipped["data"]}
    assert "/metrics/ifr/value is 1.5; IFR lies in [0, 1]" in reasons[f"entries/{hostile['forged']}.json"]
    assert reasons[f"results/{hostile['orphan']}.json"].startswith("no entry names this results file")


def test_the_detail_view_sends_a_bounded_page(hostile_served, hostile, monkeypatch) -> None:
    _app, client = hostile_served
    per_edit = client.predict(hostile["long"], api_name="/detail")[4]
    subject = per_edit["data"][0][per_edit["headers"].index("subject")]
    assert (
        subject.startswith("S" * views.CELL_CHARS) and "(100,000 characters; download results.json" in subject
    )
    assert len(subject) < views.CELL_CHARS + 100

    # Long tables: the first DETAIL_ROWS rows, and a last row that says how many more there are.
    monkeypatch.setattr(views, "DETAIL_ROWS", 1)
    _h, _m, _ripple, _heat, per_edit, _choice, chains, *_ = client.predict(
        hostile["long"], api_name="/detail"
    )
    assert len(per_edit["data"]) == 2 and per_edit["data"][1][0].startswith(
        "… 1 more edits not shown (first 1 of 2)"
    )
    assert chains["data"][-1][0].startswith("… ") and "more chains not shown" in chains["data"][-1][0]
    assert len(chains["data"]) == 2


@pytest.fixture(scope="module")
def cold_store(knowgic_tiny, tmp_path_factory):
    """120 copies of a real run, never verified by this reader (a cold cache)."""
    root = tmp_path_factory.mktemp("cold")
    run = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1, out_dir=root / "runs" / "none"),
        progress=False,
        loaded=knowgic_tiny,
    ).results_path
    store = fill_store(root / "store", [json.loads(run.read_text(encoding="utf-8"))], 120)
    return root, store


def test_a_cold_store_answers_at_once_and_rows_appear_as_they_are_verified(cold_store, monkeypatch) -> None:
    root, store = cold_store
    gate = threading.Event()
    real_load = ResultsStore.load_entry

    def gated(self, path):  # the real verification, held until the test has seen the first answer
        gate.wait(60)
        return real_load(self, path)

    monkeypatch.setattr(ResultsStore, "load_entry", gated)
    app, client = _serve(store.root, root / "cache-cold")
    try:
        _headers, rows, status = table(client, ALL_MODELS)  # answered while the store is read or verified
        assert rows == [] and ("reading the store" in status or "verifying 0 of 120 results" in status)
        deadline = time.monotonic() + 120
        while "verifying 0 of 120 results" not in status:  # read: every entry waits for verification
            assert time.monotonic() < deadline and "reading the store" in status, status
            time.sleep(0.2)
            _headers, rows, status = table(client, ALL_MODELS)
        assert rows == []
        gate.set()
        deadline = time.monotonic() + 120
        while True:
            _headers, rows, status = table(client, ALL_MODELS)
            if "verifying" not in status:
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert status.startswith("120 result(s) · ") and len(rows) > 0
    finally:
        app.close()
