"""``--stats-corpus`` and ``--stats-samples`` of ``knowgic evaluate`` and ``knowgic sweep``: they replace the
hparams' mom2_dataset and mom2_n_samples of editors with key statistics, show in results.json, and are
refused (exit 2, one line, before the model loads) where they cannot apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from knowgic.cli import main
from knowgic.editors.hparams import HPARAMS_DIR


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fast_rome(tmp_path: Path, **changes) -> Path:
    """The shipped knowgic-tiny ROME hparams with fewer optimisation steps (the option is under test here)."""
    hparams = yaml.safe_load((HPARAMS_DIR / "rome" / "knowgic-tiny.yaml").read_text(encoding="utf-8"))
    hparams.update(v_num_grad_steps=10, **changes)
    path = tmp_path / "rome-fast.yaml"
    path.write_text(yaml.safe_dump(hparams), encoding="utf-8")
    return path


def _run(args: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err.strip()


def test_evaluate_uses_and_records_the_corpus_and_count(knowgic_tiny, tmp_path, cache, capsys) -> None:
    out = tmp_path / "run"
    hparams = _fast_rome(tmp_path)
    assert yaml.safe_load(hparams.read_text())["mom2_n_samples"] == 2000
    args = [
        "evaluate",
        "--model",
        "knowgic-tiny",
        "--editor",
        "rome",
        "--hparams",
        str(hparams),
        "--limit",
        "1",
    ]
    code, err = _run(
        [*args, "--stats-corpus", "knowgic", "--stats-samples", "150", "--out", str(out)], capsys
    )
    assert code == 0, err
    config = json.loads((out / "results.json").read_text(encoding="utf-8"))["config"]
    assert config["hparams"]["mom2_dataset"] == "knowgic"
    assert config["hparams"]["mom2_n_samples"] == 150
    # The statistics were collected from that many of the benchmark's documents, not the file's 2000.
    metas = [json.loads(p.read_text()) for p in (cache / "stats").rglob("*.json")]
    assert len(metas) == 1
    assert (
        metas[0]["corpus"] == "knowgic" and metas[0]["sample_count"] == 150 and metas[0]["texts_used"] == 150
    )
    assert metas[0]["model_id"] == "knowgic-tiny"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--editor", "ft", "--stats-corpus", "knowgic"], "editor 'ft' uses no key statistics"),
        (["--editor", "ice", "--stats-samples", "10"], "editor 'ice' uses no key statistics"),
        (["--editor", "rome", "--stats-corpus", "not a name"], "stats corpus 'not a name'"),
        (["--editor", "rome", "--stats-samples", "0"], "'0' must be 1 or more"),
    ],
)
def test_evaluate_refuses_them_where_they_cannot_apply(args, message, tmp_path, cache, capsys) -> None:
    out = tmp_path / "run"
    code, err = _run(["evaluate", "--model", "knowgic-tiny", *args, "--out", str(out)], capsys)
    assert code == 2
    assert message in err.splitlines()[-1]
    assert not out.exists()


def test_evaluate_refuses_them_when_the_hparams_use_no_statistics(knowgic_tiny, tmp_path, cache, capsys):
    hparams = _fast_rome(tmp_path, mom2_adjustment=False)
    args = ["evaluate", "--model", "knowgic-tiny", "--editor", "rome", "--hparams", str(hparams)]
    code, err = _run([*args, "--stats-corpus", "knowgic", "--out", str(tmp_path / "run")], capsys)
    assert code == 2
    assert "mom2_adjustment: false" in err.splitlines()[-1]


def test_sweep_refuses_them_when_no_editor_uses_statistics(tmp_path, cache, capsys) -> None:
    args = ["sweep", "--editors", "none,ice", "--stats-corpus", "knowgic", "--out", str(tmp_path / "sweep")]
    code, err = _run(args, capsys)
    assert code == 2
    assert "none of the editors none, ice uses key statistics" in err.splitlines()[-1]


def test_sweep_applies_them_to_the_editors_with_statistics(knowgic_tiny, tmp_path, cache) -> None:
    from knowgic.evaluation.sweep import run_sweep

    documents, _ = run_sweep(
        "knowgic-tiny",
        ["none", "memit"],
        tmp_path / "sweep",
        limit=1,
        progress=False,
        stats_corpus="knowgic",
        stats_samples=150,
    )
    by_editor = {d["config"]["editor"]: d["config"]["hparams"] for d in documents}
    assert by_editor["memit"]["mom2_dataset"] == "knowgic" and by_editor["memit"]["mom2_n_samples"] == 150
    assert "mom2_n_samples" not in by_editor["none"]
