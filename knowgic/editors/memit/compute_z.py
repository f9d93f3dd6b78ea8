"""MEMIT's target residuals z_i (Meng et al. 2023, Eq. 16).

z_i = h_i^L + δ_i, with h_i^L the output of the last edited layer L (the residual stream) at the subject's
last token of the bare rewrite prompt, and δ_i the vector that, added to h^L at the subject's last token of
every prefixed prompt x_j + p(s_i, r_i), maximises the probability of o_i. The optimisation is ROME's
(:func:`knowgic.editors.rome.compute_v.optimize_delta`, with the essence KL term, the weight decay and
the clamp ‖δ‖ ≤ ``clamp_norm_factor``·‖h^L‖), placed at the layer's output instead of the MLP's.

Families whose MLP output joins the residual through a norm (Gemma 3's ``post_feedforward_layernorm``) can
only add to h^L what that norm lets through: RMSNorm(m) = g ⊙ m / rms(m) has a fixed scale and gains g that
span orders of magnitude, so most of a δ found freely in the residual stream cannot be written by any W
(see post_norm.py). There δ is optimised where ROME optimises v*, on the output m^L of layer L's projection
before the norm, and z_i is the residual h_i^L that m^L + δ_i produces: the same objective, restricted to
residual changes the edited weights can make.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from knowgic.editors.arch import arch_for
from knowgic.editors.nethook import Trace, model_device
from knowgic.editors.repr_tools import encode, make_batch, token_index
from knowgic.editors.rome.compute_v import DeltaObjective, DeltaResult, optimize_delta
from knowgic.records import EditRequest


def compute_z(
    model: torch.nn.Module,
    tokenizer: Any,
    request: EditRequest,
    z_layer: int,
    templates: Sequence[str],
    objective: DeltaObjective,
    *,
    progress: bool = True,
) -> tuple[torch.Tensor, DeltaResult]:
    """(z_i (d,) float64 on the model's device, the optimisation's record)."""
    arch = arch_for(model)
    layer_module = arch.layer(z_layer)
    if arch.mlp_post_norm is None:
        result = optimize_delta(
            model, tokenizer, request, layer_module, templates, objective, progress=progress
        )
        return (result.init + result.delta).to(torch.float64), result
    mlp_module = arch.mlp_out.format(z_layer)
    result = optimize_delta(model, tokenizer, request, mlp_module, templates, objective, progress=progress)
    return residual_with_delta(
        model, tokenizer, request, mlp_module, layer_module, result.delta, objective
    ), result


def residual_with_delta(
    model: torch.nn.Module,
    tokenizer: Any,
    request: EditRequest,
    delta_module: str,
    layer_module: str,
    delta: torch.Tensor,
    objective: DeltaObjective,
) -> torch.Tensor:
    """The output of ``layer_module`` at the bare prompt's lookup token with δ added to ``delta_module``'s."""
    index = token_index(tokenizer, request.prompt, request.subject, objective.fact_token)
    ids = encode(tokenizer, request.prompt.replace("{}", request.subject, 1))
    batch = make_batch(tokenizer, [ids]).to(model_device(model))

    def add_delta(_name: str, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[0, index] = out[0, index] + delta.to(out.dtype)
        return out

    with (
        torch.no_grad(),
        Trace(
            model,
            [delta_module, layer_module],
            edit_output=add_delta,
            edit_modules=[delta_module],
            stop=True,
        ) as tr,
    ):
        model(**batch.model_inputs())
    out = tr[layer_module].output
    assert out is not None
    return out[0, index].detach().to(torch.float64)
