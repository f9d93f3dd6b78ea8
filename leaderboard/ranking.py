"""Ranks that respect uncertainty, as Chatbot Arena's: runs the paired comparison cannot tell apart share a rank.

::

    runs of one track (model, protocol, mode, dataset version)
        │  group by what makes two runs comparable edit by edit (knowgic.uncertainty.comparability_problem)
        ▼
    per group: paired_resamples (every run recomputed on the same resampled edits)
        │  j beats i when the paired interval of score_j − score_i lies above 0
        │  (across groups, which share no edits: when j's interval lies wholly above i's)
        ▼
    rank_i = 1 + #{j : j beats i}           (runs without a deep-editing score: no rank)

The score is the deep-editing score (higher is better). Two runs tie unless one is significantly better,
so several runs can share rank 1, and a run's rank never depends on how many worse runs there are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.uncertainty import comparability_problem, paired_resamples
from leaderboard.table import RANK_METRIC


def _score(document: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    entry = document["metrics"].get(RANK_METRIC) or {}
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


def better_pairs(documents: Sequence[Mapping[str, Any]]) -> set[tuple[int, int]]:
    """Every (j, i) where run j is significantly better than run i on the deep-editing score."""
    scores = [_score(d) for d in documents]
    group_of: dict[int, int] = {}
    better: set[tuple[int, int]] = set()
    for g, group in enumerate(_comparable_groups(documents)):
        for i in group:
            group_of[i] = g
        defined = [i for i in group if scores[i][0] is not None]
        if len(defined) < 2:
            continue
        try:
            paired = paired_resamples([documents[i] for i in defined])
        except KnowgicError:  # comparable by construction; an old file without statistics says so here
            continue
        for a, i in enumerate(defined):
            for b, j in enumerate(defined):
                if scores[j][0] <= scores[i][0]:  # type: ignore[operator]
                    continue
                difference = paired.difference(RANK_METRIC, a, b)  # j − i
                if difference.low is not None and difference.low > 0.0:
                    better.add((j, i))
    for i, (value_i, _low_i, high_i) in enumerate(scores):
        for j, (value_j, low_j, _high_j) in enumerate(scores):
            if value_i is None or value_j is None or group_of[i] == group_of[j]:
                continue
            if low_j is not None and high_i is not None and low_j > high_i:
                better.add((j, i))
    return better


def uncertainty_ranks(documents: Sequence[Mapping[str, Any]]) -> list[int | None]:
    r"""Rank of each run of one track: :math:`1 + |\{j : j \text{ significantly better than } i\}|`;
    ``None`` where the run has no deep-editing score."""
    better = better_pairs(documents)
    ranks: list[int | None] = []
    for i, document in enumerate(documents):
        if _score(document)[0] is None:
            ranks.append(None)
        else:
            ranks.append(1 + sum(1 for j, k in better if k == i))
    return ranks
