"""Deltas: written atomically within a quota by the edit stage, validated by the score stage's reader.

The model is the 2-layer random GPT-2 fixture: the format and its checks need no knowledge in the model.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import stat
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from knowgic.errors import KnowgicError
from knowgic.evaluation.fingerprint import fingerprint
from knowgic.runner.stages.deltas import (
    DONE_MARKER,
    FAILED_MARKER,
    SEQUENTIAL_KEY,
    DeltaEdit,
    DeltaError,
    DeltaReader,
    DeltaWriter,
    apply_tensors,
    changed_tensors,
    folder_bytes,
    independent_key,
    model_spec,
)

EDIT_ID = "0123456789ab"
OTHER_ID = "ba9876543210"
WEIGHT = "param:transformer.h.0.mlp.c_proj.weight"


@pytest.fixture
def model(random_gpt2) -> torch.nn.Module:
    return random_gpt2[0]


def _edited(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The delta of a real in-place edit of one weight (restored afterwards)."""
    pristine = fingerprint(model)
    weight = model.transformer.h[0].mlp.c_proj.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight[0, 0] += 1.0
    try:
        return changed_tensors(model, pristine)
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def _write(
    folder: Path, tensors: dict[str, torch.Tensor], edit_id: str = EDIT_ID, key: str | None = None
) -> str:
    key = key or independent_key(0, edit_id)
    DeltaWriter(folder, quota_bytes=1 << 30).write(
        key, "independent", [DeltaEdit(edit_id, "", {"loss": 0.5})], tensors
    )
    return key


def _reader(folder: Path, model: torch.nn.Module, **kwargs) -> DeltaReader:
    return DeltaReader(
        folder, model_spec(model), timeout_seconds=kwargs.pop("timeout_seconds", 5.0), **kwargs
    )


def test_changed_tensors_are_exactly_the_edited_ones(model) -> None:
    tensors = _edited(model)
    assert list(tensors) == [WEIGHT]
    assert tensors[WEIGHT][0, 0] == model.transformer.h[0].mlp.c_proj.weight[0, 0] + 1.0


def test_round_trip_applies_and_restores_bitwise(model, tmp_path) -> None:
    tensors = _edited(model)
    key = _write(tmp_path, tensors)
    reader = _reader(tmp_path, model)
    reader.wait_for(key)
    delta = reader.read(key, "independent", [EDIT_ID])
    assert delta.edits == [DeltaEdit(EDIT_ID, "", {"loss": 0.5}, None)]
    assert torch.equal(delta.tensors[WEIGHT], tensors[WEIGHT])
    before = fingerprint(model)
    restore = apply_tensors(model, delta.tensors)
    assert torch.equal(model.transformer.h[0].mlp.c_proj.weight, tensors[WEIGHT])
    restore()
    assert fingerprint(model) == before
    reader.remove(key)
    assert list(tmp_path.iterdir()) == []


def test_no_temporary_files_are_left_and_sidecar_is_last(model, tmp_path) -> None:
    key = _write(tmp_path, _edited(model))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{key}.json", f"{key}.safetensors"]
    sidecar = json.loads((tmp_path / f"{key}.json").read_text())
    assert sidecar["tensors"] == f"{key}.safetensors" and sidecar["tensor_names"] == [WEIGHT]
    mask = os.umask(0o022)
    os.umask(mask)
    for path in tmp_path.iterdir():  # readable by a score stage running as another user
        assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~mask


def test_in_context_delta_has_no_tensors_file(model, tmp_path) -> None:
    writer = DeltaWriter(tmp_path, quota_bytes=1 << 20)
    writer.write(SEQUENTIAL_KEY, "sequential", [DeltaEdit(EDIT_ID, "New fact: A is B.\n", {})], {})
    assert [p.name for p in tmp_path.iterdir()] == [f"{SEQUENTIAL_KEY}.json"]
    delta = _reader(tmp_path, model).read(SEQUENTIAL_KEY, "sequential", [EDIT_ID])
    assert delta.tensors == {} and delta.edits[0].prompt_prefix == "New fact: A is B.\n"


def test_writer_waits_while_the_folder_is_over_quota(model, tmp_path) -> None:
    tensors = _edited(model)
    writer = DeltaWriter(tmp_path, quota_bytes=1, poll_seconds=0.01)
    first = independent_key(0, EDIT_ID)
    writer.write(first, "independent", [DeltaEdit(EDIT_ID)], tensors)  # an empty folder always takes one
    held = folder_bytes(tmp_path)
    second_written = threading.Event()

    def write_second() -> None:
        writer.write(independent_key(1, OTHER_ID), "independent", [DeltaEdit(OTHER_ID)], tensors)
        second_written.set()

    thread = threading.Thread(target=write_second)
    thread.start()
    time.sleep(0.5)
    assert not second_written.is_set(), "the writer did not wait for the folder to drain"
    _reader(tmp_path, model).remove(first)
    thread.join(timeout=10)
    assert second_written.is_set()
    assert writer.peak_bytes == held and writer.wait_seconds >= 0.4


