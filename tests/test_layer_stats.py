"""Second-moment statistics: the value, the cache key, and rebuilding corrupt or mismatched cache files."""

from __future__ import annotations

import json

import pytest
import torch

from knowgic.editors import layer_stats
from knowgic.editors.layer_stats import (
    SecondMoments,
    StatsKey,
    knowgic_texts,
    load_corpus,
    model_fingerprint,
    model_identity,
    model_revision,
    parse_datasets_corpus,
    second_moment,
    stats_paths,
)
from knowgic.editors.nethook import Trace
from knowgic.editors.repr_tools import encode, make_batch
from knowgic.errors import KnowgicError

LAYER = "transformer.h.0.mlp.c_proj"
N = 30  # texts per cached statistic in these tests (a few hundred tokens)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path))
    return tmp_path


def _direct(model, tok, texts):
    """E[k kᵀ] computed the plain way: one text at a time, every token (the fixture adds no specials)."""
    total, count = 0, 0
    for text in texts:
        batch = make_batch(tok, [encode(tok, text)])
        with torch.no_grad(), Trace(model, [LAYER], retain_input=True, retain_output=False) as tr:
            model(**batch.model_inputs())
        k = tr[LAYER].input[0].double()
        total = total + k.T @ k
        count += k.shape[0]
    return total / count


def _key(**kw) -> StatsKey:
    """The key :func:`_stats` stores its result under."""
    fields = dict(
        model_id="org/model-a",
        model_revision="rev-a",
        layer=LAYER,
        corpus="knowgic",
        corpus_hash=load_corpus("knowgic", N).content_hash,
        sample_count=N,
        dtype="float32",
        shape=(256, 256),
    )
    fields.update(kw)
    return StatsKey(**fields)


def _stats(model, tok, **kw):
    args = dict(
        model_id="org/model-a",
        model_revision="rev-a",
        corpus="knowgic",
        sample_count=N,
        dtype="float32",
        progress=False,
    )
    args.update(kw)
    return second_moment(model, tok, LAYER, **args)


def test_second_moment_value_and_shape(random_gpt2, cache):
    model, tok = random_gpt2
    c = _stats(model, tok)
    texts = load_corpus("knowgic", N).texts
    assert len(texts) == N
    assert c.shape == (256, 256) and c.dtype == torch.float32
    torch.testing.assert_close(c.double(), _direct(model, tok, texts), rtol=1e-5, atol=1e-7)
    assert torch.allclose(c, c.T)


def test_second_moment_full_rank_on_enough_text(random_gpt2):
    """~1.7k tokens of the benchmark's texts give a full-rank C for 256-dim keys, so C⁻¹k* is defined."""
    model, tok = random_gpt2
    c, tokens = layer_stats.collect_second_moment(
        model, tok, LAYER, load_corpus("knowgic", 200).texts, progress=False
    )
    assert tokens > 1000
    assert float(torch.linalg.eigvalsh(c).min()) > 0


def test_cache_is_used_and_keyed(random_gpt2, cache, monkeypatch):
    model, tok = random_gpt2
    first = _stats(model, tok)
    tensor_path, meta_path = stats_paths(_key())
    assert tensor_path.is_file() and meta_path.is_file()
    meta = json.loads(meta_path.read_text())
    assert meta["texts_used"] == N and meta["tokens"] > N and meta["corpus_source"]

    def boom(*a, **k):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(layer_stats, "collect_second_moments", boom)
    assert torch.equal(_stats(model, tok), first)
    # Every part of the key selects another file: each of these must recompute.
    for kw in (
        {"model_revision": "rev-b"},
        {"model_id": "org/model-b"},
        {"sample_count": N - 1},
        {"dtype": "float64"},
    ):
        with pytest.raises(AssertionError, match="recomputed"):
            _stats(model, tok, **kw)


def _corrupt_and_check(model, tok, cache, monkeypatch, corrupt) -> None:
    good = _stats(model, tok)
    tensor_path, meta_path = stats_paths(_key())
    corrupt(tensor_path, meta_path)
    calls = []
    real = layer_stats.collect_second_moments

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(layer_stats, "collect_second_moments", counting)
    rebuilt = _stats(model, tok)
    assert calls == [1], "a corrupt cache file was used instead of rebuilt"
    assert torch.equal(rebuilt, good)
    # ... and the rebuilt file is valid again.
    monkeypatch.setattr(layer_stats, "collect_second_moments", real)
    calls.clear()
    monkeypatch.setattr(layer_stats, "collect_second_moments", counting)
    _stats(model, tok)
    assert calls == []


