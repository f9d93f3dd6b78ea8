"""The leaderboard's metric columns: one ordered declaration, built from the benchmark spec in one place.

::

    BenchmarkSpec (spec/benchmark.yaml) ──Columns.from_spec──> Columns
        .metrics    the headline metrics, in spec order, each paper's figure that ranks by another form
                    (pooled IFR, Preservation) followed by that form: the table's metric columns
        .parts      the parts of ifr_by_length (IFR n=1 … n=5): a column group to switch on
        .optional   the metrics declared in a ``group`` (RippleEdits' criteria: accuracy and probability
                    form, one column per criterion): columns to switch on, never in the default view
        .rank       the composite (deep-editing score): what ranks are computed on and the default sort
        .default    the compact default view: the rank metric's ``of``, each with its paper's figure or
                    ranked form beside it, and the rank metric itself
        .declared   every metric path of the spec (detail and compare pages list them all)

Every column is keyed by its metric path in a results document's ``metrics`` (``"ifr"``,
``"ifr_by_length.2"`` for a part) and holds that metric's :class:`~knowgic.spec.MetricSpec`: label, short
header, direction and description are read from the declaration, never copied. A metric added to the spec
(and to the registry of :mod:`knowgic.measure`) as a headline metric becomes a column with no change here.

Nothing reads the spec at import: :func:`leaderboard_columns` reads it on first use (an app builds its
columns once and hands them to its boards, views and plots).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from knowgic.measure.ranks import ranked_form, with_paper_forms
from knowgic.spec import BenchmarkSpec, MetricSpec, benchmark_spec

RANK_METRIC = "deep_editing_score"
"""The composite that ranks runs (and sorts the table by default); its ``of`` is the compact view."""
BY_LENGTH = "ifr_by_length"
"""The metric whose parts (IFR per chain length) are a column group and the IFR-by-length plot."""
TRADEOFF = ("ifr", "preservation")
"""The trade-off scatter's axes (x, y)."""


def frame_column(path: str, stat: str = "") -> str:
    """The name of a metric's column in the board's frame and in the CSV export: the metric path for its
    value, ``<path>_<stat>`` for one of its figures (``n``, ``low``, ``high``, ``reason``)."""
    return f"{path}_{stat}" if stat else path


PAPER = "paper"
"""What a header adds to the paper's figure of a metric that ranks by another form: ``IFR (paper)``."""


@dataclass(frozen=True)
class MetricColumn:
    """One metric column: its path in a results document's ``metrics`` and its declaration; ``paper``: the
    paper's figure of a metric ranked by another form (``ranked_by``), shown and never ranked."""

    path: str
    metric: MetricSpec
    paper: bool = False

    @property
    def part(self) -> str:
        """The part of a sub-metric (``"2"`` of ``ifr_by_length.2``), "" for a plain metric."""
        return self.path.partition(".")[2]

    @property
    def label(self) -> str:
        """The column's header: the declared label, or the short header and the part ("IFR n=" + "2"); a
        paper's figure says so ("IFR (paper)")."""
        short = self.metric.short
        # "IFR n=" + "2" reads as one header; "Ripple acc." + "LG" needs a space between them.
        label = (
            (f"{short}{self.part}" if short.endswith("=") else f"{short} {self.part}")
            if self.part
            else self.metric.label
        )
        return f"{label} ({PAPER})" if self.paper else label

    @property
    def direction(self) -> str:
        return self.metric.direction

    @property
    def lower_is_better(self) -> bool:
        return self.metric.lower_is_better

    @property
    def description(self) -> str:
        return self.metric.description


