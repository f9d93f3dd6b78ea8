"""PRUNE: perturbation restraint on the accumulated edit (Ma et al., "Perturbation-Restrained Sequential
Model Editing", ICLR 2025, Sec. 4), applied on top of MEMIT.

Notation of the paper: W (W₀ below) is the edited matrix before any edit, with singular values σ_i; after n
sequential edits the model holds W_n = W + ΔW_n, and σ̂_i are the singular values of ΔW_n. The paper bounds
the perturbation of the stored associations by the condition number of the edited matrix and shows that it
grows with the large singular values of ΔW_n. PRUNE keeps the singular vectors of ΔW_n and maps every σ̂_i
above max_i σ_i by the restraint function of Sec. 4,

    F(σ̂_i) = log_α(σ̂_i) − log_α(max_i σ_i) + max_i σ_i   if σ̂_i > max_i σ_i,   F(σ̂_i) = σ̂_i otherwise,

    ΔW_n ← Û diag(F(σ̂)) V̂ᵀ.

F is continuous at max σ (F = id there) and grows only logarithmically beyond it, so every restrained value
satisfies F(σ̂) ≤ max σ + log_α(σ̂_max / max σ).

What is restrained is the change the model actually holds. Edit n is a complete MEMIT edit (all its layers,
each layer's residual computed on the model as the lower layers' unrestrained updates left it) applied to
W_{n−1}, which already holds the restrained earlier edits; only then, once per edit, each edited matrix is set
to W₀ + F(W_{n−1} + Δ_n − W₀):

    ΔW_1 = F(Δ_1),   ΔW_n = F(ΔW_{n−1} + Δ_n),

as the reference implementation does (mjy1111/PRUNE, ``reduce_weights``: it reads W_current − W₀ from the
model after each edit). W₀ (the weight
at the first edit after :meth:`PRUNEEditor.reset`) and max σ(W₀) are the editor's only state; in independent
mode (one edit per reset) PRUNE acts on that one edit's update, F(Δ_1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from knowgic.editors.arch import arch_for, get_parameter
from knowgic.editors.base import EditHandle
from knowgic.editors.memit.hparams import MEMITHyperParams
from knowgic.editors.memit.memit_main import LayerSystem, MEMITEditor
from knowgic.editors.rome.weights import read_named_weight, resolve_layers, write_weight
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


@dataclass(frozen=True)
class BaseWeight:
    """W₀ of one edited matrix (a copy of the parameter, in its own dtype and layout) and max σ(W₀)."""

    param: torch.Tensor
    sigma_max: float


class PRUNEEditor(MEMITEditor):
    """MEMIT, then PRUNE's restraint of each edited matrix's accumulated change; see the module docstring."""

    name: ClassVar[str] = "prune"
    hparams_class: ClassVar[type[PRUNEHyperParams]] = PRUNEHyperParams
    config: PRUNEHyperParams

    def __init__(self, hparams: Mapping[str, Any] | None = None, *, progress: bool = True) -> None:
        super().__init__(dict(hparams) if hparams is not None else None, progress=progress)
        self._base: dict[str, BaseWeight] = {}  # W₀ per weight name since the last reset (edit state)
        # W₀ and max σ(W₀) of weights seen before, so that independent edits (a reset each) do not recompute
        # the spectral norm of the same pristine matrix; not edit state.
        self._memo: dict[str, BaseWeight] = {}
        self._keys: dict[str, torch.Tensor] = {}
        self._epoch = 0  # bumped by reset(): a handle from before a reset leaves the new state alone
        self._live = 0  # applied and not yet restored edits in this epoch

    def reset(self) -> None:
        super().reset()
        self._base.clear()
        self._epoch += 1
        self._live = 0

    def base_weight(self, name: str) -> BaseWeight | None:
        """W₀ and max σ(W₀) of ``name`` in the current sequence of edits (None before its first edit)."""
        return self._base.get(name)

    def postprocess_delta(self, system: LayerSystem, delta: torch.Tensor) -> torch.Tensor:
        """MEMIT's ΔW unchanged (PRUNE restrains after the whole edit); keeps the layer's keys K, on which
        the rounding of the restrained write is measured for low-precision weights."""
        self._keys[system.weight_name] = system.keys
        return delta

    def _base_for(self, model: torch.nn.Module, name: str) -> BaseWeight:
        param = get_parameter(model, name).detach()
        memo = self._memo.get(name)
        if memo is None or memo.param.shape != param.shape or not torch.equal(memo.param, param):
            memo = BaseWeight(param=param.clone(), sigma_max=largest_singular_value(param))
            self._memo[name] = memo
        return memo

    def restrain_weight(self, model: torch.nn.Module, name: str, base: BaseWeight) -> dict[str, Any]:
        """W ← W₀ + F(W − W₀) for one matrix (float64, rounded once to the parameter's dtype)."""
        arch = arch_for(model)
        w0 = base.param.to(torch.float64)
        w0 = w0.T if arch.weight_transposed else w0
        change = read_named_weight(model, arch, name) - w0
        out = restrain(change, base.sigma_max, self.config.prune_log_base)
        info: dict[str, Any] = {
            "weight": name,
            "sigma_max_w0": base.sigma_max,
            "sigma_max_delta": float(out.singular_values[0]) if out.singular_values.numel() else 0.0,
            "sigma_max_restrained": float(out.restrained_values[0]) if out.restrained_values.numel() else 0.0,
            "n_restrained": out.n_restrained,
        }
        if out.n_restrained:  # else the model already holds W₀ + F(W − W₀) = W
            written = write_weight(model, arch, name, w0 + out.delta, self._keys.get(name))
            precision = self.precision.report(written)
            if precision is not None:
                info["write_precision"] = precision
        return info

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        requests = list(requests)
        if not requests:
            return super().apply(model, tokenizer, requests)
        arch = arch_for(model)
        layers = resolve_layers(model, self.config.layers, f"{self.name} hparams")
        names = [arch.mlp_out_weight(layer) for layer in layers]
        bases = {n: self._base.get(n) or self._base_for(model, n) for n in names}  # W₀ before MEMIT writes
        self._keys = {}
        handle = super().apply(model, tokenizer, requests)  # W_{n−1} + Δ_n, snapshot of W_{n−1} kept
        try:
            layer_info = [
                {"layer": layer, **self.restrain_weight(model, n, bases[n])}
                for layer, n in zip(layers, names, strict=True)
            ]
        except BaseException:
            handle.restore()
            raise
        finally:
            self._keys = {}
        self._base.update(bases)
        self._live += 1
        epoch = self._epoch
        handle.info["prune"] = {"log_base": self.config.prune_log_base, "layers": layer_info}
        restore_weights = handle.restore_fn

        def restore() -> None:
            if restore_weights is not None:
                restore_weights()  # back to W_{n−1}, bitwise
            if epoch != self._epoch:
                return
            self._live -= 1
            if self._live == 0:
                self._base.clear()  # the model is back at W₀: the next edit starts a new sequence

        handle.restore_fn = restore
        return handle
