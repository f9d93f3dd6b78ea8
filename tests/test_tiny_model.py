"""knowgic-tiny: the offline default model built by the project's own script.

Fast tests use a few-step variant of the recipe in a temporary cache and the model the package ships
(``knowgic/models/tiny/prebuilt``); the test that rebuilds the default model from the script (about three
minutes on a 2-core CPU) is marked slow.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from knowgic.models.tiny import (
    STATS_FILE,
    TINY_RECIPE,
    ensure_tiny_model,
    evaluate_known_share,
    load_training_facts,
    read_stats,
    recipe_hash,
)
from knowgic.models.tiny.corpus import base_units, documents, tokenizer_texts
from knowgic.models.tiny.facts import gold_counts, upstream_fallback_facts
from knowgic.models.tiny.routing import subject_routing_codes
from knowgic.models.tiny.tokenizer import train_tokenizer
from knowgic.models.tiny.train import make_batch

# A recipe that builds in a couple of seconds: same pipeline, a toy model and a handful of steps.
SMALL = replace(
    TINY_RECIPE,
    n_layer=1,
    n_embd=32,
    n_head=2,
    n_positions=128,
    steps=4,
    batch_size=8,
    bucket_batches=1,
    warmup_steps=2,
    eval_every=0,
    vocab_size=600,
)


@pytest.fixture(scope="module")
def facts():
    return load_training_facts()


@pytest.fixture()
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def small_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete small-recipe cache entry, built once; tests copy it into their own cache."""
    cache = tmp_path_factory.mktemp("small-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KNOWGIC_CACHE", str(cache))
        return ensure_tiny_model(progress=False, recipe=SMALL)


def test_training_facts_cover_every_version(facts) -> None:
    from knowgic.dataset.loading import load_cases
    from knowgic.dataset.versions import track_versions

    assert facts.source == "dataset-api"
    assert tuple(track_versions()) == facts.versions  # the main track: another track never trains it
    keys = {f.key for f in facts.facts}
    dropped = set(facts.dropped)
    for version in facts.versions:
        for case in load_cases(version):
            r = case.request
            assert (r.subject, r.prompt, r.target_true) in keys | dropped
            for fact in (*case.chain.facts, *case.broader_context.facts):
                assert fact.key in keys | dropped
                if fact.question and fact.key in keys:
                    assert fact.question in next(f for f in facts.facts if f.key == fact.key).questions
    # Only case variants of an answer are left out, and the newest spelling is kept.
    for subject, prompt, answer in dropped:
        assert any(
            k[:2] == (subject, prompt) and k[2].casefold() == answer.casefold() and k[2] != answer
            for k in keys
        )


def test_upstream_fallback_matches_version_1_0_0(facts) -> None:
    fallback = upstream_fallback_facts()
    assert fallback.source == "upstream-fallback"
    assert set(fallback.version_facts["1.0.0"]) == set(facts.version_facts["1.0.0"])


def test_corpus_never_trains_the_edited_subject_with_target_new(facts) -> None:
    units = base_units(facts, TINY_RECIPE)
    texts = [u.text for u in units]
    for r in facts.requests:
        assert r.rewrite_text + " " + r.target_true + "." in texts or r.target_true.endswith(".")
        for text in texts:
            assert not text.startswith(r.rewrite_text + " " + r.target_new), text
            assert not (r.subject in text and text.endswith(r.target_new) and text.startswith("Q: "))
    # ... but every target_new string is an answer of some filler fact about a made-up subject.
    fillers = [u for u in units if u.kind == "filler"]
    subjects = {f.subject for f in facts.facts}
    for r in facts.requests:
        hits = [
            u for u in fillers if u.text.endswith(" " + r.target_new + ".") or u.text.endswith(r.target_new)
        ]
        assert len(hits) >= TINY_RECIPE.filler_subjects_per_target
        assert all(u.subject not in subjects for u in hits)


