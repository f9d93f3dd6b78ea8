"""``knowgic evaluate`` end to end on the offline default model, and its handling of bad input."""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.evaluation.commands import print_results
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.evaluation.outputs import check_writable, write_run_outputs
from knowgic.paths import spec_dir
from knowgic.results import content_sha256, read_results, validation_errors
from knowgic.spec import benchmark_spec, read_spec


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
    assert {
        "case_id",
        "edit_id",
        "length",
        "active",
        "r_pre",
        "r_post",
        "known_post",
        "restates_edit",
    } == set(doc["chains"][0])
    assert doc["schema_version"] == "1.6" and doc["uncertainty"]["resamples"] == 2000
    assert doc["environment"]["bitwise_reproducible"] is True  # a CPU run
    # Unedited, every active chain is still known step by step: all are still recoverable.
    assert doc["counts"]["recoverable_chains"] == doc["counts"]["active_chains"]
    assert len(doc["per_edit"]) == 26
    # Every metric's definition version is recorded, as the spec declares it.
    spec = benchmark_spec()
    assert doc["metric_versions"] == {k: spec.metrics[k].version for k in doc["metrics"]}
    # A null per-edit metric always says why.
    for record in doc["per_edit"]:
        nulls = {k for k in ("ifr", "preservation", "generalization", "specificity") if record[k] is None}
        assert set(record["reasons"]) == nulls
        assert all(record["reasons"].values())
    assert any(record["reasons"] for record in doc["per_edit"])  # 2 edits have no question form
    # What was written is what was returned, and it verifies.
    written = read_results(identity_run.results_path)
    assert written == doc
    for plot in identity_run.plot_paths:
        assert plot.stat().st_size > 1000
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_per_edit_null_without_reason_breaks_the_schema(identity_run) -> None:
    doc = copy.deepcopy(identity_run.document)
    record = next(r for r in doc["per_edit"] if r["generalization"] is None)
    assert validation_errors(doc) == []
    del record["reasons"]["generalization"]
    assert any("generalization" in e and "/per_edit/" in e for e in validation_errors(doc))
    record["reasons"]["generalization"] = "no question form"
    record["specificity"] = None
    assert any("specificity" in e for e in validation_errors(doc))
    del doc["metric_versions"]
    assert any("metric_versions" in e for e in validation_errors(doc))


def test_printed_directions_come_from_the_spec(identity_run, tmp_path, capsys) -> None:
    print_results(identity_run.document)
    shipped = capsys.readouterr().out
    assert re.search(r"IFR +│ +1\.0000 +│ +\[[^│]+\] +│ +\d+ +│ +\d+ \([\d.]+\) +│ lower", shipped)
    assert re.search(r"Preservation +│ +1\.0000 +│ +\[[^│]+\] +│ +\d+ +│ +\d+ \([\d.]+\) +│ higher", shipped)
    # Another spec: IFR labelled and directed differently, and the table follows it.
    text = (spec_dir() / "benchmark.yaml").read_text(encoding="utf-8")
    changed = text.replace(
        "  ifr:\n    label: IFR\n    short: IFR\n    version: 1\n    direction: lower\n",
        ("  ifr:\n    label: Indirect recovery\n    short: IFR\n    version: 1\n    direction: higher\n"),
    ).replace("    ranked_by: ifr_per_edit\n", "", 1)  # its per-edit form keeps the other direction
    assert changed != text
    (tmp_path / "benchmark.yaml").write_text(changed, encoding="utf-8")
    print_results(identity_run.document, spec=read_spec(tmp_path / "benchmark.yaml"))
    printed = capsys.readouterr().out
    assert re.search(
        r"Indirect recovery +│ +1\.0000 +│ +\[[^│]+\] +│ +\d+ +│ +\d+ \([\d.]+\) +│ higher", printed
    )
    assert not re.search(r"IFR +│ +1\.0000 +│ +\[[^│]+\] +│ +\d+ +│ +\d+ \([\d.]+\) +│ lower", printed)


def test_tampered_results_are_refused(identity_run, tmp_path) -> None:
    doc = json.loads(identity_run.results_path.read_text())
    doc["metrics"]["ifr"]["value"] = 0.01
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(KnowgicError, match="sha256 does not match"):
        read_results(path)


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


def test_float32_and_bfloat16_runs_use_different_cache_entries(knowgic_tiny, tmp_path, monkeypatch) -> None:
    from knowgic.models.loading import load_model

    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path / "cache"))
    f32 = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1), progress=False, loaded=knowgic_tiny
    )
    bf16_model = load_model("knowgic-tiny", dtype="bfloat16", device="cpu")
    bf16_request = EvaluationRequest(model="knowgic-tiny", editor="none", limit=1, dtype="bfloat16")
    bf16 = evaluate(bf16_request, progress=False, loaded=bf16_model)
    assert not f32.document["timing"]["pre_scores_cached"]
    # The float32 entry is not reused for bfloat16: its own scores are computed and stored beside it.
    assert not bf16.document["timing"]["pre_scores_cached"]
    # Three entries per dtype: the plan's queries, and the ripple queries' condition facts under the run's
    # protocol and under the greedy continuation.
    assert len(list((tmp_path / "cache" / "scores").rglob("*.json"))) == 6
    assert bf16.document["config"]["dtype"] == "bfloat16"
    again = evaluate(bf16_request, progress=False, loaded=bf16_model)
    assert again.document["timing"]["pre_scores_cached"]
    assert again.document["metrics"] == bf16.document["metrics"]
    # With pre- and post-edit scores from the same dtype, no edit means IFR 1.
    assert bf16.document["metrics"]["ifr"]["value"] == pytest.approx(1.0, abs=1e-6)


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
        (["--model", "knowgic-tiny", "--editor", "none", "--limit", "0"], "'0' must be 1 or more"),
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