def test_writer_gives_up_after_its_wait_timeout(model, tmp_path) -> None:
    tensors = _edited(model)
    writer = DeltaWriter(tmp_path, quota_bytes=1, poll_seconds=0.01, wait_timeout=0.2)
    writer.write(independent_key(0, EDIT_ID), "independent", [DeltaEdit(EDIT_ID)], tensors)
    with pytest.raises(KnowgicError, match=re.escape("waited 0.2 s for the score stage")):
        writer.write(independent_key(1, OTHER_ID), "independent", [DeltaEdit(OTHER_ID)], tensors)


def test_structural_changes_are_refused_in_the_edit_stage(model) -> None:
    pristine = fingerprint(model)
    model.register_buffer("smuggled", torch.zeros(3))
    try:
        with pytest.raises(DeltaError, match="added buffer:smuggled"):
            changed_tensors(model, pristine)
    finally:
        del model._buffers["smuggled"]


# -- hostile deltas: each is refused with its reason ---------------------------------------------------


def _tamper_tensors(folder: Path, key: str, tensors: dict[str, torch.Tensor]) -> None:
    save_file(tensors, str(folder / f"{key}.safetensors"))


def _read(folder: Path, model: torch.nn.Module, key: str, ids=(EDIT_ID,), **kwargs) -> None:
    reader = _reader(folder, model, **kwargs)
    reader.wait_for(key)
    reader.read(key, "independent", list(ids))


def test_wrong_shape_is_refused(model, tmp_path) -> None:
    key = _write(tmp_path, _edited(model))
    _tamper_tensors(tmp_path, key, {WEIGHT: torch.zeros(3, 3)})
    with pytest.raises(DeltaError, match=r"has shape \[3, 3\], the model's is \[256, 64\]"):
        _read(tmp_path, model, key)


def test_wrong_dtype_is_refused(model, tmp_path) -> None:
    tensors = _edited(model)
    key = _write(tmp_path, tensors)
    _tamper_tensors(tmp_path, key, {WEIGHT: tensors[WEIGHT].double()})
    with pytest.raises(DeltaError, match=re.escape("has dtype torch.float64, the model's is torch.float32")):
        _read(tmp_path, model, key)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_values_are_refused(model, tmp_path, bad: float) -> None:
    tensors = _edited(model)
    tensors[WEIGHT][1, 2] = bad
    key = _write(tmp_path, tensors)
    with pytest.raises(DeltaError, match=r"has 1 non-finite value\(s\)"):
        _read(tmp_path, model, key)


def test_unknown_parameter_is_refused(model, tmp_path) -> None:
    tensors = _edited(model)
    key = _write(tmp_path, {**tensors, "param:backdoor.weight": torch.zeros(2)})
    with pytest.raises(
        DeltaError, match=re.escape("'param:backdoor.weight' is not a parameter or buffer of the model")
    ):
        _read(tmp_path, model, key)


@pytest.mark.parametrize(
    "payload",
    [pickle.dumps({"weight": torch.zeros(2)}), b"not a tensors file at all", b"\xff" * 8 + b"{}"],
    ids=["pickle", "text", "bad-header"],
)
def test_non_safetensors_file_is_refused_without_unpickling(model, tmp_path, payload: bytes) -> None:
    key = _write(tmp_path, _edited(model))
    (tmp_path / f"{key}.safetensors").write_bytes(payload)
    with pytest.raises(DeltaError, match="is not a valid safetensors file"):
        _read(tmp_path, model, key)


def test_sidecar_claiming_other_edit_ids_is_refused(model, tmp_path) -> None:
    key = _write(tmp_path, _edited(model))
    with pytest.raises(DeltaError, match=f"claims edit id\\(s\\) {EDIT_ID}, expected {OTHER_ID}"):
        _read(tmp_path, model, key, ids=(OTHER_ID,))


def test_sidecar_pointing_outside_the_folder_is_refused(model, tmp_path) -> None:
    key = _write(tmp_path, _edited(model))
    path = tmp_path / f"{key}.json"
    sidecar = json.loads(path.read_text())
    sidecar["tensors"] = "../../etc/passwd"
    path.write_text(json.dumps(sidecar))
    with pytest.raises(DeltaError, match=re.escape("names tensors file '../../etc/passwd', expected")):
        _read(tmp_path, model, key)


