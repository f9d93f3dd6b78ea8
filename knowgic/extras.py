"""Which optional extra of the package provides a module, read from the extras pyproject.toml declares.

The base install runs the dataset, the models and ``evaluate``; the runner, the leaderboard and the GGUF
models need extras. A command that reaches a module of a missing extra says which extra to install, in one
line, instead of a traceback::

    ModuleNotFoundError("sqlalchemy") -> extra_for("sqlalchemy") -> "runner"
                                      -> 'pip install "knowgic[runner]"'

The extras are read from the source tree's ``pyproject.toml`` when there is one (a checkout), else from the
installed distribution's metadata, so they are declared once, in ``pyproject.toml``.
"""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from importlib import metadata
from pathlib import Path

PACKAGE = "knowgic"
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DEVELOPMENT_EXTRA = "dev"
"""Named only for modules no other extra provides (the tests' own tools)."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return f'pip install "{PACKAGE}[{extra}]"'


def _module_name(distribution: str) -> str:
    """The import name a distribution usually has: ``SQLAlchemy`` -> ``sqlalchemy``."""
    return re.sub(r"[-_.]+", "_", distribution).lower()


def _declared_extras() -> dict[str, list[str]]:
    """extra -> requirement strings, from the checkout's pyproject.toml or the installed metadata."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            project = {}
        if project.get("name") == PACKAGE:
            return {k: list(v) for k, v in project.get("optional-dependencies", {}).items()}
    try:
        requires = metadata.requires(PACKAGE) or []
    except metadata.PackageNotFoundError:
        return {}
    extras: dict[str, list[str]] = {}
    for text in requires:
        match = re.search(r"""extra\s*==\s*["']([^"']+)["']""", text)
        if match:
            extras.setdefault(match.group(1), []).append(text.split(";")[0])
    return extras


@lru_cache(maxsize=1)
def module_extras() -> dict[str, str]:
    """Top-level module name -> the extra that provides it (a non-development extra when one does)."""
    found: dict[str, str] = {}
    extras = _declared_extras()
    # Development last, so that a module in both a user-facing extra and `dev` names the former.
    for extra in sorted(extras, key=lambda name: name == DEVELOPMENT_EXTRA):
        for text in extras[extra]:
            name = _REQUIREMENT_NAME.match(text.strip())
            if name is None or name.group(0).lower() == PACKAGE:  # "knowgic[runner,leaderboard]" in dev
                continue
            found.setdefault(_module_name(name.group(0)), extra)
    return found


def extra_for(module: str | None) -> str | None:
    """The extra providing ``module`` (a dotted name is looked up by its top-level package), or None."""
    if not module:
        return None
    return module_extras().get(module.split(".")[0].lower())


def missing_extra_message(error: ModuleNotFoundError, command: str) -> str | None:
    """One line naming the extra to install for ``command``, or None when no extra provides the module."""
    extra = extra_for(error.name)
    if extra is None:
        return None
    return (
        f"{command} needs the '{extra}' extra (module {error.name!r} is not installed): {install_hint(extra)}"
    )