def test_truncated_tensor_file_is_rebuilt(random_gpt2, cache, monkeypatch):
    def truncate(tensor_path, meta_path):
        data = tensor_path.read_bytes()
        tensor_path.write_bytes(data[: len(data) // 2])

    _corrupt_and_check(*random_gpt2, cache, monkeypatch, truncate)


def test_mismatched_metadata_is_rebuilt(random_gpt2, cache, monkeypatch):
    def wrong_key(tensor_path, meta_path):
        meta = json.loads(meta_path.read_text())
        meta["model_revision"] = "someone-else"
        meta_path.write_text(json.dumps(meta))

    _corrupt_and_check(*random_gpt2, cache, monkeypatch, wrong_key)


def test_wrong_shape_with_forged_metadata_is_rebuilt(random_gpt2, cache, monkeypatch):
    from safetensors.torch import save_file

    def wrong_shape(tensor_path, meta_path):
        save_file({"mom2": torch.eye(8)}, str(tensor_path))
        meta = json.loads(meta_path.read_text())
        meta["tensor_sha256"] = layer_stats._sha256_file(tensor_path)  # consistent hash, wrong content
        meta_path.write_text(json.dumps(meta))

    _corrupt_and_check(*random_gpt2, cache, monkeypatch, wrong_shape)


def test_garbage_metadata_is_rebuilt(random_gpt2, cache, monkeypatch):
    _corrupt_and_check(*random_gpt2, cache, monkeypatch, lambda t, m: m.write_text("{not json"))


def test_fingerprint_tracks_weights(random_gpt2):
    model, _ = random_gpt2
    fp = model_fingerprint(model)
    assert fp == model_fingerprint(model)
    param = model.get_parameter("transformer.h.1.mlp.c_fc.weight")
    saved = param.detach().clone()
    try:
        with torch.no_grad():
            param.mul_(1.01)
        assert model_fingerprint(model) != fp
    finally:
        with torch.no_grad():
            param.copy_(saved)
    assert model_fingerprint(model) == fp


def test_revision_prefers_declared(random_gpt2):
    model, _ = random_gpt2
    assert model_revision(model).startswith("fp-")
    model.config._knowgic_revision = "abc123"
    try:
        assert model_revision(model) == "abc123|float32"
    finally:
        del model.config._knowgic_revision


def test_model_id_separates_models_whose_revision_is_unknown(random_gpt2, cache):
    """Two hub models whose commit could not be resolved both have the revision "unknown": the model id
    keeps their statistics apart (another file, recomputed), and the metadata records it."""
    model, tok = random_gpt2
    a = _key(model_id="org/model-a", model_revision="unknown|float32")
    b = _key(model_id="org/model-b", model_revision="unknown|float32")
    assert stats_paths(a)[0] != stats_paths(b)[0]
    assert stats_paths(a) == stats_paths(_key(model_id="org/model-a", model_revision="unknown|float32"))
    _stats(model, tok, model_id="org/model-a", model_revision="unknown|float32")
    assert json.loads(stats_paths(a)[1].read_text())["model_id"] == "org/model-a"
    assert not stats_paths(b)[0].exists()


def test_model_identity(random_gpt2):
    model, _ = random_gpt2
    assert model_identity(model) == ""  # built in memory: the fingerprint identifies it
    model.config._name_or_path = "/models/some-gpt2"
    try:
        assert model_identity(model) == "/models/some-gpt2"
        model.config._knowgic_model_id = "knowgic-tiny"  # what the harness sets wins
        assert model_identity(model) == "knowgic-tiny"
    finally:
        model.config._name_or_path = ""
        model.config.__dict__.pop("_knowgic_model_id", None)
    assert model_identity(model) == ""


def test_memo_keeps_pristine_statistics(random_gpt2, cache, monkeypatch):
    """A sequential run edits the model; the editor's memo must not recompute C for the edited weights."""
    model, tok = random_gpt2
    memo = SecondMoments()
    c1 = memo.get(model, tok, LAYER, corpus="knowgic", sample_count=N, dtype="float32", progress=False)
    param = model.get_parameter("transformer.h.0.mlp.c_fc.weight")
    saved = param.detach().clone()
    monkeypatch.setattr(
        layer_stats, "collect_second_moments", lambda *a, **k: (_ for _ in ()).throw(AssertionError)
    )
    try:
        with torch.no_grad():
            param.add_(0.1)
        c2 = memo.get(model, tok, LAYER, corpus="knowgic", sample_count=N, dtype="float32", progress=False)
    finally:
        with torch.no_grad():
            param.copy_(saved)
    assert c2.dtype == torch.float64 and torch.equal(c1, c2)


def test_corpus_names():
    assert parse_datasets_corpus("wikitext:wikitext-103-raw-v1") == (
        "wikitext",
        "wikitext-103-raw-v1",
        "train",
    )
    assert parse_datasets_corpus("wikimedia/wikipedia:20231101.en@train[:10]") == (
        "wikimedia/wikipedia",
        "20231101.en",
        "train[:10]",
    )
    with pytest.raises(KnowgicError, match="stats corpus"):
        parse_datasets_corpus("bad name with spaces")
    with pytest.raises(KnowgicError, match="sample count"):
        load_corpus("knowgic", 0)


def test_the_papers_wikipedia_corpus_reaches_datasets():
    """The shipped hparams' 'wikimedia/wikipedia:20231101.en' reaches datasets as path and config; offline (as
    in tests) that fails as a one-line error naming the corpus, after no download."""
    assert parse_datasets_corpus("wikimedia/wikipedia:20231101.en") == (
        "wikimedia/wikipedia",
        "20231101.en",
        "train",
    )
    with pytest.raises(
        KnowgicError, match=r"stats corpus 'wikimedia/wikipedia:20231101.en'.*wikimedia/wikipedia"
    ):
        load_corpus("wikimedia/wikipedia:20231101.en", 5)


def test_stats_overrides():
    assert layer_stats.stats_overrides(None, None) == {}
    assert layer_stats.stats_overrides("knowgic", 300) == {"mom2_dataset": "knowgic", "mom2_n_samples": 300}
    assert layer_stats.stats_overrides("wikitext:wikitext-103-raw-v1", None) == {
        "mom2_dataset": "wikitext:wikitext-103-raw-v1"
    }
    with pytest.raises(KnowgicError, match="stats corpus"):
        layer_stats.stats_overrides("two words", None)
    with pytest.raises(KnowgicError, match="positive integer"):
        layer_stats.stats_overrides(None, 0)


def test_knowgic_documents():
    texts, _ = knowgic_texts()
    docs = layer_stats.knowgic_documents(texts, 250)
    assert len(docs) == 250 and docs == layer_stats.knowgic_documents(texts, 250)
    assert docs[:10] == layer_stats.knowgic_documents(texts, 10)  # a prefix of the same stream
    first_pass = " ".join(docs[: -(-len(texts) // 6)])
    assert all(t in first_pass for t in texts[:50])  # every text once per pass
    assert load_corpus("knowgic", 7).texts == tuple(docs[:7])


def test_several_layers_in_one_pass(random_gpt2, cache, monkeypatch):
    model, tok = random_gpt2
    other = "transformer.h.1.mlp.c_proj"
    calls = []
    real = layer_stats.collect_second_moments

    def counting(*a, **k):
        calls.append(list(a[2]))
        return real(*a, **k)

    monkeypatch.setattr(layer_stats, "collect_second_moments", counting)
    both = layer_stats.second_moments(
        model, tok, [LAYER, other], model_id="m", model_revision="rev-m", sample_count=N, progress=False
    )
    assert calls == [[LAYER, other]]
    one = second_moment(
        model, tok, other, model_id="m", model_revision="rev-m", sample_count=N, progress=False
    )
    assert calls == [[LAYER, other]] and torch.equal(one, both[other])  # cached per layer
    alone, _ = real(model, tok, [other], load_corpus("knowgic", N).texts, progress=False)
    torch.testing.assert_close(alone[other].float(), both[other])


def test_knowgic_corpus_texts():
    texts, source = knowgic_texts()
    assert source
    assert len(texts) == len(set(texts)) > 500
    assert "Harry Potter studied at Hogwarts School of Witchcraft and Wizardry" in texts
    assert any(t.endswith("?") for t in texts)  # questions are in


def test_bad_dtype_and_layer(random_gpt2, cache):
    model, tok = random_gpt2
    with pytest.raises(KnowgicError, match="dtype"):
        _stats(model, tok, dtype="int8")
    with pytest.raises(KnowgicError, match="no module"):
        second_moment(
            model, tok, "transformer.h.9.mlp.c_proj", model_id="m", model_revision="r", sample_count=5
        )
