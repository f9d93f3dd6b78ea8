"""The identity editor: applies nothing. Its scores are the unedited model's, so IFR = 1, Preservation = 1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from knowgic.editors.base import EditHandle, Editor
from knowgic.records import EditRequest


class NoEdit(Editor):
    name = "none"

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        return EditHandle(info={"edited_requests": len(requests)})
