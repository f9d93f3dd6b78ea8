"""What a newcomer meets first: the README's set-up commands, model names, --out, validate of a results
document, resumable sweeps, --json, --version, `editors list`, one sub-command placeholder, one --model
default, the IFR legend and probe's restore check. Every run is a real one on the offline knowgic-tiny."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from knowgic.argtypes import DEFAULT_MODEL, SUBCOMMAND_METAVAR
from knowgic.cli import build_parser, main
from knowgic.errors import KnowgicError

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["sweep", "--editors", "none,ice", "--limit", "1"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own exits (--help, --version, usage errors)
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


# ---- the README


def _readme_command(which: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "readme_command.py"), which], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_readme_commands_are_what_ci_runs() -> None:
    main_command, test_command = _readme_command("main"), _readme_command("tests")
    # a virtual environment, the base install only (no extras), then the main job on the offline model
    assert main_command.startswith("python3 -m venv .venv && . .venv/bin/activate && ")
    assert 'pip install "torch==2.13.0" -e . && knowgic evaluate --model knowgic-tiny ' in main_command
    assert "[" not in main_command
    assert test_command.endswith('-e ".[dev]" && python3 -m pytest')
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_command.py main" in ci and "readme_command.py tests" in ci
    # the README's first command runs before the test suite
    assert ci.index("readme_command.py main") < ci.index("readme_command.py tests")


def test_readme_command_refuses_a_readme_without_two_commands(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import readme_command
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    text = "# X\n\n## Set up\n\n```bash\necho one\n```\n\n## Next\n\n```bash\necho two\n```\n"
    assert readme_command.setup_commands(text) == ["echo one"]
    with pytest.raises(ValueError, match="no '## Set up' section"):
        readme_command.setup_commands("# X\n")


def test_the_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [link for link in re.findall(r"\]\(([^)]+)\)", readme) if not link.startswith("http")]
    assert {"docs/findings.md", "docs/runner.md", "docs/leaderboard.md", "docs/space.md"} <= set(links)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
    assert "HF_HUB_OFFLINE=1" in readme


# ---- model names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("knowgic-tinny", "did you mean 'knowgic-tiny'?"),
        ("gemma3-27m", "did you mean 'gemma3-270m'?"),
        ("not a model", "is not an offline name, an existing path or a possible hub id"),
    ],
)
def test_a_model_name_that_cannot_be_a_hub_id_fails_at_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str, expected: str
) -> None:
    import huggingface_hub

    def no_hub(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_hub)
    code, _, err = run(capsys, "evaluate", "--model", name, "--editor", "none")
    assert code == 2 and err.count("\n") == 1
    assert expected in err


def test_hub_ids_are_still_hub_ids() -> None:
    from knowgic.models.loading import HUB, resolve_source

    assert resolve_source("openai-community/gpt2").kind == HUB
    assert resolve_source("gpt2").kind == HUB  # a legacy id without owner, far from every offline name


# ---- --out, validate


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-editor sweep on one edit, made once; tests copy it."""
    out = tmp_path_factory.mktemp("sweep") / "sweep"
    assert main([*SWEEP, "--out", str(out)]) == 0
    return out


