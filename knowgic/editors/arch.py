"""Module-name templates per architecture family, detected from the model config.

Locate-then-edit methods (ROME, MEMIT, AlphaEdit, ...) edit the MLP output projection of chosen layers,
read keys at its input and values at its output. Names differ per family; this table is the only place
that knows them. To support a new family, add an :class:`ArchSpec` to ``ARCHITECTURES`` and map the
config's ``model_type`` to it in ``MODEL_TYPES``.

Gemma 3 comes as two classes: the text-only ``Gemma3ForCausalLM`` (``model_type`` ``gemma3_text``; Gemma 3
270M and 1B load as it) with its layers at ``model.layers``, and the multimodal
``Gemma3ForConditionalGeneration`` (``model_type`` ``gemma3``; 4B and larger) whose language model sits at
``model.language_model`` and whose layer count is in ``config.text_config``. Both are family ``gemma3``.
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
    ``n_layer_attr``: the config attribute holding the layer count (a dotted path reads a sub-config).
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


def _llama_like(root: str = "model", n_layer_attr: str = "num_hidden_layers") -> dict[str, str]:
    """Templates of decoders laid out as Llama's, with the decoder at ``root``."""
    return dict(
        layers=f"{root}.layers.{{}}",
        mlp_out=f"{root}.layers.{{}}.mlp.down_proj",
        mlp_in=f"{root}.layers.{{}}.mlp.up_proj",
        attn_out=f"{root}.layers.{{}}.self_attn.o_proj",
        embed=f"{root}.embed_tokens",
        final_norm=f"{root}.norm",
        lm_head="lm_head",
        n_layer_attr=n_layer_attr,
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
    "llama": ArchSpec(family="llama", **_llama_like()),
    "qwen2": ArchSpec(family="qwen2", **_llama_like()),
    # Gemma3ForCausalLM (model_type gemma3_text).
    "gemma3": ArchSpec(
        family="gemma3", mlp_post_norm="model.layers.{}.post_feedforward_layernorm", **_llama_like()
    ),
    # Gemma3ForConditionalGeneration (model_type gemma3): the text decoder inside the multimodal model.
    "gemma3_multimodal": ArchSpec(
        family="gemma3",
        mlp_post_norm="model.language_model.layers.{}.post_feedforward_layernorm",
        **_llama_like("model.language_model", "text_config.num_hidden_layers"),
    ),
}

# config.model_type -> key in ARCHITECTURES
MODEL_TYPES: dict[str, str] = {
    "gpt2": "gpt2",
    "gptj": "gptj",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "gemma3_text": "gemma3",
    "gemma3": "gemma3_multimodal",
}


def _model_type(model: torch.nn.Module | Any) -> Any:
    return getattr(getattr(model, "config", None), "model_type", None)


def _spec_key(model: torch.nn.Module | Any) -> str:
    model_type = _model_type(model)
    if model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type]
    known = ", ".join(sorted(MODEL_TYPES))
    raise KnowgicError(
        f"unknown architecture family (config.model_type={model_type!r}, {type(model).__name__}); known "
        f"model types: {known}. To add one, put an ArchSpec with its module-name templates into "
        "knowgic.editors.arch.ARCHITECTURES and map its model_type to it in knowgic.editors.arch.MODEL_TYPES."
    )


def detect_family(model: torch.nn.Module | Any) -> str:
    """The family of ``model`` (from ``model.config.model_type``): gpt2, gptj, llama, qwen2 or gemma3."""
    return ARCHITECTURES[_spec_key(model)].family


def arch_for(model: torch.nn.Module | Any) -> ArchSpec:
    """The templates for ``model``; checked against it (the first layer's MLP output projection must exist),
    so that a class whose layout differs from its model_type's entry fails here, by name."""
    key = _spec_key(model)
    spec = ARCHITECTURES[key]
    if isinstance(model, torch.nn.Module):
        first = spec.mlp_out.format(0)
        try:
            model.get_submodule(first)
        except AttributeError:
            raise KnowgicError(
                f"{type(model).__name__} (config.model_type={_model_type(model)!r}) has no module {first!r}, "
                f"where the architecture table (entry {key!r}) expects the MLP output projection; fix that "
                "entry in knowgic.editors.arch.ARCHITECTURES or map this model_type to another in MODEL_TYPES"
            ) from None
    return spec


def num_layers(model: torch.nn.Module | Any) -> int:
    spec = arch_for(model)
    value: Any = model.config
    for part in spec.n_layer_attr.split("."):
        value = getattr(value, part, None)
    return int(value if value is not None else model.config.num_hidden_layers)


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
