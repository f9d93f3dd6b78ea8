"""Editing methods behind one interface (:class:`~knowgic.editors.base.Editor`)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EditHandle", "Editor", "snapshot_restore"]
# Imported on first use, so that building the command line (`knowgic editors list` lives in this package)
# does not load torch on the runner's worker host.
_HOMES = dict.fromkeys(__all__, "knowgic.editors.base")


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'knowgic.editors' has no attribute {name!r}")