@pytest.fixture
def sweep_copy(sweep_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "sweep"
    shutil.copytree(sweep_dir, out)
    return out


def test_out_of_a_folder_of_runs_is_refused(capsys: pytest.CaptureFixture[str], sweep_copy: Path) -> None:
    before = sorted(p.name for p in sweep_copy.iterdir())
    for flags in ([], ["--overwrite"]):
        code, _, err = run(
            capsys, "evaluate", "--editor", "none", "--limit", "1", "--out", str(sweep_copy), *flags
        )
        assert code == 2 and err.count("\n") == 1
        assert f"{sweep_copy} holds other runs (2 run folder(s), e.g. ice)" in err
    assert sorted(p.name for p in sweep_copy.iterdir()) == before


def test_validate_recognises_a_results_document(
    capsys: pytest.CaptureFixture[str], sweep_dir: Path, tmp_path: Path
) -> None:
    results = sweep_dir / "none" / "results.json"
    code, out, _ = run(capsys, "validate", str(results))
    assert code == 0 and "a results document" in out and "schema and sha256 verified" in out
    assert run(capsys, "validate", str(sweep_dir / "none"))[0] == 0  # a run folder too

    document = json.loads(results.read_text(encoding="utf-8"))
    document["metrics"]["ifr"]["value"] = 0.5
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(document), encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(forged), "--json")
    report = json.loads(out)
    assert code == 1 and report["kind"] == "results" and report["n_errors"] == 1
    assert report["errors"][0]["pointer"] == "/sha256"

    document["metrics"]["ifr"]["value"] = "high"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document), encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(broken), "--json")
    report = json.loads(out)
    assert code == 1 and report["n_errors"] < 5  # the document's own errors, not thousands of row errors
    assert any(e["pointer"] == "/metrics/ifr/value" for e in report["errors"])


# ---- sweep: resume, --seed, --protocol-param, --json


def test_a_sweep_resumes_and_says_where_its_table_went(
    capsys: pytest.CaptureFixture[str], sweep_copy: Path
) -> None:
    runs = {e: (sweep_copy / e / "results.json").read_bytes() for e in ("none", "ice")}
    shutil.rmtree(sweep_copy / "ice")  # as if the sweep was interrupted during ice
    (sweep_copy / "summary.md").unlink()
    code, out, err = run(capsys, *SWEEP, "--out", str(sweep_copy))
    assert code == 0, err
    assert "[1/2] none: IFR 1.000, finished run reused" in err
    assert "[2/2] ice: IFR" in err and "finished run reused" not in err.split("[2/2]")[1]
    assert (sweep_copy / "none" / "results.json").read_bytes() == runs["none"]  # not run again
    assert out.rstrip().endswith(f"summary: {sweep_copy / 'summary.md'}")
    assert "(1 of 2 editors' runs reused)" in (sweep_copy / "summary.md").read_text(encoding="utf-8")

    # a finished sweep run again: nothing is run, the table is printed again
    code, _, err = run(capsys, *SWEEP, "--out", str(sweep_copy))
    assert code == 0 and err.count("finished run reused") == 2


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--seed", "3"], "seed 0 there, 3 asked"),
        (["--protocol-param", "batch_size=8"], "protocol parameter batch_size 64 there, 8 asked"),
        (["--limit", "2"], "limit None there, 2 asked"),
    ],
)
def test_a_sweep_refuses_runs_of_another_request(
    capsys: pytest.CaptureFixture[str], sweep_copy: Path, flags: list[str], named: str
) -> None:
    before = (sweep_copy / "none" / "results.json").read_bytes()
    argv = [*SWEEP, "--out", str(sweep_copy), *flags]
    if "--limit" in flags:
        argv = ["sweep", "--editors", "none,ice", "--out", str(sweep_copy), *flags]
        named = "limit 1 there, 2 asked"
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{sweep_copy / 'none'} holds a finished run of another request" in err and named in err
    assert "--overwrite" in err
    assert (sweep_copy / "none" / "results.json").read_bytes() == before


def test_sweep_seed_and_protocol_param_reach_the_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    argv = ["sweep", "--editors", "none", "--limit", "1", "--seed", "3", "--protocol-param", "batch_size=8"]
    code, stdout, err = run(capsys, *argv, "--out", str(out), "--json")
    assert code == 0, err
    report = json.loads(stdout)
    assert report["summary"] == str(out / "summary.md") and f"summary: {out / 'summary.md'}" in err
    (only,) = report["runs"]
    assert only["editor"] == "none" and only["results"] == str(out / "none" / "results.json")
    assert only["config"]["seed"] == 3 and only["config"]["protocol_params"]["batch_size"] == 8
    assert only["metrics"]["ifr"]["value"] == pytest.approx(1.0, abs=1e-5)