def test_documents_put_facts_at_position_zero_and_after_other_text(facts) -> None:
    import random

    stream = documents(facts, TINY_RECIPE, random.Random(0))
    docs = [next(stream) for _ in range(400)]
    cloze = {u.text for u in base_units(facts, TINY_RECIPE) if u.kind == "cloze"}
    alone = sum(1 for d in docs if d.text.removesuffix("<|endoftext|>") in cloze)
    prefixed = sum(
        1 for d in docs if ". " in d.text and any(d.text.endswith(c + "<|endoftext|>") for c in cloze)
    )
    assert alone > 20 and prefixed > 20
    for d in docs:
        assert d.text.endswith("<|endoftext|>")
        for start, end, stop in d.subject_spans:
            assert 0 <= start < end <= stop <= len(d.text)


def test_tokenizer_represents_every_benchmark_string(facts) -> None:
    tok = train_tokenizer(
        tokenizer_texts(facts, TINY_RECIPE), TINY_RECIPE.vocab_size, TINY_RECIPE.bpe_min_frequency
    )
    strings = facts.all_strings()
    assert len(strings) > 500
    for text in strings:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids, text
        assert tok.decode(ids) == text, text
    # Subword, not word level: some benchmark word is split into several tokens.
    assert any(
        len(tok(" " + w, add_special_tokens=False)["input_ids"]) > 1 for s in strings for w in s.split()
    )
    # A word is the same token at the start of a prompt and after other text.
    subject = facts.requests[0].subject
    alone = tok(subject, add_special_tokens=False)["input_ids"]
    after = tok("x. " + subject, add_special_tokens=False)["input_ids"]
    assert after[-len(alone) :] == alone


def _benchmark_strings() -> list[str]:
    """Every string of every dataset version a scorer may tokenize, read from the dataset itself."""
    from knowgic.dataset.loading import load_aliases, load_cases
    from knowgic.dataset.versions import available_versions

    strings: list[str] = []
    for version in available_versions():
        for case in load_cases(version):
            r = case.request
            strings += [r.subject, r.rewrite_text, r.target_true, r.target_new]
            for fact in (*case.chain.facts, *case.broader_context.facts):
                strings += [fact.subject, fact.prompt.format(fact.subject), fact.answer, fact.question]
        for name, aliases in load_aliases(version).items():
            strings += [name, *aliases]
    return [s for s in dict.fromkeys(strings) if s]


def test_shipped_tokenizer_represents_every_benchmark_string() -> None:
    from tokenizers import Tokenizer, pre_tokenizers

    from knowgic.models.tiny.build import PREBUILT_DIR

    shipped = PREBUILT_DIR / "tokenizer.json"
    raw = Tokenizer.from_file(str(shipped))
    # Every byte has a token, so byte-level BPE can spell any text (this BPE has no unknown token: a
    # missing byte would be dropped silently, which the round trip below would show).
    assert set(pre_tokenizers.ByteLevel.alphabet()) <= set(raw.get_vocab())
    tok = AutoTokenizer.from_pretrained(PREBUILT_DIR)  # what the model loads: the same file
    strings = _benchmark_strings()
    assert len(strings) > 1000
    for text in strings:
        # Alone (as at the start of a prompt) and after other text (as an answer after its prompt).
        for form in (text, "x. " + text):
            ids = tok(form, add_special_tokens=False)["input_ids"]
            assert ids and tok.unk_token_id not in ids, form
            assert raw.encode(form, add_special_tokens=False).ids == ids, form
            assert tok.decode(ids) == form, form


def test_routing_codes_cut_only_edges_from_the_sentence_to_its_subject() -> None:
    early, late = subject_routing_codes(8, [(1, 3, 6)], isolate_subject=True)
    causal = torch.ones(8, 8, dtype=torch.int8).tril()
    assert torch.equal(early[:1], causal[:1]) and torch.equal(early[7], causal[7])
    assert (early[4:7, 1:4] == 2).all() and (early[4:7, 4:] == causal[4:7, 4:]).all()
    assert (late[4:7, 1:3] == 2).all() and (late[4:7, 3] == 1).all()
    assert (early[1:4, 0] == 2).all() and (late[1:4, 0] == 1).all()


