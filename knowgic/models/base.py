"""The loaded-model record handed from the model loader to the evaluation loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and the provenance recorded in results.

    ``model_id`` is what the user asked for (offline name, hub id or path); ``revision`` is the hub
    commit or, for local files, a content hash, so results can say exactly which weights were scored.
    ``is_chat`` selects the chat template in the ``generate`` protocol.
    """

    model: torch.nn.Module
    tokenizer: Any
    model_id: str
    revision: str
    family: str
    dtype: str
    device: str
    is_chat: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Editors key cached key statistics by the model's identity (knowgic.editors.layer_stats); every
        # loaded model carries it, whichever command loaded it.
        config = getattr(self.model, "config", None)
        if config is not None:
            config._knowgic_revision = self.revision
            config._knowgic_model_id = self.model_id
