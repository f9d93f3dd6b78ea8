"""Reading and writing the edited matrix W in the papers' orientation, W: (d_out, d_in), so that v = W k.

``nn.Linear`` stores (d_out, d_in); GPT-2's ``Conv1D`` stores (d_in, d_out) (``ArchSpec.weight_transposed``).
Updates are computed in float64 and cast to the parameter's dtype only when written.
"""

from __future__ import annotations

import torch

from knowgic.editors.arch import ArchSpec, get_parameter, num_layers
from knowgic.errors import KnowgicError


def resolve_layers(model: torch.nn.Module, layers: tuple[int, ...], what: str) -> tuple[int, ...]:
    """Layer indices in [0, n_layers); negative ones count from the last layer. Order is kept."""
    n = num_layers(model)
    out = []
    for layer in layers:
        idx = layer + n if layer < 0 else layer
        if not 0 <= idx < n:
            raise KnowgicError(f"{what}: layer {layer} is out of range for a model with {n} layers")
        out.append(idx)
    if len(set(out)) != len(out):
        raise KnowgicError(f"{what}: layers {list(layers)} name the same layer twice")
    return tuple(out)


def read_weight(model: torch.nn.Module, arch: ArchSpec, layer: int) -> tuple[str, torch.Tensor]:
    """(parameter name, W as (d_out, d_in) float64 copy)."""
    name = arch.mlp_out_weight(layer)
    param = get_parameter(model, name)
    w = param.detach().to(torch.float64)
    return name, (w.T if arch.weight_transposed else w).clone()


def add_to_weight(model: torch.nn.Module, arch: ArchSpec, name: str, delta: torch.Tensor) -> None:
    """W += ΔW, with ΔW given as (d_out, d_in); transposed for Conv1D, cast to the parameter's dtype."""
    param = get_parameter(model, name)
    upd = delta.T if arch.weight_transposed else delta
    if tuple(upd.shape) != tuple(param.shape):
        raise ValueError(f"update of shape {tuple(delta.shape)} does not fit {name} {tuple(param.shape)}")
    with torch.no_grad():
        param.add_(upd.to(device=param.device, dtype=param.dtype))
