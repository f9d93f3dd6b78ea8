r"""From a run's records to every metric's value, n, reason and interval: the one computation.

::

    Records ──registry (one function per metric)──> EditSums per metric path (a_e, b_e, n, reason)
            ├─> metrics_of_sums: every metric entry from the sums alone
            │     ├─ value    sum_e a_e / sum_e b_e (or null with the reason); composites from their parts' values
            │     └─ interval knowgic.intervals.batch_intervals(sums, declared kinds)
            └─> counts   chains, active, recoverable, edits, facts known, neighbours known
    compute(records, spec, settings) = {"metrics", "counts", "uncertainty"}

``knowgic evaluate`` writes what :func:`compute` gives into every results document; the store's
verification, ``knowgic.recompute``, the coverage simulation and the leaderboard compute with it too. A
private split's block publishes its per-edit sums instead of its records (:mod:`knowgic.measure.private`):
its metrics are :func:`metrics_of_sums` of them, the same computation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowgic import metrics as M
from knowgic.errors import KnowgicError
from knowgic.intervals import BootstrapSettings, Interval, batch_intervals, interval_at, interval_fields
from knowgic.measure.definitions import METRICS
from knowgic.measure.records import Records
from knowgic.measure.registry import EditSums, MetricRegistry
from knowgic.ripple.queries import CRITERIA
from knowgic.spec import BenchmarkSpec, MetricSpec, benchmark_spec


def metric_sums(
    records: Records, spec: BenchmarkSpec, registry: MetricRegistry = METRICS
) -> dict[str, EditSums]:
    """Every declared plain metric's per-edit sums, by path (``ifr_by_length.2`` for a part), spec order."""
    problem = registry.problem(spec)
    if problem is not None:
        raise KnowgicError(problem)
    out: dict[str, EditSums] = {}
    for name, metric in spec.metrics.items():
        if metric.kind == "composite":
            continue
        sums = registry.sums(name, records)
        if metric.parts:
            if not isinstance(sums, Mapping) or list(sums) != list(metric.parts):
                got = list(sums) if isinstance(sums, Mapping) else "one value"
                raise KnowgicError(
                    f"metric {name}: its function gives the parts {got}, the spec declares {list(metric.parts)}"
                )
            out.update({f"{name}.{part}": s for part, s in sums.items()})
        elif isinstance(sums, EditSums):
            out[name] = sums
        else:
            raise KnowgicError(f"metric {name}: its function gives parts, the spec declares none")
    return out


def _entry(value: M.MetricValue) -> dict[str, Any]:
    entry: dict[str, Any] = {"value": value.value, "n": value.n}
    if value.value is None:
        entry["reason"] = value.reason
    return entry


def computable_paths(sums: Mapping[str, EditSums], spec: BenchmarkSpec) -> dict[str, MetricSpec]:
    """The declared metric paths (spec order) that ``sums`` give: every plain one with its sums, every
    composite with all its parts' (all of them for a run's own records; a private block written before a
    metric was declared lacks its sums)."""
    return {
        path: metric
        for path, metric in spec.metric_paths().items()
        if (all(p in sums for p in metric.of) if metric.kind == "composite" else path in sums)
    }


def metric_values(
    sums: Mapping[str, EditSums], spec: BenchmarkSpec, registry: MetricRegistry = METRICS
) -> dict[str, M.MetricValue]:
    """Every metric's value by path (:func:`computable_paths`): the plain ones from their sums, composites
    from their parts."""
    values = {path: s.value for path, s in sums.items()}
    paths = computable_paths(sums, spec)
    for name, metric in spec.metrics.items():
        if metric.kind == "composite" and name in paths:
            values[name] = registry.composite(name, [values[p].value for p in metric.of])
    return {path: values[path] for path in paths}


def intervals(
    sums: Mapping[str, EditSums],
    values: Mapping[str, M.MetricValue],
    declared: Mapping[str, MetricSpec],
    settings: BootstrapSettings,
) -> dict[str, Interval]:
    """The interval of every metric in ``declared`` (path -> declaration) by its kind's method."""
    some = next(iter(sums.values()), None)
    if some is None or some.ratio.numerator.shape[0] == 0:
        return {path: Interval(None, None, 0, "the run has no edits") for path in declared}
    arrays = {p: (s.ratio.numerator[None, :], s.ratio.denominator[None, :]) for p, s in sums.items()}
    batch = batch_intervals(arrays, settings, declared)
    return {
        path: (
            Interval(None, None, 0, "the metric is undefined")
            if values[path].value is None
            else interval_at(batch[path], 0, settings.resamples)
        )
        for path in declared
    }


