"""Ranks that respect uncertainty, as Chatbot Arena's: runs the paired comparison cannot tell apart share a rank.

::

    runs of one track (model, protocol and its known rule, mode, dataset version)
        │  group by what makes two runs comparable edit by edit (knowgic.measure.compare.comparability_problem)
        ▼
    per group: paired_resamples, then knowgic.measure.compare.ranks_by_significance
        │  every pair compared by the paired test of the score's kind, the family controlled by Holm
        │  (across groups, which share no edits: j beats i when j's interval lies wholly above i's)
        ▼
    rank_i = 1 + #{j : j significantly better than i}     (runs without a deep-editing score: no rank)

The score is the deep-editing score (higher is better). Two runs tie unless one is significantly better,
so several runs can share rank 1, and a run's rank never depends on how many worse runs there are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.leaderboard.columns import RANK_METRIC
from knowgic.measure.compare import comparability_problem, paired_resamples, ranks_by_significance


def _score(document: Mapping[str, Any], metric: str) -> tuple[float | None, float | None, float | None]:
    entry = document["metrics"].get(metric) or {}
    interval = entry.get("interval") or [None, None]
    return entry.get("value"), interval[0], interval[1]


def _comparable_groups(documents: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Indices of ``documents`` grouped so that every run of a group is comparable with its first."""
    groups: list[list[int]] = []
    for i, document in enumerate(documents):
        for group in groups:
            if comparability_problem(documents[group[0]], document) is None:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def uncertainty_ranks(documents: Sequence[Mapping[str, Any]], metric: str = RANK_METRIC) -> list[int | None]:
    r"""Rank of each run of one track on ``metric`` (the board's rank metric, the deep-editing score):
    :math:`1 + |\{j : j \text{ significantly better than } i\}|`; ``None`` where the run has no value."""
    scores = [_score(d, metric) for d in documents]
    better = [0] * len(documents)
    group_of: dict[int, int] = {}
    for g, group in enumerate(_comparable_groups(documents)):
        for i in group:
            group_of[i] = g
        if len(group) < 2:
            continue
        try:
            ranks = ranks_by_significance(paired_resamples([documents[i] for i in group]), metric)
        except KnowgicError:  # comparable by construction; an old file without statistics says so here
            continue
        for i, rank in zip(group, ranks, strict=True):
            better[i] += 0 if rank is None else rank - 1
    for i, (value_i, _low_i, high_i) in enumerate(scores):
        for j, (value_j, low_j, _high_j) in enumerate(scores):
            if value_i is None or value_j is None or group_of[i] == group_of[j]:
                continue
            if low_j is not None and high_i is not None and low_j > high_i:
                better[i] += 1
    return [None if score[0] is None else 1 + better[i] for i, score in enumerate(scores)]
