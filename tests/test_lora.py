"""LoRA through peft: in-place injection, exact removal, stacking; efficacy on knowgic-tiny."""

from __future__ import annotations

import time

import pytest
import torch

from knowgic.editors.hparams import HPARAMS_DIR, load_hparams
from knowgic.editors.lora import LoRAEditor, LoRAHparams, target_module_names
from knowgic.errors import KnowgicError

from .test_ft import (
    REQ_A,
    REQ_B,
    distinct_requests,
    efficacy,
    greedy_gives_target,
    leak_counts,
    load_all_cases,
    neighbours,
    state_copy,
    states_equal,
)

MECH = {"layers": [0, 1], "modules": ["mlp_out"], "rank": 4, "lora_alpha": 8, "num_steps": 5, "lr": 1e-2}


def _logits(model, tok, text: str = "Harry Potter studied at") -> torch.Tensor:
    with torch.no_grad():
        return model(**tok(text, return_tensors="pt")).logits


def _structure(model) -> list[tuple[str, type]]:
    return [(n, type(m)) for n, m in model.named_modules()]


def test_lora_injects_in_place_and_unloads_to_the_identical_model(random_gpt2):
    from peft.tuners.tuners_utils import BaseTunerLayer

    model, tok = random_gpt2
    cls, structure, before = type(model), _structure(model), state_copy(model)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    base_logits = _logits(model, tok)
    handle = LoRAEditor(MECH).apply(model, tok, [REQ_A])
    # the same plain transformers model, now carrying adapters
    assert type(model) is cls
    assert sum(isinstance(m, BaseTunerLayer) for m in model.modules()) == 2
    assert handle.info["trainable_parameters"] == 2 * 4 * (256 + 64)
    assert handle.info["loss_final"] < handle.info["loss_first"]
    assert not torch.allclose(_logits(model, tok), base_logits)
    # the base weights are never written, only read (peft keeps them under ".base_layer")
    wrapped = [n for n in before if n.endswith("mlp.c_proj.weight")]
    assert len(wrapped) == 2
    for name in wrapped:
        live = model.get_parameter(name.replace("c_proj.weight", "c_proj.base_layer.weight"))
        assert torch.equal(live, before[name])
    handle.restore()
    assert type(model) is cls
    assert _structure(model) == structure
    assert not any(isinstance(m, BaseTunerLayer) for m in model.modules())
    assert not any("lora" in n for n, _ in model.named_parameters())
    assert not hasattr(model, "peft_config")
    assert states_equal(before, state_copy(model))
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert torch.equal(_logits(model, tok), base_logits)


def test_lora_sequential_stacking_and_restore(random_gpt2):
    model, tok = random_gpt2
    before = state_copy(model)
    base = _logits(model, tok)
    editor = LoRAEditor(MECH)
    h1 = editor.apply(model, tok, [REQ_A, REQ_B])  # both rewrites in one loss
    after_1 = _logits(model, tok)
    h2 = editor.apply(model, tok, [REQ_B])  # a second adapter on top, the first stays active
    assert h2.info["adapter"] != h1.info["adapter"]
    assert sorted(model.peft_config) == sorted([h1.info["adapter"], h2.info["adapter"]])
    layer = model.get_submodule("transformer.h.1.mlp.c_proj")
    assert sorted(layer.active_adapters) == sorted([h1.info["adapter"], h2.info["adapter"]])
    # only the new adapter trained: the first adapter's weights are as h1 left them
    after_2 = _logits(model, tok)
    assert not torch.allclose(after_2, after_1)
    h2.restore()
    assert torch.equal(_logits(model, tok), after_1)
    assert list(model.peft_config) == [h1.info["adapter"]]
    h1.restore()
    assert states_equal(before, state_copy(model))
    assert torch.equal(_logits(model, tok), base)
    assert not hasattr(model, "peft_config")


