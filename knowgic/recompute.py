r"""Every headline value, interval and count of a results document, recomputed from its own records.

A results document carries, beside its headline ``metrics`` and ``counts``, the records they are made of:
one per chain (``chains``) and one per edit (``per_edit``). This module reads them back and hands them to
the one computation, :func:`knowgic.measure.compute.compute`::

    results document ──Records.from_document──> Records ──compute(records, spec)──> metrics, counts
         │                                                          │
         evaluate: writes what compute gives into the document it builds
         check_results(document): lists every stated number its recomputation does not give back

A reader who recomputes a published file gets what the run computed; :func:`check_results` lists every
stated value that differs (a file edited by hand, or written by another version of the definitions).
Documents of results schema 1.0 record no per-edit sums and are refused with a one-line error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from knowgic.intervals import BootstrapSettings
from knowgic.measure.compute import compute, metric_entry_at
from knowgic.measure.records import Records
from knowgic.results import RESULTS_SCHEMA_VERSION
from knowgic.spec import BenchmarkSpec, benchmark_spec

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
    spec: BenchmarkSpec | None = None,
) -> dict[str, Any]:
    """Recompute every metric, interval and count of ``document`` from its ``chains`` and ``per_edit``.

    Returns :func:`knowgic.measure.compute.compute`'s ``{"metrics", "counts", "uncertainty"}``.
    ``settings`` default to those the document records (so its intervals are reproduced bit for bit),
    ``spec`` to the benchmark spec. Raises :class:`KnowgicError` for a document whose records cannot give
    its numbers back (results schema 1.0).
    """
    records = Records.from_document(document)
    return compute(records, spec or benchmark_spec(), settings or settings_of(document))


def recomputed_view(document: Mapping[str, Any], spec: BenchmarkSpec | None = None) -> dict[str, Any]:
    """A copy of ``document`` whose metrics, counts, uncertainty and metric versions are this package's,
    recomputed from its records (:func:`recompute_metrics`): what a table shows to put runs made under
    earlier interval methods or metric versions in today's terms. A view for showing, never written: its
    ``sha256`` is the source file's, which no longer hashes this content."""
    spec = spec or benchmark_spec()
    view = dict(document)
    view.update(recompute_metrics(document, spec=spec))
    view["metric_versions"] = {name: m.version for name, m in spec.metrics.items()}
    return view


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


def check_results(
    document: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE, spec: BenchmarkSpec | None = None
) -> list[str]:
    """One line per value ``document`` states that its recomputation (:func:`recompute_metrics`) does not
    give back within ``tolerance`` (absolute): every metric's value, ``n`` and interval fields, and the
    counts the records determine. An empty list: every stated number is what its records give.

    A line reads ``metrics.ifr.value: stated 0.41, recomputed 0.418``. A metric or count the document
    lacks is listed as ``stated null``, except a metric declared after the document was written (absent
    from its ``metric_versions``) or whose definition has changed since (another version there): the
    document states nothing about this version of it. The interval fields are checked on documents of
    the current results schema (:data:`knowgic.results.RESULTS_SCHEMA_VERSION`); an older schema's
    intervals were made by other methods (``spec/schemas/CHANGELOG.md``), and its values and counts are
    checked alone. Raises :class:`KnowgicError`
    when the records cannot be recomputed at all (results schema 1.0).
    """
    spec = spec or benchmark_spec()
    recomputed = recompute_metrics(document, spec=spec)
    stated_metrics = document.get("metrics") or {}
    problems: list[str] = []
    versions = document.get("metric_versions")
    # Intervals are made by the methods of the document's schema version: an older one's are not this one's.
    current = document.get("schema_version") == RESULTS_SCHEMA_VERSION
    for path in spec.metric_paths():
        head = path.split(".")[0]
        if isinstance(versions, Mapping) and versions:
            if head not in versions:
                continue  # declared after this document was written
            if versions[head] != spec.metrics[head].version:
                continue  # another version of its definition: the document states another quantity
        try:
            stated = metric_entry_at(stated_metrics, path)
        except (KeyError, TypeError):
            stated = {}
        fresh = metric_entry_at(recomputed["metrics"], path)
        keys = sorted(set(fresh) | {k for k in stated if k in _CHECKED_FIELDS})
        for key in keys if current else [k for k in keys if k not in _INTERVAL_FIELDS]:
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
        "coverage_unmet",
    }
)
"""The fields of a metric entry a stated document is checked on (every one recompute_metrics writes)."""
_INTERVAL_FIELDS = frozenset(
    {
        "interval",
        "interval_reason",
        "interval_resamples",
        "interval_method",
        "interval_note",
        "coverage_unmet",
    }
)
"""The fields an interval method makes: checked only on a document of the current results schema, whose
intervals were made by this version's methods."""
