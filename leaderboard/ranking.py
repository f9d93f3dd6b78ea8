"""The leaderboard's ranks: rank ranges among the runs of one ranking, in the order of their values.

::

    the stored runs of one model
        │  grouped by their ranking key (knowgic.measure.ranks.RankingKey: model and revision, dataset
        │  version and content hash, limit and edits, protocol with its parameters and known rule, mode);
        │  runs of different keys are never ranked together: each key is a ranking of its own, and the
        │  default one holds full runs (no --limit)
        ▼
    per ranking: knowgic.measure.ranks.rank_runs on the rank metric (the deep-editing score), by its
        ranked form: a 95% rank range per run from one paired bootstrap of the edits the runs share; the
        private split's edits where every run was scored on one (results schema 1.5; the public figures are
        shown to reproduce), else the public edits, and the page says which (TablePage.rank_note)
        ▼
    rows ordered by that value; Rank shows the range ("2–5"); a better value never shows a worse rank

A run whose score is undefined has no rank. Runs whose ranges overlap are not told apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.leaderboard.columns import RANK_METRIC
from knowgic.measure.ranks import RankRange, rank_runs


def rank_ranges(
    documents: Sequence[Mapping[str, Any]], metric: str = RANK_METRIC
) -> tuple[list[tuple[RankRange | None, float | None]], str]:
    """Each run's rank range on ``metric`` (by its ranked form) and the value it is ranked by, for runs of one
    ranking, and what the ranks rest on in words (the private split every run was scored on, else the public
    data and why); every run unranked when they cannot share one (a :class:`KnowgicError` the scan did not
    catch)."""
    if not documents:
        return [], ""
    try:
        ranking = rank_runs(documents, [metric])[metric]
    except KnowgicError as exc:
        return [(None, None)] * len(documents), f"not ranked: {exc}"
    return list(zip(ranking.ranges, ranking.values, strict=True)), ranking.basis
