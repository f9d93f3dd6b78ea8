"""PRUNE: perturbation restraint on the accumulated edit (Ma et al., "Perturbation-Restrained Sequential
Model Editing", ICLR 2025, Sec. 4), applied on top of MEMIT.

Notation of the paper: W is the edited matrix before any edit, with singular values σ_i; after n sequential
edits the model holds W + ΔW_n, ΔW_n = Σ_j Δ_j, whose singular values are σ̂_i. The paper bounds the
perturbation of the stored associations by the condition number of the edited matrix and shows that it grows
with the large singular values of ΔW_n. PRUNE keeps every σ̂_i ≤ max_i σ_i and replaces each larger one by

    F(σ̂_i) = log_α(σ̂_i) − log_α(max_i σ_i) + max_i σ_i,

leaving the singular vectors alone: ΔW_n ← Û diag(F(σ̂)) V̂ᵀ. F is continuous at max σ (F = id there) and
grows only logarithmically beyond it, so the restrained values satisfy
F(σ̂) ≤ max σ + log_α(σ̂_max / max σ).

State: the restraint acts on the total ΔW since :meth:`PRUNEEditor.reset`, as in the reference code (which
subtracts the weights before the first edit). The editor remembers W₀ (the weight at the first edit after
the reset), σ_max(W₀) and Σ_j Δ_j (the sum of MEMIT's raw updates), and writes W₀ + F(Σ_j Δ_j) after every
edit. In independent mode (one edit per reset) it acts on that one edit's update.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from knowgic.editors.base import EditHandle
from knowgic.editors.memit.hparams import MEMITHyperParams
from knowgic.editors.memit.memit_main import LayerSystem, MEMITEditor
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest


def log_restraint(singular_values: torch.Tensor, sigma_max: float, base: float) -> torch.Tensor:
    """F(σ̂) = log_α(σ̂) − log_α(σ_max) + σ_max for σ̂ > σ_max, σ̂ otherwise (α = ``base`` > 1)."""
    if not base > 1:
        raise ValueError(f"the restraint's log base must be > 1, got {base!r}")
    if not sigma_max > 0:
        raise ValueError(f"sigma_max must be > 0, got {sigma_max!r}")
    s = singular_values.to(torch.float64)
    log_base = math.log(base)
    restrained = (torch.log(s.clamp_min(sigma_max)) - math.log(sigma_max)) / log_base + sigma_max
    return torch.where(s > sigma_max, restrained, s)


def largest_singular_value(weight: torch.Tensor) -> float:
    """max σ(W) (the spectral norm), in float64."""
    return float(torch.linalg.matrix_norm(weight.to(torch.float64), ord=2))


@dataclass(frozen=True)
class Restraint:
    """The restrained update and its spectrum before and after (descending, float64)."""

    delta: torch.Tensor
    singular_values: torch.Tensor
    restrained_values: torch.Tensor
    sigma_max: float
    n_restrained: int


def restrain(delta: torch.Tensor, sigma_max: float, base: float) -> Restraint:
    """ΔW ← Û diag(F(σ̂)) V̂ᵀ with F = :func:`log_restraint`; float64.

    Written as ΔW − Û_r diag(σ̂_r − F(σ̂_r)) V̂_rᵀ over the restrained directions r only, so that the part of
    ΔW below the bound passes through without the rounding of a full reconstruction.
    """
    d = delta.to(torch.float64)
    u, s, vh = torch.linalg.svd(d, full_matrices=False)
    f = log_restraint(s, sigma_max, base)
    over = s > sigma_max
    n = int(over.sum())
    if n:
        shrink = (s[over] - f[over]).to(d.dtype)
        d = d - (u[:, over] * shrink) @ vh[over]
    return Restraint(delta=d, singular_values=s, restrained_values=f, sigma_max=sigma_max, n_restrained=n)


# ---------------------------------------------------------------------------------------------- editor


@dataclass(frozen=True)
class PRUNEHyperParams(MEMITHyperParams):
    """``prune_log_base``: α of F (> 1). The reference code offers α ∈ {e, 1.2, 1.5, 2}
    (``--reduce_type log|log1_2|log1_5|log2``); its README's PRUNE command uses ``log``, α = e."""

    prune_log_base: float = math.e

    method: ClassVar[str] = "prune"

    @classmethod
    def _extra_spec(cls) -> dict[str, type | tuple[type, ...]]:
        return {**super()._extra_spec(), "prune_log_base": (int, float)}

    def __post_init__(self) -> None:
        super().__post_init__()
        base = float(self.prune_log_base)
        if not base > 1:
            raise KnowgicError(f"{self.method} hparams: 'prune_log_base' must be > 1, got {base!r}")
        object.__setattr__(self, "prune_log_base", base)