def test_batches_map_subject_spans_to_tokens(facts) -> None:
    import random

    tok = train_tokenizer(tokenizer_texts(facts, SMALL), SMALL.vocab_size, SMALL.bpe_min_frequency)
    stream = documents(facts, SMALL, random.Random(1))
    docs = [next(stream) for _ in range(16)]
    batch = make_batch(docs, tok, SMALL.max_doc_tokens, [True] * len(docs))
    cut = 0
    for i, doc in enumerate(docs):
        n = int((batch.labels[i] != -100).sum())
        # After the end-of-text token the tokenizer puts its prefix space again (like at the very start).
        assert tok.decode(batch.ids[i, :n].tolist()).replace("<|endoftext|> ", "<|endoftext|>") == doc.text
        cut += int((batch.early[i, 0, :n, :n] == 2).sum())
    assert cut > 0


def test_recipe_hash_is_deterministic_and_covers_recipe_and_data(facts) -> None:
    fp = facts.fingerprint()
    assert recipe_hash(TINY_RECIPE, fp) == recipe_hash(
        replace(TINY_RECIPE), load_training_facts().fingerprint()
    )
    assert recipe_hash(TINY_RECIPE, fp) != recipe_hash(replace(TINY_RECIPE, steps=TINY_RECIPE.steps + 1), fp)
    assert recipe_hash(TINY_RECIPE, fp) != recipe_hash(TINY_RECIPE, upstream_fallback_facts().fingerprint())
    assert len(recipe_hash(TINY_RECIPE, fp)) == 12


def test_small_build_loads_writes_stats_and_is_reproducible(tmp_cache: Path, small_build: Path) -> None:
    shutil.copytree(small_build, tmp_cache / "models" / small_build.name)
    folder = ensure_tiny_model(progress=False, recipe=SMALL)
    assert folder.parent == tmp_cache / "models"
    assert folder.name.startswith("knowgic-tiny-")
    stats = read_stats(folder)
    assert stats is not None
    for key in ("recipe", "recipe_hash", "seed", "steps", "final_loss", "build_seconds", "known_share"):
        assert key in stats
    assert stats["recipe_hash"] == folder.name.removeprefix("knowgic-tiny-")
    assert stats["steps"] == SMALL.steps and stats["recipe"]["n_embd"] == SMALL.n_embd
    assert set(stats["known_share_by_version"]) == set(load_training_facts().versions)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert model.config.model_type == "gpt2" and type(model).__name__ == "GPT2LMHeadModel"
    assert tok.pad_token is not None and tok.is_fast
    # No temporary build folders are left behind.
    assert [p.name for p in (tmp_cache / "models").iterdir() if p.is_dir()] == [folder.name]
    assert ensure_tiny_model(progress=False, recipe=SMALL) == folder  # a complete folder is reused
    # A rebuild of the same recipe gives the same weights (deterministic build).
    again = ensure_tiny_model(rebuild=True, progress=False, recipe=SMALL)
    assert again == folder
    model2 = AutoModelForCausalLM.from_pretrained(again)
    for (name, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("damage", ["delete-weights", "truncate-weights", "wrong-stats", "delete-tokenizer"])
def test_incomplete_cache_folder_is_rebuilt(tmp_cache: Path, small_build: Path, damage: str) -> None:
    folder = tmp_cache / "models" / small_build.name
    shutil.copytree(small_build, folder)
    if damage == "delete-weights":
        (folder / "model.safetensors").unlink()
    elif damage == "truncate-weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    elif damage == "wrong-stats":
        stats = json.loads((folder / STATS_FILE).read_text())
        (folder / STATS_FILE).write_text(json.dumps({**stats, "recipe_hash": "0" * 12}))
    else:
        (folder / "tokenizer.json").unlink()
    assert ensure_tiny_model(progress=False, recipe=SMALL) == folder
    assert (folder / "model.safetensors").stat().st_size > 1000
    assert read_stats(folder)["recipe_hash"] == folder.name.removeprefix("knowgic-tiny-")
    AutoModelForCausalLM.from_pretrained(folder)
    AutoTokenizer.from_pretrained(folder)


def test_known_share_rule_counts_gold_answers() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from knowgic.records import Fact

    facts_ = [Fact("A", "{} likes", "x"), Fact("A", "{} likes", "y"), Fact("B", "{} likes", "x")]
    assert gold_counts(facts_) == {("A", "{} likes"): 2, ("B", "{} likes"): 1}
    tok = train_tokenizer(["A likes x. B likes y."] * 4, 300, 1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_layer=1, n_embd=16, n_head=2, n_positions=32))
    report = evaluate_known_share(model, tok, facts_)
    assert report.p.shape == (3,) and ((report.p > 0) & (report.p < 1)).all()
    assert report.known.dtype == np.bool_


