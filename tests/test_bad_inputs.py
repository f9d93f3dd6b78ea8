"""Every command fed the bad inputs a new user meets: one ``error:`` line on stderr and no traceback, the
exit code ``knowgic --help`` documents (2 for a usage or input error, 1 for a failed check), and nothing left
where the command would have written. Each message comes from a check made before any work: the cases
that name a model would fail otherwise with another message, after loading it."""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.errors import EXIT_FAILED_CHECK, EXIT_INPUT
from knowgic.models import registry

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_RUN = ROOT / "tests" / "data" / "golden" / "ice.results.json.gz"
EXAMPLE_SUBMISSION = ROOT / "examples" / "custom_editor"
ABSENT_HUB_ID = "knowgic-tests/no-such-model"
"""A hub id no cache holds (the real one of the no-network case below runs with an empty cache)."""


@dataclass(frozen=True)
class Case:
    """``argv`` ({tmp}: the test's folder), a part of the one error line, and the paths under {tmp} the
    command would have written, which must not exist afterwards."""

    argv: str
    says: str
    left: tuple[str, ...] = ()


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A folder of bad inputs: a plain file where a folder is wanted, broken seed files, a private key, a
    model folder of a family with no shipped hparams, a rows file that breaks its schema, a submission
    asking for a misspelt model, and a real run's results.json."""
    (tmp_path / "afile").write_text("x\n", encoding="utf-8")
    (tmp_path / "templates.yaml").write_text(
        "born_in:\n  prompt: '{} was born in'\n  question: 'Where was {} born?'\n", encoding="utf-8"
    )
    (tmp_path / "seeds.csv").write_text("subject,relation\n", encoding="utf-8")
    (tmp_path / "seeds.jsonl").write_text('{"subject":\n', encoding="utf-8")
    assert main(["store", "keygen", "--key", str(tmp_path / "key"), "--no-trust"]) == 0
    neox = tmp_path / "neox"
    neox.mkdir()
    (neox / "config.json").write_text('{"model_type": "gpt_neox"}', encoding="utf-8")
    (neox / "model.safetensors").write_bytes(b"")  # never read: the hparams check comes first
    (tmp_path / "rows.jsonl").write_text('{"case_id": "x"}\n', encoding="utf-8")
    submission = tmp_path / "submission"
    shutil.copytree(EXAMPLE_SUBMISSION, submission)
    manifest = submission / "submission.yaml"
    text = manifest.read_text(encoding="utf-8")
    assert "models: [knowgic-tiny]" in text
    manifest.write_text(text.replace("models: [knowgic-tiny]", "models: [knowgic-tinny]"), encoding="utf-8")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_bytes(gzip.decompress(GOLDEN_RUN.read_bytes()))
    return tmp_path


TINY = "--model knowgic-tiny"
BUILD = f"build {TINY} --build-dir {{tmp}}/B --templates {{tmp}}/templates.yaml"

