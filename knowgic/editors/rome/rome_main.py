"""ROME: Rank-One Model Editing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT").

The MLP output projection W of layer l* is read as a linear associative memory v = W k. To store (k*, v*)
while disturbing the other keys least (min ‖ŴK − V‖ s.t. Ŵk* = v*), Eq. 2 gives the closed form

    Ŵ = W + Λ (C⁻¹k*)ᵀ,   Λ = (v* − W k*) / ((C⁻¹k*)ᵀ k*),   C = E[k kᵀ].

Here k* is the key averaged over random prefixes (:mod:`.compute_u`) and δ is the vector that, added to the
MLP output at the subject's last token of every prefixed prompt, makes the model say the new object
(:mod:`.compute_v`). The paper writes v* for the value stored at k*; with the additive δ two readings exist,
chosen by ``v_star_anchor``:

- ``prompt`` (default; what the reference implementation computes): v* = W k* + δ / ρ with
  ρ = (C⁻¹k*)ᵀk_p / (C⁻¹k*)ᵀk*, k_p the key of the bare rewrite prompt, so that the edited layer outputs
  exactly m_p + δ on the rewrite prompt (ΔW = δ (C⁻¹k*)ᵀ / ((C⁻¹k*)ᵀk_p));
- ``mean``: v* = W k* + δ; the bare prompt then gets ρ δ.

Either way Ŵk* = v* holds exactly up to the cast to the parameter's dtype; in bfloat16/float16 the
residual ‖Ŵk* − v*‖ / ‖v*‖ after the write is measured and reported per edit (``write_precision``, see
:mod:`.weights`). ρ is reported per edit (``key_ratio``); it is near 1 when the prefixed keys and the bare
prompt's key agree.

Requests are applied one after another, each to the model as the previous one left it.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from knowgic.editors.arch import arch_for, num_layers
from knowgic.editors.base import EditHandle, Editor, snapshot_restore
from knowgic.editors.hparams import check_editor_hparams
from knowgic.editors.layer_stats import SecondMoments
from knowgic.editors.rome.compute_u import compute_key, compute_u
from knowgic.editors.rome.compute_v import DeltaObjective, DeltaResult, optimize_delta
from knowgic.editors.rome.context_templates import generate_context_templates
from knowgic.editors.rome.hparams import LocateEditHParams, ROMEHyperParams
from knowgic.editors.rome.weights import PrecisionWarning, add_to_weight, read_weight, resolve_layers
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest


def rank_one_update(
    w: torch.Tensor, k_star: torch.Tensor, v_star: torch.Tensor, cov: torch.Tensor | None
) -> torch.Tensor:
    """ΔW = (v* − W k*)(C⁻¹k*)ᵀ / ((C⁻¹k*)ᵀ k*) (ROME Eq. 2), float64, W given as (d_out, d_in).

    ``cov=None`` uses C = I. The result has rank one and satisfies (W + ΔW) k* = v*.
    """
    w64, k, v = w.to(torch.float64), k_star.to(torch.float64), v_star.to(torch.float64)
    u = compute_u(k, cov)
    denom = torch.dot(u, k)
    if not torch.isfinite(denom) or float(denom.abs()) < 1e-12 * float(u.norm() * k.norm() + 1e-300):
        raise KnowgicError("ROME: (C⁻¹k*)ᵀk* is zero or not finite; the key statistics are degenerate")
    return torch.outer(v - w64 @ k, u) / denom


def objective_from(hp: LocateEditHParams) -> DeltaObjective:
    return DeltaObjective(
        num_grad_steps=hp.v_num_grad_steps,
        lr=hp.v_lr,
        weight_decay=hp.v_weight_decay,
        clamp_norm_factor=hp.clamp_norm_factor,
        kl_factor=hp.kl_factor,
        fact_token=hp.fact_token,
        early_stop_loss=hp.v_early_stop_loss,
    )


def check_loss_layer(model: torch.nn.Module, hp: LocateEditHParams, what: str) -> None:
    last = num_layers(model) - 1
    if hp.v_loss_layer is not None and hp.v_loss_layer not in (last, -1):
        raise KnowgicError(
            f"{what} hparams: v_loss_layer={hp.v_loss_layer}, but only the final layer ({last}) is supported "
            "(the loss reads the model's own logits); remove the key or set it to the last layer"
        )


@dataclass
class RomeUpdate:
    """One rank-one update: k*, v* = W k* + δ and ΔW (float64, (d_out, d_in)), with the δ optimisation."""

    layer: int
    weight_name: str
    k_star: torch.Tensor
    v_star: torch.Tensor
    delta_w: torch.Tensor
    weight_norm: float
    result: DeltaResult
    key_ratio: float = 1.0  # ρ = (C⁻¹k*)ᵀk_p / (C⁻¹k*)ᵀk*: the share of (W k* + δ − W k*) seen at k_p

    def info(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "weight": self.weight_name,
            "k_norm": float(self.k_star.norm()),
            "update_norm": float(self.delta_w.norm()),
            "weight_norm": self.weight_norm,
            "key_ratio": round(self.key_ratio, 6),
            **self.result.info(),
        }


def compute_rome_update(
    model: torch.nn.Module,
    tokenizer: Any,
    request: EditRequest,
    layer: int,
    templates: Sequence[str],
    objective: DeltaObjective,
    cov: torch.Tensor | None,
    *,
    anchor: str = "prompt",
    progress: bool = True,
) -> RomeUpdate:
    """k* (:func:`compute_key`), δ (:func:`optimize_delta`), v* and ΔW (Eq. 2); writes nothing.

    ``anchor`` fixes v* (module docstring): ``prompt`` makes the edited layer add exactly δ on the bare
    rewrite prompt's key k_p; ``mean`` takes v* = W k* + δ.
    """
    arch = arch_for(model)
    module = arch.mlp_out.format(layer)
    k_star = compute_key(model, tokenizer, request, module, templates, objective.fact_token)
    result = optimize_delta(model, tokenizer, request, module, templates, objective, progress=progress)
    name, w = read_weight(model, arch, layer)
    k_star = k_star.to(w.device)
    delta = result.delta.to(device=w.device, dtype=torch.float64)
    if anchor not in ("prompt", "mean"):
        raise KnowgicError(f"ROME: v_star_anchor must be 'prompt' or 'mean', got {anchor!r}")
    k_p = compute_key(model, tokenizer, request, module, ["{}"], objective.fact_token).to(w.device)
    u = compute_u(k_star, cov)
    ratio = float(torch.dot(u, k_p) / torch.dot(u, k_star))
    if anchor == "prompt" and not (math.isfinite(ratio) and abs(ratio) > 1e-9):
        raise KnowgicError("ROME: (C⁻¹k*)ᵀk_p is zero; the rewrite prompt's key is orthogonal to C⁻¹k*")
    scale = 1.0 / ratio if anchor == "prompt" else 1.0
    v_star = w @ k_star + scale * delta
    delta_w = rank_one_update(w, k_star, v_star, cov)
    return RomeUpdate(layer, name, k_star, v_star, delta_w, float(w.norm()), result, ratio)


class ContextTemplates:
    """An editor's memo of generated context templates per model and generation settings (weakly held)."""

    def __init__(self) -> None:
        self._memo: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[Any, ...], list[str]]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, model: torch.nn.Module, tokenizer: Any, hp: LocateEditHParams) -> list[str]:
        key = (
            hp.context_template_length_params,
            hp.context_template_prompts,
            hp.context_template_seed,
            hp.context_template_top_k,
            id(tokenizer),
        )
        memo = self._memo.setdefault(model, {})
        if key not in memo:
            memo[key] = generate_context_templates(
                model,
                tokenizer,
                hp.context_template_length_params,
                hp.context_template_prompts,
                seed=hp.context_template_seed,
                top_k=hp.context_template_top_k,
            )
        return list(memo[key])


