"""Models: load any transformers causal LM (hub id, folder, GGUF file) or an offline model by name.

``load_model`` returns a :class:`~knowgic.models.base.LoadedModel`; ``list_models`` lists the offline names
(``knowgic-tiny``, ``gemma3-270m``, ``smollm2-135m``) with whether each is installed and cached.
"""

from __future__ import annotations

from knowgic.models.base import LoadedModel
from knowgic.models.loading import load_model
from knowgic.models.registry import list_models, offline_names

__all__ = ["LoadedModel", "list_models", "load_model", "offline_names"]
