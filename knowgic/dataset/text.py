"""Text tests shared by the validator, the corrections and the dataset card.

Matching follows the generate protocol of the benchmark: case-insensitive, whole word (a name counts as
"in" a text when it is not glued to other letters or digits on either side).
"""

from __future__ import annotations

import re
from functools import lru_cache

# Frequent English words: an alias equal to one of these would match ordinary text by accident.
COMMON_WORDS = frozenset(
    """
    a about after again all also an and any apple are as at back be because been before being best big
    both but by can city come could day did do does down each even first for from front game get give go
    good great guard had has have he her here him his home house how i if in into is it its just king
    know last life like line little long lotus made make man many may me more most much must my name
    never new next no not now number of off old on one only or other our out over own part people place
    play point queen right said same school see she should show so some sound star state still such take
    team than that the their them then there these they thing think this those three through time to two
    under up us use valve very was way we well were what when where which while who will with word work
    world would year you your ms mr mrs dr sir
    """.split()  # noqa: SIM905 (a word list reads better as text)
)


@lru_cache(maxsize=4096)
def _word_pattern(name: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w)", re.IGNORECASE)


def mentions(text: str, name: str) -> bool:
    """Whether ``name`` occurs in ``text`` as a whole word, ignoring case."""
    return bool(name) and _word_pattern(name).search(text) is not None


def alias_risk(alias: str) -> str | None:
    """Why ``alias`` would match unrelated text by accident, or None when it is safe enough.

    Risky: at most 2 characters ("US", "MP"); 3 characters unless an all-capital acronym ("Ron", "Tex",
    "M.P"; "NBA" is fine); a frequent English word ("apple").
    """
    core = alias.strip()
    if len(core) <= 2:
        return "at most 2 characters"
    if len(core) == 3 and not (core.isalpha() and core.isupper()):
        return "3 characters and not an all-capital acronym"
    if core.lower() in COMMON_WORDS:
        return "a common English word"
    return None


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def is_name_variant(alias: str, other: str) -> bool:
    """Whether ``alias`` looks like a variant of the multi-word name ``other`` ("Steven A. Ballmer" of
    "Steve Ballmer"): same last word, first words one a prefix of the other (initials excluded), and every
    word of ``other`` a prefix of some word of ``alias``."""
    a, o = words(alias), words(other)
    if len(a) < 2 or len(o) < 2 or a[-1] != o[-1]:
        return False
    first_a, first_o = a[0], o[0]
    if len(first_a) < 2 or len(first_o) < 2:
        return False
    if not (first_a.startswith(first_o) or first_o.startswith(first_a)):
        return False
    return all(any(w.startswith(x) for w in a) for x in o)