INPUT_ERRORS = {
    # a typo'd flag or command word
    "flag typo": Case(f"evaluate --modle {TINY}", "has no option --modle: did you mean --model?"),
    "flag typo after a good one": Case(
        f"evaluate {TINY} --editor none --modle x", "has no option --modle: did you mean --model?"
    ),
    "command typo": Case("evalute", "knowgic has no command 'evalute': did you mean evaluate?"),
    "sub-command typo": Case("store ad x", "knowgic store has no command 'ad': did you mean add?"),
    "option value": Case(
        "evaluate --editor none --limit 0 --out {tmp}/out",
        "argument --limit: '0' must be 1 or more",
        ("out",),
    ),
    # evaluate: every input before the model loads
    "model typo": Case(
        "evaluate --model knowgic-tinny --editor none --out {tmp}/out",
        "did you mean 'knowgic-tiny'?",
        ("out",),
    ),
    "editor typo": Case("evaluate --editor romee --out {tmp}/out", "did you mean 'rome'?", ("out",)),
    "dataset version": Case(
        "evaluate --editor none --dataset-version 1.1.1 --out {tmp}/out", "unknown dataset version", ("out",)
    ),
    "dataset folder": Case(
        "evaluate --editor none --dataset-version {tmp}/nodir", "dataset folder {tmp}/nodir does not exist"
    ),
    "hparams file": Case(
        "evaluate --editor rome --hparams {tmp}/nope.yaml --out {tmp}/out", "does not exist", ("out",)
    ),
    "protocol": Case("evaluate --editor none --protocol nope", "unknown scoring protocol 'nope'"),
    "out is a file": Case("evaluate --editor none --out {tmp}/afile", "{tmp}/afile is not a folder"),
    "out under a file": Case("evaluate --editor none --out {tmp}/afile/run", "{tmp}/afile is not a folder"),
    "device": Case(
        "evaluate --editor none --device cuda:99 --out {tmp}/out", "'cuda:99' asked for", ("out",)
    ),
    "key statistics": Case("evaluate --editor none --stats-samples 5", "uses no key statistics"),
    "no hparams for the family": Case(
        "evaluate --model {tmp}/neox --editor rome --out {tmp}/out",
        "no hparams for editor 'rome' on model '{tmp}/neox' (family 'gpt_neox')",
        ("out",),
    ),
    "hub id, network off": Case(
        f"evaluate --model {ABSENT_HUB_ID} --editor none --out {{tmp}}/out",
        f"model '{ABSENT_HUB_ID}' is not in the local Hugging Face cache and the network is off "
        "(HF_HUB_OFFLINE=1)",
        ("out",),
    ),
    # sweep: the editors, the folder and the model, once
    "sweep editor twice": Case(
        "sweep --editors rome,rome --out {tmp}/sweep", "--editors names rome more than once", ("sweep",)
    ),
    "sweep editor typo": Case(
        "sweep --editors none,romee --out {tmp}/sweep", "did you mean 'rome'?", ("sweep",)
    ),
    "sweep out is a file": Case("sweep --editors none --out {tmp}/afile", "{tmp}/afile is not a folder"),
    "sweep model typo": Case(
        "sweep --model knowgic-tinny --editors none --out {tmp}/sweep",
        "did you mean 'knowgic-tiny'?",
        ("sweep",),
    ),
    "sweep hparams for the family": Case(
        "sweep --model {tmp}/neox --editors none,rome --out {tmp}/sweep",
        "no hparams for editor 'rome'",
        ("sweep",),
    ),
    "sweep hub id, network off": Case(
        f"sweep --model {ABSENT_HUB_ID} --editors none --out {{tmp}}/sweep",
        "and the network is off (HF_HUB_OFFLINE=1)",
        ("sweep",),
    ),
    # build: its inputs before its build folder is made
    "build seeds missing": Case(
        f"{BUILD} --seeds {{tmp}}/nope.csv", "--seeds {tmp}/nope.csv: no such file", ("B",)
    ),
    "build seeds CSV": Case(f"{BUILD} --seeds {{tmp}}/seeds.csv", "{tmp}/seeds.csv: no seed rows", ("B",)),
    "build seeds JSONL": Case(f"{BUILD} --seeds {{tmp}}/seeds.jsonl", "line 1 is not valid JSON", ("B",)),
    # the store
    "store add, no run": Case("store add {tmp}/nothere --store {tmp}/store", "does not exist", ("store",)),
    "store add, store is a file": Case(
        "store add {tmp}/run --store {tmp}/afile", "results store {tmp}/afile is a file, not a folder"
    ),
    "store list, store is a file": Case("store list --store {tmp}/afile", "is a file, not a folder"),
    "store trust, private key": Case("store trust {tmp}/key", "{tmp}/key is a private key, not a public one"),
    "store trust, no file": Case("store trust {tmp}/nope.pub", "cannot read the public key"),
    # the runner
    "runner submit, model typo": Case(
        "runner submit {tmp}/submission --store {tmp}/store", "did you mean 'knowgic-tiny'?"
    ),
    "runner status, no queue": Case("runner status --store {tmp}/nodir", "no queue database"),
    # reading runs, the dataset, models, the other model commands
    "summarize, no run": Case("summarize {tmp}/nothere", "{tmp}/nothere does not exist"),
    "summarize, out is taken": Case("summarize {tmp}/run --out {tmp}/afile", "exists; pass --overwrite"),
    "compare, not JSON": Case("compare {tmp}/afile {tmp}/afile", "is not valid JSON"),
    "validate, no file": Case("validate {tmp}/nothere", "{tmp}/nothere does not exist"),
    "dataset version typo": Case("dataset path --version 1.1.1", "unknown dataset version '1.1.1'"),
    "models prepare typo": Case("models prepare knowgic-tinny", "did you mean 'knowgic-tiny'?"),
    "probe model typo": Case(
        "probe --model knowgic-tinny --editor none --edit-id a002c1adce88", "did you mean 'knowgic-tiny'?"
    ),
    "timing model typo": Case("timing --model knowgic-tinny", "did you mean 'knowgic-tiny'?"),
    "leaderboard, store is a file": Case("leaderboard --store {tmp}/afile", "results store {tmp}/afile"),
}


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exits
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("name", list(INPUT_ERRORS))
def test_a_bad_input_gets_one_line_exit_2_and_leaves_nothing(
    name: str, inputs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    case = INPUT_ERRORS[name]
    before = sorted(p.name for p in inputs.iterdir())
    code, _, err = _run(capsys, [a.replace("{tmp}", str(inputs)) for a in case.argv.split()])
    line = _one_error_line(err)
    assert code == EXIT_INPUT, (code, line)
    assert case.says.replace("{tmp}", str(inputs)) in line
    for path in case.left:
        assert not (inputs / path).exists(), f"{path} was left behind"
    if name != "runner submit, model typo":  # see the test below
        assert sorted(p.name for p in inputs.iterdir()) == before


def test_a_refused_submission_leaves_no_store(inputs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = _run(capsys, ["runner", "submit", str(inputs / "submission"), "--store", str(inputs / "st")])
    assert code == EXIT_INPUT
    assert not (inputs / "st").exists()


def test_an_offline_model_package_missing_is_named(inputs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = registry.get_offline_model("gemma3-270m")
    assert entry is not None
    if registry.is_installed(entry):
        pytest.skip("gemma3-270m's package is installed here")
    code, _, err = _run(
        capsys, ["evaluate", "--model", "gemma3-270m", "--editor", "none", "--out", str(inputs / "out")]
    )
    assert code == EXIT_INPUT
    assert f"needs the package {entry.distribution}: {entry.install}" in _one_error_line(err)
    assert not (inputs / "out").exists()


def test_a_failed_check_exits_1_with_its_report(inputs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``validate`` ran and found the rows wrong: exit 1, the problems on stdout, nothing on stderr."""
    code, out, err = _run(capsys, ["validate", str(inputs / "rows.jsonl")])
    assert code == EXIT_FAILED_CHECK and err == ""
    assert "errors:" in out


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released): a connection there is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


NO_NETWORK = (
    "'openai-community/gpt2' is not in the local Hugging Face cache",
    "cannot be reached: the network is missing",
)


def test_a_hub_id_without_network_says_so_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The network on but the hub unreachable (a closed local port stands for it) and the cache empty: one
    line saying the network is missing, after one question and without the hub client's retries. The hub's
    settings are set as its environment variables would set them at import."""
    from huggingface_hub import constants

    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    out = tmp_path / "out"
    argv = ["evaluate", "--model", "openai-community/gpt2", "--editor", "none", "--out", str(out)]
    code, _, err = _run(capsys, argv)
    line = _one_error_line(err)
    assert code == EXIT_INPUT and all(part in line for part in NO_NETWORK), line
    assert not out.exists()


@pytest.mark.slow
def test_the_command_without_network_says_so_at_once(tmp_path: Path) -> None:
    """The same from a shell: ``knowgic`` run with the variables a user sets (no HF_HUB_OFFLINE)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HUB_CACHE=str(tmp_path / "hub"))
    argv = [
        "evaluate",
        "--model",
        "openai-community/gpt2",
        "--editor",
        "none",
        "--out",
        str(tmp_path / "out"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "knowgic.cli", *argv], capture_output=True, text=True, env=env, timeout=300
    )
    line = _one_error_line(done.stderr)
    assert done.returncode == EXIT_INPUT and all(part in line for part in NO_NETWORK), line
    assert not (tmp_path / "out").exists()
