"""Does a generated text contain the answer? (the ``generate``/``greedy`` protocols' success test)

RippleEdits (Cohen et al. 2024, §5) counts a generation as correct when an alias of the target appears in
it; KnowGIC makes "appears" precise: case-insensitive, whole-word, unicode-aware and tolerant to
punctuation. Both strings are normalized the same way and the answer must occur as a contiguous run of
whole words of the text:

- Unicode NFKC (full-width letters, ligatures), ``casefold`` ("Straße" = "STRASSE"), accents dropped
  ("Zürich" = "Zurich");
- a period after a single letter and before another is deleted, so initialisms read as one word
  ("U.S." = "US", "D.C." = "DC"); every other punctuation mark or symbol separates words ("Jean-Paul" =
  "Jean Paul", "Clinton's" = "Clinton s", "Paris." = "Paris");
- a word is a run of letters, marks and digits, so "US" does not match inside "using";
- Han characters and kana are one word each, since those scripts put no spaces between words.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable


def _is_unspaced_script(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x3040 <= cp <= 0x30FF  # hiragana, katakana
        or 0x3400 <= cp <= 0x4DBF  # CJK extension A
        or 0x4E00 <= cp <= 0x9FFF  # CJK unified ideographs
        or 0xF900 <= cp <= 0xFAFF  # CJK compatibility ideographs
        or 0x20000 <= cp <= 0x2FA1F  # CJK extensions B..F, compatibility supplement
    )


def _is_word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LMN" and not _is_unspaced_script(ch)


def words(text: str) -> list[str]:
    """The normalized words of ``text`` (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")
    text = unicodedata.normalize("NFC", text)
    out: list[str] = []
    current: list[str] = []
    since_period = 0  # word characters since the run started or since its last initialism period
    for i, ch in enumerate(text):
        if _is_unspaced_script(ch):
            if current:
                out.append("".join(current))
                current, since_period = [], 0
            out.append(ch)
        elif _is_word_char(ch):
            current.append(ch)
            since_period += 1
        elif ch == "." and since_period == 1 and i + 1 < len(text) and _is_word_char(text[i + 1]):
            since_period = 0  # "U.S": the period joins the initials
        elif current:
            out.append("".join(current))
            current, since_period = [], 0
    if current:
        out.append("".join(current))
    return out


def contains_answer(text: str, answers: Iterable[str]) -> bool:
    """True when any of ``answers`` occurs in ``text`` as whole words (an answer with no words never does)."""
    haystack = " " + " ".join(words(text)) + " "
    for answer in answers:
        needle = words(answer)
        if needle and " " + " ".join(needle) + " " in haystack:
            return True
    return False
