"""Score each distinct query once: chains and broader-context graphs repeat the same facts many times."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from knowgic.scoring.base import Query, Scorer, Scores


def unique_queries(queries: Sequence[Query]) -> tuple[list[Query], np.ndarray]:
    """Distinct queries in first-seen order, and for each input query the index of its distinct copy.

    ``unique[inverse[i]] == queries[i]``; queries are equal when all their fields are (prompt, subject,
    answers in order, question, n_gold).
    """
    index: dict[Query, int] = {}
    inverse = np.empty(len(queries), dtype=np.int64)
    for i, query in enumerate(queries):
        inverse[i] = index.setdefault(query, len(index))
    return list(index), inverse


def expand(scores: Scores, inverse: np.ndarray) -> Scores:
    """Scores of the distinct queries spread back over the original list."""
    return Scores(scores.p[inverse], scores.known[inverse])


def score_distinct(
    scorer: Scorer, model: torch.nn.Module, tokenizer: Any, queries: Sequence[Query], prefix: str = ""
) -> Scores:
    """``scorer.score`` over ``queries``, running each distinct query once."""
    unique, inverse = unique_queries(queries)
    return expand(scorer.score(model, tokenizer, unique, prefix=prefix), inverse)
