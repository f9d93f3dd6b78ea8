"""Models: load any transformers causal LM (hub id, folder, GGUF file) or an offline model by name.

``load_model`` returns a :class:`~knowgic.models.base.LoadedModel`; ``list_models`` lists the offline names
(``knowgic-tiny``, ``gemma3-270m``, ``smollm2-135m``) with whether each is installed and cached.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LoadedModel", "list_models", "load_model", "offline_names"]
# Imported on first use, so that a command that only lists its options (the runner's worker host, which
# has no torch to spare) does not load torch through this package.
_HOMES = {
    "LoadedModel": "knowgic.models.base",
    "load_model": "knowgic.models.loading",
    "list_models": "knowgic.models.registry",
    "offline_names": "knowgic.models.registry",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'knowgic.models' has no attribute {name!r}")
