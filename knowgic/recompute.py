r"""Every headline value, interval and count of a results document, recomputed from its own records.

A results document carries, beside its headline ``metrics`` and ``counts``, the records they are made of:
one per chain (``chains``) and one per edit (``per_edit``). This module reads them back and hands them to
the one computation, :func:`knowgic.measure.compute.compute`::

    results document ──Records.from_document──> Records ──compute(records, spec)──> metrics, counts
      (chains, per_edit, and from schema 1.6 the ripple records)
         │                                                          │
         evaluate: writes what compute gives into the document it builds
         check_results(document): lists every stated number its recomputation does not give back
    private block (schema 1.5) ──read_private──> per-edit sums ──metrics_of_sums──> its metrics
                                   + the top level's records ──edit_gap, decide──> its flag (ifr_gap)

A reader who recomputes a published file gets what the run computed; :func:`check_results` lists every
stated value that differs (a file edited by hand, or written by another version of the definitions).
Documents of results schema 1.0 record no per-edit sums and are refused with a one-line error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.intervals import BootstrapSettings
from knowgic.measure.compute import compute, metric_entry_at, metric_sums, metrics_of_sums
from knowgic.measure.gap import ALPHA, critical_value, decide, edit_gap
from knowgic.measure.private import has_sums, read_private
from knowgic.measure.records import Records
from knowgic.results import intervals_current
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
    counts the records determine; and, for a private block of results schema 1.5, every metric recomputed
    from its per-edit sums, its edit count and its flag (:func:`private_problems`). An empty list: every
    stated number is what its records give.

    A line reads ``metrics.ifr.value: stated 0.41, recomputed 0.418``. A metric or count the document
    lacks is listed as ``stated null``, except a metric declared after the document was written (absent
    from its ``metric_versions``) or whose definition has changed since (another version there): the
    document states nothing about this version of it. The interval fields are checked on documents whose
    intervals this package's methods make (:data:`knowgic.results.INTERVALS_FROM` and later); an older
    schema's intervals were made by other methods (``spec/schemas/CHANGELOG.md``), and its values and counts are
    checked alone. Raises :class:`KnowgicError`
    when the records cannot be recomputed at all (results schema 1.0).
    """
    spec = spec or benchmark_spec()
    recomputed = recompute_metrics(document, spec=spec)
    problems = _metric_problems(
        document, document.get("metrics"), recomputed["metrics"], "metrics", spec, tolerance
    )
    counts = document.get("counts") or {}
    for key in _RECOUNTED:
        if key == "preservation_facts" and key not in counts:
            continue
        fresh_count = recomputed["counts"][key]
        if _differs(counts.get(key), fresh_count, 0.0):
            problems.append(f"counts.{key}: stated {_shown(counts.get(key))}, recomputed {fresh_count}")
    if "ripple" in recomputed["counts"] and counts.get("ripple") != recomputed["counts"]["ripple"]:
        problems.append(
            "counts.ripple: stated counts differ from the ripple records' (recomputed per criterion)"
        )
    return problems + private_problems(document, tolerance, spec)


def _stated_paths(document: Mapping[str, Any], spec: BenchmarkSpec) -> list[str]:
    """The metric paths whose stated values a check compares: every declared one but those declared after
    the document was written or defined anew since (by its ``metric_versions``)."""
    versions = document.get("metric_versions")
    paths = []
    for path in spec.metric_paths():
        head = path.split(".")[0]
        if isinstance(versions, Mapping) and versions:
            if head not in versions:
                continue  # declared after this document was written
            if versions[head] != spec.metrics[head].version:
                continue  # another version of its definition: the document states another quantity
        paths.append(path)
    return paths


def _metric_problems(
    document: Mapping[str, Any],
    stated_metrics: Any,
    fresh_metrics: Mapping[str, Any],
    prefix: str,
    spec: BenchmarkSpec,
    tolerance: float,
) -> list[str]:
    """The lines of :func:`check_results` for one ``metrics`` object (``prefix``: where it lies)."""
    stated_metrics = stated_metrics or {}
    # Intervals are made by the methods of the document's schema version: an older one's are not this one's.
    current = intervals_current(document)
    problems: list[str] = []
    for path in _stated_paths(document, spec):
        try:
            stated = metric_entry_at(stated_metrics, path)
        except (KeyError, TypeError):
            stated = {}
        try:
            fresh = metric_entry_at(fresh_metrics, path)
        except (KeyError, TypeError):
            fresh = {}
        keys = sorted(set(fresh) | {k for k in stated if k in _CHECKED_FIELDS})
        for key in keys if current else [k for k in keys if k not in _INTERVAL_FIELDS]:
            if _differs(stated.get(key), fresh.get(key), tolerance):
                problems.append(
                    f"{prefix}.{path}.{key}: stated {_shown(stated.get(key))}, "
                    f"recomputed {_shown(fresh.get(key))}"
                )
    return problems


_GAP_FIELDS = ("public", "public_edits", "private", "private_edits", "gap", "se")


def private_problems(
    document: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE, spec: BenchmarkSpec | None = None
) -> list[str]:
    """The lines of :func:`check_results` for a private block of results schema 1.5: its per-edit sums
    read back (:func:`knowgic.measure.private.read_private`), every metric recomputed from them by the
    top level's computation (:func:`knowgic.measure.compute.metrics_of_sums`), ``counts.edits`` against
    its edit keys, and its flag (``ifr_gap``): the gap from the top level's records and the block's sums,
    the statistic and the verdict from the calibration it records. The other counts are aggregates of
    records the block does not publish; they are not checked. Empty for a document without such a block."""
    block = document.get("private")
    if not has_sums(block):
        return []
    spec = spec or benchmark_spec()
    try:
        private = read_private(block)
    except KnowgicError as exc:
        return [str(exc)]
    problems = []
    for path in _stated_paths(document, spec):
        metric = spec.metric_at(path)
        if metric is not None and metric.kind != "composite" and path not in private.sums:
            problems.append(f"private.sums.{path}: stated null; a declared metric needs its sums")
    fresh = metrics_of_sums(private.sums, spec, settings_of(block))
    problems += _metric_problems(document, block.get("metrics"), fresh, "private.metrics", spec, tolerance)
    edits = (block.get("counts") or {}).get("edits")
    if _differs(edits, len(private.keys), 0.0):
        problems.append(f"private.counts.edits: stated {_shown(edits)}, recomputed {len(private.keys)}")
    stated = block.get("ifr_gap") or {}
    metric_path = str(stated.get("metric", ""))
    if metric_path not in private.sums:
        return [*problems, f"private.ifr_gap.metric: stated {_shown(metric_path)}, which has no sums"]
    public = metric_sums(Records.from_document(document), spec)[metric_path]
    gap = asdict(edit_gap(public, private.sums[metric_path]))
    fresh_gap: dict[str, Any] = {k: gap[k] for k in _GAP_FIELDS}
    fresh_gap.update(alpha=ALPHA, critical=critical_value())  # the package's level, not one of the file's
    statistic, flagged, _ = decide({**stated, **fresh_gap})
    fresh_gap.update(statistic=statistic, flagged=flagged)
    for key, value in fresh_gap.items():
        if _differs(stated.get(key), value, tolerance):
            problems.append(
                f"private.ifr_gap.{key}: stated {_shown(stated.get(key))}, recomputed {_shown(value)}"
            )
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
"""The fields an interval method makes: checked only on a document whose intervals this package's methods
make (:func:`knowgic.results.intervals_current`)."""
