"""How a results document's figures are written for people: values, intervals, the few-edits mark and
note, an undefined value's text, and the verdict of a paired comparison in words.

One module for the CLI (``knowgic evaluate``, ``compare``, ``sweep``, ``summarize``) and the leaderboard,
so that a value, an interval or a verdict reads the same wherever it is shown. It takes plain values and
metric entries (the dicts of ``results.json``'s ``metrics``) and reads no spec: where a threshold or a
direction matters, the caller passes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

UNDEFINED = "–"
"""Shown in place of an undefined value or a missing interval (never 0)."""
FEW_EDITS_MARK = "†"
"""Shown after a value resting on few effective edits (an entry flagged ``few_edits``)."""

TOLD_APART = "told apart"
"""The verdict of a paired comparison whose p-value is below ``1 - level``."""
NOT_TOLD_APART = "not told apart"
"""The verdict of a paired comparison whose p-value is not: these edits cannot tell the two runs apart
(which is not evidence that they are equal)."""

_DIRECTION_TEXT = {"lower": "lower ↓", "higher": "higher ↑"}


def format_number(value: Any, digits: int = 4, signed: bool = False, undefined: str = UNDEFINED) -> str:
    """``0.4180`` (``+0.4180`` when ``signed``), or ``undefined`` for None."""
    if value is None:
        return undefined
    return f"{float(value):{'+' if signed else ''}.{digits}f}"


def has_interval(interval: Any) -> bool:
    """Whether ``interval`` is a ``[low, high]`` pair of numbers (not null, not missing)."""
    return (
        isinstance(interval, Sequence)
        and not isinstance(interval, str)
        and len(interval) == 2
        and all(end is not None for end in interval)
    )


def format_interval(interval: Any, digits: int = 4, signed: bool = False) -> str:
    """``[0.2593, 0.5808]`` (``[-0.1200, +0.0500]`` when ``signed``), or ``–`` where there is none."""
    if not has_interval(interval):
        return UNDEFINED
    low, high = interval
    return f"[{format_number(low, digits, signed)}, {format_number(high, digits, signed)}]"


def format_value(entry: Mapping[str, Any], digits: int = 3) -> str:
    """``0.418 [0.35, 0.49]`` (the interval one digit shorter), ``0.418`` without an interval, ``–`` if null;
    :data:`FEW_EDITS_MARK` after it where the entry is flagged ``few_edits``."""
    value = entry.get("value")
    if value is None:
        return UNDEFINED
    text = f"{value:.{digits}f}"
    interval = entry.get("interval")
    if interval:
        text += f" {format_interval(interval, max(1, digits - 1))}"
    if entry.get("few_edits"):
        text += f" {FEW_EDITS_MARK}"
    return text


def undefined_text(entry: Mapping[str, Any]) -> str:
    """Why the entry's value is undefined (its ``reason``), or ``""`` when it is defined or says nothing."""
    return str(entry.get("reason") or "") if entry.get("value") is None else ""


def few_edits_note(effective_edits: float | None, below: float, mark: bool = True) -> str:
    """``† few edits: 9.6 effective (below 10)``: a figure resting on fewer than ``below`` effective edits."""
    note = f"few edits: {effective_edits or 0:.1f} effective (below {below:g})"
    return f"{FEW_EDITS_MARK} {note}" if mark else note


def entry_note(entry: Mapping[str, Any], few_edits_below: float) -> str:
    """Why the value is null, else why its interval is, or what to know about it (few edits, every edit
    the same value); ``""`` for an entry with none of these (documents of schema 1.0)."""
    if entry.get("reason"):
        return str(entry["reason"])
    notes = []
    if entry.get("value") is not None and entry.get("interval_reason"):
        notes.append(f"no interval: {entry['interval_reason']}")
    if entry.get("few_edits"):
        notes.append(few_edits_note(entry.get("effective_edits"), few_edits_below))
    if entry.get("interval_note"):
        notes.append(str(entry["interval_note"]))
    return "; ".join(notes)


def direction_text(direction: str | None) -> str:
    """``lower ↓`` or ``higher ↑`` for a metric's declared direction; ``""`` for none."""
    return _DIRECTION_TEXT.get(direction or "", "")


def verdict_words(told_apart: bool | None, better: str | None = None) -> str | None:
    """A paired comparison in words: ``B better (told apart)`` (``better`` is ``"A"`` or ``"B"`` by the
    metric's direction), ``told apart`` (no direction), ``not told apart``; None where there is no test."""
    if told_apart is None:
        return None
    if not told_apart:
        return NOT_TOLD_APART
    return f"{better} better ({TOLD_APART})" if better else TOLD_APART


def verdict_text(
    told_apart: bool | None, better: str | None = None, few_edits: bool = False, reason: str | None = None
) -> str:
    """:func:`verdict_words` with ``† few edits`` after it for a comparison resting on few edits, or
    ``– (reason)`` where there is no test."""
    words = verdict_words(told_apart, better)
    if words is None:
        return f"{UNDEFINED} ({reason})"
    return f"{words} {FEW_EDITS_MARK} few edits" if few_edits else words


def verdict_meaning(level: float) -> str:
    """What the verdict words mean at confidence ``level`` (``'told apart': p < 0.05``)."""
    return f"'{TOLD_APART}': p < {1 - level:.2g}"
