"""Scoring stage: how much a model knows each query (DESIGN.md, "Scoring protocols").

Protocols: ``logprob`` (:class:`~knowgic.scoring.logprob.LogprobScorer`), ``generate`` and ``greedy``
(:mod:`knowgic.scoring.generate`). :func:`make_scorer` builds one with the defaults of
``spec/benchmark.yaml``; :class:`~knowgic.scoring.cache.ScoreCache` keeps pre-edit scores on disk;
:func:`~knowgic.scoring.dedupe.unique_queries` lets callers score each distinct query once.
"""

from __future__ import annotations

from typing import Any

from knowgic.scoring.base import Query, Scorer, Scores

__all__ = ["SCORERS", "Query", "Scorer", "Scores", "make_scorer"]


def __getattr__(name: str) -> Any:
    # The scorers need torch; the queries and the spec do not (the runner's worker host reads them).
    if name in ("SCORERS", "make_scorer"):
        from knowgic.scoring import factory

        return getattr(factory, name)
    raise AttributeError(f"module 'knowgic.scoring' has no attribute {name!r}")
