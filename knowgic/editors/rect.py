"""RECT: relative-change regularisation of the update (Gu et al., "Model Editing Harms General Abilities of
Large Language Models: Regularization to the Rescue", EMNLP 2024, Sec. 5), applied on top of MEMIT.

Notation of the paper: an edit changes W by δ. RECT ranks the entries by their relative change
|δ_ij| / |w_ij|, keeps the top-k% of them (the ones that carry the edit) and sets the others to zero, so the
update stays small relative to the weights it touches. The paper's default keeps k = 20%.

Conventions here, which the paper leaves open: the number of kept entries is round(k · N) for N entries
(half up); an entry with w_ij = 0 and δ_ij ≠ 0 has an infinite relative change (kept first), one with
w_ij = δ_ij = 0 has none; ties at the cut are broken by the lower row-major index of the (d_out, d_in)
matrix, so the mask is deterministic.
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


def relative_change(delta: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """|δ_ij| / |w_ij| in float64, with x/0 = inf for x > 0 and 0/0 = 0."""
    if delta.shape != weight.shape:
        raise ValueError(f"delta {tuple(delta.shape)} and weight {tuple(weight.shape)} differ in shape")
    num = delta.to(torch.float64).abs()
    den = weight.to(device=delta.device, dtype=torch.float64).abs()
    rel = num / den
    return torch.where(num == 0, torch.zeros_like(rel), rel)


def kept_count(numel: int, keep_fraction: float) -> int:
    """round(k · N), half up: the number of entries RECT keeps."""
    if not 0 <= keep_fraction <= 1:
        raise ValueError(f"keep_fraction must be in [0, 1], got {keep_fraction!r}")
    return min(numel, math.floor(keep_fraction * numel + 0.5))


def rect_mask(delta: torch.Tensor, weight: torch.Tensor, keep_fraction: float) -> torch.Tensor:
    """Boolean mask of the kept entries: exactly :func:`kept_count` of them, the largest relative changes."""
    rel = relative_change(delta, weight).reshape(-1)
    n = rel.numel()
    k = kept_count(n, keep_fraction)
    mask = torch.zeros(n, dtype=torch.bool, device=rel.device)
    if k == 0:
        return mask.reshape(delta.shape)
    # The k-th largest value is the (n - k + 1)-th smallest; everything above it is kept, and the cut
    # value itself fills the remaining places in index order.
    cut = torch.kthvalue(rel, n - k + 1).values
    above = rel > cut
    need = k - int(above.sum())
    at_cut = rel == cut
    mask = above | (at_cut & (torch.cumsum(at_cut.to(torch.int64), 0) <= need))
    return mask.reshape(delta.shape)


def rect_sparsify(delta: torch.Tensor, weight: torch.Tensor, keep_fraction: float) -> torch.Tensor:
    """δ with all but the top-k% entries by relative change set to zero (same dtype as ``delta``)."""
    mask = rect_mask(delta, weight, keep_fraction)
    return torch.where(mask, delta, torch.zeros_like(delta))


# ---------------------------------------------------------------------------------------------- editor


@dataclass(frozen=True)
class RECTHyperParams(MEMITHyperParams):
    """``rect_keep_fraction``: k, the share of ΔW's entries kept (the paper's top-20%: 0.2)."""

    rect_keep_fraction: float = 0.2

    method: ClassVar[str] = "rect"

    @classmethod
    def _extra_spec(cls) -> dict[str, type | tuple[type, ...]]:
        return {**super()._extra_spec(), "rect_keep_fraction": (int, float)}

    def __post_init__(self) -> None:
        super().__post_init__()
        k = float(self.rect_keep_fraction)
        if not 0 < k <= 1:
            raise KnowgicError(f"{self.method} hparams: 'rect_keep_fraction' must be in (0, 1], got {k!r}")
        object.__setattr__(self, "rect_keep_fraction", k)


class RECTEditor(MEMITEditor):
    """MEMIT whose per-layer update keeps only its top-k% entries by relative change (stateless)."""

    name: ClassVar[str] = "rect"
    hparams_class: ClassVar[type[RECTHyperParams]] = RECTHyperParams
    config: RECTHyperParams

    def __init__(self, hparams: Mapping[str, Any] | None = None, *, progress: bool = True) -> None:
        super().__init__(dict(hparams) if hparams is not None else None, progress=progress)
        self._layer_info: dict[str, dict[str, Any]] = {}

    def postprocess_delta(self, system: LayerSystem, delta: torch.Tensor) -> torch.Tensor:
        """δ with all but the top-k% entries by |δ_ij| / |w_ij| set to zero (w = the current W)."""
        mask = rect_mask(delta, system.w0, self.config.rect_keep_fraction)
        sparse = torch.where(mask, delta, torch.zeros_like(delta))
        norm = float(torch.linalg.norm(delta))
        self._layer_info[system.weight_name] = {
            "layer": system.layer,
            "kept": int(mask.sum()),
            "entries": delta.numel(),
            "norm_kept": float(torch.linalg.norm(sparse)) / norm if norm > 0 else 1.0,
        }
        return sparse

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        self._layer_info = {}
        handle = super().apply(model, tokenizer, requests)
        handle.info["rect"] = {
            "keep_fraction": self.config.rect_keep_fraction,
            "layers": [dict(v) for v in self._layer_info.values()],
        }
        return handle