@dataclass
class _Accumulated:
    """Per edited weight since the last reset: W₀, max σ(W₀) and Σ_j Δ_j (MEMIT's raw updates)."""

    w0: torch.Tensor
    sigma_max: float
    total: torch.Tensor


class PRUNEEditor(MEMITEditor):
    """MEMIT whose accumulated update is restrained by PRUNE's log rule; see the module docstring."""

    name: ClassVar[str] = "prune"
    hparams_class: ClassVar[type[PRUNEHyperParams]] = PRUNEHyperParams
    config: PRUNEHyperParams

    def __init__(self, hparams: Mapping[str, Any] | None = None, *, progress: bool = True) -> None:
        super().__init__(dict(hparams) if hparams is not None else None, progress=progress)
        self._acc: dict[str, _Accumulated] = {}
        self._pending: dict[str, torch.Tensor] = {}
        self._layer_info: dict[str, dict[str, Any]] = {}
        self._epoch = 0  # bumped by reset(): a handle from before a reset leaves the new state alone
        self._live = 0  # applied and not yet restored edits in this epoch

    @property
    def accumulated(self) -> dict[str, torch.Tensor]:
        """Σ_j Δ_j per weight name since the last reset (MEMIT's raw updates, before the restraint)."""
        return {name: acc.total.clone() for name, acc in self._acc.items()}

    def reset(self) -> None:
        super().reset()
        self._acc.clear()
        self._pending.clear()
        self._epoch += 1
        self._live = 0

    def postprocess_delta(self, system: LayerSystem, delta: torch.Tensor) -> torch.Tensor:
        """The increment that turns the current W into W₀ + F(Σ_j Δ_j), this edit's Δ included."""
        name = system.weight_name
        acc = self._acc.get(name)
        if acc is None:
            w0 = system.w0.detach().to(torch.float64).clone()
            acc = _Accumulated(w0=w0, sigma_max=largest_singular_value(w0), total=torch.zeros_like(w0))
            self._acc[name] = acc
        raw = delta.to(device=acc.w0.device, dtype=torch.float64)
        pending = self._pending.get(name)
        pending = raw if pending is None else pending + raw
        self._pending[name] = pending
        out = restrain(acc.total + pending, acc.sigma_max, self.config.prune_log_base)
        self._layer_info[name] = {
            "layer": system.layer,
            "sigma_max_w0": acc.sigma_max,
            "sigma_max_delta": float(out.singular_values[0]),
            "sigma_max_restrained": float(out.restrained_values[0]),
            "n_restrained": out.n_restrained,
        }
        current = system.w0.to(device=acc.w0.device, dtype=torch.float64)
        return (acc.w0 + out.delta - current).to(delta.device)

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        self._pending = {}
        self._layer_info = {}
        try:
            handle = super().apply(model, tokenizer, requests)
        finally:
            committed, self._pending = self._pending, {}
        for name, raw in committed.items():
            self._acc[name].total = self._acc[name].total + raw
        self._live += 1
        epoch = self._epoch
        handle.info["prune"] = {
            "log_base": self.config.prune_log_base,
            "layers": [dict(v) for v in self._layer_info.values()],
        }
        restore_weights = handle.restore_fn

        def restore() -> None:
            if restore_weights is not None:
                restore_weights()
            if epoch != self._epoch:
                return
            self._live -= 1
            if self._live == 0:
                self._acc.clear()  # the model is back at W₀: start afresh
                return
            for name, raw in committed.items():
                if name in self._acc:
                    self._acc[name].total = self._acc[name].total - raw

        handle.restore_fn = restore
        return handle
