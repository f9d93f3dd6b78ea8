"""Golden tests: the numbers KnowGIC gives today, pinned before its code is moved.

``tests/data/golden/`` holds real ``results.json`` documents written by ``knowgic evaluate`` on knowgic-tiny
(gzip, as written) and, beside each, ``<run>.expected.json``: what recomputing that document from its own
records gave when it was pinned (every metric's value, n, reason and interval fields, the counts the records
determine, the interval settings) and the paired comparisons of every pair of full runs. A change of the
metric code that moves any of these numbers fails here; a deliberate change of a definition regenerates the
files (``KNOWGIC_REGENERATE_GOLDEN=1 python -m pytest tests/test_golden.py``) and says why in the results
changelog (``spec/schemas/CHANGELOG.md``).

Values are compared to 1e-12 (absolute): a sum taken in another order may move the last bits of a float,
never more. Everything else (n, reasons, methods, counts, edit counts) must be equal.

The suite's own run of the offline model (the ``evaluated_results`` fixture: FT, first edit) is pinned too,
to 1e-9: there the scores come from the model's forward passes, whose last bits may depend on the CPU. The
pinned documents predate ripple scoring (results schema 1.6), so their RippleEdits metrics are null; the
suite's own run's are pinned apart, in ``ft-limit1.ripple.json``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from knowgic.measure.compare import compare_results
from knowgic.recompute import check_results, recompute_metrics
from knowgic.spec import benchmark_spec

GOLDEN = Path(__file__).parent / "data" / "golden"
RUNS = ("ft-limit1", "none-limit5", "lora-seq-limit3", "ice", "memit", "rome")
"""The pinned runs: knowgic-tiny on KnowGIC 1.1.0, logprob protocol; ``-limitN``: the first N edits;
``-seq``: sequential mode; the others independent mode on all 26 edits."""
FULL_RUNS = ("ice", "memit", "rome")
"""The runs over the same 26 edits, compared pairwise."""
REGENERATE = os.environ.get("KNOWGIC_REGENERATE_GOLDEN") == "1"
RIPPLE = frozenset(name for name, m in benchmark_spec().metrics.items() if m.group == "ripple")
"""RippleEdits' metrics: null in the pinned documents (written before ripple scoring)."""
VALUE_TOLERANCE = 1e-12


def _document(run: str) -> dict[str, Any]:
    with gzip.open(GOLDEN / f"{run}.results.json.gz", "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "metric": d.metric,
            "difference": d.difference,
            "interval": [d.low, d.high],
            "p_value": d.p_value,
            "test": d.test,
            "better": d.better,
            "told_apart": d.told_apart,
            "reason": d.reason,
            "edits": d.edits,
            "ranked_by": d.ranked_by,
        }
        for d in compare_results(a, b)
    ]


def _pinned(run: str) -> dict[str, Any]:
    """What the code gives today for ``run``: its recomputation, and its comparisons with later full runs."""
    document = _document(run)
    pinned: dict[str, Any] = dict(recompute_metrics(document))
    if run in FULL_RUNS:
        later = FULL_RUNS[FULL_RUNS.index(run) + 1 :]
        pinned["compare"] = {other: _differences(document, _document(other)) for other in later}
    return pinned