def test_lora_first_adapter_frozen_while_second_trains(random_gpt2):
    model, tok = random_gpt2
    editor = LoRAEditor(MECH)
    h1 = editor.apply(model, tok, [REQ_A])
    first = {n: p.detach().clone() for n, p in model.named_parameters() if h1.info["adapter"] in n}
    h2 = editor.apply(model, tok, [REQ_B])
    for n, p in model.named_parameters():
        if n in first:
            assert torch.equal(p, first[n]), n
    h2.restore()
    h1.restore()


def test_lora_target_modules_by_role_and_suffix(random_gpt2):
    model, _ = random_gpt2
    hp = LoRAHparams.from_dict(
        {"layers": [-1], "modules": ["mlp_in", "attn_out"], "target_modules": ["c_attn"]}
    )
    assert target_module_names(model, hp) == [
        "transformer.h.1.mlp.c_fc",
        "transformer.h.1.attn.c_proj",
        "transformer.h.1.attn.c_attn",
    ]
    all_layers = target_module_names(model, LoRAHparams.from_dict({}))
    assert all_layers == ["transformer.h.0.mlp.c_proj", "transformer.h.1.mlp.c_proj"]


def test_lora_bad_hparams_are_one_line_errors(random_gpt2):
    model, tok = random_gpt2
    with pytest.raises(KnowgicError, match="no module named"):
        LoRAEditor({"target_modules": ["q_proj"]}).apply(model, tok, [REQ_A])
    with pytest.raises(KnowgicError, match="unknown module role"):
        LoRAHparams.from_dict({"modules": ["mlp_middle"]})
    with pytest.raises(KnowgicError, match="unknown key"):
        LoRAHparams.from_dict({"r": 4})
    with pytest.raises(KnowgicError, match="nothing to adapt"):
        LoRAHparams.from_dict({"modules": []})
    with pytest.raises(KnowgicError, match="out of range"):
        LoRAEditor({"layers": [5]}).apply(model, tok, [REQ_A])
    assert not hasattr(model, "peft_config")


@pytest.mark.parametrize("path", sorted((HPARAMS_DIR / "lora").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_lora_hparams_validate(path):
    hparams, _ = load_hparams("lora", "x", "x", path=path)
    LoRAHparams.from_dict(hparams)


def test_shipped_lora_hparams_cover_the_models():
    stems = {p.stem for p in (HPARAMS_DIR / "lora").glob("*.yaml")}
    assert {
        "knowgic-tiny",
        "gpt2-xl",
        "gpt-j-6b",
        "llama-3-8b",
        "qwen2.5-7b",
        "gemma3-270m",
        "smollm2-135m",
    } <= stems


@pytest.mark.slow
def test_lora_efficacy_on_knowgic_tiny(knowgic_tiny):
    """Efficacy >= 0.9 on the distinct edits; the leak to same-template subjects is measured, not asserted."""
    lm = knowgic_tiny
    hparams, _ = load_hparams("lora", lm.model_id, lm.family)
    editor = LoRAEditor(hparams)
    cases = load_all_cases()
    requests = distinct_requests()
    assert len(requests) == 26
    before = state_copy(lm.model)
    pre = {hash(r): greedy_gives_target(lm.model, lm.tokenizer, neighbours(r, cases)) for r in requests}
    wins, switched, total, seconds = 0, 0, 0, 0.0
    for req in requests:
        start = time.perf_counter()
        handle = editor.apply(lm.model, lm.tokenizer, [req])
        seconds += time.perf_counter() - start
        wins += efficacy(lm.model, lm.tokenizer, req)
        s, n = leak_counts(lm.model, lm.tokenizer, req, cases, pre)
        switched, total = switched + s, total + n
        handle.restore()
    assert states_equal(before, state_copy(lm.model))
    assert not hasattr(lm.model, "peft_config")
    eff = wins / len(requests)
    print(
        f"\nLoRA on knowgic-tiny: efficacy {eff:.3f} ({wins}/{len(requests)}), {seconds / len(requests):.2f} s/edit; "
        f"same-template neighbours whose top prediction became target_new: {switched}/{total}"
    )
    assert eff >= 0.9, f"LoRA efficacy {eff:.3f} < 0.9"
