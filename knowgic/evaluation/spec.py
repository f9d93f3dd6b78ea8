"""The evaluation sections of ``spec/benchmark.yaml``: default protocol and mode, the modes, the metrics.

The spec is the one place these are declared, and :func:`load_evaluation_spec` the one reader::

    spec/benchmark.yaml --load_evaluation_spec()--> EvaluationSpec
        .default_protocol, .default_mode, .modes  -> the command line's defaults, the modes a run accepts
        .metrics[name] (label, short, direction,  -> every table, plot and report (labels, arrows)
                        kind, bounds, parts, of)  -> knowgic.uncertainty (interval and paired test by kind)
        .metric_paths()                           -> every metric that gets a value and an interval,
                                                     ``ifr_by_length.2`` for a part
        .metric_versions()                        -> recorded in every results file

A metric's ``kind`` (:data:`KINDS`) says what it is made of, and so how its uncertainty is measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.scoring.spec import read_benchmark_spec

DIRECTIONS = ("lower", "higher")
KINDS = {
    "edit_outcome": "one 0/1 outcome per edit; the metric is the share of edits",
    "edit_mean": "one bounded value per edit, every edit weighing the same",
    "clustered_proportion": "a share of 0/1 items, the items clustered in edits",
    "ratio_of_sums": "a weighted mean of items clustered in edits, sum_e a_e / sum_e b_e",
    "composite": "a function of other metrics' values",
}
"""Every metric kind the spec may declare, with what it means (see ``spec/benchmark.yaml``)."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric's declaration.

    ``direction``: whether lower or higher values are better; ``kind``: one of :data:`KINDS`; ``bounds``:
    the range of its values (``None``: unbounded on that side); ``parts``: the keys of its sub-metrics
    (IFR per chain length), empty for a plain metric; ``of``: the metrics a composite is computed from;
    ``headline``: a column of the summary tables; ``short``: a table column's header.
    """

    name: str
    label: str
    direction: str
    version: int
    description: str
    kind: str = "ratio_of_sums"
    short: str = ""
    bounds: tuple[float | None, float | None] = (None, None)
    parts: tuple[str, ...] = ()
    of: tuple[str, ...] = ()
    headline: bool = False

    @property
    def lower_is_better(self) -> bool:
        return self.direction == "lower"

    @property
    def arrow(self) -> str:
        return "↓" if self.direction == "lower" else "↑"


@dataclass(frozen=True)
class EvaluationSpec:
    default_protocol: str
    default_mode: str
    modes: dict[str, str]  # name -> description, in spec order
    metrics: dict[str, MetricSpec]  # in spec order

    def metric_versions(self) -> dict[str, int]:
        return {name: m.version for name, m in self.metrics.items()}

    def metric_paths(self) -> dict[str, MetricSpec]:
        """Every metric that gets a value and an interval, by its path in a results document's ``metrics``
        (``"ifr"``, or ``"ifr_by_length.2"`` for a part), in spec order, with its declaration."""
        paths: dict[str, MetricSpec] = {}
        for name, metric in self.metrics.items():
            for part in metric.parts or ("",):
                paths[f"{name}.{part}" if part else name] = metric
        return paths

    def metric_at(self, path: str) -> MetricSpec | None:
        """The declaration of the metric at ``path`` (``"ifr_by_length.2"`` is ``ifr_by_length``'s)."""
        return self.metrics.get(path.partition(".")[0])

    def path_label(self, path: str) -> str:
        """``"IFR by chain length, n = 2"`` for a part, the label for a plain metric, ``path`` if undeclared."""
        head, _, part = path.partition(".")
        metric = self.metrics.get(head)
        if metric is None:
            return path
        return f"{metric.label}, n = {part}" if part else metric.label


def _metric(path: Path, name: Any, entry: Any) -> MetricSpec:
    where = f"{path}: metrics.{name}"
    if not isinstance(entry, dict):
        raise KnowgicError(f"{where} must be a mapping with label, direction and version")
    direction = entry.get("direction")
    if direction not in DIRECTIONS:
        raise KnowgicError(f"{where}.direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    version = entry.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise KnowgicError(f"{where}.version must be a positive integer, got {version!r}")
    label = entry.get("label")
    if not isinstance(label, str) or not label.strip():
        raise KnowgicError(f"{where}.label must be a non-empty string, got {label!r}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise KnowgicError(f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    bounds = entry.get("bounds", [None, None])
    if (
        not isinstance(bounds, list)
        or len(bounds) != 2
        or not all(b is None or (isinstance(b, (int, float)) and not isinstance(b, bool)) for b in bounds)
        or (bounds[0] is not None and bounds[1] is not None and bounds[0] >= bounds[1])
    ):
        raise KnowgicError(
            f"{where}.bounds must be [low, high] (numbers or null, low < high), got {bounds!r}"
        )
    parts = entry.get("parts", [])
    if not isinstance(parts, list) or not all(isinstance(p, str) and p for p in parts):
        raise KnowgicError(f"{where}.parts must be a list of non-empty strings, got {parts!r}")
    of = entry.get("of", [])
    if kind == "composite" and (not isinstance(of, list) or not of):
        raise KnowgicError(f"{where}.of must list the metrics a composite is computed from, got {of!r}")
    if not isinstance(of, list) or not all(isinstance(o, str) for o in of):
        raise KnowgicError(f"{where}.of must be a list of metric names, got {of!r}")
    headline = entry.get("headline", False)
    if not isinstance(headline, bool):
        raise KnowgicError(f"{where}.headline must be true or false, got {headline!r}")
    short = entry.get("short", label)
    if not isinstance(short, str) or not short.strip():
        raise KnowgicError(f"{where}.short must be a non-empty string, got {short!r}")
    return MetricSpec(
        name=str(name),
        label=label,
        direction=direction,
        version=version,
        description=str(entry.get("description", "")).strip(),
        kind=kind,
        short=short,
        bounds=(
            None if bounds[0] is None else float(bounds[0]),
            None if bounds[1] is None else float(bounds[1]),
        ),
        parts=tuple(parts),
        of=tuple(of),
        headline=headline,
    )


def load_evaluation_spec(path: Path | None = None) -> EvaluationSpec:
    """Read and check the evaluation sections (``path`` defaults to ``spec/benchmark.yaml``)."""
    data, path = read_benchmark_spec(path)
    modes = data.get("modes")
    if not isinstance(modes, dict) or not modes:
        raise KnowgicError(f"{path}: 'modes' must be a non-empty mapping of mode names to descriptions")
    default_mode = data.get("default_mode")
    if default_mode not in modes:
        raise KnowgicError(
            f"{path}: default_mode {default_mode!r} is not one of the modes {', '.join(modes)}"
        )
    protocols = data.get("protocols")
    default_protocol = data.get("default_protocol")
    if not isinstance(protocols, dict) or default_protocol not in protocols:
        raise KnowgicError(
            f"{path}: default_protocol {default_protocol!r} is not one of the declared protocols"
        )
    metrics = data.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise KnowgicError(f"{path}: 'metrics' must be a non-empty mapping")
    declared = {str(name): _metric(path, name, entry) for name, entry in metrics.items()}
    for metric in declared.values():
        unknown = [o for o in metric.of if o not in declared or declared[o].kind == "composite"]
        if unknown:
            raise KnowgicError(
                f"{path}: metrics.{metric.name}.of names {', '.join(unknown)}, which is not a declared "
                "metric (or is itself a composite)"
            )
    return EvaluationSpec(
        default_protocol=str(default_protocol),
        default_mode=str(default_mode),
        modes={str(k): str(v).strip() for k, v in modes.items()},
        metrics=declared,
    )
