"""Bounded quoting: a report or error message never prints more than a few hundred characters of a value.

Input files can hold anything (a 50 MB question, a key of a million characters); what a report quotes from
them is cut to ``limit`` characters and says how much was left out, in text and in JSON alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

QUOTE_LIMIT = 200
"""Characters of one quoted value (an example, a row's question, a schema message) in a report."""


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` when it has at most ``limit`` characters, else its start and end around a marker saying how
    many characters were left out: ``'abc…[+52,428,700 chars]…xyz'``.

    The end is kept because what follows a quoted value often says what it is (``'...' (subject 'X', 2x)``).
    The result has at most ``limit`` + 24 characters.
    """
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 4, limit // 4
    return f"{text[:head]}…[+{len(text) - head - tail:,} chars]…{text[len(text) - tail :]}"


def clip_strings(value: Any, limit: int = QUOTE_LIMIT) -> Any:
    """A copy of a JSON-like value (dicts, lists, scalars) with every string, keys included, clipped."""
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, Mapping):
        return {clip(str(k), limit): clip_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clip_strings(v, limit) for v in value]
    return value
