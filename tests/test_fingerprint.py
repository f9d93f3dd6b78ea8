"""The restore check: it must catch any change an editor leaves behind, and only real changes."""

from __future__ import annotations

import pytest
import torch

from knowgic.errors import RestoreError
from knowgic.evaluation.fingerprint import assert_restored, changed_since, fingerprint


def test_untouched_model_passes(random_gpt2) -> None:
    model, _ = random_gpt2
    stamps = fingerprint(model)
    assert changed_since(model, stamps) == []
    assert_restored(model, stamps, "none")


def test_exact_restore_passes_after_in_place_write(random_gpt2) -> None:
    model, _ = random_gpt2
    stamps = fingerprint(model)
    weight = model.transformer.h[0].mlp.c_proj.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.add_(1.0)
        weight.copy_(saved)
    # The version counter moved, but the content is identical: not a change.
    assert changed_since(model, stamps) == []
    assert_restored(model, stamps, "x")


def test_single_element_change_is_caught(random_gpt2) -> None:
    model, _ = random_gpt2
    stamps = fingerprint(model)
    weight = model.transformer.h[1].mlp.c_proj.weight
    with torch.no_grad():
        old = weight[3, 5].item()
        weight[3, 5] = torch.nextafter(torch.tensor(old), torch.tensor(float("inf")))
    try:
        assert changed_since(model, stamps) == ["param:transformer.h.1.mlp.c_proj.weight"]
        with pytest.raises(RestoreError, match=r"transformer\.h\.1\.mlp\.c_proj\.weight"):
            assert_restored(model, stamps, "leaky")
    finally:
        with torch.no_grad():
            weight[3, 5] = old
    assert changed_since(model, stamps) == []


def test_replaced_and_added_parameters_are_caught(random_gpt2) -> None:
    model, _ = random_gpt2
    stamps = fingerprint(model)
    mlp = model.transformer.h[0].mlp
    original = mlp.c_fc.bias
    try:
        mlp.c_fc.bias = torch.nn.Parameter(original.detach().clone() + 1)
        assert changed_since(model, stamps) == ["param:transformer.h.0.mlp.c_fc.bias"]
        mlp.c_fc.bias = original
        mlp.register_parameter("extra", torch.nn.Parameter(torch.zeros(2)))
        assert changed_since(model, stamps) == ["param:transformer.h.0.mlp.extra"]
    finally:
        mlp.c_fc.bias = original
        if "extra" in mlp._parameters:
            del mlp._parameters["extra"]
    assert changed_since(model, stamps) == []


def test_scalar_buffers_are_fingerprinted_and_checked() -> None:
    # Gemma 3 keeps its embedding scale as a 0-dim buffer; a scalar must hash and its change be caught.
    module = torch.nn.Linear(2, 2)
    module.register_buffer("scale", torch.tensor(16.0))
    stamps = fingerprint(module)
    assert changed_since(module, stamps) == []
    with torch.no_grad():
        module.scale.fill_(17.0)
    assert changed_since(module, stamps) == ["buffer:scale"]
