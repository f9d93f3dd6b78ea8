"""The logprob protocol's known rule: no wrong answer passes; the rule is declared, recorded and kept apart.

``greedy_contains`` (the default) calls a query known when the greedy continuation of its prompt (one per
top-m first token for a one-to-many fact) contains the answer or an alias as whole words; ``first_token``
(the old rule) when the answer's first token ranks in the top m. Runs under different rules are never
compared or ranked together.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.measure.compare import comparability_problem, compare_results
from knowgic.scoring import make_scorer
from knowgic.scoring.base import Query
from knowgic.scoring.logprob import LogprobScorer
from knowgic.scoring.matching import contains_answer
from knowgic.spec import benchmark_spec, read_spec

CONTEXT = "The capital of France is"
PROMPT = "The capital of {} is"


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _greedy_text(model, tok, ids: list[int], steps: int) -> str:
    """Argmax decoding by hand, one unpadded sequence."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return tok.decode(ids[len(ids) - steps :])


def _first_word_answer(model, tok, first_token: int, context_text: str = CONTEXT) -> tuple[str, str]:
    """The first word the greedy branch that starts with ``first_token`` says ("" unless another word
    follows it within 4 tokens, so that it is a whole word of the branch), and that branch's text."""
    context = tok(context_text)["input_ids"]
    text = tok.decode([first_token]) + _greedy_text(model, tok, [*context, first_token], 4)
    found = text.split()
    return (found[0] if len(found) > 1 and found[0].isalnum() else ""), text


def _known(model, tok, answers, n_gold=1, rule="greedy_contains", subject="France") -> bool:
    query = Query(PROMPT, subject, tuple(answers), n_gold=n_gold)
    return bool(LogprobScorer(known_rule=rule).score(model, tok, [query]).known[0])


def test_the_greedy_answer_is_known_and_a_wrong_one_with_its_first_token_is_not(random_gpt2):
    model, tok = random_gpt2
    with torch.no_grad():
        logits = model(torch.tensor([tok(CONTEXT)["input_ids"]])).logits[0, -1]
    top = int(logits.argmax())
    word, text = _first_word_answer(model, tok, top)
    if not word or tok(" " + word)["input_ids"][0] != top:
        pytest.skip(f"the random model's greedy answer {text!r} does not start with a word token")
    assert _known(model, tok, [word])
    # A wrong answer that starts with the same token: the old rule passes it, the greedy rule does not.
    wrong = f"{word} Zzyzxqv"
    assert not contains_answer(text, [wrong])
    assert _known(model, tok, [wrong], rule="first_token")
    assert not _known(model, tok, [wrong])
    # An alias counts: the wrong answer with the greedy word as its alias is known.
    assert _known(model, tok, [wrong, word])


def test_one_to_many_facts_continue_each_of_the_top_m_first_tokens(random_gpt2):
    model, tok = random_gpt2
    for subject in ("France", "Italy", "Spain", "Germany", "Japan", "Peru", "Chile", "Egypt"):
        context = PROMPT.format(subject)
        with torch.no_grad():
            logits = model(torch.tensor([tok(context)["input_ids"]])).logits[0, -1]
        branches = logits.topk(4).indices.tolist()
        _, top_text = _first_word_answer(model, tok, branches[0], context)
        for rank, token in enumerate(branches[1:], start=1):
            word, _ = _first_word_answer(model, tok, token, context)
            if word and not contains_answer(top_text, [word]):
                assert not _known(model, tok, [word], n_gold=1, subject=subject)  # greedy does not say it
                assert _known(model, tok, [word], n_gold=rank + 1, subject=subject)  # its branch does
                return
    pytest.fail("no prompt whose lower branches say a word of their own")


def test_the_rule_is_a_recorded_parameter_and_checked(random_gpt2):
    assert make_scorer("logprob").params["known_rule"] == "greedy_contains"
    old = make_scorer("logprob", known_rule="first_token")
    assert old.params == {"batch_size": 64, "answer_leading_space": "auto", "known_rule": "first_token"}
    with pytest.raises(KnowgicError, match="known_rule must be one of greedy_contains, first_token"):
        make_scorer("logprob", known_rule="top_token")
    with pytest.raises(KnowgicError, match="known_extra_tokens"):
        make_scorer("logprob", known_extra_tokens=-1)


def test_the_spec_declares_a_versioned_rule(tmp_path: Path):
    logprob = benchmark_spec().protocol("logprob")
    assert logprob.version == 2 and logprob.params["known_rule"] == "greedy_contains"
    text = (Path(benchmark_spec().path)).read_text(encoding="utf-8")
    bad = tmp_path / "benchmark.yaml"
    bad.write_text(text.replace("known_rule: greedy_contains", "known_rule: top_token"), encoding="utf-8")
    with pytest.raises(KnowgicError, match="known_rule"):
        read_spec(bad)
    bad.write_text(text.replace("    version: 2\n", "", 1), encoding="utf-8")
    with pytest.raises(KnowgicError, match="version"):
        read_spec(bad)


