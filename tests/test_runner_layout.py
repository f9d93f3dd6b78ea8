"""The runner's folders follow its trust boundary, read from the sources with ``ast`` (nothing imported):
the stages (the code inside the containers) reach neither the host, the intake nor the store; the
leaderboard reads the runner only through the store (and the intake and queue for its submit tab); and
no two runner modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNNER = REPO_ROOT / "runner"
LEADERBOARD = REPO_ROOT / "leaderboard"
PREFIX = "knowgic.runner"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(RUNNER).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PREFIX, *parts])


RUNNER_MODULES = {_module_name(path): path for path in sorted(RUNNER.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, *, typing_too: bool) -> set[str]:
    """The modules ``path`` imports (at the top or inside functions); ``from PACKAGE import NAME`` names
    the module PACKAGE.NAME where that is a runner module. ``typing_too``: also those under TYPE_CHECKING."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing_too:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(
                f"{node.module}.{alias.name}"
                for alias in node.names
                if f"{node.module}.{alias.name}" in RUNNER_MODULES
            )
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _runner_imports(path: Path, *, typing_too: bool) -> set[str]:
    return {name for name in _imports(path, typing_too=typing_too) if name.startswith(PREFIX)}


def test_every_runner_folder_is_a_documented_package() -> None:
    for folder in [RUNNER, *(p for p in RUNNER.iterdir() if p.is_dir() and p.name != "__pycache__")]:
        init = folder / "__init__.py"
        assert init.is_file(), folder
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), init


def test_the_stages_reach_neither_the_host_the_intake_nor_the_store() -> None:
    forbidden = tuple(f"{PREFIX}.{folder}" for folder in ("host", "intake", "store"))
    stages = {name: path for name, path in RUNNER_MODULES.items() if name.startswith(f"{PREFIX}.stages")}
    assert f"{PREFIX}.stages.edit" in stages
    found = {
        name: sorted(i for i in _runner_imports(path, typing_too=True) if i.startswith(forbidden))
        for name, path in stages.items()
    }
    assert not {name: bad for name, bad in found.items() if bad}


def test_the_leaderboard_reads_the_runner_only_through_store_intake_queue_and_options() -> None:
    allowed = tuple(f"{PREFIX}.{name}" for name in ("store", "intake", "queue", "options"))
    found = {
        path.name: sorted(
            name
            for name in _runner_imports(path, typing_too=True)
            if name != PREFIX and not any(name == a or name.startswith(f"{a}.") for a in allowed)
        )
        for path in sorted(LEADERBOARD.rglob("*.py"))
    }
    assert not {name: bad for name, bad in found.items() if bad}


def test_no_import_cycle_among_runner_modules() -> None:
    """Imports that run (TYPE_CHECKING blocks left out), at the top or inside functions."""
    graph: dict[str, set[str]] = {}
    for name, path in RUNNER_MODULES.items():
        targets = {t for t in _runner_imports(path, typing_too=False) if t in RUNNER_MODULES and t != name}
        graph[name] = targets
    done: set[str] = set()
    stack: list[str] = []

    def walk(node: str) -> None:
        if node in done:
            return
        if node in stack:
            cycle = [*stack[stack.index(node) :], node]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        stack.append(node)
        for target in sorted(graph[node]):
            walk(target)
        stack.pop()
        done.add(node)

    for name in sorted(graph):
        walk(name)
    assert len(done) == len(RUNNER_MODULES)