def _mismatches(expected: Any, actual: Any, where: str, tolerance: float) -> list[str]:
    """Every place where ``actual`` differs from ``expected``: floats beyond ``tolerance``, anything else at all."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines = [f"{where}.{k}: missing" for k in expected if k not in actual]
        lines += [f"{where}.{k}: not pinned" for k in actual if k not in expected]
        for key in expected.keys() & actual.keys():
            lines += _mismatches(expected[key], actual[key], f"{where}.{key}", tolerance)
        return lines
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(actual)} items, pinned {len(expected)}"]
        return [
            line
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for line in _mismatches(e, a, f"{where}[{i}]", tolerance)
        ]
    numbers = [isinstance(x, (int, float)) and not isinstance(x, bool) for x in (expected, actual)]
    if all(numbers) and not (isinstance(expected, int) and isinstance(actual, int)):
        same = math.isclose(float(expected), float(actual), rel_tol=0.0, abs_tol=tolerance)
    else:
        same = expected == actual and type(expected) is type(actual)
    return [] if same else [f"{where}: {actual!r}, pinned {expected!r}"]


@pytest.mark.parametrize("run", RUNS)
def test_recomputation_gives_the_pinned_numbers(run: str) -> None:
    path = GOLDEN / f"{run}.expected.json"
    pinned = _pinned(run)
    if REGENERATE:
        path.write_text(json.dumps(pinned, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert _mismatches(expected, pinned, run, VALUE_TOLERANCE) == []


@pytest.mark.parametrize("run", RUNS)
def test_the_pinned_documents_state_what_their_records_give(run: str) -> None:
    assert check_results(_document(run)) == []


def test_the_suites_own_run_gives_the_pinned_numbers(evaluated_results: Path) -> None:
    """The test run's own FT evaluation of the first edit (a session fixture) states the pinned numbers."""
    document = json.loads(evaluated_results.read_text(encoding="utf-8"))
    expected = json.loads((GOLDEN / "ft-limit1.expected.json").read_text(encoding="utf-8"))
    assert all(isinstance(c["restates_edit"], bool) for c in document["chains"])
    stated = {"metrics": document["metrics"], "uncertainty": document["uncertainty"]}
    counts = {k: document["counts"][k] for k in expected["counts"]}
    ripple = {k: v for k, v in stated["metrics"].items() if k in RIPPLE}
    stated["metrics"] = {k: v for k, v in stated["metrics"].items() if k not in RIPPLE}
    expected["metrics"] = {k: v for k, v in expected["metrics"].items() if k not in RIPPLE}
    assert _mismatches(expected["metrics"], stated["metrics"], "metrics", 1e-9) == []
    ripple_path = GOLDEN / "ft-limit1.ripple.json"
    pinned_ripple = {"metrics": ripple, "counts": document["counts"]["ripple"]}
    if REGENERATE:
        ripple_path.write_text(
            json.dumps(pinned_ripple, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    assert (
        _mismatches(json.loads(ripple_path.read_text(encoding="utf-8")), pinned_ripple, "ripple", 1e-9) == []
    )
    assert _mismatches(expected["uncertainty"], stated["uncertainty"], "uncertainty", 0.0) == []
    assert counts == expected["counts"]


def test_a_moved_number_is_caught() -> None:
    """The comparison the golden tests rest on sees a change in the eleventh decimal, and a changed reason."""
    expected = json.loads((GOLDEN / "memit.expected.json").read_text(encoding="utf-8"))
    moved = json.loads(json.dumps(expected))
    moved["metrics"]["ifr"]["value"] += 1e-11
    moved["metrics"]["ifr_by_length"]["5"]["interval_method"] = "another method"
    lines = _mismatches(expected, moved, "memit", VALUE_TOLERANCE)
    assert sorted(lines) == sorted(
        [
            f"memit.metrics.ifr.value: {moved['metrics']['ifr']['value']!r}, "
            f"pinned {expected['metrics']['ifr']['value']!r}",
            "memit.metrics.ifr_by_length.5.interval_method: 'another method', pinned "
            f"{expected['metrics']['ifr_by_length']['5']['interval_method']!r}",
        ]
    )
    assert _mismatches(expected, json.loads(json.dumps(expected)), "memit", VALUE_TOLERANCE) == []
    del moved["metrics"]["efficacy"]
    assert "memit.metrics.efficacy: missing" in _mismatches(expected, moved, "memit", VALUE_TOLERANCE)


def test_every_pinned_run_is_listed() -> None:
    """Every golden document in the folder is one of RUNS (none forgotten), and each has its numbers."""
    on_disk = {p.name.removesuffix(".results.json.gz") for p in GOLDEN.glob("*.results.json.gz")}
    assert on_disk == set(RUNS)
    assert {p.name.removesuffix(".expected.json") for p in GOLDEN.glob("*.expected.json")} == set(RUNS)
    assert set(FULL_RUNS) <= set(RUNS)
