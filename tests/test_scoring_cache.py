"""Pre-edit score cache (round trip, keys, corruption) and query deduplication."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from knowgic.errors import KnowgicError
from knowgic.scoring.base import Query, Scores
from knowgic.scoring.cache import ScoreCache, queries_sha256
from knowgic.scoring.dedupe import expand, score_distinct, unique_queries
from knowgic.scoring.logprob import LogprobScorer

Q1 = Query("{} studied at", "Harry Potter", ("Hogwarts",), "Where did Harry Potter study?")
Q2 = Query("The capital of {} is", "France", ("Paris", "City of Light"))
Q3 = Query("{} studied at", "Harry Potter", ("Hogwarts",), "Where did Harry Potter study?", n_gold=2)

SCORES = Scores(np.array([0.25, 1.0, 0.0, 1e-12]), np.array([True, True, False, False]))


def _key(**changes):
    parts = {
        "model_revision": "abc123",
        "protocol": "logprob",
        "params": {"batch_size": 64, "answer_leading_space": "auto"},
        "dataset_sha256": "d" * 64,
        "queries_sha256": queries_sha256([Q1, Q2]),
        "prefix": "",
        "dtype": "float32",
        "device_type": "cpu",
    }
    parts.update(changes)
    return ScoreCache.key(**parts)


def test_round_trip(tmp_path):
    cache = ScoreCache(tmp_path)
    key = _key()
    assert cache.get(key) is None
    cache.put(key, SCORES, info={"model": "tiny"})
    got = cache.get(key)
    assert got is not None
    np.testing.assert_array_equal(got.p, SCORES.p)
    np.testing.assert_array_equal(got.known, SCORES.known)
    assert got.p.dtype == np.float64 and got.known.dtype == np.bool_
    assert not list(tmp_path.rglob("*.tmp"))  # no leftovers from the atomic writes
    meta = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert meta["n"] == 4 and meta["info"] == {"model": "tiny"}


def test_default_root_under_knowgic_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path))
    assert ScoreCache().root == tmp_path / "scores"


def test_key_depends_on_every_part():
    base = _key()
    assert base == _key() and len(base) == 64
    variants = [
        _key(model_revision="abc124"),
        _key(protocol="generate"),
        _key(params={"batch_size": 64, "answer_leading_space": "never"}),
        _key(dataset_sha256="e" * 64),
        _key(queries_sha256=queries_sha256([Q2, Q1])),
        _key(prefix="Imagine that x. "),
        _key(dtype="bfloat16"),
        _key(dtype="float16"),
        _key(device_type="cuda"),
        _key(protocol="generate", params={"k": 5, "chat": True}),
    ]
    assert len({base, *variants}) == 1 + len(variants)
    # The chat-template decision is one of the generation protocols' parameters, so it is in the key.
    assert _key(protocol="generate", params={"k": 5, "chat": False}) != variants[-1]
    # parameter order does not matter
    assert _key(params={"answer_leading_space": "auto", "batch_size": 64}) == base
    assert queries_sha256([Q1]) != queries_sha256([Q3])  # n_gold is part of a query
    with pytest.raises(KnowgicError, match="JSON"):
        _key(params={"x": object()})
    with pytest.raises(KnowgicError, match="not a score cache key"):
        ScoreCache().get("../../etc/passwd")


def _corrupt_npz_bytes(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    [
        lambda npz, meta: npz.write_bytes(npz.read_bytes()[:50]),  # truncated
        lambda npz, meta: _corrupt_npz_bytes(npz),  # flipped byte
        lambda npz, meta: npz.unlink(),  # missing array file
        lambda npz, meta: meta.write_text("{not json"),  # broken metadata
        lambda npz, meta: meta.write_text(json.dumps({**json.loads(meta.read_text()), "key": "f" * 64})),
        lambda npz, meta: meta.write_text(json.dumps({**json.loads(meta.read_text()), "n": 5})),
    ],
    ids=["truncated", "bitflip", "missing-npz", "bad-json", "other-key", "wrong-n"],
)
def test_corrupt_entry_is_ignored_and_recomputed(tmp_path, caplog, damage):
    cache = ScoreCache(tmp_path)
    key = _key()
    cache.put(key, SCORES)
    npz, meta = next(tmp_path.rglob("*.npz")), next(tmp_path.rglob("*.json"))
    damage(npz, meta)
    with caplog.at_level(logging.WARNING, logger="knowgic.scoring.cache"):
        assert cache.get(key) is None
    assert "corrupt" in caplog.text
    cache.put(key, SCORES)  # recomputed scores overwrite the bad entry
    np.testing.assert_array_equal(cache.get(key).p, SCORES.p)


def test_out_of_range_scores_in_file_are_rejected(tmp_path):
    cache = ScoreCache(tmp_path)
    key = _key()
    cache.put(key, Scores(np.array([0.5, 1.5]), np.array([True, False])))
    assert cache.get(key) is None
    with pytest.raises(ValueError):
        cache.put(key, Scores(np.array([0.5, 0.2]), np.array([True])))


def test_unique_queries_and_expand():
    queries = [Q1, Q2, Q1, Q3, Q2]
    unique, inverse = unique_queries(queries)
    assert unique == [Q1, Q2, Q3]
    assert inverse.tolist() == [0, 1, 0, 2, 1]
    assert [unique[i] for i in inverse] == queries
    scores = Scores(np.array([0.1, 0.2, 0.3]), np.array([True, False, True]))
    full = expand(scores, inverse)
    assert full.p.tolist() == [0.1, 0.2, 0.1, 0.3, 0.2]
    assert full.known.tolist() == [True, False, True, True, False]
    empty, empty_inverse = unique_queries([])
    assert empty == [] and empty_inverse.shape == (0,)


def test_batch_size_does_not_split_the_cache(tmp_path):
    assert _key(params={"batch_size": 8, "answer_leading_space": "auto"}) == _key()
    assert _key(params={"batch_size": 64, "answer_leading_space": "never"}) != _key()


def test_get_or_compute(tmp_path):
    cache = ScoreCache(tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return SCORES

    first, hit1 = cache.get_or_compute(_key(), compute)
    second, hit2 = cache.get_or_compute(_key(), compute)
    assert (hit1, hit2) == (False, True) and len(calls) == 1
    np.testing.assert_array_equal(first.p, second.p)


def test_score_distinct_scores_each_query_once(random_gpt2):
    model, tok = random_gpt2
    seen = []

    class Counting(LogprobScorer):
        def score(self, model, tokenizer, queries, prefix=""):
            seen.append(len(queries))
            return super().score(model, tokenizer, queries, prefix)

    queries = [Q1, Q2, Q1, Q1, Q2]
    scores = score_distinct(Counting(), model, tok, queries)
    assert seen == [2]
    direct = LogprobScorer().score(model, tok, queries)
    np.testing.assert_allclose(scores.p, direct.p, rtol=1e-6)
