"""The key k* and the direction u = C⁻¹k* of ROME's rank-one update (Meng et al. 2022, §3 and Eq. 2).

k* = 1/N Σ_j k(x_j + s): the input of the edited projection W (the MLP's hidden activation) at the subject's
last token, averaged over the prefixed prompts x_j + p (templates from
:mod:`knowgic.editors.rome.context_templates`, the bare prompt included). u = C⁻¹k* with C = E[k kᵀ] from
:mod:`knowgic.editors.layer_stats`; it is obtained with ``torch.linalg.solve`` in float64, never with an
explicit inverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from knowgic.editors.repr_tools import reps_at_tokens
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest


def compute_key(
    model: torch.nn.Module,
    tokenizer: Any,
    request: EditRequest,
    module_name: str,
    templates: Sequence[str],
    fact_token: str = "subject_last",
) -> torch.Tensor:
    """k* (d_in,) in float64: mean input of ``module_name`` at the lookup token over the templates."""
    prompt_templates = [t.replace("{}", request.prompt, 1) for t in templates]
    keys = reps_at_tokens(
        model,
        tokenizer,
        prompt_templates,
        [request.subject] * len(prompt_templates),
        module_name,
        fact_token=fact_token,
        track="in",
    )
    return keys.to(torch.float64).mean(dim=0)


def compute_u(k_star: torch.Tensor, cov: torch.Tensor | None) -> torch.Tensor:
    """u = C⁻¹k* (float64); with ``cov=None`` (``mom2_adjustment: false``) C = I and u = k*."""
    k = k_star.to(torch.float64)
    if cov is None:
        return k
    try:
        return torch.linalg.solve(cov.to(device=k.device, dtype=torch.float64), k)
    except torch.linalg.LinAlgError as exc:
        raise KnowgicError(
            f"the key second moment C is singular ({exc}); collect it from more text (mom2_n_samples, "
            "mom2_dataset) or set mom2_adjustment: false"
        ) from None