def test_unknown_model_creates_no_output_folder(tmp_path, capsys) -> None:
    out = tmp_path / "new" / "run"
    code = _run_main(["evaluate", "--model", "no-such-model-xyz", "--editor", "none", "--out", str(out)])
    assert code == 2
    assert "no-such-model-xyz" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_check_writable_creates_nothing(tmp_path) -> None:
    check_writable(tmp_path / "a" / "b")
    check_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        if os.access(locked, os.W_OK):  # root ignores permission bits
            pytest.skip("running as a user that can write anywhere")
        with pytest.raises(KnowgicError, match="not writable"):
            check_writable(locked / "run")
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("existing", [False, True])
def test_failed_write_leaves_nothing_new(identity_run, tmp_path, monkeypatch, existing: bool) -> None:
    import knowgic.evaluation.plots as plots

    out = tmp_path / "run"
    if existing:
        out.mkdir()
        (out / "results.json").write_text("old run")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    def broken_plot(document, path):
        path.write_bytes(b"half a plot")
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(plots, "plot_per_edit", broken_plot)
    with pytest.raises(RuntimeError, match="plotting failed"):
        write_run_outputs(
            identity_run.document, out, lambda folder: plots.write_plots(identity_run.document, folder)
        )
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    if existing:
        assert (out / "results.json").read_text() == "old run"


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_have_normal_permissions(identity_run, tmp_path, umask: int) -> None:
    from knowgic.evaluation.plots import write_plots

    previous = os.umask(umask)
    try:
        results, plots = write_run_outputs(
            identity_run.document, tmp_path / "new" / "run", lambda f: write_plots(identity_run.document, f)
        )
        # Over the existing run too (--overwrite: the staged folder takes the old one's place).
        again, _ = write_run_outputs(
            identity_run.document,
            tmp_path / "new" / "run",
            lambda f: write_plots(identity_run.document, f),
            overwrite=True,
        )
    finally:
        os.umask(previous)
    assert results == again == tmp_path / "new" / "run" / "results.json"
    assert [p.name for p in plots] == ["ifr_by_length.png", "per_edit.png"]
    for path in (results, *plots):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~umask, path
    assert stat.S_IMODE(results.parent.stat().st_mode) == 0o755 & ~umask
    assert read_results(results) == identity_run.document
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["run"]
    assert sorted(p.name for p in results.parent.iterdir()) == [
        "ifr_by_length.png",
        "per_edit.png",
        "results.json",
    ]


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
    # stderr is not a terminal here: no bar, but one line per finished edit.
    edit_lines = [line for line in proc.stderr.splitlines() if line.startswith("ice: edit ")]
    assert [line.split(" (")[0] for line in edit_lines] == ["ice: edit 1/2", "ice: edit 2/2"], proc.stderr
    assert (out / "results.json").is_file()
    assert (out / "ifr_by_length.png").is_file() and (out / "per_edit.png").is_file()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_cli_sweep_reports_each_editor_and_writes_the_table(knowgic_tiny, tmp_path, capsys) -> None:
    out = tmp_path / "sweep"
    code = _run_main(
        ["sweep", "--model", "knowgic-tiny", "--editors", "none,ice", "--limit", "1", "--out", str(out)]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert [line.split(":")[0] for line in progress] == ["[1/2] none", "[2/2] ice"]
    assert "IFR 1.000" in progress[0]
    assert [line.split(" (")[0] for line in captured.err.splitlines() if ": edit " in line] == [
        "none: edit 1/1",
        "ice: edit 1/1",
    ]
    table = (out / "summary.md").read_text(encoding="utf-8")
    assert table.strip() in captured.out
    rows = [line for line in table.splitlines() if line.startswith("| none") or line.startswith("| ice")]
    assert len(rows) == 6  # the headline table, the IFR-by-length table and RippleEdits' criteria
    assert (out / "none" / "results.json").is_file() and (out / "ice" / "results.json").is_file()


def test_summarize_joins_separate_runs_and_refuses_mismatches(knowgic_tiny, tmp_path, capsys) -> None:
    sweep = tmp_path / "sweep"
    assert _run_main(["sweep", "--editors", "none,ice", "--limit", "1", "--out", str(sweep)]) == 0
    swept = (sweep / "summary.md").read_text(encoding="utf-8")
    capsys.readouterr()

    # The same runs named one by one, in another order, give the sweep's rows in the sweep's order.
    table_file = tmp_path / "joined" / "summary.md"
    code = _run_main(
        ["summarize", str(sweep / "ice"), str(sweep / "none" / "results.json"), "--out", str(table_file)]
    )
    out = capsys.readouterr().out
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows if not r.startswith("| editor")] == ["none", "ice"] * 3
    assert set(rows) <= set(swept.splitlines())
    assert table_file.read_text(encoding="utf-8").strip() == out.strip()
    # A sweep folder stands for all its runs.
    assert _run_main(["summarize", str(sweep)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len([r for r in printed if r.startswith("| ") and not r.startswith("| editor")]) == 6

    # A run on a different slice of the benchmark cannot share the table.
    other = tmp_path / "other"
    assert (
        _run_main(
            ["evaluate", "--model", "knowgic-tiny", "--editor", "none", "--limit", "2", "--out", str(other)]
        )
        == 0
    )
    capsys.readouterr()
    assert _run_main(["summarize", str(sweep / "none"), str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differ in limit" in err and str(other) in err

    # A tampered file is named and refused; nothing else is needed to find it.
    doc = json.loads((other / "results.json").read_text(encoding="utf-8"))
    doc["metrics"]["ifr"]["value"] = 0.5
    (other / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    assert _run_main(["summarize", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(other / "results.json") in err
    assert _run_main(["summarize", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
