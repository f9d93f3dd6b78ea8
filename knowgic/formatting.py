"""How a metric entry of a results document is shown: value, interval and the few-edits mark."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FEW_EDITS_MARK = "†"
"""Shown after a value resting on fewer than ``knowgic.intervals.FEW_EDITS`` effective edits (``few_edits``)."""


def format_value(entry: Mapping[str, Any], digits: int = 3) -> str:
    """``0.418 [0.35, 0.49]`` (the interval one digit shorter), ``0.418`` without an interval, ``–`` if null;
    :data:`FEW_EDITS_MARK` after it where the entry is flagged ``few_edits``."""
    value = entry.get("value")
    if value is None:
        return "–"
    text = f"{value:.{digits}f}"
    interval = entry.get("interval")
    if interval:
        low, high = interval
        text += f" [{low:.{max(1, digits - 1)}f}, {high:.{max(1, digits - 1)}f}]"
    if entry.get("few_edits"):
        text += f" {FEW_EDITS_MARK}"
    return text
