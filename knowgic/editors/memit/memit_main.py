"""MEMIT: Mass-Editing Memory in a Transformer (Meng et al. 2023), Algorithm 1.

For a batch of requests (s_i, r_i, o_i):

1. z_i = h_i^L + δ_i at the last edited layer L (Eq. 16, :mod:`.compute_z`; behind a post-MLP norm, as in
   Gemma 3, δ_i is found on the projection's output before the norm, so that z_i is writable).
2. For each edited layer l ∈ R, from the lowest up, on the model as updated so far:
   K^l = [k_i^l] the keys (Eq. 19, :mod:`.compute_ks`); R^l = (z_i − h_i^L) / (L − l + 1), the residual
   still missing at L spread over the layers that remain (Eq. 20, h_i^L recomputed after the lower layers'
   updates); and the update that keeps the old associations (C = E[k kᵀ] over text, weighted by λ) while
   writing the new ones (Eqs. 14, 21):

       ΔW^l = R^l K^lᵀ (λC + K^l K^lᵀ)⁻¹,

   solved in float64 with ``torch.linalg.solve`` (no explicit inverse), then written into W^l (rounded once
   to the weight's dtype; for bfloat16/float16 weights the rounding's effect on the layer's keys is measured
   and reported, ``write_precision``, see :mod:`knowgic.editors.rome.weights`).

Extension points for methods built on MEMIT (AlphaEdit, RECT): :meth:`MEMITEditor.solve_layer`
(the linear system of one layer, given as a :class:`LayerSystem`), :meth:`MEMITEditor.postprocess_delta`
(changes ΔW before it is written), :meth:`MEMITEditor.reset` (state between independent edits). PRUNE
acts on the whole edit instead, after :meth:`MEMITEditor.apply`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from knowgic.editors.arch import arch_for, get_module
from knowgic.editors.base import EditHandle, Editor, snapshot_restore
from knowgic.editors.hparams import check_editor_hparams
from knowgic.editors.layer_stats import SecondMoments
from knowgic.editors.memit.compute_ks import compute_ks
from knowgic.editors.memit.compute_z import compute_z
from knowgic.editors.memit.hparams import MEMITHyperParams
from knowgic.editors.memit.post_norm import residual_to_mlp_output
from knowgic.editors.repr_tools import reps_at_tokens
from knowgic.editors.rome.rome_main import ContextTemplates, check_loss_layer, objective_from
from knowgic.editors.rome.weights import PrecisionWarning, add_to_weight, read_weight, resolve_layers
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest


@dataclass
class LayerSystem:
    """What MEMIT solves at one layer l (all tensors float64, on the model's device)."""

    layer: int
    weight_name: str  # the parameter edited, e.g. "transformer.h.3.mlp.c_proj.weight"
    keys: torch.Tensor  # K: (d_in, n), this request batch's keys at layer l
    residuals: torch.Tensor  # R: (d_out, n), already spread (divided by the layers remaining), as the change
    # of W k that is wanted (equal to the residual target unless a norm follows the MLP, see post_norm.py)
    cov: torch.Tensor  # C = E[k kᵀ]: (d_in, d_in) from layer_stats (not yet scaled by λ)
    w0: torch.Tensor  # current W at layer l in (d_out, d_in) orientation
    mom2_update_weight: float  # λ


def memit_solve(system: LayerSystem) -> torch.Tensor:
    """ΔW = R Kᵀ (λC + K Kᵀ)⁻¹ (MEMIT Eq. 14), (d_out, d_in) float64.

    (λC + KKᵀ) is symmetric, so ΔW = R Aᵀ with A = (λC + KKᵀ)⁻¹ K from one ``torch.linalg.solve``.
    """
    k = system.keys.to(torch.float64)
    r = system.residuals.to(torch.float64)
    a = system.mom2_update_weight * system.cov.to(torch.float64) + k @ k.T
    try:
        adj_k = torch.linalg.solve(a, k)
    except torch.linalg.LinAlgError as exc:
        raise KnowgicError(
            f"MEMIT layer {system.layer}: λC + KKᵀ is singular ({exc}); collect C from more text "
            "(mom2_n_samples, mom2_dataset) or raise mom2_update_weight"
        ) from None
    return r @ adj_k.T


class MEMITEditor(Editor):
    """MEMIT over ``hparams["layers"]``; many requests in one :meth:`apply` are edited together.

    The hparams are checked on construction against the class's ``hparams_schema`` when it sets one, else
    against ``spec/schemas/hparams/<hparams_class.method>.schema.json`` (memit, alphaedit, prune, rect): an
    unknown key is an error. A subclass with keys of its own declares them with
    :func:`knowgic.editors.memit.schema.extend_memit_schema`.
    """

    name: ClassVar[str] = "memit"
    hparams_class: ClassVar[type[MEMITHyperParams]] = MEMITHyperParams
    uses_key_statistics: ClassVar[bool] = True

    def __init__(self, hparams: dict[str, Any] | None = None, *, progress: bool = True) -> None:
        super().__init__(hparams)
        check_editor_hparams(
            self.hparams, self.hparams_class.method, f"of editor {self.name!r}", type(self).hparams_schema
        )
        self.config = self.hparams_class.from_dict(self.hparams)
        self.progress = progress
        self.stats = SecondMoments()
        self.templates = ContextTemplates()
        self.precision = PrecisionWarning(self.name)

    # -- extension points -------------------------------------------------------------------------------

    def solve_layer(self, system: LayerSystem) -> torch.Tensor:
        """MEMIT: R Kᵀ (λC + K Kᵀ)⁻¹, (d_out, d_in) float64."""
        return memit_solve(system)

    def postprocess_delta(self, system: LayerSystem, delta: torch.Tensor) -> torch.Tensor:
        """Hook applied to ΔW before it is written (identity for MEMIT; PRUNE/RECT override)."""
        return delta

    def reset(self) -> None:
        """MEMIT keeps no edit state; subclasses with state override this and call ``super().reset()``.

        The memos of C and of the context templates describe the pristine model, not edits, and are kept.
        """

    # -- the algorithm ----------------------------------------------------------------------------------

    def second_moment(self, model: torch.nn.Module, tokenizer: Any, layer: int) -> torch.Tensor:
        """C = E[k kᵀ] at layer ``layer`` (float64, model device); the identity if ``mom2_adjustment`` is off."""
        hp = self.config
        module = arch_for(model).mlp_out.format(layer)
        if not hp.mom2_adjustment:
            _, w = read_weight(model, arch_for(model), layer)
            return torch.eye(w.shape[1], dtype=torch.float64, device=w.device)
        arch = arch_for(model)
        return self.stats.get(
            model,
            tokenizer,
            module,
            prefetch=[arch.mlp_out.format(lay) for lay in resolve_layers(model, hp.layers, self.name)],
            corpus=hp.mom2_dataset,
            sample_count=hp.mom2_n_samples,
            dtype=hp.mom2_dtype,
            batch_tokens=hp.mom2_batch_tokens,
            progress=self.progress,
        )

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        hp = self.config
        requests = list(requests)
        if not requests:
            return EditHandle(restore_fn=None, info={"method": self.name, "edits": []})
        arch = arch_for(model)
        layers = tuple(sorted(resolve_layers(model, hp.layers, f"{self.name} hparams")))
        check_loss_layer(model, hp, self.name)
        names = [arch.mlp_out_weight(layer) for layer in layers]
        restore = snapshot_restore(model, names)
        started = time.perf_counter()
        try:
            info = self._execute(model, tokenizer, requests, layers)
        except BaseException:
            restore()
            raise
        info["seconds"] = round(time.perf_counter() - started, 3)
        return EditHandle(restore_fn=restore, info=info)

    def _execute(
        self, model: torch.nn.Module, tokenizer: Any, requests: list[EditRequest], layers: tuple[int, ...]
    ) -> dict[str, Any]:
        hp = self.config
        arch = arch_for(model)
        templates = self.templates.get(model, tokenizer, hp)
        objective = objective_from(hp)
        z_layer = layers[-1]
        z_module = arch.layer(z_layer)

        z_cols, z_scales, z_infos = [], [], []
        for request in requests:
            z, res = compute_z(
                model, tokenizer, request, z_layer, templates, objective, progress=self.progress
            )
            z_cols.append(z)
            # κ of post_norm.py: the scale of m^L + δ relative to m^L (used only behind a post-MLP norm).
            z_scales.append(float((res.init + res.delta).norm() / res.init.norm().clamp_min(1e-12)))
            z_infos.append({"edit_id": request.edit_id, **res.info()})
        zs = torch.stack(z_cols, dim=1)  # (d, n)

        layer_infos = []
        for i, layer in enumerate(layers):
            keys = compute_ks(model, tokenizer, requests, layer, templates, hp.fact_token)
            cur = (
                reps_at_tokens(
                    model,
                    tokenizer,
                    [r.prompt for r in requests],
                    [r.subject for r in requests],
                    z_module,
                    fact_token=hp.fact_token,
                    track="out",
                )
                .to(torch.float64)
                .T
            )  # (d, n): h_i^L on the model as updated so far
            residuals = (zs.to(cur.device) - cur) / (len(layers) - i)
            residual_norm = float(residuals.norm(dim=0).mean()) * (len(layers) - i)
            if arch.mlp_post_norm is not None:
                # The MLP output joins the residual through a norm: ask W for the output change that norm
                # turns into the residual target, at the scale δ chose at L (post_norm.py, compute_z.py).
                m = reps_at_tokens(
                    model,
                    tokenizer,
                    [r.prompt for r in requests],
                    [r.subject for r in requests],
                    arch.mlp_out.format(layer),
                    fact_token=hp.fact_token,
                    track="out",
                )
                norm = get_module(model, arch.mlp_post_norm.format(layer))
                scales = torch.tensor(z_scales, dtype=torch.float64, device=m.device)
                residuals = residual_to_mlp_output(norm, m, residuals.T.to(m.device), scales).T
            weight_name, w0 = read_weight(model, arch, layer)
            system = LayerSystem(
                layer=layer,
                weight_name=weight_name,
                keys=keys.to(w0.device),
                residuals=residuals.to(w0.device),
                cov=self.second_moment(model, tokenizer, layer).to(w0.device),
                w0=w0,
                mom2_update_weight=hp.mom2_update_weight,
            )
            delta = self.solve_layer(system)
            delta = self.postprocess_delta(system, delta)
            if tuple(delta.shape) != tuple(w0.shape):
                raise ValueError(
                    f"{self.name}: ΔW of shape {tuple(delta.shape)} for {weight_name} {tuple(w0.shape)}"
                )
            written = add_to_weight(model, arch, weight_name, delta, system.keys)
            layer_info = {
                "layer": layer,
                "weight": weight_name,
                "residual_norm": residual_norm,
                "update_norm": float(delta.norm()),
                "weight_norm": float(w0.norm()),
            }
            precision = self.precision.report(written)
            if precision is not None:
                layer_info["write_precision"] = precision
            layer_infos.append(layer_info)
        return {
            "method": self.name,
            "layers": list(layers),
            "n_requests": len(requests),
            "n_templates": len(templates),
            "edits": z_infos,
            "layer_updates": layer_infos,
        }
