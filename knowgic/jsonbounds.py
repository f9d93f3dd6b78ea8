"""JSON from untrusted input, read within a named bound on its nesting.

``json.loads`` of ``[[[[…]]]]`` 200,000 deep raises a bare ``RecursionError``, and a document a few hundred
levels deep parses but then exhausts the stack of whatever walks it next (a schema validator, a
recursive copy). :func:`loads_bounded` parses, then measures the nesting without recursion, and refuses
either case in one line that names the bound::

    delta sidecar edit-0001-….json nests arrays or objects deeper than 32 levels (at /edits/0/info/a/a/…)

:data:`MAX_DEPTH` is the one bound: the results store accepts no deeper document (its ``StoreLimits``),
so nothing the runner reads from a submission needs more.
"""

from __future__ import annotations

import json
from typing import Any

from knowgic.errors import KnowgicError

MAX_DEPTH = 32
"""Levels of arrays and objects a JSON document the runner reads from a submission may nest."""


class TooDeep(KnowgicError):
    """A JSON document nested deeper than its bound; the message names the bound and where."""


def _pointer(parts: list[str | int]) -> str:
    shown = [str(p).replace("~", "~0").replace("/", "~1") for p in parts[:6]]
    return "/" + "/".join(shown) + ("/…" if len(parts) > 6 else "")


def too_deep(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """The JSON pointer of the first array or object nested deeper than ``max_depth``, or None (measured
    without recursion: a deep value cannot exhaust the stack here)."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            continue
        if len(path) >= max_depth:
            return _pointer(path)
        stack.extend((child, [*path, key]) for key, child in children)
    return None


def loads_bounded(data: bytes | str, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(data)``, refused with :class:`TooDeep` when it nests arrays or objects deeper than
    ``max_depth``; invalid JSON is a :class:`KnowgicError` naming ``where``."""
    bound = f"{where} nests arrays or objects deeper than {max_depth} levels"
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(f"{bound} (deeper than the parser can follow)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KnowgicError(f"{where} is not valid JSON: {exc}") from None
    pointer = too_deep(value, max_depth)
    if pointer is not None:
        raise TooDeep(f"{bound} (at {pointer})")
    return value
