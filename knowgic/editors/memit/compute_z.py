"""MEMIT's target residuals z_i (Meng et al. 2023, Eq. 16).

z_i = h_i^L + δ_i, with h_i^L the output of the last edited layer L (the residual stream) at the subject's
last token of the bare rewrite prompt, and δ_i the vector that, added to h^L at the subject's last token of
every prefixed prompt x_j + p(s_i, r_i), maximises the probability of o_i. The optimisation is ROME's
(:func:`knowgic.editors.rome.compute_v.optimize_delta`, with the essence KL term, the weight decay and
the clamp ‖δ‖ ≤ ``clamp_norm_factor``·‖h^L‖), placed at the layer's output instead of the MLP's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from knowgic.editors.arch import arch_for
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
    module = arch_for(model).layer(z_layer)
    result = optimize_delta(model, tokenizer, request, module, templates, objective, progress=progress)
    z = (result.init + result.delta).to(torch.float64)
    return z, result
