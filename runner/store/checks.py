"""What the store checks before it believes a file: sizes, finite numbers, ranges, intervals.

Every results file passes the same checks when ``knowgic store add`` (or a worker) stores it and when a
reader (``knowgic store list``, the leaderboard) shows it::

    file size <= LIMITS.file_bytes                  (refused before it is read)
    JSON, nested at most LIMITS.depth deep, each string <= LIMITS.string_chars characters,
      each array or object <= LIMITS.items members
    results.schema.json and the document's own sha256             (knowgic.runner.store.store)
    every number finite (no NaN, Infinity)
    every metric's value and interval within its declared bounds (spec/benchmark.yaml "bounds"),
      interval [low, high] with low <= value <= high
    every headline value and interval recomputed from the per-chain and per-edit records
      (knowgic.recompute.check_results: the functions ``evaluate`` uses)

A failed check is one line: the JSON pointer of the field and what was expected there.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.jsonbounds import MAX_DEPTH
from knowgic.recompute import check_results
from knowgic.spec import benchmark_spec

# Float noise allowed when a value is compared with its interval or range: intervals are quantiles of
# resamples computed by other arithmetic than the point estimate.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class StoreLimits:
    """Sizes the store accepts (a full KnowGIC v1 run is about 0.35 MB; limits leave room for larger
    datasets, private splits and in-context prefixes, and bound what a reader must hold in memory)."""

    file_bytes: int = 16 * 1024 * 1024  # a results file
    entry_bytes: int = 1024 * 1024  # an entry file (manifest and job record)
    string_chars: int = 256 * 1024  # any one string value
    items: int = 100_000  # members of any one array or object
    depth: int = MAX_DEPTH  # nesting of arrays and objects (knowgic.jsonbounds: the runner's one bound)


LIMITS = StoreLimits()


class CheckFailed(KnowgicError):
    """A file breaks one of the store's checks; the message names the field and what was expected."""


def read_capped(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of ``path``, refused (before reading) when larger than ``max_bytes``."""
    return read_capped_stat(path, what, max_bytes)[0]


def read_capped_stat(
    path: Path, what: str, max_bytes: int, missing: str = "does not exist"
) -> tuple[bytes, os.stat_result, os.stat_result]:
    """:func:`read_capped`, with the file's status as the read began and as it ended (so a reader can tell a
    file that changed while it was read). ``missing``: how the message says the file is not there."""
    try:
        with path.open("rb") as handle:
            before = os.fstat(handle.fileno())
            if before.st_size > max_bytes:
                raise CheckFailed(
                    f"{what} {path} is {before.st_size:,} bytes; the store accepts at most {max_bytes:,}"
                )
            data = handle.read(max_bytes + 1)
            after = os.fstat(handle.fileno())
    except FileNotFoundError:
        raise CheckFailed(f"{what} {path} {missing}") from None
    except OSError as exc:
        raise CheckFailed(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # grew while being read
        raise CheckFailed(f"{what} {path} is over {max_bytes:,} bytes; the store accepts at most that")
    return data, before, after


def parse_json(data: bytes, where: str) -> Any:
    """JSON from bytes; one line when it is not JSON or nests deeper than a parser can follow."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckFailed(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise CheckFailed(f"{where} nests arrays or objects deeper than {LIMITS.depth} levels") from None


def _pointer(parts: tuple[str | int, ...]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _walk(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))


