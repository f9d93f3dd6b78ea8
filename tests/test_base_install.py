"""The command line with only the base dependencies importable, as after ``pip install knowgic``.

The tests run with the development extras installed, so a subprocess hides the extras' modules behind a
meta-path finder that refuses them (the module names come from pyproject.toml's extras through
``knowgic.extras``). In it: ``knowgic --help`` and every sub-command's ``--help`` exit 0 with no traceback,
and a command that needs a missing extra says which one to install, in one line, with exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from knowgic.extras import extra_for, install_hint, module_extras

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    BLOCKED = set(sys.argv[1].split(","))

    class Blocker(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    del sys.argv[1]
    """
)

# Every sub-command's --help, run in one interpreter: a list of [command words, exit code, stderr].
WALK = textwrap.dedent(
    """
    import argparse, contextlib, io, json, traceback
    from knowgic.cli import build_parser, main

    def paths(parser, words):
        yield words
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from paths(sub, [*words, name])

    report = []
    for words in paths(build_parser(), []):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([*words, "--help"])
            except SystemExit as exc:
                code = exc.code
            except BaseException:
                code, err = "raised", io.StringIO(traceback.format_exc())
        report.append([words, code, err.getvalue(), out.getvalue()[:200]])
    print(json.dumps(report))
    """
)


def _blocked_modules() -> list[str]:
    return sorted(module_extras())


def _run_base_only(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code, ",".join(_blocked_modules()), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or ROOT,
        timeout=300,
    )


def test_the_extras_are_read_from_pyproject() -> None:
    assert extra_for("sqlalchemy") == "runner" and extra_for("docker.errors") == "runner"
    assert extra_for("gradio") == "leaderboard" and extra_for("plotly") == "leaderboard"
    assert extra_for("gguf") == "models"
    assert extra_for("torch") is None  # a base dependency
    assert install_hint("runner") == 'pip install "knowgic[runner]"'


def test_the_blocker_hides_the_extras() -> None:
    done = _run_base_only("import sqlalchemy")
    assert done.returncode == 1 and "No module named 'sqlalchemy'" in done.stderr


def test_every_help_works_with_the_base_dependencies_only() -> None:
    done = _run_base_only(WALK)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    commands = {" ".join(words) for words, *_ in report}
    assert {"", "evaluate", "sweep", "runner", "runner status", "leaderboard", "store list"} <= commands
    failed = [(words, code, err) for words, code, err, _ in report if code != 0 or "Traceback" in err]
    assert not failed, failed
    for words, _, _, out in report:
        assert out.startswith("usage: knowgic"), (words, out)


# Commands that need an extra, run in one interpreter: a list of [exit code, stderr].
RUN_EACH = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from knowgic.cli import main

    report = []
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(argv)
        report.append([code, err.getvalue()])
    print(json.dumps(report))
    """
)


def test_a_missing_extra_is_named_in_one_line(tmp_path: Path) -> None:
    cases = [
        (["runner", "status", "--store", str(tmp_path)], "runner"),
        (["runner", "worker", "--once", "--store", str(tmp_path)], "runner"),
        (["leaderboard", "--store", str(tmp_path)], "leaderboard"),
    ]
    done = _run_base_only(RUN_EACH, json.dumps([argv for argv, _ in cases]))
    assert done.returncode == 0, done.stderr
    for (argv, extra), (code, err) in zip(cases, json.loads(done.stdout), strict=True):
        assert code == 2 and "Traceback" not in err, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (argv, err)
        assert lines[0].startswith(f"error: knowgic {argv[0]}") and install_hint(extra) in lines[0], lines


def test_a_missing_module_of_no_extra_is_not_hidden() -> None:
    """Only the extras' modules get the one-line hint; any other missing module is a bug and says so."""
    from knowgic.extras import missing_extra_message

    assert missing_extra_message(ModuleNotFoundError("x", name="not_a_dependency"), "knowgic x") is None
