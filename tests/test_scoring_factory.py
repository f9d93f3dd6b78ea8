"""Building scorers from the benchmark spec, and the bare forward-pass timer used for the speed ratio."""

from __future__ import annotations

import pytest

from knowgic.errors import KnowgicError
from knowgic.scoring import SCORERS, make_scorer
from knowgic.scoring.base import Query
from knowgic.scoring.forward import bare_forward_seconds, measure_scoring_ratio, token_rows
from knowgic.scoring.generate import GenerateScorer, GreedyScorer
from knowgic.scoring.logprob import LogprobScorer

Q1 = Query("{} studied at", "Harry Potter", ("Hogwarts",), "Where did Harry Potter study?")
Q2 = Query("The capital of {} is", "France", ("Paris", "City of Light"))
Q3 = Query("{} studied at", "Harry Potter", ("Hogwarts",), "Where did Harry Potter study?", n_gold=2)


def test_make_scorer_defaults_and_overrides():
    assert set(SCORERS) == {"logprob", "generate", "greedy"}
    logprob = make_scorer("logprob")
    assert isinstance(logprob, LogprobScorer) and logprob.protocol == "logprob"
    assert logprob.params == {
        "batch_size": 64,
        "answer_leading_space": "auto",
        "known_rule": "greedy_contains",
        "known_extra_tokens": 4,
    }
    generate = make_scorer("generate", k=3, chat=False)
    assert isinstance(generate, GenerateScorer)
    assert generate.params["k"] == 3 and generate.params["seed"] == 0 and generate.params["chat"] is False
    assert generate.known_threshold == 0.2
    assert isinstance(make_scorer("greedy"), GreedyScorer)


@pytest.mark.parametrize(
    ("protocol", "overrides", "message"),
    [
        ("beam", {}, "unknown scoring protocol 'beam'"),
        ("logprob", {"k": 5}, "unknown parameter 'k'"),
        ("greedy", {"temperature": 0.7}, "unknown parameter 'temperature'"),
        ("generate", {"topp": 0.9}, "unknown parameter 'topp'"),
        ("logprob", {"batch_size": 0}, "batch_size"),
        ("logprob", {"batch_size": "64"}, "batch_size"),
        ("logprob", {"answer_leading_space": "sometimes"}, "answer_leading_space"),
        ("generate", {"top_p": 0.0}, "top_p"),
        ("greedy", {"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_make_scorer_rejects_bad_input(protocol, overrides, message):
    with pytest.raises(KnowgicError, match=message):
        make_scorer(protocol, **overrides)


def test_bare_forward_uses_the_scorers_rows(random_gpt2):
    model, tok = random_gpt2
    queries = [Q1, Q2, Q3]
    rows = token_rows(tok, queries)
    assert len(rows) == 4  # Q1 and Q3 one answer each, Q2 two
    assert rows[1] == tok("The capital of France is Paris")["input_ids"]
    seconds = bare_forward_seconds(model, tok, queries, batch_size=2)
    assert 0 < seconds < 60
    report = measure_scoring_ratio(model, tok, queries, batch_size=2, repeats=1)
    assert report.n_rows == 4 and report.n_queries == 3
    assert report.ratio_cold > 0 and report.ratio_warm > 0