def _size_problem(document: Any, limits: StoreLimits) -> str | None:
    """The first field over a limit, checked iteratively (a deep file must not exhaust the stack)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if len(value) > limits.string_chars:
                return f"{_pointer(path)} is a string of {len(value):,} characters; at most {limits.string_chars:,}"
        elif isinstance(value, dict | list):
            if len(path) >= limits.depth:
                return f"{_pointer(path)} nests deeper than {limits.depth} levels"
            if len(value) > limits.items:
                kind = "an object of" if isinstance(value, dict) else "an array of"
                return f"{_pointer(path)} is {kind} {len(value):,} members; at most {limits.items:,}"
            if isinstance(value, dict):
                for key, item in value.items():
                    if len(key) > limits.string_chars:
                        return f"{_pointer(path)} has a key of {len(key):,} characters; at most {limits.string_chars:,}"
                    stack.append(((*path, key), item))
            else:
                stack.extend(((*path, i), item) for i, item in enumerate(value))
    return None


def check_sizes(document: Any, where: str, limits: StoreLimits = LIMITS) -> None:
    """Raise :class:`CheckFailed` naming the first string, array or object over ``limits``."""
    problem = _size_problem(document, limits)
    if problem is not None:
        raise CheckFailed(f"{where}: {problem}")


@dataclass(frozen=True)
class _Range:
    label: str
    low: float | None
    high: float | None

    def text(self) -> str:
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"[{low}, {high}]"

    def holds(self, value: float) -> bool:
        return (self.low is None or value >= self.low - _TOLERANCE) and (
            self.high is None or value <= self.high + _TOLERANCE
        )


@lru_cache(maxsize=1)
def _ranges() -> dict[str, _Range]:
    """Each declared metric's label and range, from spec/benchmark.yaml (the one declaration)."""
    return {name: _Range(m.label, *m.bounds) for name, m in benchmark_spec().metrics.items()}


def _metric_entries(metrics: Mapping[str, Any]) -> Iterator[tuple[str, tuple[str, ...], Mapping[str, Any]]]:
    """(declared metric name, pointer parts, metric object) for every metric object of a document."""
    for name, entry in metrics.items():
        if name == "ifr_by_length" and isinstance(entry, Mapping):
            for length, item in entry.items():
                if isinstance(item, Mapping):
                    yield name, ("metrics", name, length), item
        elif isinstance(entry, Mapping):
            yield name, ("metrics", name), entry


def value_problems(document: Mapping[str, Any]) -> list[str]:
    """Non-finite numbers anywhere; metric values and intervals outside their declared range; intervals
    that are reversed or do not contain their value. One line per problem, each naming its field."""
    problems = [
        f"{_pointer(path)} is {value!r}; a results file holds finite numbers only"
        for path, value in _walk(document)
        if isinstance(value, float) and not math.isfinite(value)
    ]
    if problems:
        return problems
    ranges = _ranges()
    for name, parts, entry in _metric_entries(document.get("metrics") or {}):
        declared = ranges.get(name)
        value = entry.get("value")
        if declared is not None and isinstance(value, int | float) and not declared.holds(value):
            problems.append(
                f"{_pointer((*parts, 'value'))} is {value:g}; {declared.label} lies in {declared.text()}"
            )
        interval = entry.get("interval")
        if not (isinstance(interval, list) and len(interval) == 2):
            continue
        low, high = interval
        where = _pointer((*parts, "interval"))
        if not all(isinstance(v, int | float) for v in (low, high)):
            continue  # the schema refuses it
        if low > high:
            problems.append(f"{where} is [{low:g}, {high:g}]: reversed (low above high)")
        elif declared is not None and not (declared.holds(low) and declared.holds(high)):
            problems.append(f"{where} is [{low:g}, {high:g}]; {declared.label} lies in {declared.text()}")
        elif isinstance(value, int | float) and not (low - _TOLERANCE <= value <= high + _TOLERANCE):
            problems.append(f"{where} is [{low:g}, {high:g}] and does not contain its value {value:g}")
    return problems


def recompute_problems(document: Mapping[str, Any]) -> list[str]:
    """Stated values, intervals and counts that differ from what the records give (empty when none)."""
    try:
        lines = check_results(document)
    except KnowgicError as exc:  # records it cannot recompute from (an old schema, inconsistent records)
        return [f"its metrics cannot be recomputed from its records: {exc}"]
    # "metrics.ifr.value: stated 0.001, recomputed 0.31" -> "/metrics/ifr/value: stated ..., recomputed ..."
    problems = []
    for line in lines:
        where, _, rest = line.partition(": ")
        problems.append((not where.endswith(".value"), f"{_pointer(tuple(where.split('.')))}: {rest}"))
    # Values first: the line a person reads first is the number that was changed.
    return [
        f"{text} from the per-chain and per-edit records" for _, text in sorted(problems, key=lambda p: p[0])
    ]


def check_values(document: Mapping[str, Any], where: str) -> None:
    """Raise :class:`CheckFailed` with the first value problem (and how many more there are)."""
    problems = value_problems(document) or recompute_problems(document)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CheckFailed(f"{where}: {problems[0]}{more}")
