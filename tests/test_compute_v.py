"""The value objective reads the LM head at the loss's positions only; that must not change δ."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from knowgic.editors.nethook import logits_only_at
from knowgic.editors.rome import compute_v
from knowgic.editors.rome.compute_v import DeltaObjective, optimize_delta
from knowgic.records import EditRequest

REQUEST = EditRequest(
    "{} studied at",
    "Harry Potter",
    "Hogwarts School of Witchcraft and Wizardry",
    "Ilvermorny School of Witchcraft and Wizardry",
)
OBJECTIVE = DeltaObjective(
    num_grad_steps=6, lr=0.5, weight_decay=1e-3, clamp_norm_factor=4.0, kl_factor=0.0625, early_stop_loss=0.0
)
TEMPLATES = ["{}", "The day began. {}", "After a long walk home, {}"]


@contextmanager
def _full_logits(model, rows, positions):
    yield False  # the plain path: logits at every position, selected afterwards


def _gemma3_text():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        final_logit_softcapping=30.0,  # elementwise after the head: must commute with the gathering
    )
    return Gemma3ForCausalLM(config).eval()


@pytest.mark.parametrize("family", ["gpt2", "gemma3_text"])
def test_gathered_logits_give_the_same_delta(random_gpt2, monkeypatch, family):
    gpt2, tokenizer = random_gpt2
    model, module = (
        (gpt2, "transformer.h.0.mlp.c_proj")
        if family == "gpt2"
        else (_gemma3_text(), "model.layers.0.mlp.down_proj")
    )
    fast = optimize_delta(model, tokenizer, REQUEST, module, TEMPLATES, OBJECTIVE, progress=False)
    monkeypatch.setattr(compute_v, "logits_only_at", _full_logits)
    full = optimize_delta(model, tokenizer, REQUEST, module, TEMPLATES, OBJECTIVE, progress=False)
    assert fast.steps == full.steps == OBJECTIVE.num_grad_steps
    torch.testing.assert_close(fast.delta, full.delta, rtol=1e-4, atol=1e-5)
    assert fast.losses == pytest.approx(full.losses, rel=1e-5)
    assert fast.delta.norm() > 0


def test_logits_only_at_restores_the_head(random_gpt2):
    model, tokenizer = random_gpt2
    ids = tokenizer(["Harry Potter studied at"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        before = model(input_ids=ids).logits
        with logits_only_at(model, torch.tensor([0, 0]), torch.tensor([1, 3])) as gathered:
            picked = model(input_ids=ids).logits
        after = model(input_ids=ids).logits
    assert gathered and picked.shape == (1, 2, before.shape[-1])
    torch.testing.assert_close(picked[0], before[0, [1, 3]])
    torch.testing.assert_close(after, before)