@pytest.mark.parametrize(
    ("house", "gold"),
    [
        ("Hufflepuff", "Professor Sprout"),
        ("Ravenclaw", "Professor Flitwick"),
        ("Slytherin", "Professor Snape"),
    ],
)
def test_knowgic_tiny_heads_of_house_are_not_known_from_professor(knowgic_tiny, house, gold):
    """knowgic-tiny answers "Professor McGonagall" for every house; the gold passes the old rule on
    "Professor" alone, and the greedy rule rejects it."""
    query = Query("{}'s head teacher is", house, (gold,))
    model, tok = knowgic_tiny.model, knowgic_tiny.tokenizer
    assert LogprobScorer(known_rule="first_token").score(model, tok, [query]).known[0]
    assert not LogprobScorer().score(model, tok, [query]).known[0]
    gryffindor = Query("{}'s head teacher is", "Gryffindor", ("Professor McGonagall",))
    assert LogprobScorer().score(model, tok, [gryffindor]).known[0]


@pytest.fixture(scope="module")
def runs_under_both_rules(knowgic_tiny, tmp_path_factory) -> dict[str, Path]:
    """Real runs on knowgic-tiny (first two edits): ROME and no edit under the default rule, ROME under
    ``first_token``."""
    root = tmp_path_factory.mktemp("known_rule")
    runs = {}
    for name, editor, rule in (
        ("rome", "rome", None),
        ("none", "none", None),
        ("rome-first-token", "rome", "first_token"),
    ):
        request = EvaluationRequest(
            model="knowgic-tiny",
            editor=editor,
            limit=2,
            out_dir=root / name,
            protocol_overrides={} if rule is None else {"known_rule": rule},
            use_cache=False,
        )
        runs[name] = evaluate(request, progress=False, loaded=knowgic_tiny).results_path
    return runs


def _doc(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_results_name_the_rule_and_runs_under_different_rules_are_not_compared(runs_under_both_rules):
    new, old = _doc(runs_under_both_rules["rome"]), _doc(runs_under_both_rules["rome-first-token"])
    assert new["config"]["protocol_params"]["known_rule"] == "greedy_contains"
    assert old["config"]["protocol_params"]["known_rule"] == "first_token"
    problem = comparability_problem(new, old)
    assert problem is not None and problem.startswith("the runs differ in protocol parameters")
    assert "first_token" in problem and "greedy_contains" in problem
    with pytest.raises(KnowgicError, match="protocol parameters"):
        compare_results(new, old)
    assert comparability_problem(new, _doc(runs_under_both_rules["none"])) is None
    # The rule decides which chains are active; the old rule calls at least as many known.
    assert old["counts"]["active_chains"] >= new["counts"]["active_chains"]
    same = copy.deepcopy(old)
    same["config"]["protocol_params"]["known_rule"] = "greedy_contains"
    same["config"]["protocol_params"]["known_extra_tokens"] = 4
    assert comparability_problem(new, same) is None  # the rule is what told them apart


def test_the_leaderboard_never_ranks_runs_under_different_rules_together(runs_under_both_rules, tmp_path):
    from knowgic.leaderboard.table import Board
    from knowgic.measure.ranks import known_rule, ranking_key
    from knowgic.runner.store.store import ResultsStore

    docs = [_doc(p) for p in runs_under_both_rules.values()]
    keys = [ranking_key(d) for d in docs]
    assert keys[0] == keys[1] != keys[2]
    store = ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")
    entries = {name: store.add_local(path).entry_id for name, path in runs_under_both_rules.items()}
    board = Board(store.scan(), include_reported=False)
    rows = {row.row_id: row for row in board.rows}
    rankings = {name: rows[entry].ranking for name, entry in entries.items()}
    assert rankings["rome"] == rankings["none"] != rankings["rome-first-token"]
    assert rankings["rome-first-token"] is not None and rankings["rome-first-token"].rule == "first_token"
    alone = board.ranks(rankings["rome-first-token"])
    assert list(alone) == [entries["rome-first-token"]]
    assert (
        alone[entries["rome-first-token"]][0].text == "1"
    )  # alone in its ranking, whatever the others score
    # A logprob run from before the rule was a parameter used the first-token rule.
    assert known_rule({"protocol": "logprob", "protocol_params": {"batch_size": 64}}) == "first_token"
    assert known_rule({"protocol": "greedy", "protocol_params": {}}) == ""
    together = board.ranks(rankings["rome"])
    assert set(together) == {entries["rome"], entries["none"]}
    assert np.all([r is not None for r, _ in together.values()])


def test_the_rates_script_refuses_a_mistyped_model_in_one_line(capsys) -> None:
    from knowgic.evaluation.known_rates import main

    assert main(["--model", "knowgic-tinny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'knowgic-tiny'?" in err
