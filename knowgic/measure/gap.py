r"""The private split's flag: does a run recover less of the published chains than of chains it never saw,
by more than honest editors do on the same two edit sets?

A private split holds other edits than the public ones, so no edit has both a public and a private figure
to pair: the test is two-sample, on each edit's own IFR (the form that ranks IFR, ``ifr_per_edit``), and
calibrated against honest editors' gaps between the same two edit sets::

    the run:   x_e, each edit's own IFR, on the public edits Q and on the private edits P
               gap   d    = mean_P x - mean_Q x          a method that memorised the published chains has a
               SE_d       = sqrt(s_P^2/|P| + s_Q^2/|Q|)  low public IFR and a normal private one: d > 0
    honest:    d_1..d_k, the gaps of k reference runs (built-in editors that edit, on the same public edits,
               scored the same way, on the same private split)
               gbar = mean_r d_r,  s_g = sd_r d_r
    t = (d - gbar) / sqrt(SE_d^2 + s_g^2);  flagged when t > z_{1-alpha}, alpha = 0.05, one-sided
    fewer than MIN_REFERENCE_RUNS reference runs: not calibrated, ``flagged`` null with the reason

*Why calibrated.* The private edits come from other fact families than the public ones, so an honest
editor's IFR differs between the two sets by itself, and by how much depends on the editor: on
knowgic-tiny's growth track ICE's gap reaches +0.40 and FT's -0.32 on splits where the weight editors' lie
within ±0.06. ``gbar`` takes out what the two sets do to every editor, ``s_g`` how much honest editors
differ, ``SE_d`` the run's own noise (its sampling of edits). Measured on the real runs (docs/metrics.md,
"The private split's flag"; ``python -m knowgic.evaluation.gap_calibration``), it flags 0.019-0.028 of
honest runs on random splits and on 1.1.0's fact-family splits, where Welch's test of ``d`` alone reaches
0.060, and finds a cheat that hides every public chain at 1.1.0 0.998-0.999 of the time.

*What it cannot do.* An honest method unlike every reference run can be flagged: its gap is its own (ICE
left out of the references is flagged on every 20-edit family split of the growth track). Where honest
gaps spread as widely as a cheat moves its own (the growth track's weight editors, IFR per edit about
0.1), a cheat is found 0.14-0.36 of the time. A method whose public IFR is already near 0 has nothing to
hide. The flag asks for a look and never moves a rank: where a private split exists, it ranks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from knowgic.measure.registry import EditSums
from knowgic.spec import BenchmarkSpec

ALPHA = 0.05
"""The flag's one-sided level."""
MIN_REFERENCE_RUNS = 3
"""The fewest reference runs that calibrate the flag (a spread needs two; the simulation's level held at
three)."""
FLAGGED_METRIC = "ifr"
"""The metric whose ranked form (``ranked_by``: IFR per edit) the flag tests."""
NO_EDIT_EDITORS = frozenset({"none"})
"""Built-in editors that are never reference runs: the unedited model's IFR is 1 on every edit of any
set, so its gap says nothing about how an editor's IFR moves between the two sets."""
RULE = (
    "t = (d - mean of the reference gaps) / sqrt(SE_d^2 + sd of the reference gaps^2) > z(0.95): d = the "
    "run's mean per-edit IFR on the private edits minus on the public ones, SE_d Welch's; the reference "
    "gaps are built-in editors' on the same public edits and private split"
)
_TINY = 1e-12


def gap_metric(spec: BenchmarkSpec) -> str:
    """The path of the metric the flag tests: IFR's ranked form (``ifr_per_edit``)."""
    return spec.metrics[FLAGGED_METRIC].ranked_by


@dataclass(frozen=True)
class Gap:
    """A run's gap between its private and its public edits on one metric: each side's mean of the edits'
    own values and how many edits have one, ``gap`` = private - public, ``se`` Welch's standard error;
    ``reason`` (gap None) when a side has fewer than two values."""

    public: float | None
    public_edits: int
    private: float | None
    private_edits: int
    gap: float | None
    se: float | None
    reason: str | None = None


