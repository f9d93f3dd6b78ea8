"""The logprob protocol: batching invariance, exact probabilities, the first-token rule, in-context tokenization
(the default known rule: tests/test_known_rule.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from knowgic.errors import KnowgicError
from knowgic.scoring.base import Query
from knowgic.scoring.logprob import LogprobScorer
from knowgic.scoring.tokenize import SplitCache, answer_separator, split_many
from tests.conftest import _benchmark_texts


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread (and do not fight over a shared machine's cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


QUERIES = [
    Query("The capital of {} is", "France", ("Paris", "Paris city", "the city of Paris")),
    Query(
        "{} studied at", "Harry Potter", ("Hogwarts School of Witchcraft and Wizardry", "Hogwarts"), n_gold=2
    ),
    Query("{} is a citizen of", "Uma Bharti", ("India",)),
    Query("The child of {} is named ", "Hillary Clinton", ("Chelsea Clinton",)),  # trailing space
    Query("{}'s sport", "Mark Teixeira", ("baseball", "Baseball", "baseball")),  # duplicate alias
    Query("Q: Who created {}?\nA:", "Miss Piggy", ("Jim Henson",)),
]


def _p_one_at_a_time(model, tok, queries, prefix=""):
    scorer = LogprobScorer(batch_size=1)
    return [scorer.score(model, tok, [q], prefix=prefix) for q in queries]


@pytest.mark.parametrize("prefix", ["", "Imagine that Harry Potter studied at Ilvermorny. "])
def test_batched_equals_one_at_a_time(random_gpt2, prefix):
    model, tok = random_gpt2
    singles = _p_one_at_a_time(model, tok, QUERIES, prefix)
    p_single = np.array([s.p[0] for s in singles])
    known_single = np.array([s.known[0] for s in singles])
    for batch_size in (2, 3, 64):
        scores = LogprobScorer(batch_size=batch_size).score(model, tok, QUERIES, prefix=prefix)
        assert scores.p.dtype == np.float64 and scores.known.dtype == np.bool_
        # Random-weight probabilities are tiny, so compare in log space: relative agreement to 1e-5.
        np.testing.assert_allclose(np.log(scores.p), np.log(p_single), rtol=0, atol=1e-5)
        np.testing.assert_allclose(scores.p, p_single, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(scores.known, known_single)
    assert np.all((p_single > 0) & (p_single <= 1))


def _full_sequence_prob(model, tok, context: str, answer: str) -> tuple[float, int]:
    """P(answer | context) by hand: one unpadded forward pass, softmax, product over answer tokens."""
    full = tok(context + " " + answer)["input_ids"]
    n_ctx = len(tok(context)["input_ids"])
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([full])).logits[0].double(), dim=-1)
    p = 1.0
    for pos in range(n_ctx, len(full)):
        p *= float(probs[pos - 1, full[pos]])
    return p, len(full) - n_ctx


def test_p_is_product_of_token_probabilities(random_gpt2):
    model, tok = random_gpt2
    context, answer = "Harry Potter studied at", "Hogwarts School of Witchcraft and Wizardry"
    expected, n_answer_tokens = _full_sequence_prob(model, tok, context, answer)
    assert n_answer_tokens > 1
    scores = LogprobScorer().score(model, tok, [Query("{} studied at", "Harry Potter", (answer,))])
    assert scores.p[0] == pytest.approx(expected, rel=1e-5)


def test_p_is_max_over_aliases(random_gpt2):
    model, tok = random_gpt2
    answers = ("Paris", "Lyon", "Marseille")
    each = [
        LogprobScorer().score(model, tok, [Query("The capital of {} is", "France", (a,))]).p[0]
        for a in answers
    ]
    both = LogprobScorer().score(model, tok, [Query("The capital of {} is", "France", answers)]).p[0]
    assert both == pytest.approx(max(each), rel=1e-6)
    # first_token looks only at the gold answer's first token (answers[0]), not at the best alias
    old = LogprobScorer(known_rule="first_token")
    gold_first = old.score(model, tok, [Query("The capital of {} is", "France", answers)])
    gold_only = old.score(model, tok, [Query("The capital of {} is", "France", answers[:1])])
    assert gold_first.known[0] == gold_only.known[0]


def _ranked_word_tokens(model, tok, context: str) -> list[tuple[int, str]]:
    """(rank, word) for next tokens after ``context`` that are a whole word tokenizing to one token."""
    with torch.no_grad():
        logits = model(torch.tensor([tok(context)["input_ids"]])).logits[0, -1]
    order = torch.argsort(logits, descending=True).tolist()
    found = []
    for rank, tid in enumerate(order):
        piece = tok.decode([tid])
        if piece.startswith(" ") and piece[1:].isalpha() and tok(" " + piece[1:])["input_ids"] == [tid]:
            found.append((rank, piece[1:]))
    return found


def test_first_token_rule_is_top_m_of_first_gold_token(random_gpt2):
    """The old rule (``known_rule: first_token``), kept to reproduce results made under it."""
    model, tok = random_gpt2
    context = "The capital of France is"
    ranked = _ranked_word_tokens(model, tok, context)
    rank, word = next((r, w) for r, w in ranked if r >= 2)  # a word that is not the top token
    scorer = LogprobScorer(known_rule="first_token")

    def known(n_gold: int, answers=(word,)) -> bool:
        return bool(
            scorer.score(model, tok, [Query("The capital of {} is", "France", answers, n_gold=n_gold)]).known[
                0
            ]
        )

    assert not known(rank)  # rank tokens are above it
    assert known(rank + 1)
    assert known(1, (ranked[0][1],)) == (ranked[0][0] == 0)
    # an alias that is the top token does not make the gold answer known
    top_rank, top_word = ranked[0]
    assert top_rank < rank
    assert not known(rank, (word, top_word))


def test_bfloat16_model_scores_in_float32(random_gpt2):
    model, tok = random_gpt2
    reference = LogprobScorer().score(model, tok, QUERIES).p
    half = copy.deepcopy(model).to(torch.bfloat16)
    scores = LogprobScorer().score(half, tok, QUERIES)
    assert scores.p.dtype == np.float64
    np.testing.assert_allclose(np.log(scores.p), np.log(reference), atol=0.5)


def test_training_mode_restored_and_model_untouched(random_gpt2):
    model, tok = random_gpt2
    before = {k: v.clone() for k, v in model.state_dict().items()}
    eval_scores = LogprobScorer().score(model, tok, QUERIES)
    model.train()
    try:
        train_scores = LogprobScorer().score(model, tok, QUERIES)  # dropout must be off while scoring
        assert model.training
    finally:
        model.eval()
    np.testing.assert_allclose(train_scores.p, eval_scores.p, rtol=1e-6)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_tokenization_cached_across_calls(random_gpt2):
    model, tok = random_gpt2
    scorer = LogprobScorer()
    first = scorer.score(model, tok, QUERIES)
    n_cached = len(scorer._splits)
    assert n_cached == sum(len(dict.fromkeys(q.answers)) for q in QUERIES)
    second = scorer.score(model, tok, QUERIES)
    assert len(scorer._splits) == n_cached
    np.testing.assert_array_equal(first.p, second.p)
    scorer.score(model, tok, QUERIES, prefix="New: ")
    assert len(scorer._splits) == 2 * n_cached


def test_bad_queries_raise_knowgic_error(random_gpt2):
    model, tok = random_gpt2
    scorer = LogprobScorer()
    with pytest.raises(KnowgicError, match="no gold answer"):
        scorer.score(model, tok, [Query("{} is", "x", ())])
    with pytest.raises(KnowgicError, match="no gold answer"):
        scorer.score(model, tok, [Query("{} is", "x", ("  ",))])
    with pytest.raises(KnowgicError, match="query 1"):
        scorer.score(model, tok, [QUERIES[0], Query("{name} is", "x", ("y",))])
    with pytest.raises(KnowgicError, match="n_gold"):
        scorer.score(model, tok, [Query("{} is", "x", ("y",), n_gold=0)])
    with pytest.raises(KnowgicError, match="positions"):
        scorer.score(model, tok, [Query("{} is", "word " * 300, ("y",))])
    assert len(scorer.score(model, tok, [])) == 0


# -- leading-space convention ---------------------------------------------------------------------------


def test_separator_modes():
    assert answer_separator("The capital is", "auto") == " "
    assert answer_separator("The capital is ", "auto") == ""
    assert answer_separator("Q: x\nA:\n", "auto") == ""
    assert answer_separator("", "auto") == ""
    assert answer_separator("is ", "always") == " "
    assert answer_separator("is", "never") == ""
    with pytest.raises(KnowgicError, match="answer_leading_space"):
        answer_separator("is", "sometimes")


@pytest.mark.parametrize("use_offsets", [True, False])
def test_byte_level_bpe_space_merges_into_answer(random_gpt2, use_offsets):
    _, tok = random_gpt2
    for context in ("The capital of France is", "The capital of France is "):
        split = split_many(tok, [context], ["Paris"], use_offsets=use_offsets)[0]
        assert list(split.context) == tok("The capital of France is")["input_ids"]
        assert list(split.context + split.answer) == tok("The capital of France is Paris")["input_ids"]
        assert tok.convert_ids_to_tokens(list(split.answer))[0].startswith("Ġ")  # the space is in the answer
        assert tok.decode(list(split.answer)) == " Paris"
    never = split_many(tok, ["The capital of France is"], ["Paris"], mode="never", use_offsets=use_offsets)[0]
    assert not tok.convert_ids_to_tokens(list(never.answer))[0].startswith("Ġ")
    # an empty prompt still gives the model one token (EOS/BOS) to predict from
    empty = split_many(tok, [""], ["Paris"], use_offsets=use_offsets)[0]
    assert list(empty.context) == [tok.eos_token_id]
    assert tok.decode(list(empty.answer)) == "Paris"


@pytest.fixture(scope="module")
def sentencepiece_tokenizer() -> PreTrainedTokenizerFast:
    """A Llama/Gemma-style tokenizer: Unigram model, Metaspace "▁" spaces, BOS added, EOS appended."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.UnigramTrainer(
        vocab_size=800, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(_benchmark_texts() + ["The capital of France is Paris."] * 20, trainer=trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.pad_token = fast.unk_token
    return fast


@pytest.mark.parametrize("use_offsets", [True, False])
def test_sentencepiece_space_becomes_metaspace(sentencepiece_tokenizer, use_offsets):
    tok = sentencepiece_tokenizer
    splits = split_many(
        tok,
        ["The capital of France is", "The capital of France is "],
        ["Paris", "Paris"],
        use_offsets=use_offsets,
    )
    full = tok("The capital of France is Paris")["input_ids"]
    assert full[0] == tok.bos_token_id and full[-1] == tok.eos_token_id
    for split in splits:
        assert split.context[0] == tok.bos_token_id and tok.bos_token_id not in split.answer
        assert tok.eos_token_id not in split.answer  # the appended EOS is not part of the answer
        assert list(split.context + split.answer) == full[:-1]
        assert tok.convert_ids_to_tokens(list(split.answer))[0].startswith("▁")
        assert tok.decode(list(split.answer)).strip() == "Paris"


def test_sentencepiece_scores_match_hand_computation(sentencepiece_tokenizer):
    tok = sentencepiece_tokenizer
    torch.manual_seed(1)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=1, n_head=2)
    ).eval()
    queries = [
        Query("The capital of {} is", "France", ("Paris",)),
        Query("{} studied at", "Harry Potter", ("Hogwarts",)),
    ]
    scores = LogprobScorer(batch_size=2).score(model, tok, queries)
    for query, p in zip(queries, scores.p, strict=True):
        full = tok(query.text + " " + query.answers[0])["input_ids"][:-1]  # drop the appended EOS
        n_ctx = len(tok(query.text)["input_ids"]) - 1
        with torch.no_grad():
            probs = torch.softmax(model(torch.tensor([full])).logits[0].double(), dim=-1)
        expected = float(np.prod([float(probs[i - 1, full[i]]) for i in range(n_ctx, len(full))]))
        assert p == pytest.approx(expected, rel=1e-5)


