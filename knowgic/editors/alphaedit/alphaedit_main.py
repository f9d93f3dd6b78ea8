"""AlphaEdit (Fang et al., "AlphaEdit: Null-Space Constrained Knowledge Editing for Language Models",
ICLR 2025) on top of :class:`~knowgic.editors.memit.memit_main.MEMITEditor`.

Everything MEMIT does to find the keys K₁ and the residuals R of the requested facts at each edited layer
stays as it is; only the per-layer solve changes (Sec. 3.2):

    MEMIT:      Δ = R K₁ᵀ (λ C + K₁ K₁ᵀ)⁻¹
    AlphaEdit:  Δ = R K₁ᵀ P (K_p K_pᵀ P + K₁ K₁ᵀ P + α I)⁻¹

with P the projector onto the null space of the preserved keys, built from the same second moment C
(:mod:`~knowgic.editors.alphaedit.projection`), α = ``l2_regularization`` and K_p the keys of the facts
edited earlier since the last :meth:`AlphaEditEditor.reset` (sequential editing). λ = ``mom2_update_weight``
plays no part in AlphaEdit's solve.

State: K_p K_pᵀ per edited weight. It grows by K₁ K₁ᵀ after each successful :meth:`apply` (the keys of a
layer are its inputs, which the updates of that layer and the layers after it do not change, so the keys
seen by the solve are the keys of the edited model), shrinks back when that edit's handle restores the
model, and is cleared by :meth:`reset`. The projectors depend only on C and the threshold and are cached
across resets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from knowgic.editors.alphaedit.hparams import AlphaEditHyperParams
from knowgic.editors.alphaedit.projection import NullSpace, null_space
from knowgic.editors.alphaedit.solve import alphaedit_delta
from knowgic.editors.base import EditHandle
from knowgic.editors.memit.memit_main import LayerSystem, MEMITEditor
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest


@dataclass(frozen=True)
class _CachedNullSpace:
    signature: tuple[Any, ...]
    space: NullSpace


def _cov_signature(cov: torch.Tensor, threshold: float) -> tuple[Any, ...]:
    """Cheap identity of a second moment: shape, device and two reductions (O(d²), no decomposition)."""
    c = cov.detach()
    return (tuple(c.shape), str(c.device), float(c.sum()), float(c.diagonal().sum()), threshold)


class AlphaEditEditor(MEMITEditor):
    """MEMIT with the null-space-constrained solve of AlphaEdit; see the module docstring."""

    name: ClassVar[str] = "alphaedit"
    hparams_class: ClassVar[type[AlphaEditHyperParams]] = AlphaEditHyperParams
    config: AlphaEditHyperParams

    def __init__(self, hparams: Mapping[str, Any] | None = None, *, progress: bool = True) -> None:
        super().__init__(dict(hparams) if hparams is not None else None, progress=progress)
        self._null_spaces: dict[str, _CachedNullSpace] = {}
        self._prior_gram: dict[str, torch.Tensor] = {}
        self._pending_gram: dict[str, torch.Tensor] = {}
        self._layer_info: dict[str, dict[str, Any]] = {}
        self._epoch = 0  # bumped by reset(): a handle from before a reset leaves the new history alone
        self._live = 0  # applied and not yet restored edits in this epoch

    @property
    def prior_gram(self) -> dict[str, torch.Tensor]:
        """K_p K_pᵀ per weight name for the edits applied since the last reset (read-only view)."""
        return dict(self._prior_gram)

    def reset(self) -> None:
        super().reset()
        self._prior_gram.clear()
        self._pending_gram.clear()
        self._epoch += 1
        self._live = 0

    def null_space_for(self, system: LayerSystem) -> NullSpace:
        """P for ``system``'s layer, from its second moment C (cached while C and the threshold stay)."""
        threshold = self.config.nullspace_threshold
        signature = _cov_signature(system.cov, threshold)
        cached = self._null_spaces.get(system.weight_name)
        if cached is None or cached.signature != signature:
            space = null_space(system.cov, threshold)
            if space.dim == 0:
                raise KnowgicError(
                    f"AlphaEdit: no eigenvalue of the key second moment at layer {system.layer} "
                    f"({system.weight_name}) is below nullspace_threshold={threshold:g} (the smallest is "
                    f"{space.smallest_dropped:.3g}), so every update would touch preserved knowledge; "
                    "raise nullspace_threshold in the hparams"
                )
            space = NullSpace(
                projector=space.projector.to(system.keys.device),
                dim=space.dim,
                total=space.total,
                threshold=space.threshold,
                largest_kept=space.largest_kept,
                smallest_dropped=space.smallest_dropped,
            )
            cached = _CachedNullSpace(signature, space)
            self._null_spaces[system.weight_name] = cached
        return cached.space

    def solve_layer(self, system: LayerSystem) -> torch.Tensor:
        """Δ = R K₁ᵀ P (K_p K_pᵀ P + K₁ K₁ᵀ P + α I)⁻¹ (Fang et al. 2025, Sec. 3.2), float64."""
        space = self.null_space_for(system)
        name = system.weight_name
        keys = system.keys.to(torch.float64)
        prior = self._prior_gram.get(name)
        pending = self._pending_gram.get(name)
        if pending is not None:  # an earlier chunk of this same apply() at this layer
            prior = pending if prior is None else prior + pending
        delta = alphaedit_delta(keys, system.residuals, space.projector, self.config.l2_regularization, prior)
        gram = keys @ keys.T
        self._pending_gram[name] = gram if pending is None else pending + gram
        self._layer_info[name] = {
            "layer": system.layer,
            "nullspace_dim": space.dim,
            "key_dim": space.total,
            "prior_keys_trace": float(prior.diagonal().sum()) if prior is not None else 0.0,
        }
        return delta

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        self._pending_gram = {}
        self._layer_info = {}
        try:
            handle = super().apply(model, tokenizer, requests)
        finally:
            committed, self._pending_gram = self._pending_gram, {}
        for name, gram in committed.items():
            self._prior_gram[name] = gram if name not in self._prior_gram else self._prior_gram[name] + gram
        self._live += 1
        epoch = self._epoch
        handle.info["alphaedit"] = {
            "nullspace_threshold": self.config.nullspace_threshold,
            "l2_regularization": self.config.l2_regularization,
            "layers": [dict(v) for v in self._layer_info.values()],
        }
        restore_weights = handle.restore_fn

        def restore() -> None:
            if restore_weights is not None:
                restore_weights()
            if epoch != self._epoch:
                return
            # The restored model no longer holds this edit: its keys leave the history too.
            self._live -= 1
            if self._live == 0:
                self._prior_gram.clear()  # exactly empty, free of the rounding of the subtractions
                return
            for name, gram in committed.items():
                if name in self._prior_gram:
                    self._prior_gram[name] = self._prior_gram[name] - gram

        handle.restore_fn = restore
        return handle
