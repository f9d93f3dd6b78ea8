"""The benchmark spec, ``spec/benchmark.yaml``, read in one place into one typed object.

::

    spec/benchmark.yaml ──read_yaml──> mapping ──benchmark.schema.json──> checked shapes
                        ──cross-checks (defaults name a declared protocol and mode, a composite's parts
                          are declared plain metrics)──> BenchmarkSpec
        .versions                    dataset versions shipped, their folders and content hashes
        .protocols[name]             ProtocolSpec: parameters, known threshold, deterministic
        .default_protocol, .modes,   the command line's defaults and the modes a run accepts
         .default_mode
        .metrics[name]               MetricSpec: label, direction, kind, bounds, parts, of, headline
        .metric_paths()              every metric that gets a value and an interval (``ifr_by_length.2``)

:func:`benchmark_spec` is the shipped spec, read once on first use (never at import) and handed to whatever
needs it; :func:`read_spec` reads another file (a test's, a fork's). A metric's *declaration* lives here;
its *computation* is one registered function (:mod:`knowgic.measure`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir
from knowgic.schema_errors import first_error_line
from knowgic.yamlfile import read_yaml

KINDS = {
    "edit_outcome": "one 0/1 outcome per edit; the metric is the share of edits",
    "edit_mean": "one bounded value per edit, every edit weighing the same",
    "clustered_proportion": "a share of 0/1 items, the items clustered in edits",
    "ratio_of_sums": "a weighted mean of items clustered in edits, sum_e a_e / sum_e b_e",
    "composite": "a function of other metrics' values",
}
"""Every metric kind the spec may declare, with what it means (the schema's ``kind`` enum says the same)."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric's declaration.

    ``direction``: whether lower or higher values are better; ``kind``: one of :data:`KINDS`; ``bounds``:
    the range of its values (``None``: unbounded on that side); ``parts``: the keys of its sub-metrics
    (IFR per chain length), empty for a plain metric; ``of``: the metrics a composite is computed from;
    ``headline``: a column of the summary tables; ``group``: a set of optional columns the metric belongs
    to (``ripple``: RippleEdits' criteria; empty: none); ``short``: a table column's header; ``ranked_by``: the
    metric whose per-edit form ranks, marks and compares this one (its own name unless the spec names a
    per-edit form: IFR is the paper's pooled figure, ranked by ``ifr_per_edit``, each edit weighing the
    same).
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
    ranked_by: str = ""
    group: str = ""

    def __post_init__(self) -> None:
        if not self.ranked_by:
            object.__setattr__(self, "ranked_by", self.name)

    @property
    def lower_is_better(self) -> bool:
        return self.direction == "lower"

    @property
    def arrow(self) -> str:
        return "↓" if self.direction == "lower" else "↑"


@dataclass(frozen=True)
class ProtocolSpec:
    """A scoring protocol's declaration: its default parameters, and when a query counts as known."""

    name: str
    params: dict[str, Any]
    known_threshold: float | None
    deterministic: bool
    description: str = ""
    version: int = 1  # bumped when the protocol's scores or its known rule change


@dataclass(frozen=True)
class VersionSpec:
    """A published dataset version: its folder (relative to the repository or package root) and hash."""

    name: str
    path: str
    sha256: str
    based_on: str | None = None
    rows: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkSpec:
    """``spec/benchmark.yaml``, checked and typed (see the module docstring)."""

    path: Path
    versions: dict[str, VersionSpec]  # in the file's order
    protocols: dict[str, ProtocolSpec]
    default_protocol: str
    modes: dict[str, str]  # name -> description, in spec order
    default_mode: str
    metrics: dict[str, MetricSpec]  # in spec order
    # RippleEdits' accuracy: new tokens of a ripple query's greedy continuation (knowgic.scoring.continuation).
    ripple_max_new_tokens: int = 20

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
        """``"IFR by chain length, n = 2"`` for a part (``"RippleEdits accuracy, LG"`` for a named one), the label
        for a plain metric, ``path`` if undeclared."""
        head, _, part = path.partition(".")
        metric = self.metrics.get(head)
        if metric is None:
            return path
        return part_label(metric.label, part)

    def protocol(self, name: str) -> ProtocolSpec:
        if name not in self.protocols:
            raise KnowgicError(
                f"unknown scoring protocol {name!r}; known: {', '.join(sorted(self.protocols))}"
            )
        return self.protocols[name]


def part_label(label: str, part: str) -> str:
    """A metric's label with its part: ``"IFR by chain length, n = 2"`` (a chain length),
    ``"RippleEdits accuracy, LG"`` (a named part); the label alone for no part."""
    if not part:
        return label
    return f"{label}, n = {part}" if part.isdigit() else f"{label}, {part}"


def _schema_problem(data: Any) -> str | None:
    """The first problem the JSON Schema finds, as ``/metrics/ifr/direction: <what was expected>``."""
    schema = json.loads((spec_dir() / "schemas" / "benchmark.schema.json").read_text(encoding="utf-8"))
    return first_error_line(jsonschema.Draft202012Validator(schema).iter_errors(data))


def _metric(name: str, entry: dict[str, Any]) -> MetricSpec:
    bounds = entry.get("bounds", [None, None])
    return MetricSpec(
        name=name,
        label=entry["label"],
        direction=entry["direction"],
        version=entry["version"],
        description=str(entry.get("description", "")).strip(),
        kind=entry["kind"],
        short=entry.get("short", entry["label"]),
        bounds=(
            None if bounds[0] is None else float(bounds[0]),
            None if bounds[1] is None else float(bounds[1]),
        ),
        parts=tuple(entry.get("parts", ())),
        of=tuple(entry.get("of", ())),
        headline=entry.get("headline", False),
        ranked_by=str(entry.get("ranked_by", name)),
        group=str(entry.get("group", "")),
    )


def _cross_problem(data: dict[str, Any], metrics: dict[str, MetricSpec]) -> str | None:
    """What the schema cannot say: a default that names nothing declared, bounds the wrong way round, a
    composite of undeclared or composite metrics."""
    if data["default_mode"] not in data["modes"]:
        return f"/default_mode: {data['default_mode']!r} is not one of the modes {', '.join(data['modes'])}"
    if data["default_protocol"] not in data["protocols"]:
        return (
            f"/default_protocol: {data['default_protocol']!r} is not one of the declared protocols "
            f"{', '.join(data['protocols'])}"
        )
    for metric in metrics.values():
        low, high = metric.bounds
        if low is not None and high is not None and low >= high:
            return f"/metrics/{metric.name}/bounds: expected [low, high] with low < high, got [{low:g}, {high:g}]"
        unknown = [o for o in metric.of if o not in metrics or metrics[o].kind == "composite"]
        if unknown:
            return (
                f"/metrics/{metric.name}/of: names {', '.join(unknown)}, which is not a declared metric (or is "
                "itself a composite)"
            )
        ranker = metrics.get(metric.ranked_by)
        if ranker is None or ranker.direction != metric.direction or ranker.parts != metric.parts:
            return (
                f"/metrics/{metric.name}/ranked_by: {metric.ranked_by!r} is not a declared metric of the same "
                "direction and parts"
            )
    return None


def spec_file() -> Path:
    """The shipped spec's file, ``spec/benchmark.yaml``."""
    return spec_dir() / "benchmark.yaml"


def read_spec(path: Path | None = None) -> BenchmarkSpec:
    """Read and check a benchmark spec (``path`` defaults to :func:`spec_file`).

    Raises :class:`KnowgicError` with one line naming the file, the field and the problem."""
    path = path or spec_file()
    data = read_yaml(path, "the benchmark spec")
    problem = _schema_problem(data)
    if problem is None:
        metrics = {str(name): _metric(str(name), entry) for name, entry in data["metrics"].items()}
        problem = _cross_problem(data, metrics)
    if problem is not None:
        raise KnowgicError(f"{path}: {problem}")
    versions = {
        str(name): VersionSpec(
            name=str(name),
            path=entry["path"],
            sha256=entry["sha256"],
            based_on=entry.get("based_on"),
            rows=dict(entry.get("rows") or {}),
        )
        for name, entry in (data["dataset"]["versions"] or {}).items()
    }
    protocols = {
        str(name): ProtocolSpec(
            name=str(name),
            params=dict(entry["params"]),
            known_threshold=None if entry.get("known_threshold") is None else float(entry["known_threshold"]),
            deterministic=entry["deterministic"],
            description=" ".join(str(entry["description"]).split()),
            version=int(entry.get("version", 1)),
        )
        for name, entry in data["protocols"].items()
    }
    return BenchmarkSpec(
        path=path,
        versions=versions,
        protocols=protocols,
        default_protocol=data["default_protocol"],
        modes={str(k): str(v).strip() for k, v in data["modes"].items()},
        default_mode=data["default_mode"],
        metrics=metrics,
        ripple_max_new_tokens=int(data["ripple"]["max_new_tokens"]),
    )


@cache
def benchmark_spec() -> BenchmarkSpec:
    """The shipped spec, read and checked once per process, on first use."""
    return read_spec()
