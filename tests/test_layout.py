"""The package's import graph, read from the sources with ``ast`` (nothing imported): no circle, and every
module imports only from its own floor or the floors below (docs/architecture.md draws them).

Imports inside functions count as much as those at the top (a hidden import is still a dependency); those
under ``TYPE_CHECKING`` do not (they never run). The root package ``knowgic`` re-exports
``knowgic.load_dataset`` for users, lazily: only its module-level imports count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

REPO_ROOT = Path(__file__).resolve().parent.parent
ROOTS = {
    "knowgic": REPO_ROOT / "knowgic",
    "knowgic.runner": REPO_ROOT / "runner",
    "knowgic.leaderboard": REPO_ROOT / "leaderboard",
}
FLOORS: tuple[tuple[str, ...], ...] = (
    # 0: foundations, no knowledge of the benchmark's meaning
    (
        "knowgic",
        "knowgic.errors",
        "knowgic.paths",
        "knowgic.clip",
        "knowgic.yamlfile",
        "knowgic.argtypes",
        "knowgic.extras",
        "knowgic.schema_errors",
        "knowgic.jsonbounds",
        "knowgic.printable",
        "knowgic.formatting",
        "knowgic.records",
        "knowgic.metrics",
    ),
    ("knowgic.spec", "knowgic.ripple"),  # 1: the readers of spec/ (benchmark, relations), ripple queries
    ("knowgic.intervals", "knowgic.paired"),  # 2: interval math and paired tests, on arrays
    ("knowgic.measure",),  # 3: records -> one registered function per metric -> values, intervals
    ("knowgic.results", "knowgic.recompute"),  # 4: the results document and its recomputation
    ("knowgic.dataset", "knowgic.scoring"),  # 5: the benchmark's data, and scoring a query
    ("knowgic.editors",),  # 6: editing methods
    ("knowgic.models",),  # 7: loading models (and what editors need of them)
    ("knowgic.evaluation", "knowgic.builder", "knowgic.coverage"),  # 8: a run, a build, the simulation
    ("knowgic.runner", "knowgic.leaderboard", "knowgic.cli"),  # 9: the runner, the app, the command line
)
"""Each floor's packages and modules, lowest first."""


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for prefix, folder in ROOTS.items():
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" in path.parts or "hub" in path.relative_to(folder).parts:
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str) -> set[str]:
    """The project's modules ``module`` imports (``from a.b import c``: ``a.b.c`` where that is a module)."""
    top_only = module == "knowgic"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if top_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in MODULES:
                    found.add(full)
                elif node.module in MODULES:
                    found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(MODULES[module].read_text(encoding="utf-8")))
    return found - {module}


def _floor(module: str) -> int:
    """The floor of the longest declared name that is ``module`` or a package holding it."""
    best, floor = -1, -1
    for index, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, floor = len(name), index
    return floor


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    graph.add_edges_from((module, target) for module in MODULES for target in _imports(module))
    return graph


def test_every_module_has_a_floor() -> None:
    assert "knowgic.measure.definitions" in MODULES and "knowgic.runner.stages.score" in MODULES
    assert sorted(m for m in MODULES if _floor(m) < 0) == []


def test_no_import_circle() -> None:
    circles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert circles == []


def test_no_import_reaches_a_higher_floor() -> None:
    upward = sorted(
        f"{module} (floor {_floor(module)}) imports {target} (floor {_floor(target)})"
        for module, target in _graph().edges
        if _floor(target) > _floor(module)
    )
    assert upward == []


def test_nothing_below_evaluation_imports_it() -> None:
    """No foundation reaches up into ``knowgic.evaluation``: a run is built on them, never the reverse."""
    evaluation = _floor("knowgic.evaluation")
    below = sorted(
        module
        for module, target in _graph().edges
        if target.startswith("knowgic.evaluation") and _floor(module) < evaluation
    )
    assert below == []


def test_the_checks_see_a_violation() -> None:
    """The graph the tests read is the real one: known edges are in it, and a made-up upward edge would be
    reported by the floor rule."""
    graph = _graph()
    assert graph.has_edge("knowgic.recompute", "knowgic.measure.compute")
    assert graph.has_edge("knowgic.evaluation.evaluate", "knowgic.evaluation.scored")
    assert _floor("knowgic.measure.compute") > _floor("knowgic.intervals")
    assert _floor("knowgic.evaluation.results_view") == _floor("knowgic.evaluation")
