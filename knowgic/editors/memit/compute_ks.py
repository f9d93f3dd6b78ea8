"""MEMIT's keys at layer l (Meng et al. 2023, Eq. 19): k_i^l = 1/P Σ_j k^l(x_j + s_i).

The input of layer l's MLP output projection at the subject's last token, averaged over the P prefixed
prompts (the bare prompt is template 0), read from the model as it is now, i.e. after the updates of the
layers below l (Algorithm 1 recomputes keys layer by layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from knowgic.editors.arch import arch_for
from knowgic.editors.repr_tools import reps_at_tokens
from knowgic.records import EditRequest


def compute_ks(
    model: torch.nn.Module,
    tokenizer: Any,
    requests: Sequence[EditRequest],
    layer: int,
    templates: Sequence[str],
    fact_token: str = "subject_last",
) -> torch.Tensor:
    """K: (d_in, n) float64, column i = request i's key averaged over ``templates``."""
    module = arch_for(model).mlp_out.format(layer)
    prompt_templates = [t.replace("{}", r.prompt, 1) for r in requests for t in templates]
    subjects = [r.subject for r in requests for _ in templates]
    keys = reps_at_tokens(
        model, tokenizer, prompt_templates, subjects, module, fact_token=fact_token, track="in"
    ).to(torch.float64)
    return keys.reshape(len(requests), len(templates), -1).mean(dim=1).T.contiguous()
