r"""Every headline value, interval and count of a results document, recomputed from its own records.

A results document carries, beside its headline ``metrics`` and ``counts``, the records they are made of:
one per chain (``chains``: length, active, :math:`R`, :math:`R'`, known after the edit) and one per edit
(``per_edit``: the edit's outcome on the rewrite prompt and the question form, and the per-edit sums of
Preservation and Specificity). This module is the one computation from those records to the numbers::

    results document ──chains──────> knowgic.metrics (IFR, per length, recoverable chains)
                     ──per_edit────> per-edit sums  a_e, b_e ──> value  sum_e a_e / sum_e b_e
                                                             └─> knowgic.uncertainty (interval by kind)
                     ──> recompute_metrics(document) = {"metrics", "counts", "uncertainty"}
                                  │
         evaluate ────────────────┤ writes them into the document it builds (one computation)
         check_results(document) ─┘ compares them with what the document states

``knowgic evaluate`` builds every results document's metrics with :func:`recompute_metrics`, so what a
reader recomputes from a published file is what the run computed; :func:`check_results` lists every
stated value that differs (a file edited by hand, or written by another version of the definitions).
Documents of results schema 1.0 record no per-edit sums and are refused with a one-line error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from knowgic import metrics as M
from knowgic.errors import KnowgicError
from knowgic.evaluation.spec import EvaluationSpec, load_evaluation_spec
from knowgic.uncertainty import BootstrapSettings, interval_fields, metric_entry_at, metric_intervals

DEFAULT_TOLERANCE = 1e-9
"""How far (absolute) a stated value may lie from its recomputation before :func:`check_results` lists it."""

_RECOUNTED = (
    "rows",
    "chains",
    "active_chains",
    "recoverable_chains",
    "edits",
    "preservation_facts",
    "preservation_facts_known",
    "specificity_facts",
    "specificity_facts_known",
    "generalization_edits",
)
"""The ``counts`` recomputed from the records (``distinct_queries`` is a property of the plan, not of them)."""


def _chain_outcomes(document: Mapping[str, Any]) -> list[M.ChainOutcome]:
    return [
        M.ChainOutcome(
            case_id=int(c["case_id"]),
            edit_id=str(c["edit_id"]),
            length=int(c["length"]),
            active=bool(c["active"]),
            r_pre=float(c["r_pre"]),
            r_post=float(c["r_post"]),
            known_post=c.get("known_post"),
        )
        for c in document["chains"]
    ]


def _check_records(document: Mapping[str, Any]) -> None:
    """Refuse, in one line, a document whose records cannot give back its numbers."""
    version = document.get("schema_version")
    per_edit = document.get("per_edit")
    if not isinstance(per_edit, list) or not isinstance(document.get("chains"), list):
        raise KnowgicError("the results document has no per_edit and chains records to recompute from")
    needed = ("preservation_sum", "preservation_n", "specificity_kept", "neighbours", "neighbours_known")
    lacking = sorted({k for r in per_edit for k in needed if k not in r})
    if lacking:
        raise KnowgicError(
            f"results schema {version} records no per-edit {', '.join(lacking)}: its metrics and intervals "
            "cannot be recomputed (results schema 1.1 and later record them; rerun the evaluation)"
        )


def _ratio_value(
    numerator: float, denominator: float, n: int, empty: str | None, none_known: str
) -> M.MetricValue:
    """``numerator / denominator`` as a metric value; undefined (with the metric's own reason) without data."""
    if empty is not None:
        return M.MetricValue.undefined(empty)
    if denominator <= 0:
        return M.MetricValue.undefined(none_known)
    return M.MetricValue(value=numerator / denominator, n=n)


def _preservation_facts(document: Mapping[str, Any]) -> int:
    per_edit = document["per_edit"]
    if all("preservation_facts" in r for r in per_edit):
        return sum(int(r["preservation_facts"]) for r in per_edit)
    return int(document["counts"]["preservation_facts"])  # schema 1.1/1.2: the total only


def _specificity(records: Sequence[Mapping[str, Any]]) -> M.MetricValue:
    """Specificity over the known neighbours of ``records``, with :func:`knowgic.metrics.specificity`'s reasons."""
    known = sum(int(r["neighbours_known"]) for r in records)
    return _ratio_value(
        float(sum(int(r["specificity_kept"]) for r in records)),
        float(known),
        known,
        None if sum(int(r["neighbours"]) for r in records) else "no neighbourhood facts",
        "the unedited model knows none of the neighbourhood facts",
    )


def _values(document: Mapping[str, Any], spec: EvaluationSpec) -> dict[str, Any]:
    """Every declared metric's value (``MetricValue``; a dict of them for a metric with parts)."""
    chains = _chain_outcomes(document)
    per_edit = document["per_edit"]
    rewrite = [M.TargetOutcome(str(r["edit_id"]), float(r["p_new"]), float(r["p_true"])) for r in per_edit]
    pres_n = sum(int(r["preservation_n"]) for r in per_edit)
    preservation = _ratio_value(
        sum(float(r["preservation_sum"]) for r in per_edit),
        float(pres_n),
        pres_n,
        None if _preservation_facts(document) else "no broader-context facts",
        "the unedited model knows none of the broader-context facts",
    )
    per_edit_pres = [float(r["preservation"]) for r in per_edit if r["preservation"] is not None]
    questions = [float(r["generalization"]) for r in per_edit if r["generalization"] is not None]
    values: dict[str, Any] = {
        "ifr": M.indirect_fact_recovery(chains),
        "ifr_uncapped": M.indirect_fact_recovery(chains, capped=False),
        "ifr_by_length": M.ifr_by_length(chains),
        "preservation": preservation,
        "preservation_macro": (
            M.MetricValue(sum(per_edit_pres) / len(per_edit_pres), len(per_edit_pres))
            if per_edit_pres
            else M.MetricValue.undefined("no edit has a known broader-context fact")
        ),
        "efficacy": M.efficacy(rewrite),
        "efficacy_magnitude": M.efficacy_magnitude(rewrite),
        "generalization": (
            M.MetricValue(sum(questions) / len(questions), len(questions))
            if questions
            else M.MetricValue.undefined("no edit has a question form of the edited fact")
        ),
        "specificity": _specificity(per_edit),
        "specificity_same_relation": _specificity(
            [r for r in per_edit if r["neighbourhood"] == "same-relation"]
        ),
        "specificity_other_graphs": _specificity(
            [r for r in per_edit if r["neighbourhood"] == "other-graphs"]
        ),
    }
    for name, metric in spec.metrics.items():
        if metric.kind == "composite":
            values[name] = M.deep_editing_score(*(values[part].value for part in metric.of))
    unknown = [name for name in spec.metrics if name not in values]
    if unknown:
        raise KnowgicError(
            f"spec/benchmark.yaml declares the metric(s) {', '.join(unknown)}, which this version of knowgic "
            "cannot recompute from a results document"
        )
    return {name: values[name] for name in spec.metrics}


def _entry(value: M.MetricValue) -> dict[str, Any]:
    entry: dict[str, Any] = {"value": value.value, "n": value.n}
    if value.value is None:
        entry["reason"] = value.reason
    return entry


def _counts(document: Mapping[str, Any]) -> dict[str, int]:
    chains = _chain_outcomes(document)
    per_edit = document["per_edit"]
    return {
        "rows": len(chains),
        "chains": len(chains),
        "active_chains": sum(c.active for c in chains),
        "recoverable_chains": M.recoverable_chains(chains),
        "edits": len(per_edit),
        "preservation_facts": _preservation_facts(document),
        "preservation_facts_known": sum(int(r["preservation_facts_known"]) for r in per_edit),
        "specificity_facts": sum(int(r["neighbours"]) for r in per_edit),
        "specificity_facts_known": sum(int(r["neighbours_known"]) for r in per_edit),
        "generalization_edits": sum(r["generalization"] is not None for r in per_edit),
    }


def settings_of(document: Mapping[str, Any]) -> BootstrapSettings:
    """The interval settings a document records (resamples, seed, level); the defaults where it has none."""
    recorded = document.get("uncertainty") or {}
    defaults = BootstrapSettings()
    return BootstrapSettings(
        resamples=int(recorded.get("resamples", defaults.resamples)),
        seed=int(recorded.get("seed", defaults.seed)),
        level=float(recorded.get("level", defaults.level)),
    )


def recompute_metrics(
    document: Mapping[str, Any],
    settings: BootstrapSettings | None = None,
    spec: EvaluationSpec | None = None,
) -> dict[str, Any]:
    """Recompute every metric, interval and count of ``document`` from its ``chains`` and ``per_edit``.

    Returns ``{"metrics": ..., "counts": ..., "uncertainty": ...}`` in the shape a results document
    holds them: ``metrics`` has every metric ``spec/benchmark.yaml`` declares (value, ``n``, the reason
    for a null, the interval and how it was made); ``counts`` the counts the records determine (every
    count but ``distinct_queries``); ``uncertainty`` the interval settings. ``settings`` default to those
    the document records (so its intervals are reproduced bit for bit), ``spec`` to the benchmark spec.
    The values come from :mod:`knowgic.metrics` where the records allow (IFR from the chain records,
    Efficacy from each edit's two scores) and as ratios of the per-edit sums elsewhere; the intervals
    from :func:`knowgic.uncertainty.metric_intervals`. Raises :class:`KnowgicError` for a document whose
    records cannot give its numbers back (results schema 1.0).
    """
    spec = spec or load_evaluation_spec()
    settings = settings or settings_of(document)
    _check_records(document)
    metrics: dict[str, Any] = {}
    for name, value in _values(document, spec).items():
        metrics[name] = (
            {part: _entry(v) for part, v in value.items()} if isinstance(value, dict) else _entry(value)
        )
    with_values = {**document, "metrics": metrics}
    for path, interval in metric_intervals(with_values, settings).items():
        metric_entry_at(metrics, path).update(interval_fields(interval))
    return {"metrics": metrics, "counts": _counts(document), "uncertainty": settings.record()}


def _differs(stated: Any, recomputed: Any, tolerance: float) -> bool:
    if isinstance(stated, bool) or isinstance(recomputed, bool) or stated is None or recomputed is None:
        return stated != recomputed
    if isinstance(stated, (int, float)) and isinstance(recomputed, (int, float)):
        return not math.isclose(float(stated), float(recomputed), rel_tol=0.0, abs_tol=tolerance)
    if isinstance(stated, list) and isinstance(recomputed, list):
        return len(stated) != len(recomputed) or any(
            _differs(s, r, tolerance) for s, r in zip(stated, recomputed, strict=False)
        )
    return stated != recomputed


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return "null" if value is None else str(value)


def check_results(document: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE) -> list[str]:
    """One line per value ``document`` states that its recomputation (:func:`recompute_metrics`) does not
    give back within ``tolerance`` (absolute): every metric's value, ``n`` and interval fields, and the
    counts the records determine. An empty list: every stated number is what its records give.

    A line reads ``metrics.ifr.value: stated 0.41, recomputed 0.418``. A metric or count the document
    lacks is listed as ``stated null``. Raises :class:`KnowgicError` when the records cannot be
    recomputed at all (results schema 1.0).
    """
    spec = load_evaluation_spec()
    recomputed = recompute_metrics(document, spec=spec)
    stated_metrics = document.get("metrics") or {}
    problems: list[str] = []
    for path in spec.metric_paths():
        try:
            stated = metric_entry_at(stated_metrics, path)
        except (KeyError, TypeError):
            stated = {}
        fresh = metric_entry_at(recomputed["metrics"], path)
        for key in sorted(set(fresh) | {k for k in stated if k in _CHECKED_FIELDS}):
            if _differs(stated.get(key), fresh.get(key), tolerance):
                problems.append(
                    f"metrics.{path}.{key}: stated {_shown(stated.get(key))}, "
                    f"recomputed {_shown(fresh.get(key))}"
                )
    counts = document.get("counts") or {}
    for key in _RECOUNTED:
        if key == "preservation_facts" and key not in counts:
            continue
        fresh_count = recomputed["counts"][key]
        if _differs(counts.get(key), fresh_count, 0.0):
            problems.append(f"counts.{key}: stated {_shown(counts.get(key))}, recomputed {fresh_count}")
    return problems


_CHECKED_FIELDS = frozenset(
    {
        "value",
        "n",
        "reason",
        "interval",
        "interval_reason",
        "interval_resamples",
        "interval_method",
        "interval_note",
        "edits",
        "effective_edits",
        "few_edits",
    }
)
"""The fields of a metric entry a stated document is checked on (every one recompute_metrics writes)."""
