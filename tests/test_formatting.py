"""How values, intervals, notes and verdicts are written (knowgic.formatting), on metric entries made by
the same code that writes results.json's (``interval_fields`` of ``ratio_interval``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from knowgic.formatting import (
    FEW_EDITS_MARK,
    NOT_TOLD_APART,
    UNDEFINED,
    direction_text,
    entry_note,
    few_edits_note,
    format_interval,
    format_number,
    format_value,
    undefined_text,
    verdict_meaning,
    verdict_text,
    verdict_words,
)
from knowgic.intervals import FEW_EDITS, Ratio, interval_fields, ratio_interval
from knowgic.paired import MetricDifference


def _entry(
    numerator: list[float], denominator: list[float] | None = None, kind: str = "ratio_of_sums"
) -> dict:
    """A metric entry as results.json holds it: the value and the interval fields of its per-edit sums."""
    a = np.asarray(numerator, dtype=float)
    b = np.ones_like(a) if denominator is None else np.asarray(denominator, dtype=float)
    value = float(a.sum() / b.sum()) if b.sum() > 0 else None
    return {"value": value, "n": int(b.sum()), **interval_fields(ratio_interval(Ratio(a, b), kind=kind))}


def _difference(**fields: Any) -> MetricDifference:
    base: dict[str, Any] = dict(metric="ifr", a=0.4, b=0.2, difference=-0.2, low=-0.3, high=-0.1)
    return MetricDifference(**{**base, "excludes_zero": True, **fields})


def test_numbers_round_to_their_digits_and_none_is_undefined() -> None:
    assert format_number(0.41849) == "0.4185"
    assert format_number(0.41849, 3) == "0.418"
    assert format_number(1) == "1.0000"
    assert format_number(np.float32(0.25), 2) == "0.25"
    assert format_number(-0.0312, signed=True) == "-0.0312"
    assert format_number(0.0312, signed=True) == "+0.0312"
    assert format_number(None) == UNDEFINED == "–"
    assert format_number(None, undefined="null") == "null"


def test_intervals_are_low_and_high_in_brackets() -> None:
    entry = _entry([1.0] * 26, kind="edit_outcome")  # 26 of 26: Clopper-Pearson [0.868, 1]
    assert entry["value"] == 1.0 and entry["few_edits"] is False
    assert format_interval(entry["interval"]) == "[0.8677, 1.0000]"
    assert format_interval(entry["interval"], 2) == "[0.87, 1.00]"
    assert format_interval((-0.12, 0.05), signed=True) == "[-0.1200, +0.0500]"
    for missing in (None, [], (None, None), (0.1, None), "ab"):
        assert format_interval(missing) == UNDEFINED


def test_a_value_is_written_with_its_interval_one_digit_shorter() -> None:
    entry = _entry([1.0] * 26, kind="edit_outcome")
    assert format_value(entry) == "1.000 [0.87, 1.00]"
    assert format_value(entry, digits=4) == "1.0000 [0.868, 1.000]"
    assert format_value(entry, digits=1) == "1.0 [0.9, 1.0]"  # never fewer than one digit
    spread = _entry([0.5 + 1e-3 * d for d in (0, 1, 0, 2, 0, 0, 1, 0)] * 2)
    low, high = spread["interval"]
    assert format_value(spread) == f"{spread['value']:.3f} [{low:.2f}, {high:.2f}]"
    assert format_value({"value": 0.41849}) == "0.418"  # schema 1.0: no interval fields


def test_null_value_says_its_reason() -> None:
    null = {"value": None, "n": 0, "reason": "no chain of length 5 is active"}
    assert format_value(null) == UNDEFINED
    assert undefined_text(null) == "no chain of length 5 is active"
    assert entry_note(null, FEW_EDITS) == "no chain of length 5 is active"
    assert undefined_text({"value": 0.3, "reason": "stale"}) == ""  # a defined value has no such text
    assert undefined_text({"value": None}) == ""


def test_a_value_without_an_interval_says_why() -> None:
    entry = _entry([0.3, 0.0, 0.0], [1.0, 0.0, 0.0])  # rests on one edit
    assert entry["interval"] is None and "one edit" in entry["interval_reason"]
    assert format_value(entry) == f"0.300 {FEW_EDITS_MARK}"
    note = entry_note(entry, FEW_EDITS)
    assert note.startswith(f"no interval: {entry['interval_reason']}; ")
    assert note.endswith(f"{FEW_EDITS_MARK} few edits: 1.0 effective (below 10)")


def test_few_edits_are_marked_and_noted() -> None:
    entry = _entry([0.2, 0.5, 0.9])
    assert entry["few_edits"] is True and entry["effective_edits"] == 3.0
    assert format_value(entry).endswith(f"] {FEW_EDITS_MARK}")
    assert entry_note(entry, FEW_EDITS) == "† few edits: 3.0 effective (below 10)"
    assert few_edits_note(9.64, 10.0) == "† few edits: 9.6 effective (below 10)"
    assert few_edits_note(None, 10.0, mark=False) == "few edits: 0.0 effective (below 10)"
    constant = _entry([0.5] * 12)  # every edit the same value: the interval is the point, with a note
    assert constant["few_edits"] is False
    assert entry_note(constant, FEW_EDITS) == constant["interval_note"]
    assert entry_note({"value": 0.5}, FEW_EDITS) == ""


def test_directions() -> None:
    assert direction_text("lower") == "lower ↓"
    assert direction_text("higher") == "higher ↑"
    assert direction_text(None) == direction_text("") == ""


def test_one_wording_for_the_verdict_of_a_paired_comparison() -> None:
    told = _difference(better="A")
    assert verdict_words(told.told_apart, told.better) == "A better (told apart)"
    assert verdict_text(told.told_apart, told.better) == "A better (told apart)"
    assert verdict_words(True, None) == "told apart"  # a metric without a direction
    tied = _difference(excludes_zero=False, few_edits=True)
    assert verdict_words(tied.told_apart, tied.better) == NOT_TOLD_APART == "not told apart"
    assert verdict_text(tied.told_apart, tied.better, tied.few_edits) == "not told apart † few edits"
    untested = _difference(excludes_zero=None, reason="undefined in run A")
    assert verdict_words(untested.told_apart, untested.better) is None
    assert verdict_text(untested.told_apart, None, True, untested.reason) == "– (undefined in run A)"
    assert verdict_meaning(0.95) == "'told apart': p < 0.05"
    assert verdict_meaning(0.9) == "'told apart': p < 0.1"
