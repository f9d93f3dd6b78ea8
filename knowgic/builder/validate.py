"""Stages 2 and 4, validation: a fact stays when the model knows it by the metrics' own rule.

    fact (subject, prompt, answer, aliases, question) --Query--> scorer of the protocol --> p, known

The query is made as the evaluation makes it (:class:`~knowgic.scoring.base.Query`): the answer and its
aliases, the fact's question, and ``n_gold`` = the distinct answers the graph lists for (subject, prompt),
and the scorer's known rule decides (:mod:`knowgic.scoring.known`). Under ``logprob`` with the default
``known_rule: greedy_contains`` a fact is kept when the model's greedy continuation of the prompt (for a
one-to-many fact, the continuation after one of its top ``n_gold`` first tokens) contains the answer or an
alias as whole words, so a fact the model answers with another entity is dropped even where that entity
shares the answer's first token ("Professor McGonagall" for "Professor Sprout"). A scorer built with
``known_rule: first_token`` keeps the old test, the answer's first token in the model's top ``n_gold``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from knowgic.scoring.base import Query, Scorer


def gold_counts(facts: Sequence[dict[str, Any]]) -> dict[tuple[str, str], int]:
    answers: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in facts:
        answers[(f["subject"], f["prompt"])].add(f["answer"])
    return {k: len(v) for k, v in answers.items()}


def fact_query(fact: dict[str, Any], n_gold: int) -> Query:
    return Query(
        prompt=fact["prompt"],
        subject=fact["subject"],
        answers=(fact["answer"], *[a for a in fact.get("aliases", ()) if a and a != fact["answer"]]),
        question=fact.get("question", ""),
        n_gold=max(1, n_gold),
    )


def score_facts(
    facts: Sequence[dict[str, Any]],
    loaded: Any,
    scorer: Scorer,
    gold_from: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """``facts`` with ``validation`` = {p, known} added; ``gold_from``: the facts n_gold is counted over
    (default ``facts``)."""
    gold = gold_counts(gold_from if gold_from is not None else facts)
    queries = [fact_query(f, gold.get((f["subject"], f["prompt"]), 1)) for f in facts]
    scores = scorer.score(loaded.model, loaded.tokenizer, queries)
    return [
        {**f, "validation": {"p": float(p), "known": bool(k), "n_gold": q.n_gold}}
        for f, p, k, q in zip(facts, scores.p, scores.known, queries, strict=True)
    ]