def ripple_counts(records: Records) -> dict[str, dict[str, int]]:
    """Per criterion: the ripple queries of the run's edits, those kept (every condition fact known before
    the edit), those dropped by their conditions, and those with a competitor (the probability form's)."""
    rows = records.ripple or ()
    return {
        c: {
            "queries": sum(r.criterion == c for r in rows),
            "kept": sum(r.criterion == c and r.kept for r in rows),
            "dropped_by_conditions": sum(r.criterion == c and not r.kept for r in rows),
            "with_competitor": sum(r.criterion == c and r.has_competitor for r in rows),
        }
        for c in CRITERIA
    }


def counts(records: Records) -> dict[str, Any]:
    """The counts the records determine (a run's ``distinct_queries`` is its plan's, not theirs); ``ripple``
    (:func:`ripple_counts`) where the records have ripple queries."""
    chains, edits = records.chains, records.edits
    extra: dict[str, Any] = {} if records.ripple is None else {"ripple": ripple_counts(records)}
    return {
        "rows": len(chains),
        "chains": len(chains),
        "active_chains": sum(c.active for c in chains),
        "recoverable_chains": M.recoverable_chains(chains),
        "edits": len(edits),
        "preservation_facts": records.preservation_facts,
        "preservation_facts_known": sum(e.preservation_facts_known for e in edits),
        "specificity_facts": sum(e.neighbours for e in edits),
        "specificity_facts_known": sum(e.neighbours_known for e in edits),
        "generalization_edits": sum(e.generalization is not None for e in edits),
        **extra,
    }


BEFORE_RIPPLE = "written before ripple scoring"
"""Why a document written before results schema 1.6 has no RippleEdits metrics (``group: ripple``)."""


def metric_entry_at(metrics: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The entry of a document's ``metrics`` at ``path`` (``"ifr"`` or ``"ifr_by_length.2"``). A metric of
    the ``ripple`` group that a document lacks (written before ripple scoring, results schema 1.6) is null
    with :data:`BEFORE_RIPPLE`."""
    head, _, tail = path.partition(".")
    if head not in metrics:
        declared = benchmark_spec().metrics.get(head)
        if declared is not None and declared.group == "ripple":
            return {"value": None, "n": 0, "reason": BEFORE_RIPPLE}
    entry = metrics[head]
    return entry[tail] if tail else entry


def metrics_of_sums(
    sums: Mapping[str, EditSums],
    spec: BenchmarkSpec,
    settings: BootstrapSettings,
    registry: MetricRegistry = METRICS,
) -> dict[str, Any]:
    """A results document's ``metrics`` from per-edit sums alone: every metric of
    :func:`computable_paths`, in spec order (value, ``n``, the reason for a null, and the interval fields of
    :func:`knowgic.intervals.interval_fields`; a metric with parts maps each part to such an entry)."""
    values = metric_values(sums, spec, registry)
    declared = computable_paths(sums, spec)
    found = intervals(sums, values, declared, settings)
    metrics: dict[str, Any] = {}
    for path in declared:
        head, _, part = path.partition(".")
        entry = {**_entry(values[path]), **interval_fields(found[path], declared[path])}
        if part:
            metrics.setdefault(head, {})[part] = entry
        else:
            metrics[head] = entry
    return metrics


def compute(
    records: Records,
    spec: BenchmarkSpec,
    settings: BootstrapSettings | None = None,
    registry: MetricRegistry = METRICS,
) -> dict[str, Any]:
    """Every declared metric of ``records`` in the shape a results document holds them.

    Returns ``{"metrics", "counts", "uncertainty"}``: ``metrics`` is :func:`metrics_of_sums` of the
    records' :func:`metric_sums` (every metric the spec declares), ``counts`` what :func:`counts` gives,
    ``uncertainty`` the interval settings.
    """
    settings = settings or BootstrapSettings()
    sums = metric_sums(records, spec, registry)
    metrics = metrics_of_sums(sums, spec, settings, registry)
    return {"metrics": metrics, "counts": counts(records), "uncertainty": settings.record()}
