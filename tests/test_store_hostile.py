"""A person with write access to a store folder tries to earn a rank: every attempt ends in a one-line refusal
or an entry shown as local. Real results files (``evaluate`` on knowgic-tiny), real Ed25519 signatures."""

from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from knowgic.cli import main
from knowgic.results import content_sha256
from knowgic.runner.store.checks import LIMITS
from knowgic.runner.store.signing import TrustedKeys, generate_key, load_signer
from knowgic.runner.store.store import STORE_VERSION, ResultsStore, local_entry_id


@pytest.fixture(scope="module")
def run(knowgic_tiny, tmp_path_factory) -> Path:
    """A real run on knowgic-tiny: ROME on the first 2 edits."""
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

    out = tmp_path_factory.mktemp("hostile-run")
    request = EvaluationRequest(model="knowgic-tiny", editor="rome", limit=2, out_dir=out / "rome")
    return evaluate(request, progress=False, loaded=knowgic_tiny).results_path


@pytest.fixture
def store(tmp_path) -> ResultsStore:
    return ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")


def _document(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _rehashed(document: dict[str, Any], path: Path) -> Path:
    """Write ``document`` with its sha256 recomputed, as an attacker who read the schema would."""
    document["sha256"] = content_sha256(document)
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


def _store_add(capsys, path: Path, root: Path) -> tuple[int, str]:
    code = main(["store", "add", str(path), "--store", str(root)])
    captured = capsys.readouterr()
    return code, captured.err.strip()


def _drop_in(store: ResultsStore, path: Path) -> str:
    """Put a file into the store by hand (no `store add`): results file plus a local entry naming it."""
    document = _document(path)
    sha = document["sha256"]
    store.results_dir.mkdir(parents=True, exist_ok=True)
    store.entries_dir.mkdir(parents=True, exist_ok=True)
    store.results_path(sha).write_bytes(path.read_bytes())
    entry_id = local_entry_id(sha)
    record = {
        "store_version": STORE_VERSION,
        "entry_id": entry_id,
        "source": "local",
        "results_sha256": sha,
        "submission_sha256": None,
        "manifest": None,
        "job": None,
        "added_at": "2026-01-01T00:00:00+00:00",
        "label": None,
    }
    store.entry_path(entry_id).write_text(json.dumps(record), encoding="utf-8")
    return entry_id


# -- recomputation -------------------------------------------------------------------------------------
def test_edited_headline_metrics_with_a_recomputed_hash_are_refused_and_never_ranked(
    run, store, tmp_path, capsys
):
    document = _document(run)
    honest_ifr = document["metrics"]["ifr"]["value"]
    document["metrics"]["ifr"]["value"] = 0.001
    document["metrics"]["preservation"]["value"] = 0.99
    for name in ("ifr", "preservation"):  # keep the intervals consistent with the forged values
        value = document["metrics"][name]["value"]
        document["metrics"][name]["interval"] = [value, value]
    forged = _rehashed(document, tmp_path / "better.json")

    code, err = _store_add(capsys, forged, store.root)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"/metrics/ifr/value: stated 0.001, recomputed {honest_ifr:.4g}" in err
    assert "from the per-chain and per-edit records (and " in err
    assert not store.root.exists()

    entry_id = _drop_in(store, forged)
    assert store.scan().entries == []
    from knowgic.leaderboard.table import Board

    board = Board(store.scan(), include_reported=False)
    assert board.rows == [] and any(s.path.name == f"{entry_id}.json" for s in board.skipped)


def test_a_forged_interval_is_refused_by_recomputation(run, store, tmp_path, capsys):
    document = _document(run)
    metrics = document["metrics"]
    name = next(
        n
        for n in ("ifr", "preservation", "specificity")
        if metrics[n]["interval"][0] < metrics[n]["interval"][1]
    )
    value = metrics[name]["value"]
    metrics[name]["interval"] = [value, value]  # a tighter interval than the data gives
    forged = _rehashed(document, tmp_path / "tight.json")
    code, err = _store_add(capsys, forged, store.root)
    assert code == 2 and f"/metrics/{name}/interval: stated [{value:.6g}, {value:.6g}]" in err, err


# -- values ---------------------------------------------------------------------------------------------
BAD_VALUES = [
    ("ifr-above-range", ("ifr", "value"), 1.5, "/metrics/ifr/value is 1.5; IFR lies in [0, 1]"),
    ("ifr-below-range", ("ifr", "value"), -0.5, "/metrics/ifr/value is -0.5; IFR lies in [0, 1]"),
    ("ifr-nan", ("ifr", "value"), float("nan"), "/metrics/ifr/value is nan; a results file holds finite"),
    (
        "preservation-infinity",
        ("preservation", "value"),
        float("inf"),
        "/metrics/preservation/value is inf; a results file holds finite",
    ),
    (
        "reversed-interval",
        ("efficacy", "interval"),
        [0.9, 0.1],
        "/metrics/efficacy/interval is [0.9, 0.1]: reversed",
    ),
    (
        "interval-out-of-range",
        ("specificity", "interval"),
        [-0.2, 1.2],
        "/metrics/specificity/interval is [-0.2, 1.2]; Specificity lies in [0, 1]",
    ),
]


@pytest.mark.parametrize(("name", "where", "value", "message"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_values_outside_what_a_metric_can_be_are_refused_at_add_and_at_read(
    run, store, tmp_path, capsys, name, where, value, message
):
    document = _document(run)
    metric, field = where
    document["metrics"][metric][field] = value
    forged = _rehashed(document, tmp_path / f"{name}.json")

    code, err = _store_add(capsys, forged, store.root)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.splitlines()) == 1
    assert not store.root.exists()  # nothing was written

    # Dropped into the folder by hand, the reader skips it with the same reason and shows nothing.
    entry_id = _drop_in(store, forged)
    scan = store.scan()
    assert scan.entries == []
    (skipped,) = [s for s in scan.skipped if s.path.name == f"{entry_id}.json"]
    assert message in skipped.reason


def test_an_interval_that_does_not_contain_its_value_is_refused(run, store, tmp_path, capsys):
    document = _document(run)
    entry = document["metrics"]["preservation"]
    entry["value"] = 0.5
    entry["interval"] = [0.7, 0.9]
    forged = _rehashed(document, tmp_path / "outside.json")
    code, err = _store_add(capsys, forged, store.root)
    assert (
        code == 2 and "/metrics/preservation/interval is [0.7, 0.9] and does not contain its value 0.5" in err
    )


def test_a_nan_deep_in_a_per_chain_record_is_refused(run, store, tmp_path, capsys):
    document = _document(run)
    document["chains"][0]["r_post"] = float("nan")
    forged = _rehashed(document, tmp_path / "nan-chain.json")
    code, err = _store_add(capsys, forged, store.root)
    assert code == 2 and "/chains/0/r_post is nan" in err


def test_the_honest_run_is_accepted(run, store, capsys):
    code, _ = _store_add(capsys, run, store.root)
    assert code == 0
    (entry,) = store.scan().entries
    assert entry.source == "local" and entry.results_sha256 == _document(run)["sha256"]


# -- sizes ----------------------------------------------------------------------------------------------
def test_a_50_mb_value_in_a_per_edit_field_is_refused(run, store, tmp_path, capsys):
    document = _document(run)
    document["per_edit"][0]["subject"] = "x" * (50 * 1024 * 1024)
    forged = _rehashed(document, tmp_path / "huge-field.json")
    code, err = _store_add(capsys, forged, store.root)
    assert code == 2
    assert f"the store accepts at most {LIMITS.file_bytes:,}" in err  # refused before it is even parsed
    assert not store.root.exists()


def test_a_long_field_within_the_file_limit_is_refused_by_its_own_limit(run, store, tmp_path, capsys):
    document = _document(run)
    document["per_edit"][1]["prompt"] = "{} " + "y" * (LIMITS.string_chars + 1)
    forged = _rehashed(document, tmp_path / "long-field.json")
    code, err = _store_add(capsys, forged, store.root)
    assert code == 2
    assert f"/per_edit/1/prompt is a string of {LIMITS.string_chars + 4:,} characters" in err


def test_deep_nesting_is_refused_with_a_line(run, store, tmp_path, capsys):
    document = _document(run)
    deep: Any = 0
    for _ in range(100):
        deep = [deep]
    document["config"]["hparams"]["nested"] = deep
    forged = _rehashed(document, tmp_path / "deep.json")
    code, err = _store_add(capsys, forged, store.root)
    assert code == 2 and "nests deeper than 32 levels" in err
    # Deeper than the JSON parser follows: still one line.
    (tmp_path / "deeper.json").write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    code, err = _store_add(capsys, tmp_path / "deeper.json", store.root)
    assert code == 2 and "nests arrays or objects deeper than" in err and "Traceback" not in err


# -- files without an entry -----------------------------------------------------------------------------
def test_a_results_file_dropped_without_an_entry_is_listed_as_skipped(run, store, capsys):
    store.add_local(run)
    document = _document(run)
    document["config"]["seed"] = 7
    sha = content_sha256(document)
    document["sha256"] = sha
    store.results_path(sha).write_text(json.dumps(document), encoding="utf-8")
    store.results_dir.joinpath("notes.txt").write_text("hello", encoding="utf-8")

    scan = store.scan()
    assert len(scan.entries) == 1
    reasons = {s.path.name: s.reason for s in scan.skipped}
    assert reasons[f"{sha}.json"] == "no entry names this results file; add it with `knowgic store add`"
    assert "not a results file" in reasons["notes.txt"]
    assert main(["store", "list", "--store", str(store.root)]) == 0
    assert f"skipped: {store.results_path(sha)}: no entry names" in capsys.readouterr().out


# -- signatures -----------------------------------------------------------------------------------------
def _archive(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission.yaml").write_text("name: demo\n", encoding="utf-8")
    archive = folder.parent / "demo.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder / "submission.yaml", arcname="submission.yaml")
    return archive


def _write_entry(store: ResultsStore, record: dict[str, Any]) -> None:
    store.entry_path(record["entry_id"]).write_text(json.dumps(record, indent=2), encoding="utf-8")


def test_verified_is_a_signature_that_a_file_cannot_claim(run, store, tmp_path, capsys):
    archive = _archive(tmp_path / "submission")
    job = {"job_id": "job-honest", "model": "knowgic-tiny"}
    signed = store.add_verified(
        run, archive_path=archive, manifest={"name": "demo"}, job=job, signer=load_signer()
    )
    assert signed.source == "verified" and signed.trust.startswith("signed by SHA256:")
    record = json.loads(signed.path.read_text(encoding="utf-8"))
    assert record["signature"]["algorithm"] == "ed25519"

    # 1. A hand-written entry that says "verified", with an archive in place and no signature.
    _write_entry(store, {**{k: v for k, v in record.items() if k != "signature"}, "entry_id": "job-handmade"})
    # 2. The honest signature copied onto an entry with other bytes (another job id, a better manifest).
    _write_entry(store, {**record, "entry_id": "job-copied", "manifest": {"name": "famous lab"}})
    # 3. A real signature by a key the reader does not trust.
    stranger = generate_key(tmp_path / "stranger-key")
    _write_entry(store, stranger.sign({**record, "entry_id": "job-stranger"}))
    # 4. A signature value that is not even base64.
    broken = json.loads(json.dumps(record))
    broken.update(entry_id="job-garbled")
    broken["signature"]["value"] = base64.b64encode(b"\0" * 64).decode()
    _write_entry(store, broken)

    entries = {e.entry_id: e for e in store.scan().entries}
    assert entries["job-honest"].source == "verified"
    expected = {
        "job-handmade": "carries no signature",
        "job-copied": "does not match the entry",
        "job-stranger": "signed by a key this reader does not trust",
        "job-garbled": "does not match the entry",
    }
    for entry_id, reason in expected.items():
        assert entries[entry_id].source == "local", entry_id
        assert reason in entries[entry_id].trust, (entry_id, entries[entry_id].trust)

    # A reader configured with no keys believes no signature; one that trusts the stranger believes its.
    assert {e.source for e in ResultsStore(store.root, trusted_keys=TrustedKeys.none()).scan().entries} == {
        "local"
    }
    keys = tmp_path / "stranger-trusted"
    keys.write_text(stranger.public_line + "\n", encoding="utf-8")
    by_stranger = {
        e.entry_id: e.source
        for e in ResultsStore(store.root, trusted_keys=TrustedKeys.load(keys)).scan().entries
    }
    assert by_stranger["job-stranger"] == "verified" and by_stranger["job-honest"] == "local"

    # `knowgic store list` says the same, and why.
    assert main(["store", "list", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "job-honest\tverified" in out and "job-handmade\tlocal" in out
    assert "note: job-handmade: shown as local: it claims to be verified, but it carries no signature" in out
    assert "5 run(s) (1 verified)" in out


def test_keygen_and_trust_commands(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KNOWGIC_TRUSTED_KEYS", str(tmp_path / "trusted"))
    key = tmp_path / "keys" / "worker"
    assert main(["store", "keygen", "--key", str(key), "--comment", "gpu-host-1"]) == 0
    out = capsys.readouterr().out
    assert (key.stat().st_mode & 0o777) == 0o600
    signer = load_signer(key)
    assert signer.fingerprint in out and signer.fingerprint in TrustedKeys.load(tmp_path / "trusted").keys
    # Never over an existing key.
    assert main(["store", "keygen", "--key", str(key)]) == 2
    assert "never overwritten" in capsys.readouterr().err

    # A leaderboard host trusts a worker's public key; twice is once.
    other = tmp_path / "board-trusted"
    assert main(["store", "trust", f"{key}.pub", "--trusted-keys", str(other)]) == 0
    assert "now trusted" in capsys.readouterr().out
    assert main(["store", "trust", f"{key}.pub", "--trusted-keys", str(other)]) == 0
    assert "already trusted" in capsys.readouterr().out
    assert len(other.read_text(encoding="utf-8").splitlines()) == 1
    bad = tmp_path / "bad.pub"
    bad.write_text("ssh-rsa AAAAB3NzaC1yc2E= someone\n", encoding="utf-8")
    assert main(["store", "trust", str(bad), "--trusted-keys", str(other)]) == 2
    assert "expected 'ssh-ed25519 BASE64 [comment]'" in capsys.readouterr().err


def test_a_worker_without_a_signing_key_refuses_to_start(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KNOWGIC_SIGNING_KEY", str(tmp_path / "no-such-key"))
    code = main(["runner", "worker", "--store", str(tmp_path / "store"), "--once", "--gpus", "none"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"no signing key at {tmp_path / 'no-such-key'}" in err and "knowgic store keygen" in err
