"""The plug-in path for new editing methods, run for real on the example in ``examples/custom_editor``.

(1) ``module:Class`` with the example folder on ``sys.path``; (2) the example installed as a package,
found through its ``knowgic.editors`` entry point (a pip install into a temporary ``--target``, and a
hand-made ``.dist-info`` that needs no build backend); (3) broken plug-ins give one-line errors;
(4) ``knowgic evaluate`` runs the example end to end in a subprocess.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from knowgic.editors.base import Editor
from knowgic.editors.ft import rewrite_batch, rewrite_nll
from knowgic.editors.hparams import load_hparams
from knowgic.editors.registry import ENTRY_POINT_GROUP, available_editors, plugin_editors, resolve_editor
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "custom_editor"
EXAMPLE_HPARAMS = EXAMPLE / "rank_one_ft.yaml"
TARGET = "knowgic_rank_one.editor:RankOneFT"
ENTRY_NAME = "rank-one-ft"
REQ = EditRequest("{} studied at", "Harry Potter", "Hogwarts School of Witchcraft and Wizardry", "Ilvermorny")


@pytest.fixture
def fresh_example(monkeypatch):
    """Forget any imported copy of the example package, before and after the test."""
    for name in list(sys.modules):
        if name.split(".")[0] in {"knowgic_rank_one", "plug_bad"}:
            monkeypatch.delitem(sys.modules, name)
    yield
    for name in list(sys.modules):
        if name.split(".")[0] in {"knowgic_rank_one", "plug_bad"}:
            del sys.modules[name]


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def _check_real_edit(cls: type[Editor], model: torch.nn.Module, tok) -> None:
    """The example edits exactly one weight, lowers the rewrite loss, and restores bitwise."""
    hparams, _ = load_hparams(
        cls.name, "random-gpt2", "gpt2", path=EXAMPLE_HPARAMS, editor_schema=cls.hparams_schema
    )
    before = _state(model)
    batch = rewrite_batch(tok, [REQ], "cpu")
    with torch.no_grad():
        loss_before = float(rewrite_nll(model, batch))
    handle = cls(hparams).apply(model, tok, [REQ])
    with torch.no_grad():
        loss_after = float(rewrite_nll(model, batch))
    changed = [n for n, t in model.state_dict().items() if not torch.equal(t, before[n])]
    assert changed == [f"transformer.h.{hparams['layer']}.mlp.c_proj.weight"]
    assert loss_after < loss_before - 1.0
    assert all(p.grad is None for p in model.parameters())
    handle.restore()
    assert all(torch.equal(t, before[n]) for n, t in model.state_dict().items())


# ---- (1) module:Class


def test_example_by_module_class(random_gpt2, fresh_example, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    cls = resolve_editor(TARGET)
    assert cls.__name__ == "RankOneFT" and issubclass(cls, Editor)
    assert Path(inspect.getfile(cls)).resolve().is_relative_to(EXAMPLE)
    _check_real_edit(cls, *random_gpt2)


def test_example_editor_is_under_60_lines():
    lines = (EXAMPLE / "knowgic_rank_one" / "editor.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 60
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    # the READMEs (the example's and the project's) show the editor exactly as shipped
    assert "\n".join(lines) in readme
    assert "\n".join(lines) in (EXAMPLE.parents[1] / "README.md").read_text(encoding="utf-8")


def test_a_typo_in_the_example_hparams_is_refused(tmp_path, fresh_example, monkeypatch):
    """The example declares hparams_schema, so `layre: 1` is an error naming the key, not a silent default."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    cls = resolve_editor(TARGET)
    typo = tmp_path / "typo.yaml"
    typo.write_text(EXAMPLE_HPARAMS.read_text(encoding="utf-8").replace("layer:", "layre:"), encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"/layre: unknown key \(did you mean 'layer'\?\)"):
        load_hparams(cls.name, "random-gpt2", "gpt2", path=typo, editor_schema=cls.hparams_schema)
    bad_value = tmp_path / "bad.yaml"
    bad_value.write_text("layer: -1\n", encoding="utf-8")
    with pytest.raises(KnowgicError, match="/layer"):
        load_hparams(cls.name, "random-gpt2", "gpt2", path=bad_value, editor_schema=cls.hparams_schema)


# ---- (2) entry points


def _hand_made_install(site: Path) -> None:
    """What an installer leaves behind, made by hand: the package and a .dist-info with entry_points.txt."""
    shutil.copytree(EXAMPLE / "knowgic_rank_one", site / "knowgic_rank_one")
    info = site / "knowgic_rank_one_ft-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: knowgic-rank-one-ft\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{ENTRY_NAME} = {TARGET}\n")


def _resolve_installed(site: Path, monkeypatch, random_gpt2) -> None:
    monkeypatch.syspath_prepend(str(site))
    assert plugin_editors().get(ENTRY_NAME) == TARGET
    assert ENTRY_NAME in available_editors()
    cls = resolve_editor(ENTRY_NAME)
    assert Path(inspect.getfile(cls)).resolve().is_relative_to(site.resolve())
    _check_real_edit(cls, *random_gpt2)


def test_entry_point_from_dist_info(tmp_path, random_gpt2, fresh_example, monkeypatch):
    _hand_made_install(tmp_path)
    _resolve_installed(tmp_path, monkeypatch, random_gpt2)


def _setuptools_can_build() -> str | None:
    """None when the example's build backend (setuptools >= 70.1) is importable offline, else why not."""
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools is not installed"
    from importlib.metadata import version

    major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    return None if (major, minor) >= (70, 1) else f"setuptools {major}.{minor} < 70.1"


