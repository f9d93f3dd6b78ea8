"""Typed hparams of MEMIT: ROME's keys (see :class:`knowgic.editors.rome.hparams.LocateEditHParams`) plus
``mom2_update_weight`` λ, with MEMIT's reference defaults (clamp 0.75, prefixes from five seed words)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from knowgic.editors.rome.hparams import LocateEditHParams

MEMIT_SEED_PROMPTS: tuple[str, ...] = ("The", "Therefore", "Because", "I", "You")


@dataclass(frozen=True)
class MEMITHyperParams(LocateEditHParams):
    """``layers``: the critical path l ∈ R, edited from the lowest up; z is optimised at the last one, L.

    ``mom2_update_weight``: λ in ΔW = R Kᵀ (λC + K Kᵀ)⁻¹ (MEMIT Eq. 14 with C₀ = λ·E[k kᵀ]).
    """

    clamp_norm_factor: float = 0.75
    mom2_update_weight: float = 15000.0
    context_template_length_params: tuple[tuple[int, int], ...] = ((10, 5),)
    context_template_prompts: tuple[str, ...] = MEMIT_SEED_PROMPTS

    method: ClassVar[str] = "memit"

    @classmethod
    def _extra_spec(cls) -> dict[str, type | tuple[type, ...]]:
        return {"mom2_update_weight": (int, float)}

    def __post_init__(self) -> None:
        object.__setattr__(self, "mom2_update_weight", float(self.mom2_update_weight))