class ROMEEditor(Editor):
    """ROME on the MLP output projection of ``hparams["layers"]`` (usually one layer).

    The hparams are checked against ``spec/schemas/hparams/rome.schema.json`` (or the class's
    ``hparams_schema``) on construction: an unknown key is an error.
    """

    name: ClassVar[str] = "rome"
    uses_key_statistics: ClassVar[bool] = True

    def __init__(self, hparams: dict[str, Any] | None = None, *, progress: bool = True) -> None:
        super().__init__(hparams)
        check_editor_hparams(self.hparams, "rome", f"of editor {self.name!r}", type(self).hparams_schema)
        self.config = ROMEHyperParams.from_dict(self.hparams)
        self.progress = progress
        self.stats = SecondMoments()
        self.templates = ContextTemplates()
        self.precision = PrecisionWarning(self.name)

    def reset(self) -> None:
        """ROME keeps no edit state (memos of C and of the templates describe the model, not edits)."""

    def second_moment(self, model: torch.nn.Module, tokenizer: Any, layer: int) -> torch.Tensor | None:
        hp = self.config
        if not hp.mom2_adjustment:
            return None
        return self.stats.get(
            model,
            tokenizer,
            arch_for(model).mlp_out.format(layer),
            corpus=hp.mom2_dataset,
            sample_count=hp.mom2_n_samples,
            dtype=hp.mom2_dtype,
            batch_tokens=hp.mom2_batch_tokens,
            progress=self.progress,
        )

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        hp = self.config
        arch = arch_for(model)
        layers = resolve_layers(model, hp.layers, "rome hparams")
        check_loss_layer(model, hp, "rome")
        names = [arch.mlp_out_weight(layer) for layer in layers]
        restore = snapshot_restore(model, names)
        infos: list[dict[str, Any]] = []
        try:
            templates = self.templates.get(model, tokenizer, hp)
            objective = objective_from(hp)
            for request in requests:
                started = time.perf_counter()
                for layer in layers:
                    infos.append(self._edit_one(model, tokenizer, request, layer, templates, objective))
                infos[-1]["request_seconds"] = round(time.perf_counter() - started, 3)
        except BaseException:
            restore()
            raise
        return EditHandle(
            restore_fn=restore,
            info={"method": "rome", "layers": list(layers), "n_templates": len(templates), "edits": infos},
        )

    def _edit_one(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        request: EditRequest,
        layer: int,
        templates: Sequence[str],
        objective: DeltaObjective,
    ) -> dict[str, Any]:
        cov = self.second_moment(model, tokenizer, layer)
        update = compute_rome_update(
            model,
            tokenizer,
            request,
            layer,
            templates,
            objective,
            cov,
            anchor=self.config.v_star_anchor,
            progress=self.progress,
        )
        written = add_to_weight(model, arch_for(model), update.weight_name, update.delta_w, update.k_star)
        info = {"edit_id": request.edit_id, **update.info()}
        precision = self.precision.report(written)
        if precision is not None:
            info["write_precision"] = precision
        return info