def _edit_values(sums: EditSums) -> np.ndarray:
    """Each edit's own value a_e / b_e, over the edits that have one (b_e > 0)."""
    a, b = sums.ratio.numerator, sums.ratio.denominator
    kept = b > 0
    return a[kept] / b[kept]


def edit_gap(public: EditSums, private: EditSums) -> Gap:
    r"""The :class:`Gap` of per-edit values: :math:`d = \bar x_P - \bar x_Q`,
    :math:`SE_d = \sqrt{s_P^2/|P| + s_Q^2/|Q|}` (sample variances, ``ddof`` 1)."""
    xq, xp = _edit_values(public), _edit_values(private)
    mq = float(xq.mean()) if xq.size else None
    mp = float(xp.mean()) if xp.size else None
    short = [name for name, x in (("public", xq), ("private", xp)) if x.size < 2]
    if short:
        return Gap(
            mq, xq.size, mp, xp.size, None, None,
            f"the {' and the '.join(short)} edits have fewer than two values: no spread to test a gap with",
        )  # fmt: skip
    se = math.sqrt(float(xp.var(ddof=1)) / xp.size + float(xq.var(ddof=1)) / xq.size)
    return Gap(mq, xq.size, mp, xp.size, float(mp - mq), se)  # type: ignore[operator]


@dataclass(frozen=True)
class Calibration:
    """Honest editors' gaps on the same two edit sets: how many runs, their mean and standard deviation, and
    where they come from (``source``, in words)."""

    source: str
    runs: int
    mean: float
    sd: float

    def record(self) -> dict[str, Any]:
        return {"source": self.source, "runs": self.runs, "mean": self.mean, "sd": self.sd}


def calibration(gaps: Sequence[float], source: str) -> Calibration | str:
    """The :class:`Calibration` of reference gaps, or why there is none (fewer than
    :data:`MIN_REFERENCE_RUNS`)."""
    if len(gaps) < MIN_REFERENCE_RUNS:
        found = f"{len(gaps)} reference run{'s' if len(gaps) != 1 else ''}"
        return (
            f"not calibrated: {found} ({source}); the flag needs the gaps of at least {MIN_REFERENCE_RUNS} "
            "built-in editors' runs on the same public edits and private split"
        )
    values = np.asarray(gaps, dtype=float)
    return Calibration(source, len(gaps), float(values.mean()), float(values.std(ddof=1)))


def critical_value(alpha: float = ALPHA) -> float:
    """The one-sided normal quantile the statistic must exceed."""
    return float(sps.norm.ppf(1.0 - alpha))


def flag_record(gap: Gap, metric: str, found: Calibration | str) -> dict[str, Any]:
    """The flag as a results document records it (``private.ifr_gap``): the run's gap, the calibration (or
    why there is none), the statistic and ``flagged`` (true, false, or null with ``reason`` where it cannot
    be decided)."""
    record: dict[str, Any] = {
        "metric": metric,
        "public": gap.public,
        "public_edits": gap.public_edits,
        "private": gap.private,
        "private_edits": gap.private_edits,
        "gap": gap.gap,
        "se": gap.se,
        "calibration": found.record() if isinstance(found, Calibration) else None,
        "statistic": None,
        "critical": critical_value(),
        "alpha": ALPHA,
        "flagged": None,
        "rule": RULE,
    }
    decided = decide(record)
    record["statistic"], record["flagged"] = decided[0], decided[1]
    reason = gap.reason or (found if isinstance(found, str) else decided[2])
    if record["flagged"] is None:
        record["reason"] = reason
    return record


def decide(record: Mapping[str, Any]) -> tuple[float | None, bool | None, str | None]:
    """``(statistic, flagged, reason)`` from a flag record's gap, standard error and calibration: what
    :func:`flag_record` writes, and what a reader recomputes."""
    cal, d, se = record.get("calibration"), record.get("gap"), record.get("se")
    if d is None or se is None or not isinstance(cal, Mapping):
        return None, None, None
    scale = math.sqrt(float(se) ** 2 + float(cal["sd"]) ** 2)
    if scale < _TINY:
        return None, None, "neither the run's gap nor the reference gaps have any spread"
    t = (float(d) - float(cal["mean"])) / scale
    return t, bool(t > float(record.get("critical", critical_value()))), None