@dataclass(frozen=True)
class Columns:
    """The leaderboard's metric columns (see the module docstring)."""

    metrics: tuple[MetricColumn, ...]
    parts: tuple[MetricColumn, ...]
    rank: MetricColumn
    declared: tuple[MetricColumn, ...]
    compact: tuple[MetricColumn, ...] = ()  # the rank metric's parts, each with its paper's or ranked form
    optional: tuple[MetricColumn, ...] = ()  # the metrics of a declared group, each part a column

    @classmethod
    def from_spec(
        cls, spec: BenchmarkSpec, *, rank: str = RANK_METRIC, by_length: str = BY_LENGTH
    ) -> Columns:
        paths = spec.metric_paths()
        declared = {
            path: MetricColumn(path, metric, ranked_form(spec, path) != path)
            for path, metric in paths.items()
        }
        if rank not in declared:
            raise KeyError(f"the rank metric {rank!r} is not declared in {spec.path}")
        headline = [p for p, m in paths.items() if m.headline and not m.parts]
        return cls(
            metrics=tuple(declared[p] for p, _ in with_paper_forms(spec, headline)),
            parts=tuple(c for c in declared.values() if c.metric.name == by_length and c.part),
            rank=declared[rank],
            declared=tuple(declared.values()),
            compact=tuple(declared[p] for p, _ in with_paper_forms(spec, declared[rank].metric.of)),
            optional=tuple(c for c in declared.values() if c.metric.group and (c.part or not c.metric.parts)),
        )

    @property
    def table(self) -> tuple[MetricColumn, ...]:
        """Every metric column of the table, in order: the headline metrics, the parts of IFR by length,
        then the optional groups' columns."""
        return (*self.metrics, *self.parts, *self.optional)

    def group(self, name: str) -> tuple[MetricColumn, ...]:
        """The optional columns of the metrics declared in group ``name`` (``"ripple"``)."""
        return tuple(c for c in self.optional if c.metric.group == name)

    @property
    def default(self) -> tuple[MetricColumn, ...]:
        """The compact view: the metrics the rank metric summarises, each paper's figure beside the form
        that ranks it, then the rank metric."""
        return (*self.compact, self.rank)

    @property
    def ranked_by(self) -> str:
        """The path of the form the ranking orders runs by (the rank metric's ``ranked_by``)."""
        return self.rank.metric.ranked_by

    def papers(self) -> list[tuple[MetricColumn, MetricColumn]]:
        """Each paper's figure among the table's columns with the column that ranks it (IFR (paper), IFR
        (per edit))."""
        out = []
        for column in self.metrics:
            if column.paper:
                part = column.part
                form = f"{column.metric.ranked_by}.{part}" if part else column.metric.ranked_by
                out.append((column, self[form]))
        return out

    @property
    def per_edit(self) -> tuple[MetricColumn, ...]:
        """The headline metrics an edit can have on its own (a composite is a run's summary only), by their
        plain labels: one edit's IFR is the same in the paper's pooled form and the per-edit one."""
        return tuple(replace(c, paper=False) for c in self.metrics if c.metric.kind != "composite")

    def per_edit_in(self, records: Sequence[Mapping[str, Any]]) -> tuple[MetricColumn, ...]:
        """The per-edit metrics that per-edit ``records`` (a results document's ``per_edit``) carry; all of
        them for no records."""
        if not records:
            return self.per_edit
        return tuple(c for c in self.per_edit if any(c.path in r for r in records))

    @property
    def tradeoff(self) -> tuple[MetricColumn, MetricColumn]:
        """The trade-off scatter's axes: x, y (:data:`TRADEOFF`)."""
        return self[TRADEOFF[0]], self[TRADEOFF[1]]

    @property
    def lengths(self) -> tuple[int, ...]:
        """The chain lengths of the parts (the IFR-by-length plot's x)."""
        return tuple(int(c.part) for c in self.parts)

    @cached_property
    def _by_path(self) -> dict[str, MetricColumn]:
        return {c.path: c for c in self.declared}

    @cached_property
    def _table_paths(self) -> frozenset[str]:
        return frozenset(c.path for c in self.table)

    def at(self, path: str) -> MetricColumn | None:
        """The declared metric at ``path``; None when the spec declares none."""
        return self._by_path.get(path)

    def __getitem__(self, path: str) -> MetricColumn:
        column = self.at(path)
        if column is None:
            raise KeyError(path)
        return column

    def is_table_metric(self, path: str) -> bool:
        """Whether ``path`` is one of the table's metric columns."""
        return path in self._table_paths

    def parts_of(self, name: str) -> tuple[MetricColumn, ...]:
        """The declared parts of metric ``name`` (empty for a plain metric)."""
        return tuple(c for c in self.declared if c.metric.name == name and c.part)

    def label(self, path: str) -> str:
        """A metric's label by its path ("IFR", "IFR n=2"); the path itself when the spec declares none."""
        column = self.at(path)
        return path if column is None else column.label

    def direction(self, path: str) -> str | None:
        """ "lower" or "higher" (is better) for a metric path; None when undeclared."""
        column = self.at(path)
        return None if column is None else column.direction


def leaderboard_columns(spec: BenchmarkSpec | None = None) -> Columns:
    """The columns of ``spec`` (default: the shipped spec, read now if it was not read yet)."""
    return Columns.from_spec(spec if spec is not None else benchmark_spec())
