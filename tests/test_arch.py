"""The architecture table: every template of every family names a real module of the right shape.

Models are built from tiny random configs (transformers config classes, nothing downloaded); a forward pass
through each checks that the edited projection is the one the model actually runs, with keys of width d_ff
going in and values of width d_model coming out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from knowgic.editors.arch import ARCHITECTURES, MODEL_TYPES, arch_for, detect_family, num_layers
from knowgic.editors.layer_stats import key_dim
from knowgic.editors.nethook import Trace
from knowgic.editors.rome.weights import read_weight
from knowgic.errors import KnowgicError

VOCAB, D_MODEL, D_FF, LAYERS, HEADS, HEAD_DIM = 96, 32, 64, 3, 2, 16


@dataclass(frozen=True)
class Case:
    build: Callable[[], torch.nn.Module]
    family: str
    d_ff: int  # width of the MLP's hidden layer (the keys)
    attn_width: int  # input width of the attention output projection


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=D_MODEL, n_layer=LAYERS, n_head=HEADS)
    )


def _gptj() -> torch.nn.Module:
    from transformers import GPTJConfig, GPTJForCausalLM

    return GPTJForCausalLM(
        GPTJConfig(
            vocab_size=VOCAB, n_positions=64, n_embd=D_MODEL, n_layer=LAYERS, n_head=HEADS, rotary_dim=8
        )
    )


def _llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=D_MODEL,
            intermediate_size=D_FF,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=1,
        )
    )


def _qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=D_MODEL,
            intermediate_size=D_FF,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=1,
        )
    )


def _gemma3_text_config():
    from transformers import Gemma3TextConfig

    # head_dim * heads != hidden_size, as in the real Gemma 3 models
    return Gemma3TextConfig(
        vocab_size=VOCAB,
        hidden_size=D_MODEL,
        intermediate_size=D_FF,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        head_dim=HEAD_DIM * 2,
    )


def _gemma3_text() -> torch.nn.Module:
    from transformers import Gemma3ForCausalLM

    return Gemma3ForCausalLM(_gemma3_text_config())


def _gemma3_multimodal() -> torch.nn.Module:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    vision = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    )
    config = Gemma3Config(
        text_config=_gemma3_text_config().to_dict(), vision_config=vision, mm_tokens_per_image=4
    )
    return Gemma3ForConditionalGeneration(config)


CASES = {
    "gpt2": Case(_gpt2, "gpt2", 4 * D_MODEL, D_MODEL),
    "gptj": Case(_gptj, "gptj", 4 * D_MODEL, D_MODEL),
    "llama": Case(_llama, "llama", D_FF, D_MODEL),
    "qwen2": Case(_qwen2, "qwen2", D_FF, D_MODEL),
    "gemma3_text": Case(_gemma3_text, "gemma3", D_FF, HEADS * HEAD_DIM * 2),
    "gemma3": Case(_gemma3_multimodal, "gemma3", D_FF, HEADS * HEAD_DIM * 2),
}


def _weight(model: torch.nn.Module, name: str) -> torch.Tensor:
    return model.get_submodule(name).weight


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_every_template_resolves_to_a_module_of_the_expected_shape(model_type: str) -> None:
    torch.manual_seed(0)
    case = CASES[model_type]
    model = case.build().eval()
    assert model.config.model_type == model_type
    assert detect_family(model) == case.family
    spec = arch_for(model)
    assert spec is ARCHITECTURES[MODEL_TYPES[model_type]]
    assert num_layers(model) == LAYERS
    t = spec.weight_transposed  # GPT-2's Conv1D stores (d_in, d_out)

    def linear(d_in: int, d_out: int) -> tuple[int, int]:
        return (d_in, d_out) if t else (d_out, d_in)

    assert tuple(_weight(model, spec.embed).shape) == (VOCAB, D_MODEL)
    assert tuple(_weight(model, spec.final_norm).shape) == (D_MODEL,)
    assert tuple(_weight(model, spec.lm_head).shape) == (VOCAB, D_MODEL)
    for layer in range(LAYERS):
        assert isinstance(model.get_submodule(spec.layer(layer)), torch.nn.Module)
        assert tuple(_weight(model, spec.mlp_out.format(layer)).shape) == linear(case.d_ff, D_MODEL)
        assert tuple(_weight(model, spec.mlp_in.format(layer)).shape) == linear(D_MODEL, case.d_ff)
        assert tuple(_weight(model, spec.attn_out.format(layer)).shape) == linear(case.attn_width, D_MODEL)
        if spec.mlp_post_norm is not None:
            assert tuple(_weight(model, spec.mlp_post_norm.format(layer)).shape) == (D_MODEL,)
        # The editors' view: W as (d_out, d_in), keys of width d_ff.
        name, w = read_weight(model, spec, layer)
        assert name == spec.mlp_out_weight(layer) and tuple(w.shape) == (D_MODEL, case.d_ff)
        assert key_dim(model, spec.mlp_out.format(layer)) == case.d_ff
    assert (spec.mlp_post_norm is not None) == (case.family == "gemma3")

    # The forward pass runs through the templated modules: keys in, values out, at every position.
    names = [spec.mlp_out.format(LAYERS - 1), spec.layer(LAYERS - 1)]
    ids = torch.tensor([[1, 5, 7, 9]])
    with torch.no_grad(), Trace(model, names, retain_input=True, retain_output=True) as tr:
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert tuple(tr[names[0]].input.shape) == (1, 4, case.d_ff)
    assert tuple(tr[names[0]].output.shape) == (1, 4, D_MODEL)
    assert tuple(tr[names[1]].output.shape) == (1, 4, D_MODEL)
    assert logits.shape[-1] == VOCAB


def test_unknown_family_names_how_to_add_one() -> None:
    from transformers import OPTConfig, OPTForCausalLM

    model = OPTForCausalLM(
        OPTConfig(
            vocab_size=VOCAB,
            hidden_size=D_MODEL,
            num_hidden_layers=2,
            ffn_dim=D_FF,
            num_attention_heads=HEADS,
            word_embed_proj_dim=D_MODEL,
            max_position_embeddings=64,
        )
    )
    with pytest.raises(KnowgicError) as info:
        arch_for(model)
    message = str(info.value)
    assert "'opt'" in message and "OPTForCausalLM" in message
    assert "knowgic.editors.arch.ARCHITECTURES" in message and "MODEL_TYPES" in message
    assert "ArchSpec" in message and "\n" not in message


def test_a_class_whose_layout_differs_from_its_entry_is_named() -> None:
    """A model_type mapped to templates its class does not have fails in arch_for, naming the module."""
    model = _gemma3_text()
    model.config.model_type = "gemma3"  # the multimodal entry, on the text-only class
    with pytest.raises(
        KnowgicError, match=r"Gemma3ForCausalLM .*'model\.language_model\.layers\.0\.mlp\.down_proj'"
    ):
        arch_for(model)
