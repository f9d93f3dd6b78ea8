"""``knowgic evaluate`` end to end on the offline default model, and its handling of bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.evaluation.results import content_sha256, load_results, validation_errors


@pytest.fixture(scope="module")
def identity_run(knowgic_tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("none")
    request = EvaluationRequest(model="knowgic-tiny", editor="none", out_dir=out)
    return evaluate(request, progress=False, loaded=knowgic_tiny)


def test_identity_editor(identity_run) -> None:
    m = identity_run.document["metrics"]
    counts = identity_run.document["counts"]
    assert counts["edits"] == 26
    assert counts["chains"] == 1406
    # The model knows 97.5% of the distinct facts; the few it misses sit in many chains each (86% active).
    assert counts["active_chains"] > 0.8 * counts["chains"]
    # No edit: every chain keeps its reliability and every fact its score (up to float32 batching noise).
    assert m["ifr"]["value"] == pytest.approx(1.0, abs=1e-6)
    assert m["preservation"]["value"] == pytest.approx(1.0, abs=1e-6)
    assert m["efficacy"]["value"] == 0.0
    for length in "12345":
        assert m["ifr_by_length"][length]["value"] == pytest.approx(1.0, abs=1e-6)
    assert m["specificity"]["value"] == pytest.approx(1.0)


def test_results_document(identity_run) -> None:
    doc = identity_run.document
    assert validation_errors(doc) == []
    assert doc["sha256"] == content_sha256(doc)
    assert doc["dataset"]["name"] == "knowgic"
    assert len(doc["dataset"]["sha256"]) == 64
    config = doc["config"]
    assert config["model"] == "knowgic-tiny" and config["editor"] == "none"
    assert config["protocol"] == "logprob" and config["mode"] == "independent"
    assert len(config["hparams_sha256"]) == 64
    assert doc["environment"]["packages"]["torch"]
    assert len(doc["chains"]) == 1406
    assert {"case_id", "edit_id", "length", "active", "r_pre", "r_post"} == set(doc["chains"][0])
    assert len(doc["per_edit"]) == 26
    # What was written is what was returned, and it verifies.
    written = load_results(identity_run.results_path)
    assert written == doc
    for plot in identity_run.plot_paths:
        assert plot.stat().st_size > 1000
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tampered_results_are_refused(identity_run, tmp_path) -> None:
    doc = json.loads(identity_run.results_path.read_text())
    doc["metrics"]["ifr"]["value"] = 0.01
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    from knowgic.errors import KnowgicError

    with pytest.raises(KnowgicError, match="sha256 does not match"):
        load_results(path)


def test_in_context_editing_lowers_ifr(knowgic_tiny) -> None:
    run = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="ice", limit=6), progress=False, loaded=knowgic_tiny
    )
    assert run.document["metrics"]["ifr"]["value"] < 1.0


def test_pre_edit_scores_are_cached(knowgic_tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path / "cache"))
    first = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1), progress=False, loaded=knowgic_tiny
    )
    second = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1), progress=False, loaded=knowgic_tiny
    )
    assert not first.document["timing"]["pre_scores_cached"]
    assert second.document["timing"]["pre_scores_cached"]
    assert first.document["metrics"] == second.document["metrics"]


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "knowgic.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no-such-model-xyz", "--editor", "none"], "no-such-model-xyz"),
        (["--model", "knowgic-tiny", "--editor", "no-such-editor"], "unknown editor 'no-such-editor'"),
        (["--model", "knowgic-tiny", "--editor", "none", "--protocol", "telepathy"], "telepathy"),
        (["--model", "knowgic-tiny", "--editor", "none", "--dataset-version", "9.9.9"], "9.9.9"),
        (["--model", "knowgic-tiny", "--editor", "none", "--mode", "parallel"], "unknown mode 'parallel'"),
        (["--model", "knowgic-tiny", "--editor", "none", "--dtype", "int3"], "unknown dtype 'int3'"),
        (["--model", "knowgic-tiny", "--editor", "none", "--limit", "0"], "positive integer"),
        (
            ["--model", "knowgic-tiny", "--editor", "mypkg.nowhere:Editor"],
            "no module named 'mypkg'",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(args: list[str], message: str, capsys) -> None:
    code = _run_main(["evaluate", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert message in err[-1]
    assert "Traceback" not in "\n".join(err)


def _run_main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code or 0)


def test_malformed_hparams(tmp_path, capsys) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("layers: [5, 6\n")
    code = _run_main(["evaluate", "--model", "knowgic-tiny", "--editor", "ice", "--hparams", str(bad_yaml)])
    assert code == 2
    assert "not valid YAML" in capsys.readouterr().err
    unknown_key = tmp_path / "unknown.yaml"
    unknown_key.write_text("template: 'Imagine that {fact}. '\nlearning_rate: 3\n")
    code = _run_main(
        ["evaluate", "--model", "knowgic-tiny", "--editor", "ice", "--hparams", str(unknown_key)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "learning_rate" in err and "hparams" in err
    missing = tmp_path / "missing.yaml"
    code = _run_main(["evaluate", "--model", "knowgic-tiny", "--editor", "ice", "--hparams", str(missing)])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_unwritable_output_folder(tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = _run_main(
        ["evaluate", "--model", "knowgic-tiny", "--editor", "none", "--out", str(blocker / "out")]
    )
    assert code == 2
    assert "not writable" in capsys.readouterr().err
    assert blocker.read_text() == "not a folder"


def test_cli_prints_table_and_writes_files(knowgic_tiny, tmp_path) -> None:
    out = tmp_path / "run"
    proc = _cli("evaluate", "--model", "knowgic-tiny", "--editor", "ice", "--limit", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "IFR" in proc.stdout and "Preservation" in proc.stdout and "Specificity" in proc.stdout
    assert (out / "results.json").is_file()
    assert (out / "ifr_by_length.png").is_file() and (out / "per_edit.png").is_file()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
