"""The restore check: it must catch any change an editor leaves behind, and only real changes."""

from __future__ import annotations

import re

import pytest
import torch

from knowgic.errors import RestoreError
from knowgic.evaluation.fingerprint import assert_restored, changed_since, checksum, fingerprint


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


# --- writes that bypass PyTorch's version counter -----------------------------------------------------


def _restore_from(weight: torch.Tensor, saved: torch.Tensor) -> None:
    with torch.no_grad():
        weight.data = saved.clone()


@pytest.mark.parametrize("write", ["data-add", "data-assign", "numpy-view"])
def test_writes_through_data_and_numpy_are_caught(random_gpt2, write: str) -> None:
    model, _ = random_gpt2
    stamps = fingerprint(model)
    name = "transformer.h.0.attn.c_attn.weight"
    weight = model.get_parameter(name)
    saved = weight.detach().clone()
    version = weight._version
    try:
        if write == "data-add":
            weight.data.add_(1e-3)
        elif write == "data-assign":
            replacement = saved.clone()
            replacement[7, 11] += 1.0
            weight.data = replacement
        else:
            weight.detach().numpy()[2, 3] += 0.5
        # None of these writes moves the parameter's version counter: only its content shows the change.
        assert weight._version == version
        assert changed_since(model, stamps) == [f"param:{name}"]
        with pytest.raises(RestoreError, match=re.escape(name)):
            assert_restored(model, stamps, "sloppy")
    finally:
        _restore_from(weight, saved)
    # A restore to the exact bits passes, even though the tensor object behind .data is a new one.
    assert changed_since(model, stamps) == []
    assert assert_restored(model, stamps, "careful") is stamps


def test_bfloat16_single_element_change_is_caught() -> None:
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 8).to(torch.bfloat16)
    stamps = fingerprint(module)
    saved = module.weight.detach().clone()
    with torch.no_grad():
        old = module.weight[2, 6].clone()
        module.weight.data[2, 6] = torch.nextafter(old, torch.tensor(float("inf"), dtype=torch.bfloat16))
    assert not torch.equal(module.weight, saved)
    assert changed_since(module, stamps) == ["param:weight"]
    module.weight.data.copy_(saved)
    assert changed_since(module, stamps) == []


def test_scalar_buffer_write_through_data_is_caught() -> None:
    module = torch.nn.Linear(2, 2)
    module.register_buffer("scale", torch.tensor(16.0, dtype=torch.bfloat16))
    stamps = fingerprint(module)
    module.scale.data = torch.tensor(16.125, dtype=torch.bfloat16)
    assert changed_since(module, stamps) == ["buffer:scale"]
    module.scale.data = torch.tensor(16.0, dtype=torch.bfloat16)
    assert changed_since(module, stamps) == []


def test_tied_weights_are_checked_under_both_names(random_gpt2) -> None:
    model, _ = random_gpt2
    stamps = fingerprint(model)
    assert model.lm_head.weight is model.transformer.wte.weight
    weight = model.transformer.wte.weight
    saved = weight.detach().clone()
    try:
        weight.data[5, 0] += 1.0
        assert changed_since(model, stamps) == ["param:lm_head.weight", "param:transformer.wte.weight"]
    finally:
        _restore_from(weight, saved)
    assert changed_since(model, stamps) == []


# --- the on-device checksum, exercised on the CPU ------------------------------------------------------


def _reference_checksum(tensor: torch.Tensor, chunk: int) -> str:
    """The same sum in Python's exact integers, reduced modulo 2^64 at the end."""
    from knowgic.evaluation.fingerprint import _LANE_SEEDS, _as_integers, _odd_weights

    bits = [int(v) for v in _as_integers(tensor).tolist()]
    n_chunks = -(-len(bits) // chunk)
    lanes = []
    for seed in _LANE_SEEDS:
        within = [int(w) for w in _odd_weights(min(chunk, len(bits)), seed, torch.device("cpu")).tolist()]
        across = [int(w) for w in _odd_weights(n_chunks, ~seed, torch.device("cpu")).tolist()]
        total = sum(across[i // chunk] * within[i % chunk] * x for i, x in enumerate(bits))
        lanes.append(total % 2**64)
    return "".join(f"{lane:016x}" for lane in lanes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8])
def test_checksum_equals_exact_integer_arithmetic(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(1)
    tensor = (torch.randn(37, generator=generator) * 100).to(dtype)
    assert checksum(tensor, chunk=8) == _reference_checksum(tensor, chunk=8)
    assert checksum(tensor[0], chunk=8) == _reference_checksum(tensor[0], chunk=8)  # 0-dim


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.bool])
def test_checksum_catches_every_single_element_change(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(2)
    tensor = (
        (torch.randn(4, 13, generator=generator) > 0)
        if dtype == torch.bool
        else torch.randn(4, 13, generator=generator).to(dtype)
    )
    base = checksum(tensor, chunk=16)
    seen = {base}
    flat = tensor.reshape(-1)
    for i in range(flat.numel()):
        changed = flat.clone()
        if dtype == torch.bool:
            changed[i] = ~changed[i]
        else:
            # The smallest change there is: one unit in the last place.
            changed[i] = torch.nextafter(changed[i], torch.tensor(float("inf"), dtype=dtype))
        digest = checksum(changed.reshape(tensor.shape), chunk=16)
        assert digest != base, i
        seen.add(digest)
    assert len(seen) == flat.numel() + 1
    assert checksum(tensor.clone(), chunk=16) == base


def test_checksum_depends_on_positions_within_and_across_chunks() -> None:
    tensor = torch.arange(32, dtype=torch.float32)
    base = checksum(tensor, chunk=8)
    swapped_within = tensor.clone()
    swapped_within[[1, 2]] = swapped_within[[2, 1]]
    swapped_across = tensor.clone()
    swapped_across[[3, 11]] = swapped_across[[11, 3]]  # same place in two chunks
    assert checksum(swapped_within, chunk=8) != base
    assert checksum(swapped_across, chunk=8) != base
    assert checksum(tensor.reshape(4, 8).t().contiguous().t(), chunk=8) == base  # layout is not content


@pytest.mark.gpu
def test_accelerator_tensors_are_checked_on_the_device(random_gpt2) -> None:
    import copy

    model = copy.deepcopy(random_gpt2[0]).to("cuda")
    stamps = fingerprint(model)
    assert all(s.digest.startswith("sum:") for s in stamps.values())
    weight = model.transformer.h[1].mlp.c_fc.weight
    # The device sum is the same arithmetic as on the CPU.
    assert stamps["param:transformer.h.1.mlp.c_fc.weight"].digest == "sum:" + checksum(weight.cpu())
    saved = weight.detach().clone()
    weight.data[0, 0] = torch.nextafter(saved[0, 0], torch.tensor(float("inf"), device="cuda"))
    assert changed_since(model, stamps) == ["param:transformer.h.1.mlp.c_fc.weight"]
    weight.data = saved
    assert changed_since(model, stamps) == []
    half = model.to(torch.bfloat16)
    stamps = fingerprint(half)
    half.transformer.h[0].ln_1.weight.data.mul_(2)
    assert changed_since(half, stamps) == ["param:transformer.h.0.ln_1.weight"]
