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
