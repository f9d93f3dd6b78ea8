"""The generate and greedy protocols: reproducible sampling, p as a share of samples, chat templates."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from knowgic.errors import KnowgicError
from knowgic.scoring.base import Query
from knowgic.scoring.generate import GenerateScorer, GreedyScorer
from knowgic.scoring.matching import words
from knowgic.scoring.sampling import inverse_cdf_sample, sample_seed, step_uniforms


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread (and do not fight over a shared machine's cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


QUESTIONS = [
    Query("{} studied at", "Harry Potter", ("Hogwarts",), question="Where did Harry Potter study?"),
    Query("The capital of {} is", "France", ("Paris",), question="What is the capital of France?"),
    Query(
        "{} is a citizen of",
        "Uma Bharti",
        ("India",),
        question="What is the country of citizenship of Uma Bharti?",
    ),
    Query("{} has child", "Hillary Clinton", ("Chelsea Clinton",)),  # no question: the cloze text is used
]


def _samples(scorer, model, tok, queries, prefix=""):
    """The scorer's decoded answers per query (k each), rebuilt through its public pieces."""
    chat = scorer.is_chat(tok)
    prompts = [scorer.render(tok, scorer.question(q, i), prefix, chat) for i, q in enumerate(queries)]
    ids = tok(prompts, add_special_tokens=not chat)["input_ids"]
    rows = [(i, j) for i in range(len(queries)) for j in range(scorer.k)]
    uniforms = None
    if scorer.sample:
        seeds = [sample_seed(scorer.seed, scorer.question(queries[i], i), j) for i, j in rows]
        uniforms = step_uniforms(seeds, scorer.max_new_tokens)
    texts = scorer.decode(model, tok, [ids[i] for i, _ in rows], uniforms, cut_newline=not chat)
    return [texts[i * scorer.k : (i + 1) * scorer.k] for i in range(len(queries))]


