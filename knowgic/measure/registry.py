r"""A metric is one declaration in ``spec/benchmark.yaml`` plus one function registered here.

The function turns a run's typed records (:class:`~knowgic.measure.records.Records`) into the metric's
*per-edit sums* :math:`a_e, b_e`, from which everything else follows, for every metric the same way::

    @METRICS.register("efficacy")            records ──fn──> EditSums(a, b, n, reason)
    def efficacy(records) -> EditSums:          value            sum_e a_e / sum_e b_e   (None: reason)
        ...                                     interval         knowgic.intervals, by the declared kind
                                                paired difference knowgic.paired, edit by edit

A metric with ``parts`` (IFR per chain length) returns one :class:`EditSums` per part. A ``composite``
metric (the deep-editing score) is the harmonic mean of its declared parts, :math:`1 - x` for a
lower-is-better part; it is registered with the function of its parts' values, and its interval is computed
from its parts' sums. Adding a metric takes one YAML entry and one decorated function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowgic.errors import KnowgicError
from knowgic.intervals import Ratio
from knowgic.measure.records import Records
from knowgic.metrics import MetricValue
from knowgic.spec import BenchmarkSpec


@dataclass(frozen=True)
class EditSums:
    r"""A metric on a run: per-edit sums :math:`a_e` (``ratio.numerator``) and :math:`b_e`
    (``ratio.denominator``) in the run's edit order, the number ``n`` of items that entered them, and why
    the metric is undefined on these records (``reason``; ``None`` when it is defined)."""

    ratio: Ratio
    n: int
    reason: str | None = None

    @classmethod
    def of(
        cls, numerator: Sequence[float], denominator: Sequence[float], n: int, *reasons: str | None
    ) -> EditSums:
        r"""Sums that are undefined for the first given reason that is not ``None``; a metric with no weight
        at all (:math:`\sum_e b_e = 0`) must have been given one."""
        a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
        reason = next((r for r in reasons if r is not None), None)
        if reason is None and not float(b.sum()) > 0.0:
            raise KnowgicError("internal error: a metric with no weight in any edit needs a reason")
        return cls(Ratio(a, b), n, reason)

    def record(self) -> dict[str, Any]:
        """The sums as JSON (a private block's ``sums``): ``numerator``, ``denominator``, ``n`` and, where the
        metric is undefined, ``reason``. Floats print exactly, so :meth:`from_record` gives them back bit
        for bit."""
        out: dict[str, Any] = {
            "numerator": [float(x) for x in self.ratio.numerator],
            "denominator": [float(x) for x in self.ratio.denominator],
            "n": self.n,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str) -> EditSums:
        """Sums read back from :meth:`record`; a one-line :class:`KnowgicError` naming ``where`` when the
        two arrays differ in length, a weight is negative, or a metric with no weight gives no reason."""
        a = np.asarray(record["numerator"], dtype=float)
        b = np.asarray(record["denominator"], dtype=float)
        if a.shape != b.shape or a.ndim != 1:
            raise KnowgicError(f"{where}: numerator and denominator differ in length ({a.size} vs {b.size})")
        if not (np.isfinite(a).all() and np.isfinite(b).all()) or (b < 0).any():
            raise KnowgicError(f"{where}: the sums must be finite, the denominators at least 0")
        reason = record.get("reason")
        if reason is None and not float(b.sum()) > 0.0:
            raise KnowgicError(f"{where}: no edit has weight, and no reason says why the metric is undefined")
        return cls(Ratio(a, b), int(record["n"]), None if reason is None else str(reason))

    @property
    def value(self) -> MetricValue:
        r""":math:`\sum_e a_e / \sum_e b_e` over ``n`` items, or undefined with the reason."""
        if self.reason is not None:
            return MetricValue.undefined(self.reason)
        return MetricValue(float(self.ratio.numerator.sum()) / float(self.ratio.denominator.sum()), self.n)


SumsFunction = Callable[[Records], "EditSums | Mapping[str, EditSums]"]
CompositeFunction = Callable[[Sequence["float | None"]], MetricValue]


class MetricRegistry:
    """Metric name -> its function: per-edit sums (:data:`SumsFunction`) or, for a composite, the function of
    its parts' values (:data:`CompositeFunction`)."""

    def __init__(self) -> None:
        self._sums: dict[str, SumsFunction] = {}
        self._composites: dict[str, CompositeFunction] = {}

    def register(self, name: str) -> Callable[[SumsFunction], SumsFunction]:
        """Decorator: ``fn(records)`` gives metric ``name``'s per-edit sums (a mapping of them by part)."""

        def add(fn: SumsFunction) -> SumsFunction:
            self._refuse_twice(name)
            self._sums[name] = fn
            return fn

        return add

    def register_composite(self, name: str) -> Callable[[CompositeFunction], CompositeFunction]:
        """Decorator: ``fn(values)`` gives composite ``name`` from its parts' values (spec order of ``of``)."""

        def add(fn: CompositeFunction) -> CompositeFunction:
            self._refuse_twice(name)
            self._composites[name] = fn
            return fn

        return add

    def remove(self, name: str) -> None:
        """Forget metric ``name`` (a plug-in or test that registered one takes it back)."""
        self._sums.pop(name, None)
        self._composites.pop(name, None)

    def _refuse_twice(self, name: str) -> None:
        if name in self._sums or name in self._composites:
            raise KnowgicError(f"metric {name!r} is registered twice")

    def sums(self, name: str, records: Records) -> EditSums | Mapping[str, EditSums]:
        return self._sums[name](records)

    def composite(self, name: str, values: Sequence[float | None]) -> MetricValue:
        return self._composites[name](values)

    def problem(self, spec: BenchmarkSpec) -> str | None:
        """Why the spec's metrics and the registered ones disagree, or ``None`` when every declared metric
        has a function of its kind and every function a declaration."""
        registered = {**dict.fromkeys(self._sums, "sums"), **dict.fromkeys(self._composites, "composite")}
        undeclared = [name for name in registered if name not in spec.metrics]
        if undeclared:
            return f"{spec.path} declares no metric {', '.join(undeclared)}, which knowgic computes"
        missing = [name for name in spec.metrics if name not in registered]
        if missing:
            return (
                f"{spec.path} declares the metric(s) {', '.join(missing)}, which this version of knowgic "
                "does not compute (no function is registered for them)"
            )
        wrong = [
            name
            for name, metric in spec.metrics.items()
            if (metric.kind == "composite") != (registered[name] == "composite")
        ]
        if wrong:
            return f"{spec.path}: the metric(s) {', '.join(wrong)} are registered with a function of another kind"
        return None
