"""Typed hparams of AlphaEdit: MEMIT's keys plus the null-space threshold and α."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from knowgic.editors.memit.hparams import MEMITHyperParams
from knowgic.errors import KnowgicError


@dataclass(frozen=True)
class AlphaEditHyperParams(MEMITHyperParams):
    """``nullspace_threshold``: eigenvalues of C = E[k kᵀ] below it span the null space (reference
    ``nullspace_threshold``, 2e-2 for every model it ships). ``l2_regularization``: α, the weight of ‖ΔP‖²
    (reference ``L2``, 10 for every model it ships). ``mom2_update_weight`` is not used by the solve."""

    nullspace_threshold: float = 2e-2
    l2_regularization: float = 10.0

    method: ClassVar[str] = "alphaedit"

    @classmethod
    def _extra_spec(cls) -> dict[str, type | tuple[type, ...]]:
        return {
            **super()._extra_spec(),
            "nullspace_threshold": (int, float),
            "l2_regularization": (int, float),
        }

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("nullspace_threshold", "l2_regularization"):
            value = float(getattr(self, key))
            if not value > 0:
                raise KnowgicError(f"{self.method} hparams: {key!r} must be > 0, got {value!r}")
            object.__setattr__(self, key, value)
