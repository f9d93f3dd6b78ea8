"""Answer matching for the generate/greedy protocols: whole words, case, punctuation, unicode."""

from __future__ import annotations

import pytest

from knowgic.scoring.matching import contains_answer, words


@pytest.mark.parametrize(
    ("text", "answers", "expected"),
    [
        ("He studied at Hogwarts.", ["Hogwarts"], True),
        ("he studied at HOGWARTS", ["Hogwarts"], True),  # case
        ("Hogwartsian traditions", ["Hogwarts"], False),  # word boundary (suffix)
        ("using the library", ["US"], False),  # "US" inside "using"
        ("born in the US.", ["US"], True),
        ("born in the U.S.", ["US"], True),  # abbreviation periods
        ("born in the US", ["U.S."], True),
        ("born in the USA", ["US"], False),
        ("Paris, France", ["Paris"], True),
        ("Paris...and Lyon", ["Paris"], True),
        ("Washington D.C.", ["Washington, DC"], True),
        ("O'Brien", ["O'Brien"], True),
        ("(Paris)", ["Paris"], True),
        ("Paris-based", ["Paris"], True),  # hyphen separates words
        ("Jean Paul Sartre", ["Jean-Paul Sartre"], True),
        ("Chelsea Clinton's daughter", ["Chelsea Clinton"], True),  # possessive
        ("Chelsea  Clinton", ["Chelsea Clinton"], True),  # extra space
        ("Chelsea\nClinton", ["Chelsea Clinton"], True),
        ("Clinton Chelsea", ["Chelsea Clinton"], False),  # order matters
        ("Chelsea Victoria Clinton", ["Chelsea Clinton"], False),  # contiguous words
        ("Zurich", ["Zürich"], True),  # accents
        ("ZÜRICH is big", ["zürich"], True),
        ("Straße", ["STRASSE"], True),  # casefold
        ("ＵＳ", ["US"], True),  # full-width (NFKC)
        ("Café", ["Cafe\u0301"], True),  # composed vs decomposed
        ("Москва — столица", ["москва"], True),  # Cyrillic
        ("Москвич", ["Москва"], False),
        ("首都是北京。", ["北京"], True),  # Han: no spaces between words
        ("Nothing here", ["Paris", "Hogwarts"], False),
        ("Ilvermorny School", ["Hogwarts", "Ilvermorny"], True),  # any alias
        ("anything", [""], False),  # an empty answer never matches
        ("...", ["..."], False),
        ("", ["Paris"], False),
        ("answer: 1,000 people", ["1,000"], True),
        ("answer: 11,000 people", ["1,000"], False),
    ],
)
def test_contains_answer(text, answers, expected):
    assert contains_answer(text, answers) is expected


def test_words_normalization():
    assert words("U.S. President O'Brien, Jean-Paul") == ["us", "president", "o", "brien", "jean", "paul"]
    assert words("Washington, D.C. St. Louis") == ["washington", "dc", "st", "louis"]
    assert words("北京 city") == ["北", "京", "city"]
    assert words("") == []