def test_entry_point_from_pip_install(tmp_path, random_gpt2, fresh_example, monkeypatch):
    why = _setuptools_can_build()
    if why:
        pytest.skip(f"cannot build the example offline: {why} (the dist-info test covers entry points)")
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = tmp_path / "site"
    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
        "--disable-pip-version-check", "--target", str(site), str(src),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(site.glob("knowgic_rank_one_ft-*.dist-info/entry_points.txt"))
    _resolve_installed(site, monkeypatch, random_gpt2)


# ---- (3) broken plug-ins: one line each, naming what is wrong

BAD_MODULE = """
from knowgic.editors import Editor

helper = 3


class NotAnEditor:
    def apply(self, model, tokenizer, requests):
        return None


class Lazy(Editor):
    name = "lazy"


class Raising(Editor):
    name = "raising"

    def apply(self, model, tokenizer, requests):
        raise ValueError("this method is broken")
"""


@pytest.fixture
def bad_plugins(tmp_path, monkeypatch, fresh_example):
    pkg = tmp_path / "plug_bad"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "editors.py").write_text(textwrap.dedent(BAD_MODULE))
    (pkg / "explodes.py").write_text("raise RuntimeError('plug-in import failed\\non two lines')\n")
    (pkg / "needs_dep.py").write_text("import no_such_dependency_for_knowgic  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return tmp_path


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "no_such_knowgic_plugin.module:Editor",
            "no module named 'no_such_knowgic_plugin'; is its package installed",
        ),
        ("knowgic_rank_one.editor:Nope", "has no attribute 'Nope'; editor classes there: RankOneFT"),
        ("plug_bad.editors:NotAnEditor", "is not a subclass of knowgic.editors.Editor"),
        ("plug_bad.editors:helper", "is a int, not a class"),
        ("plug_bad.editors:Lazy", "does not implement apply()"),
        (
            "plug_bad.explodes:Anything",
            "importing 'plug_bad.explodes' failed: RuntimeError: plug-in import failed on",
        ),
        ("plug_bad.needs_dep:X", "it needs module 'no_such_dependency_for_knowgic', which is not installed"),
        ("plug_bad.editors:", "expected 'package.module:ClassName'"),
        ("no-such-editor", "unknown editor 'no-such-editor'; known:"),
    ],
)
def test_bad_plugin_errors_are_one_line(bad_plugins, name, message):
    with pytest.raises(KnowgicError) as info:
        resolve_editor(name)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_apply_raising_is_one_line_naming_the_edit(bad_plugins, random_gpt2):
    from types import SimpleNamespace

    from knowgic.evaluation.harness import _apply

    model, tok = random_gpt2
    editor = resolve_editor("plug_bad.editors:Raising")({})
    edit = SimpleNamespace(request=REQ, edit_id=REQ.edit_id)
    with pytest.raises(KnowgicError) as info:
        _apply(editor, model, tok, edit)
    text = str(info.value)
    assert "editor 'raising' failed on edit" in text and REQ.edit_id in text
    assert "ValueError: this method is broken" in text
    assert "\n" not in text


def _cli(args: list[str], extra_path: list[Path], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in extra_path), env.get("PYTHONPATH", "")])
    env.setdefault("HF_HUB_OFFLINE", "1")
    return subprocess.run(
        [sys.executable, "-m", "knowgic.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _require_cli() -> None:
    from knowgic.cli import COMMAND_MODULES

    missing = [m for m in COMMAND_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"the knowgic command line is not complete in this install (missing {', '.join(missing)})"
        )


def test_cli_bad_plugin_is_one_line_exit_2(bad_plugins):
    _require_cli()
    proc = _cli(
        ["evaluate", "--model", "knowgic-tiny", "--editor", "plug_bad.editors:NotAnEditor"], [bad_plugins]
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "not a subclass of knowgic.editors.Editor" in lines[0]


# ---- (4) knowgic evaluate with the example, end to end


def _require_evaluate_and_tiny() -> None:
    _require_cli()
    if importlib.util.find_spec("knowgic.models.loading") is None:
        pytest.skip("the model loader (knowgic-tiny) is not available in this install")


@pytest.mark.slow
def test_evaluate_runs_the_example_by_module_class(tmp_path):
    _require_evaluate_and_tiny()
    out = tmp_path / "out"
    args = ["evaluate", "--model", "knowgic-tiny", "--editor", TARGET, "--hparams", str(EXAMPLE_HPARAMS)]
    proc = _cli([*args, "--limit", "2", "--out", str(out)], [EXAMPLE])
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    text = json.dumps(results)
    assert "RankOneFT" in text


@pytest.mark.slow
def test_evaluate_runs_the_example_by_entry_point(tmp_path):
    _require_evaluate_and_tiny()
    site = tmp_path / "site"
    site.mkdir()
    _hand_made_install(site)
    out = tmp_path / "out"
    args = ["evaluate", "--model", "knowgic-tiny", "--editor", ENTRY_NAME, "--hparams", str(EXAMPLE_HPARAMS)]
    proc = _cli([*args, "--limit", "2", "--out", str(out)], [site])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "results.json").is_file()


@pytest.mark.slow
def test_evaluate_reports_a_raising_apply_in_one_line(bad_plugins):
    _require_evaluate_and_tiny()
    proc = _cli(
        ["evaluate", "--model", "knowgic-tiny", "--editor", "plug_bad.editors:Raising", "--limit", "1"],
        [bad_plugins],
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "ValueError: this method is broken" in lines[0], proc.stderr[-3000:]
