"""Text from untrusted input, printed as text and refused by name.

A submission, its manifest, a results file or a job's log can hold any character. Printed raw, ESC
(U+001B) or CSI (U+009B) starts a terminal escape sequence (colours, a window title, the clipboard, text
that hides what follows), a carriage return overwrites a line, U+2028 breaks one, bidirectional overrides
(U+202E) reorder what a person reads, and a lone surrogate stops ``print`` with a UnicodeEncodeError.
One rule says which characters are not plain text, and everything here follows it::

    is_plain(ch)                 str.isprintable(): not a control (C0, DEL, C1), format (bidi, zero width),
                                 surrogate, private-use or unassigned character, not a line or paragraph
                                 separator, and no space but U+0020
    first_unsafe(text, allow)    (index, character) of the first one, for a refusal that names it
    character_name(ch)           'U+2028 LINE SEPARATOR'
    printable(text, newlines)    each such character written as its escape (\\x1b, \\u2028); newlines and
                                 tabs kept for multi-line text (a log)
    printable_json(value)        JSON with each such character as a \\uXXXX escape (valid JSON, plain text)

Markup is the other half: a rich table parses ``[link=...]`` in a plain ``str``; :func:`plain_cell`
returns a ``rich.text.Text``, which rich never parses.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

MULTILINE = "\n\t"
"""The characters a multi-line text (a log, a description) keeps."""


def is_plain(character: str) -> bool:
    """True for a character that prints as itself (see the module docstring)."""
    return character.isprintable()


def first_unsafe(text: str, allow: str = "") -> tuple[int, str] | None:
    """The index and character of the first character of ``text`` that is not plain text and not in
    ``allow``; None when there is none."""
    if text.isprintable():  # the common case, in C
        return None
    for index, character in enumerate(text):
        if not character.isprintable() and character not in allow:
            return index, character
    return None


def character_name(character: str) -> str:
    """``U+2028 LINE SEPARATOR``; a character without a name by its category (``U+001B (control)``)."""
    name = unicodedata.name(character, "")
    if not name:
        category = unicodedata.category(character)
        kinds = {"Cc": "control", "Cs": "surrogate", "Co": "private use", "Cn": "unassigned"}
        name = f"({kinds.get(category, category)})"
    return f"U+{ord(character):04X} {name}"


def _escape(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` with every character that is not plain text written as its escape (as ``repr`` writes
    it); ``newlines``: keep line feeds and tabs (a log, a multi-line message)."""
    if text.isprintable():
        return text
    keep = MULTILINE if newlines else ""
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def printable_json(value: Any, **dumps: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **dumps)`` with every character that is not plain text as a
    ``\\uXXXX`` escape: still valid JSON for a script, plain text for a terminal. Such characters can only
    stand inside JSON strings, where the escape means the same character."""
    text = json.dumps(value, ensure_ascii=False, **dumps)
    if text.isprintable() or first_unsafe(text, MULTILINE) is None:
        return text
    out = []
    for character in text:
        if character.isprintable() or character in MULTILINE:
            out.append(character)
        else:
            # Beyond the BMP: the UTF-16 pair JSON uses.
            encoded = character.encode("utf-16-be", "surrogatepass")
            out.extend(
                f"\\u{int.from_bytes(encoded[i : i + 2], 'big'):04x}" for i in range(0, len(encoded), 2)
            )
    return "".join(out)


def plain_cell(text: Any) -> Any:
    """A ``rich.text.Text`` of ``printable(str(text))``: rich prints it as it is (no markup, no emoji codes)."""
    from rich.text import Text

    return Text(printable(str(text)))
