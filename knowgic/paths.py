"""Where the project's files live: the declarative spec, the dataset folders, the user cache."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# A read-only folder of key statistics computed by trusted code (knowgic.editors.layer_stats).
PROVIDED_STATS_VARIABLE = "KNOWGIC_STATS_DIR"


def spec_dir() -> Path:
    """The ``spec/`` folder: inside the installed wheel (``knowgic/_spec``) or at the repository root."""
    installed = PACKAGE_DIR / "_spec"
    if installed.is_dir():
        return installed
    repo = PACKAGE_DIR.parent / "spec"
    if repo.is_dir():
        return repo
    raise FileNotFoundError(
        "cannot find the KnowGIC spec folder (spec/); is the package installed correctly?"
    )


def cache_dir() -> Path:
    """The user cache: ``$KNOWGIC_CACHE``, else ``$XDG_CACHE_HOME/knowgic``, else ``~/.cache/knowgic``."""
    env = os.environ.get("KNOWGIC_CACHE")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "knowgic"
    path.mkdir(parents=True, exist_ok=True)
    return path