def recalibrated(record: Mapping[str, Any], found: Calibration | str) -> dict[str, Any]:
    """A flag record decided again with another calibration (the leaderboard's, from the store's reference
    runs): the run's own gap is the record's."""
    gap = Gap(
        record.get("public"),
        int(record.get("public_edits", 0)),
        record.get("private"),
        int(record.get("private_edits", 0)),
        record.get("gap"),
        record.get("se"),
        None if record.get("gap") is not None else record.get("reason"),
    )
    return flag_record(gap, str(record.get("metric", "")), found)


def is_reference_editor(config: Mapping[str, Any]) -> bool:
    """Whether a run's editor can be a reference run: a built-in editor (its class is one of
    ``knowgic.editors``) that edits (not :data:`NO_EDIT_EDITORS`)."""
    editor_class = str(config.get("editor_class") or "")
    return editor_class.startswith("knowgic.editors.") and str(config.get("editor")) not in NO_EDIT_EDITORS


def recorded_gap(document: Mapping[str, Any]) -> float | None:
    """The gap a results document's private block records (``private.ifr_gap.gap``); None without one."""
    private = document.get("private")
    record = private.get("ifr_gap") if isinstance(private, Mapping) else None
    gap = record.get("gap") if isinstance(record, Mapping) else None
    return None if gap is None else float(gap)


def calibration_record(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``calibration`` record a private split's ``version.json`` may hold: the gaps of reference runs
    (:func:`is_reference_editor`; others are left out) of one ranking, each scored on this split.

    ``{"metric", "ranking": its RankingKey digest, "label": the ranking in words, "split_sha256",
    "runs": [{"editor", "results_sha256", "gap"}]}``. Raises :class:`KnowgicError` when the runs do not
    share one ranking and one private split, or one has no gap."""
    from knowgic.errors import KnowgicError
    from knowgic.measure.ranks import one_ranking

    key = one_ranking(documents)
    splits = {str((d.get("private") or {}).get("dataset", {}).get("sha256")) for d in documents}
    if len(splits) != 1 or "None" in splits:
        raise KnowgicError("the reference runs must all be scored on one private split")
    runs = []
    for document in documents:
        if not is_reference_editor(document["config"]):
            continue
        gap = recorded_gap(document)
        if gap is None:
            raise KnowgicError(f"run {document['sha256'][:12]} has no private gap to calibrate with")
        runs.append(
            {"editor": document["config"]["editor"], "results_sha256": document["sha256"], "gap": gap}
        )
    metric = str(documents[0]["private"]["ifr_gap"]["metric"])
    return {
        "metric": metric,
        "ranking": key.digest,
        "label": key.label,
        "split_sha256": splits.pop(),
        "runs": runs,
    }


SPLIT_SOURCE = "the private split's calibration record"
STORE_SOURCE = "the store's verified runs of built-in editors"


def split_calibration(record: Any, ranking_digest: str, split_sha256: str, metric: str) -> Calibration | str:
    """The calibration a split's ``calibration`` record gives a run of ranking ``ranking_digest`` on split
    ``split_sha256``, or why it gives none (absent, another ranking, split or metric)."""
    if not isinstance(record, Mapping):
        return calibration([], "the private split records no calibration")
    if record.get("ranking") != ranking_digest:
        return calibration([], "the private split's calibration is of another ranking")
    if record.get("split_sha256") != split_sha256 or record.get("metric") != metric:
        return calibration([], "the private split's calibration is of another split or metric")
    runs = record.get("runs")
    gaps = [float(r["gap"]) for r in runs if isinstance(r, Mapping)] if isinstance(runs, list) else []
    return calibration(gaps, SPLIT_SOURCE)