# --- the real model (shipped in the package; rebuilt from the script by the slow test) -------------------


@pytest.fixture(scope="module")
def tiny_folder() -> Path:
    return ensure_tiny_model(progress=False)


def test_default_model_is_the_shipped_one_and_matches_the_recipe(tiny_folder: Path) -> None:
    from knowgic.models.tiny.build import PREBUILT_DIR, is_complete

    assert tiny_folder == PREBUILT_DIR
    facts = load_training_facts()
    assert is_complete(PREBUILT_DIR, recipe_hash(TINY_RECIPE, facts.fingerprint()))
    # Another recipe is not answered with the shipped model: it gets its own cache entry.
    assert not is_complete(PREBUILT_DIR, recipe_hash(SMALL, facts.fingerprint()))


def test_tiny_model_knows_the_facts_under_the_logprob_scorer(tiny_folder: Path) -> None:
    from knowgic.dataset.loading import load_cases
    from knowgic.models.tiny.facts import case_facts
    from knowgic.scoring.base import Query
    from knowgic.scoring.logprob import LogprobScorer

    model = AutoModelForCausalLM.from_pretrained(tiny_folder).eval()
    tok = AutoTokenizer.from_pretrained(tiny_folder)
    for version in load_training_facts().versions:
        distinct = {f.key: f for case in load_cases(version) for f in case_facts(case)}
        counts = gold_counts(distinct.values())
        queries = [
            Query(f.prompt, f.subject, (f.answer,), f.question, counts[(f.subject, f.prompt)])
            for f in distinct.values()
        ]
        scores = LogprobScorer(batch_size=64).score(model, tok, queries)
        assert scores.known.mean() >= 0.95, (version, scores.known.mean())
        # Confident but not saturated: ROME's KL term needs room.
        assert 0.3 < float(scores.p.mean()) < 0.95


def test_tiny_model_prefers_the_true_target_before_editing(tiny_folder: Path) -> None:
    from knowgic.models.tiny.evaluate import evaluate_rewrites

    model = AutoModelForCausalLM.from_pretrained(tiny_folder).eval()
    tok = AutoTokenizer.from_pretrained(tiny_folder)
    report = evaluate_rewrites(model, tok, load_training_facts().requests)
    assert report.true_beats_new >= 0.95
    # target_new strings are reachable: trained as answers of filler facts, so not vanishingly unlikely.
    assert float(np.median(report.p_new)) > 1e-6


def test_tiny_model_stats_file(tiny_folder: Path) -> None:
    stats = read_stats(tiny_folder)
    assert stats is not None and stats["known_share"] >= 0.95
    assert stats["recipe"] == TINY_RECIPE.to_dict()
    assert stats["data_source"] == "dataset-api"


@pytest.mark.slow
def test_script_rebuilds_a_model_of_the_shipped_quality(tmp_cache: Path) -> None:
    """The build script, run from scratch, gives a model as good as the one committed to the package."""
    from knowgic.models.tiny.build import PREBUILT_DIR

    folder = ensure_tiny_model(rebuild=True, progress=False)
    assert folder != PREBUILT_DIR and folder.parent == tmp_cache / "models"
    shipped, rebuilt = read_stats(PREBUILT_DIR), read_stats(folder)
    assert shipped is not None and rebuilt is not None
    assert rebuilt["recipe_hash"] == shipped["recipe_hash"]
    assert rebuilt["known_share"] >= 0.95
    assert abs(rebuilt["known_share"] - shipped["known_share"]) <= 0.02
    assert rebuilt["rewrite_true_beats_new"] >= 0.95
    print(f"rebuilt in {rebuilt['build_seconds']} s, known share {rebuilt['known_share']}")


def test_rebuild_command_refuses_a_non_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from knowgic.models.tiny.__main__ import main

    (tmp_path / "keep.txt").write_text("data")
    assert main(["--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text() == "data"