def test_split_cache_resets_on_new_tokenizer(random_gpt2, sentencepiece_tokenizer):
    _, bpe = random_gpt2
    cache = SplitCache()
    a = cache.get(bpe, [("The capital of France is", "Paris")])
    b = cache.get(sentencepiece_tokenizer, [("The capital of France is", "Paris")])
    assert a != b and len(cache) == 1
    with pytest.raises(KnowgicError):
        SplitCache("sometimes")


@pytest.mark.gpu
def test_cuda_matches_cpu(random_gpt2):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model, tok = random_gpt2
    cpu = LogprobScorer().score(model, tok, QUERIES)
    cuda_model = copy.deepcopy(model).cuda()
    single = [LogprobScorer(batch_size=1).score(cuda_model, tok, [q]).p[0] for q in QUERIES]
    batched = LogprobScorer(batch_size=4).score(cuda_model, tok, QUERIES)
    np.testing.assert_allclose(np.log(batched.p), np.log(single), atol=1e-5)
    np.testing.assert_allclose(np.log(batched.p), np.log(cpu.p), atol=1e-4)
    half = LogprobScorer().score(copy.deepcopy(model).cuda().half(), tok, QUERIES)
    assert half.p.dtype == np.float64 and np.all(np.isfinite(np.log(half.p)))


def test_non_finite_logits_are_an_error(random_gpt2):
    model, tok = random_gpt2
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.transformer.ln_f.bias.fill_(float("nan"))
    with pytest.raises(KnowgicError, match="non-finite"):
        LogprobScorer().score(broken, tok, QUERIES[:2])