def _with_sampled_answers(queries, samples):
    """Queries whose answer is a word the model produced in its first sample: p is then > 0."""
    out = []
    for query, texts in zip(queries, samples, strict=True):
        found = words(texts[0])
        answer = found[len(found) // 2] if found else "zzzz"
        out.append(Query(query.prompt, query.subject, (answer,), query.question))
    return out


def test_generate_reproducible_regardless_of_batch_size(random_gpt2):
    model, tok = random_gpt2
    base = GenerateScorer(k=5, seed=0, max_new_tokens=8)
    samples = _samples(base, model, tok, QUESTIONS)
    assert len({t for s in samples for t in s}) > 10  # real sampling: the samples differ
    queries = _with_sampled_answers(QUESTIONS, samples)
    reference = base.score(model, tok, queries)
    assert np.all(reference.p >= 0.2) and reference.known.all()
    for batch_size in (1, 3, 7, 64):
        scores = GenerateScorer(k=5, seed=0, max_new_tokens=8, batch_size=batch_size).score(
            model, tok, queries
        )
        np.testing.assert_array_equal(scores.p, reference.p)
        np.testing.assert_array_equal(scores.known, reference.known)
    # order and company do not matter either: a query's samples depend only on its question
    reversed_scores = base.score(model, tok, queries[::-1])
    np.testing.assert_array_equal(reversed_scores.p[::-1], reference.p)
    alone = base.score(model, tok, queries[1:2])
    assert alone.p[0] == reference.p[1]


def test_generate_seed_changes_samples(random_gpt2):
    model, tok = random_gpt2
    a = _samples(GenerateScorer(k=3, seed=0, max_new_tokens=6), model, tok, QUESTIONS)
    b = _samples(GenerateScorer(k=3, seed=1, max_new_tokens=6), model, tok, QUESTIONS)
    assert a != b
    assert a == _samples(GenerateScorer(k=3, seed=0, max_new_tokens=6, batch_size=2), model, tok, QUESTIONS)


def test_generate_p_is_share_of_samples(random_gpt2):
    model, tok = random_gpt2
    scorer = GenerateScorer(k=5, seed=3, max_new_tokens=8)
    samples = _samples(scorer, model, tok, QUESTIONS[:1])[0]
    answer = words(samples[0])[0]
    expected = sum(answer in words(s) for s in samples) / 5
    query = Query(QUESTIONS[0].prompt, QUESTIONS[0].subject, (answer,), QUESTIONS[0].question)
    scores = scorer.score(model, tok, [query])
    assert scores.p[0] == pytest.approx(expected) and expected >= 0.2
    assert scores.known[0]
    miss = scorer.score(
        model, tok, [Query(query.prompt, query.subject, ("Xylophonequartz",), query.question)]
    )
    assert miss.p[0] == 0.0 and not miss.known[0]


def test_base_model_answer_is_cut_at_first_newline(random_gpt2):
    model, tok = random_gpt2
    scorer = GenerateScorer(k=4, seed=0, max_new_tokens=16)
    for sample_set in _samples(scorer, model, tok, QUESTIONS):
        for text in sample_set:
            assert "\n" not in text


@pytest.fixture(scope="module")
def paris_model(random_gpt2):
    """The random GPT-2 with its final layer norm replaced by a constant pointing at the token " Paris":
    every next-token distribution is the same, with " Paris" on top (probability about 0.4)."""
    model, tok = random_gpt2
    (paris,) = tok(" Paris")["input_ids"]
    crafted = copy.deepcopy(model)
    with torch.no_grad():
        crafted.transformer.ln_f.weight.zero_()
        direction = crafted.transformer.wte.weight[paris]
        crafted.transformer.ln_f.bias.copy_(direction * 6.5 / direction.dot(direction))
        logits = crafted(torch.tensor([[paris]])).logits[0, -1]
    assert int(logits.argmax()) == paris
    return crafted, paris


def test_greedy_p_is_zero_or_one(random_gpt2, paris_model):
    _, tok = random_gpt2
    model, _ = paris_model
    scorer = GreedyScorer(max_new_tokens=5)
    decoded = _samples(scorer, model, tok, QUESTIONS)
    assert decoded == [["Paris Paris Paris Paris Paris"]] * len(QUESTIONS)  # argmax at every step
    queries = [Query(q.prompt, q.subject, (a,), q.question) for q in QUESTIONS for a in ("paris", "London")]
    for batch_size in (1, 3, 32):
        scores = GreedyScorer(max_new_tokens=5, batch_size=batch_size).score(model, tok, queries)
        np.testing.assert_array_equal(scores.p, [1.0, 0.0] * len(QUESTIONS))
        np.testing.assert_array_equal(scores.known, scores.p == 1.0)


def test_generate_on_peaked_model(random_gpt2, paris_model):
    _, tok = random_gpt2
    model, paris = paris_model
    with torch.no_grad():
        prob = float(torch.softmax(model(torch.tensor([[paris]])).logits[0, -1], -1)[paris])
    # one new token: a sample says "Paris" exactly when that token is " Paris" (other tokens spell other words)
    queries = [Query(q.prompt, q.subject, ("Paris",), q.question) for q in QUESTIONS] * 10
    queries = [
        Query(q.prompt, f"{q.subject}{i}", q.answers, f"{q.question} ({i})") for i, q in enumerate(queries)
    ]
    scores = GenerateScorer(k=5, max_new_tokens=1).score(model, tok, queries)
    assert set(np.unique(scores.p * 5)) <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}
    assert 0.2 < prob < 0.6
    assert scores.p.mean() == pytest.approx(prob, abs=0.1)  # 200 samples: standard error about 0.035
    assert 0 < scores.known.mean() < 1 or scores.p.min() >= 0.2
    np.testing.assert_array_equal(scores.known, scores.p >= 0.2)


def test_prefix_goes_before_the_question(random_gpt2):
    model, tok = random_gpt2
    scorer = GenerateScorer()
    assert scorer.render(tok, "Where?", "Imagine X. ", chat=False) == "Imagine X. Q: Where?\nA:"
    sampler = GenerateScorer(k=2, max_new_tokens=6)
    with_prefix = _samples(sampler, model, tok, QUESTIONS, prefix="Imagine that Paris. ")
    assert with_prefix != _samples(sampler, model, tok, QUESTIONS)
    # score() uses the prefix the same way
    queries = _with_sampled_answers(QUESTIONS, with_prefix)
    assert np.all(sampler.score(model, tok, queries, prefix="Imagine that Paris. ").p > 0)


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture()
def chat_tokenizer(random_gpt2):
    _, tok = random_gpt2
    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = CHAT_TEMPLATE
    return chat_tok


