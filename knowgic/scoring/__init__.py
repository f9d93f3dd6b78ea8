"""Scoring stage: how much a model knows each query (DESIGN.md, "Scoring protocols").

Protocols: ``logprob`` (:class:`~knowgic.scoring.logprob.LogprobScorer`), ``generate`` and ``greedy``
(:mod:`knowgic.scoring.generate`). :func:`make_scorer` builds one with the defaults of
``spec/benchmark.yaml``; :class:`~knowgic.scoring.cache.ScoreCache` keeps pre-edit scores on disk;
:func:`~knowgic.scoring.dedupe.unique_queries` lets callers score each distinct query once.
"""

from __future__ import annotations

from knowgic.scoring.base import Query, Scorer, Scores
from knowgic.scoring.factory import SCORERS, make_scorer

__all__ = ["SCORERS", "Query", "Scorer", "Scores", "make_scorer"]
