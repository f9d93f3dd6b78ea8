"""Module-name templates per architecture family, detected from the model config.

Locate-then-edit methods (ROME, MEMIT, AlphaEdit, ...) edit the MLP output projection of chosen layers,
read keys at its input and values at its output. Names differ per family; this table is the only place
that knows them. To support a new family, add an :class:`ArchSpec` to ``ARCHITECTURES`` keyed by the
config's ``model_type``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from knowgic.errors import KnowgicError


@dataclass(frozen=True)
class ArchSpec:
    """Templates take the layer index via ``str.format``.

    ``mlp_out``: the MLP output projection (the edited matrix W, keys at its input, values at its output).
    ``weight_transposed``: GPT-2's ``Conv1D`` stores W as (d_in, d_out), so ``y = x @ W``; ``nn.Linear``
    stores (d_out, d_in), so ``y = x @ W.T``. Editors compute ΔW in (d_out, d_in) and transpose on write.
    """

    family: str
    layers: str
    mlp_out: str
    mlp_in: str
    attn_out: str
    embed: str
    final_norm: str
    lm_head: str
    n_layer_attr: str
    weight_transposed: bool = False
    # A norm applied to the MLP output before it joins the residual stream (Gemma 2/3's
    # post_feedforward_layernorm); None when the MLP output is added to the residual as it is.
    mlp_post_norm: str | None = None

    def layer(self, i: int) -> str:
        return self.layers.format(i)

    def mlp_out_weight(self, i: int) -> str:
        return self.mlp_out.format(i) + ".weight"


_LLAMA_LIKE = dict(
    layers="model.layers.{}",
    mlp_out="model.layers.{}.mlp.down_proj",
    mlp_in="model.layers.{}.mlp.up_proj",
    attn_out="model.layers.{}.self_attn.o_proj",
    embed="model.embed_tokens",
    final_norm="model.norm",
    lm_head="lm_head",
    n_layer_attr="num_hidden_layers",
)

ARCHITECTURES: dict[str, ArchSpec] = {
    "gpt2": ArchSpec(
        family="gpt2",
        layers="transformer.h.{}",
        mlp_out="transformer.h.{}.mlp.c_proj",
        mlp_in="transformer.h.{}.mlp.c_fc",
        attn_out="transformer.h.{}.attn.c_proj",
        embed="transformer.wte",
        final_norm="transformer.ln_f",
        lm_head="lm_head",
        n_layer_attr="n_layer",
        weight_transposed=True,
    ),
    "gptj": ArchSpec(
        family="gptj",
        layers="transformer.h.{}",
        mlp_out="transformer.h.{}.mlp.fc_out",
        mlp_in="transformer.h.{}.mlp.fc_in",
        attn_out="transformer.h.{}.attn.out_proj",
        embed="transformer.wte",
        final_norm="transformer.ln_f",
        lm_head="lm_head",
        n_layer_attr="n_layer",
    ),
    "llama": ArchSpec(family="llama", **_LLAMA_LIKE),
    "qwen2": ArchSpec(family="qwen2", **_LLAMA_LIKE),
    "gemma3": ArchSpec(
        family="gemma3", mlp_post_norm="model.layers.{}.post_feedforward_layernorm", **_LLAMA_LIKE
    ),
}

# config.model_type -> family key in ARCHITECTURES
MODEL_TYPES: dict[str, str] = {
    "gpt2": "gpt2",
    "gptj": "gptj",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
}


def detect_family(model: torch.nn.Module | Any) -> str:
    """The family key for ``model`` (from ``model.config.model_type``)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type]
    known = ", ".join(sorted(MODEL_TYPES))
    raise KnowgicError(
        f"unknown architecture family (config.model_type={model_type!r}); known: {known}. "
        "To add one, put an ArchSpec with its module-name templates into "
        "knowgic.editors.arch.ARCHITECTURES and map its model_type in MODEL_TYPES."
    )


def arch_for(model: torch.nn.Module | Any) -> ArchSpec:
    return ARCHITECTURES[detect_family(model)]


def num_layers(model: torch.nn.Module | Any) -> int:
    spec = arch_for(model)
    config = model.config
    return int(getattr(config, spec.n_layer_attr, None) or config.num_hidden_layers)


def get_module(model: torch.nn.Module, name: str) -> torch.nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError as exc:
        raise KnowgicError(f"model has no module {name!r}: {exc}") from None


def get_parameter(model: torch.nn.Module, name: str) -> torch.nn.Parameter:
    try:
        return model.get_parameter(name)
    except AttributeError as exc:
        raise KnowgicError(f"model has no parameter {name!r}: {exc}") from None