def test_linked_delta_is_refused(model, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "deltas"
    folder.mkdir()
    key = _write(outside, _edited(model))
    os.replace(outside / f"{key}.json", folder / f"{key}.json")
    os.symlink(outside / f"{key}.safetensors", folder / f"{key}.safetensors")
    with pytest.raises(DeltaError, match="is not a regular file"):
        _read(folder, model, key)


def test_fifo_is_refused_without_blocking(model, tmp_path) -> None:
    key = _write(tmp_path, _edited(model))
    (tmp_path / f"{key}.safetensors").unlink()
    os.mkfifo(tmp_path / f"{key}.safetensors")
    with pytest.raises(DeltaError, match="is not a regular file"):
        _read(tmp_path, model, key)


def test_oversized_delta_is_refused(model, tmp_path) -> None:
    key = _write(tmp_path, _edited(model))
    with pytest.raises(DeltaError, match="more than the limit of 1000"):
        _read(tmp_path, model, key, max_tensor_bytes=1000)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(format="pickle"), "breaks the delta schema at /format"),
        (lambda s: s["edits"][0].update(edit_id="../../x"), "breaks the delta schema at /edits/0/edit_id"),
        (lambda s: s.update(extra=1), "breaks the delta schema at /"),
        (
            lambda s: s["edits"][0].update(prompt_prefix="x" * 100_001),
            "breaks the delta schema at /edits/0/prompt_prefix",
        ),
        (
            lambda s: s["edits"][0].update(info={"log": "x" * 70_000}),
            "the info of edit 0123456789ab has 70011 bytes",
        ),
        (
            lambda s: s.update(tensor_names=[]),
            "lists tensors other than those edit-0000-0123456789ab.safetensors",
        ),
        (lambda s: s.update(mode="sequential"), "is for mode 'sequential', the job's is 'independent'"),
        (lambda s: s.update(key="edit-0001-0123456789ab"), "claims key 'edit-0001-0123456789ab'"),
    ],
    ids=["format", "edit-id", "extra-field", "prefix-size", "info-size", "tensor-names", "mode", "key"],
)
def test_malformed_sidecar_is_refused(model, tmp_path, change, message: str) -> None:
    key = _write(tmp_path, _edited(model))
    path = tmp_path / f"{key}.json"
    sidecar = json.loads(path.read_text())
    change(sidecar)
    path.write_text(json.dumps(sidecar))
    with pytest.raises(DeltaError, match=re.escape(message)):
        _read(tmp_path, model, key)


def test_sidecar_that_is_not_json_is_refused(model, tmp_path) -> None:
    key = _write(tmp_path, _edited(model))
    (tmp_path / f"{key}.json").write_bytes(b"\x80\x81 not json")
    with pytest.raises(DeltaError, match="is not valid JSON"):
        _read(tmp_path, model, key)


# -- markers -------------------------------------------------------------------------------------------


def test_failed_marker_fails_the_wait_with_the_edit_stage_reason(model, tmp_path) -> None:
    (tmp_path / FAILED_MARKER).write_text("editor 'x' failed on edit 0123456789ab: boom\n\x1b[31mred\n")
    with pytest.raises(
        DeltaError, match="the edit stage failed: editor 'x' failed on edit 0123456789ab: boom"
    ):
        _reader(tmp_path, model).wait_for(independent_key(0, EDIT_ID))


def test_done_without_the_delta_fails(model, tmp_path) -> None:
    (tmp_path / DONE_MARKER).write_text("done\n")
    with pytest.raises(DeltaError, match="finished without writing the delta edit-0000-0123456789ab"):
        _reader(tmp_path, model).wait_for(independent_key(0, EDIT_ID))


def test_waiting_times_out(model, tmp_path) -> None:
    start = time.monotonic()
    with pytest.raises(
        DeltaError, match=re.escape("timed out after 0.3 s waiting for the edit stage's delta")
    ):
        _reader(tmp_path, model, timeout_seconds=0.3, poll_seconds=0.01).wait_for(independent_key(0, EDIT_ID))
    assert time.monotonic() - start < 5


def test_tied_weights_are_written_under_each_name_and_restored(model, tmp_path) -> None:
    """GPT-2 ties its output layer to the token embeddings: one storage, two names."""
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    pristine = fingerprint(model)
    embeddings = model.transformer.wte.weight
    saved = embeddings.detach().clone()
    with torch.no_grad():
        embeddings[3, 1] -= 2.0
    try:
        tensors = changed_tensors(model, pristine)
    finally:
        with torch.no_grad():
            embeddings.copy_(saved)
    assert sorted(tensors) == ["param:lm_head.weight", "param:transformer.wte.weight"]
    key = _write(tmp_path, tensors)
    delta = _reader(tmp_path, model).read(key, "independent", [EDIT_ID])
    restore = apply_tensors(model, delta.tensors)
    assert model.lm_head.weight[3, 1] == saved[3, 1] - 2.0
    restore()
    assert fingerprint(model) == pristine
