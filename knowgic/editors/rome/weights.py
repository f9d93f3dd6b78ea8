"""Reading and writing the edited matrix W in the papers' orientation, W: (d_out, d_in), so that v = W k.

``nn.Linear`` stores (d_out, d_in); GPT-2's ``Conv1D`` stores (d_in, d_out) (``ArchSpec.weight_transposed``).
Updates are computed in float64; the new weight W + ΔW is formed in float64 and rounded once, to the
parameter's dtype, when written.

In bfloat16 or float16 that rounding loses part of a small update (bf16 keeps 8 significant bits, so an
entry of ΔW below about 2⁻⁹ of its weight entry can vanish). :func:`write_weight` measures the loss on the
edit's keys K when the dtype is not float32/float64: with V* = W_target K the outputs the edit asked for,

    relative_residual = ‖W' K − V*‖ / ‖V*‖,   update_lost = ‖W' K − V*‖ / ‖(W_target − W) K‖,

W' the weight as written (Frobenius norms over the keys). The second says what share of the edit's
change of the outputs the rounding took away.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from knowgic.editors.arch import ArchSpec, get_parameter, num_layers
from knowgic.errors import KnowgicError

log = logging.getLogger(__name__)

FULL_PRECISION = (torch.float32, torch.float64)


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
    return name, read_named_weight(model, arch, name)


def read_named_weight(model: torch.nn.Module, arch: ArchSpec, name: str) -> torch.Tensor:
    """The parameter ``name`` as W (d_out, d_in), a float64 copy."""
    w = get_parameter(model, name).detach().to(torch.float64)
    return (w.T if arch.weight_transposed else w).clone()


@dataclass(frozen=True)
class WriteReport:
    """How much of an edit survived the cast to a low-precision weight dtype (see the module docstring)."""

    weight: str
    dtype: str
    relative_residual: float  # ‖W'K − V*‖ / ‖V*‖
    update_lost: float  # ‖W'K − V*‖ / ‖(W_target − W)K‖

    def info(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "dtype": self.dtype,
            "relative_residual": self.relative_residual,
            "update_lost": self.update_lost,
        }


def write_weight(
    model: torch.nn.Module,
    arch: ArchSpec,
    name: str,
    target: torch.Tensor,
    keys: torch.Tensor | None = None,
) -> WriteReport | None:
    """W ← ``target`` (given as (d_out, d_in)), rounded once to the parameter's dtype.

    ``keys`` (d_in,) or (d_in, n): the edit's keys; when given and the parameter is stored in a dtype other
    than float32/float64, the rounding's effect on them is measured and returned (else None).
    """
    param = get_parameter(model, name)
    new = target.T if arch.weight_transposed else target
    if tuple(new.shape) != tuple(param.shape):
        raise ValueError(f"weight of shape {tuple(target.shape)} does not fit {name} {tuple(param.shape)}")
    measure = keys is not None and param.dtype not in FULL_PRECISION
    before = read_named_weight(model, arch, name) if measure else None
    with torch.no_grad():
        param.copy_(new.to(device=param.device, dtype=param.dtype))
    if not measure:
        return None
    assert before is not None and keys is not None
    k = keys.to(device=before.device, dtype=torch.float64)
    k = k.unsqueeze(1) if k.dim() == 1 else k
    t = target.to(device=before.device, dtype=torch.float64)
    wanted = t @ k
    residual = float(torch.linalg.norm(read_named_weight(model, arch, name) @ k - wanted))
    change = float(torch.linalg.norm(wanted - before @ k))
    return WriteReport(
        weight=name,
        dtype=str(param.dtype).removeprefix("torch."),
        relative_residual=residual / max(float(torch.linalg.norm(wanted)), 1e-300),
        update_lost=residual / change if change > 0 else 0.0,
    )


def add_to_weight(
    model: torch.nn.Module,
    arch: ArchSpec,
    name: str,
    delta: torch.Tensor,
    keys: torch.Tensor | None = None,
) -> WriteReport | None:
    """W ← W + ΔW with ΔW given as (d_out, d_in); the sum is formed in float64 and rounded once.

    ``keys``: as in :func:`write_weight` (the rounding is measured on them for low-precision weights).
    """
    w = read_named_weight(model, arch, name)
    if tuple(delta.shape) != tuple(w.shape):
        raise ValueError(f"update of shape {tuple(delta.shape)} does not fit {name} {tuple(w.shape)}")
    return write_weight(model, arch, name, w + delta.to(device=w.device, dtype=torch.float64), keys)


class PrecisionWarning:
    """Logs the rounding loss of low-precision writes once per editor (one editor serves one run)."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.warned = False

    def report(self, report: WriteReport | None) -> dict[str, Any] | None:
        """The report as an info dict, warning the first time one is seen."""
        if report is None:
            return None
        if not self.warned:
            self.warned = True
            log.warning(
                "%s: %s is stored in %s; after writing the edit, ||W'k* - v*|| / ||v*|| = %.3g on the edit's "
                "keys (%.3g%% of the intended change of the outputs lost to rounding). Load the model in "
                "float32 for exact edits; every edit's figure is in its info 'write_precision'.",
                self.method,
                report.weight,
                report.dtype,
                report.relative_residual,
                100 * report.update_lost,
            )
        return report.info()
