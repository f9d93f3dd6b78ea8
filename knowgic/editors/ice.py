"""In-context editing (ICE), the RippleEdits baseline (Cohen et al. 2024, §5).

RippleEdits conditions generation on the new fact with the prefix "Imagine that <o*> would have been <Pr>",
where Pr is a hand-written proposition of the relation. KnowGIC's edit requests carry a cloze prompt
instead of a proposition, so the fact is stated in its cloze form: "Imagine that Harry Potter studied at
Ilvermorny School of Witchcraft and Wizardry." (template in hparams). No weight changes; the scorer puts
the prefix before every query of the edited model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from knowgic.editors.base import EditHandle, Editor
from knowgic.records import EditRequest

DEFAULT_TEMPLATE = "Imagine that {fact}. "


class InContextEditor(Editor):
    name = "ice"

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        template = self.hparams.get("template", DEFAULT_TEMPLATE)
        prefix = "".join(
            template.format(fact=f"{request.rewrite_text} {request.target_new}") for request in requests
        )
        return EditHandle(prompt_prefix=prefix, info={"prefix": prefix})