def test_chat_template_path(random_gpt2, chat_tokenizer):
    model, _ = random_gpt2
    scorer = GenerateScorer(k=3, max_new_tokens=8)
    assert scorer.is_chat(chat_tokenizer)  # auto: the tokenizer has a template
    rendered = scorer.render(chat_tokenizer, "Where did Harry Potter study?", "Imagine X. ", chat=True)
    assert rendered == "<|user|>Imagine X. Where did Harry Potter study?<|end|>\n<|assistant|>"
    samples = _samples(scorer, model, chat_tokenizer, QUESTIONS)
    queries = _with_sampled_answers(QUESTIONS, samples)
    chat_scores = scorer.score(model, chat_tokenizer, queries)
    assert np.all(chat_scores.p > 0)
    # chat=False on the same tokenizer takes the base template: other inputs, other samples
    base = GenerateScorer(k=3, max_new_tokens=8, chat=False)
    assert _samples(base, model, chat_tokenizer, QUESTIONS) != samples


def test_chat_errors(random_gpt2, chat_tokenizer):
    model, tok = random_gpt2
    with pytest.raises(KnowgicError, match="no chat template"):
        GenerateScorer(chat=True).score(model, tok, QUESTIONS[:1])
    broken = copy.deepcopy(chat_tokenizer)
    broken.chat_template = "{{ raise_exception('system role not supported') }}"
    with pytest.raises(KnowgicError, match="chat template failed"):
        GenerateScorer(chat=True).score(model, broken, QUESTIONS[:1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k must be"),
        ({"temperature": 0}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"batch_size": -1}, "batch_size"),
        ({"base_template": "Q: {q}\nA:"}, "base_template"),
        ({"base_template": "no field"}, "base_template"),
        ({"seed": "zero"}, "seed"),
        ({"known_threshold": 2.0}, "known_threshold"),
    ],
)
def test_generate_bad_params(kwargs, message):
    with pytest.raises(KnowgicError, match=message):
        GenerateScorer(**kwargs)


def test_thresholds_and_params_from_spec():
    assert GenerateScorer().known_threshold == 0.2
    assert GreedyScorer().known_threshold == 1.0
    assert GenerateScorer().params["k"] == 5 and "k" not in GreedyScorer().params


def test_inverse_cdf_sampling_follows_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(4000, generator=gen, dtype=torch.float64)
    freq = torch.bincount(inverse_cdf_sample(logits, u, 1.0, 1.0), minlength=4).double() / 4000
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64), atol=0.03)
    nucleus = torch.bincount(inverse_cdf_sample(logits, u, 1.0, 0.7), minlength=4).double() / 4000
    assert nucleus[2] == 0 and nucleus[3] == 0  # top-p 0.7 keeps {0.5, 0.3}
    assert nucleus[0] == pytest.approx(0.5 / 0.8, abs=0.03)
    cold = torch.bincount(inverse_cdf_sample(logits, u, 0.01, 1.0), minlength=4)
    assert cold[0] == 4000  # temperature -> 0 is argmax
    masked = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf")]]).repeat(4000, 1)
    drawn = inverse_cdf_sample(masked, u, 1.0, 1.0)
    assert set(drawn.tolist()) == {0, 2}
    edge = inverse_cdf_sample(masked[:1], torch.tensor([1.0 - 1e-17], dtype=torch.float64), 1.0, 1.0)
    assert edge.tolist() == [2]


def test_step_uniforms_deterministic():
    a = step_uniforms([sample_seed(0, "Where?", j) for j in range(3)], 5)
    b = step_uniforms([sample_seed(0, "Where?", j) for j in range(3)], 5)
    assert torch.equal(a, b) and a.shape == (3, 5) and a.dtype == torch.float64
    assert not torch.equal(a[0], a[1])
    assert sample_seed(0, "Where?", 0) != sample_seed(1, "Where?", 0)


def test_generate_bad_queries(random_gpt2):
    model, tok = random_gpt2
    with pytest.raises(KnowgicError, match="has no answer"):
        GreedyScorer().score(model, tok, [Query("{} is", "x", ("",), "What?")])
    with pytest.raises(KnowgicError, match="positions"):
        GreedyScorer(max_new_tokens=120).score(model, tok, QUESTIONS[:1])
    assert len(GenerateScorer().score(model, tok, [])) == 0
