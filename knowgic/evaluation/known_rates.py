"""How often a ``logprob`` known rule calls a fact known that the model answers with another entity.

    python -m knowgic.evaluation.known_rates --model knowgic-tiny [--version 1.1.0] [--examples 5]

Every fact of the dataset version is scored as the evaluation scores it (the answer and its aliases,
``n_gold`` from the version) under each known rule (:mod:`knowgic.scoring.known`), and under a rule that
is not the protocol's, measured beside them: the full answer's probability ranks in the top ``n_gold``
among the relation's candidate objects (every answer the version lists for the prompt). The reference is the
model's greedy answer to the cloze prompt (up to ``--max-new-tokens`` tokens, cut at the first newline),
and, as a second reference, its greedy answer to the fact's question (the ``greedy`` protocol). A fact is
*falsely known* under a rule when the rule says known but the reference answer does not contain the gold
answer or an alias (whole words, case-insensitive). One-to-many facts (``n_gold > 1``) are counted apart,
and for them the reference is right when it names any gold answer of the fact's subject and prompt (one
greedy answer names one of them at most).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from knowgic.argtypes import add_model_argument, positive_int
from knowgic.dataset.folder import open_dataset
from knowgic.errors import KnowgicError
from knowgic.models import load_model
from knowgic.models.loading import resolve_source
from knowgic.scoring.base import Query
from knowgic.scoring.generate import GreedyScorer
from knowgic.scoring.known import KNOWN_RULES, answer_text, greedy_continuations
from knowgic.scoring.logprob import LogprobScorer
from knowgic.scoring.matching import contains_answer
from knowgic.scoring.tokenize import split_many


def fact_queries(version: str | None) -> tuple[str, list[Query]]:
    """The version's facts as the evaluation asks them."""
    dataset = open_dataset(version)
    aliases = dataset.clean_aliases()
    queries = []
    for row in dataset.rows("facts"):
        answer = row["answer"]
        extra = aliases.get(answer) or tuple(a for a in row.get("aliases", ()) if a and a != answer)
        questions = row.get("questions") or [""]
        queries.append(
            Query(
                prompt=row["prompt"],
                subject=row["subject"],
                answers=(answer, *extra),
                question=questions[0],
                n_gold=max(1, int(row.get("n_gold", 1))),
            )
        )
    return dataset.version, queries


def cloze_answers(loaded: Any, queries: Sequence[Query], max_new_tokens: int, batch_size: int) -> list[str]:
    """The greedy continuation of each query's cloze prompt."""
    splits = split_many(loaded.tokenizer, [q.text for q in queries], [q.answers[0] for q in queries])
    prompts = [list(s.context) for s in splits]
    tokens = greedy_continuations(
        loaded.model, loaded.tokenizer, prompts, [max_new_tokens] * len(prompts), batch_size
    )
    return [answer_text(loaded.tokenizer, t) for t in tokens]


def answer_rank_known(loaded: Any, queries: Sequence[Query], batch_size: int) -> np.ndarray:
    """The rule measured beside the protocol's: the full answer's probability (max over its aliases) ranks
    in the top ``n_gold`` among the relation's candidate objects, every answer the version lists for the
    prompt (each with its own aliases)."""
    candidates: dict[str, dict[str, tuple[str, ...]]] = {}
    for q in queries:
        candidates.setdefault(q.prompt, {})[q.answers[0]] = q.answers
    rows: list[Query] = []
    owner: list[int] = []
    for qi, q in enumerate(queries):
        for answers in candidates[q.prompt].values():
            rows.append(Query(q.prompt, q.subject, answers))
            owner.append(qi)
    p = (
        LogprobScorer(batch_size=batch_size, known_rule="first_token")
        .score(loaded.model, loaded.tokenizer, rows)
        .p
    )
    gold = (
        LogprobScorer(batch_size=batch_size, known_rule="first_token")
        .score(loaded.model, loaded.tokenizer, queries)
        .p
    )
    above = np.zeros(len(queries), dtype=np.int64)
    np.add.at(above, np.asarray(owner), p > gold[np.asarray(owner)])
    return above < np.array([q.n_gold for q in queries])


def _row(name: str, known: np.ndarray, right: np.ndarray, subset: np.ndarray) -> str:
    k = known & subset
    false = k & ~right
    rate = f"{false.sum() / k.sum():.1%}" if k.sum() else "n/a"
    return f"| {name} | {int(subset.sum())} | {int(k.sum())} | {int(false.sum())} | {rate} |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m knowgic.evaluation.known_rates", description=__doc__)
    add_model_argument(parser)
    parser.add_argument("--version", default=None, help="dataset version (default: the latest)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=24)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--examples", type=positive_int, default=5, help="falsely known facts shown per rule")
    args = parser.parse_args(argv)
    try:
        return _measure(args)
    except KnowgicError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def _measure(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    resolve_source(args.model)  # a mistyped model name fails before the dataset and the model load
    version, queries = fact_queries(args.version)
    loaded = load_model(args.model)
    texts = cloze_answers(loaded, queries, args.max_new_tokens, args.batch_size)
    cloze_right = np.array([contains_answer(t, q.answers) for t, q in zip(texts, queries, strict=True)])
    greedy = GreedyScorer(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, chat=loaded.is_chat)
    question_right = greedy.score(loaded.model, loaded.tokenizer, queries).known
    one = np.array([q.n_gold == 1 for q in queries])
    gold_set: dict[tuple[str, str], list[str]] = {}
    for q in queries:
        gold_set.setdefault((q.subject, q.prompt), []).extend(q.answers)
    many = [gold_set[(q.subject, q.prompt)] for q in queries]
    cloze_right |= ~one & np.array([contains_answer(t, g) for t, g in zip(texts, many, strict=True)])
    asked = [
        Query(q.prompt, q.subject, tuple(g), q.question, q.n_gold) for q, g in zip(queries, many, strict=True)
    ]
    question_right |= ~one & greedy.score(loaded.model, loaded.tokenizer, asked).known
    known = {
        rule: LogprobScorer(batch_size=args.batch_size, known_rule=rule)
        .score(loaded.model, loaded.tokenizer, queries)
        .known
        for rule in KNOWN_RULES
    }
    known["answer_rank (not a protocol rule)"] = answer_rank_known(loaded, queries, args.batch_size)
    seconds = time.perf_counter() - start

    print(f"model {args.model}, KnowGIC {version}, {len(queries)} facts ({int(one.sum())} with n_gold = 1)")
    for reference, right in (
        ("greedy cloze continuation", cloze_right),
        ("greedy answer to the question", question_right),
    ):
        print(
            f"\nreference: {reference} ({int((right & one).sum())} of the n_gold = 1 facts contain the answer)"
        )
        print("| rule | facts | known | falsely known | falsely known / known |")
        print("| --- | --- | --- | --- | --- |")
        for rule in known:
            print(_row(f"{rule}, n_gold = 1", known[rule], right, one))
            print(_row(f"{rule}, n_gold > 1", known[rule], right, ~one))
    for rule in known:
        false = np.flatnonzero(known[rule] & ~cloze_right & one)[: args.examples]
        if len(false):
            print(f"\n{rule}: falsely known (n_gold = 1), the greedy cloze continuation:")
        for i in false:
            q = queries[i]
            print(f"  {q.text!r} -> {texts[i]!r} (gold {q.answers[0]!r})")
    print(f"\n{platform.node()} ({platform.processor() or platform.machine()}), {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