def test_summarize_and_store_list_speak_json(
    capsys: pytest.CaptureFixture[str], sweep_dir: Path, tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "summarize", str(sweep_dir), "--json")
    report = json.loads(out)
    assert code == 0 and [r["editor"] for r in report["runs"]] == ["none", "ice"]
    assert report["runs"][0]["results"] == str(sweep_dir / "none" / "results.json")
    assert set(report["runs"][1]["metrics"]) >= {"ifr", "preservation", "efficacy", "specificity"}

    store = tmp_path / "store"
    assert run(capsys, "store", "add", str(sweep_dir), "--store", str(store))[0] == 0
    code, out, _ = run(capsys, "store", "list", "--store", str(store), "--json")
    report = json.loads(out)
    assert code == 0 and sorted(r["editor"] for r in report["runs"]) == ["ice", "none"]
    assert report["skipped"] == []


# ---- the command line itself


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import knowgic

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith(f"knowgic {knowgic.__version__} (dataset versions 1.0.0, 1.1.0")


def test_editors_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "editors", "list")
    assert code == 0 and re.search(r"^memit\s+built-in\s+knowgic\.editors\.memit", out, re.M)
    code, out, _ = run(capsys, "editors", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and {"none", "ice", "rome", "memit", "ft", "lora"} <= rows.keys()
    assert "knowgic-tiny" in rows["rome"]["hparams_for"]


def _subparser_actions(parser: argparse.ArgumentParser, path: str = "knowgic"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield path, action
            for name, sub in action.choices.items():
                yield from _subparser_actions(sub, f"{path} {name}")


def test_one_placeholder_for_every_sub_command() -> None:
    found = {path: action.metavar for path, action in _subparser_actions(build_parser())}
    assert {"knowgic", "knowgic runner", "knowgic store", "knowgic models", "knowgic editors"} <= found.keys()
    assert set(found.values()) == {SUBCOMMAND_METAVAR}, found


def test_one_model_default() -> None:
    parser = build_parser()
    for argv in (
        ["evaluate", "--editor", "none"],
        ["sweep", "--out", "x"],
        ["probe", "--editor", "none", "--subject", "x"],
    ):
        assert parser.parse_args(argv).model == DEFAULT_MODEL, argv


def test_evaluate_explains_ifr_and_probe_its_restore(capsys: pytest.CaptureFixture[str]) -> None:
    from knowgic.spec import benchmark_spec

    ifr = benchmark_spec().metrics["ifr"]
    code, out, _ = run(capsys, "evaluate", "--editor", "none", "--limit", "1")
    assert code == 0
    legend = [line for line in out.splitlines() if line.startswith(f"{ifr.label} (lower is better) = ")]
    assert legend == [f"{ifr.label} (lower is better) = {ifr.description}"]
    assert "Indirect Fact Recovery: how much of the old fact" in legend[0]

    code, out, _ = run(capsys, "probe", "--editor", "rome", "--subject", "Harry Potter")
    assert code == 0
    assert re.search(
        r"^restore check: all \d+ parameters and buffers identical to before the edit", out, re.M
    )
    code, out, _ = run(capsys, "probe", "--editor", "rome", "--subject", "Harry Potter", "--json")
    restore = json.loads(out)["restore"]
    assert restore["identical"] is True and restore["tensors"] > 0


def test_a_missing_extra_hint_names_the_command() -> None:
    from knowgic.extras import missing_extra_message

    line = missing_extra_message(ModuleNotFoundError("x", name="sqlalchemy"), "knowgic runner status")
    assert line == (
        "knowgic runner status needs the 'runner' extra (module 'sqlalchemy' is not installed): "
        'pip install "knowgic[runner]"'
    )
    with pytest.raises(KnowgicError):
        raise KnowgicError(line)
