"""knowgic.schema_errors: one line per reportable error, naming its JSON pointer and what was expected."""

from __future__ import annotations

import jsonschema

from knowgic.schema_errors import error_lines, first_error_line, json_pointer

SCHEMA = {
    "type": "object",
    "required": ["layers", "lr"],
    "additionalProperties": False,
    "properties": {
        "layers": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "lr": {"type": "number", "exclusiveMinimum": 0},
        "name": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
        "a/b": {"enum": ["x", "y"]},
    },
}


def _lines(document: object) -> list[str]:
    return error_lines(jsonschema.Draft202012Validator(SCHEMA).iter_errors(document))


def test_each_error_names_its_pointer_and_what_was_expected() -> None:
    lines = _lines({"layers": [1, -2, "x"], "lr": 0, "name": "", "a/b": "z", "extra": 1})
    assert lines == [
        "/: unknown field 'extra' (allowed: a/b, layers, lr, name)",
        '/a~1b: expected one of "x", "y", got \'z\'',
        "/layers/1: expected a number >= 0, got -2",
        "/layers/2: expected an integer, got string 'x'",
        "/lr: expected a number > 0, got 0",
        "/name: expected a non-empty string",  # the pattern error of the same empty string is left out
    ]


def test_a_missing_field_is_reported_at_the_document() -> None:
    assert _lines({"layers": []}) == ["/: missing required field 'lr'"]
    assert first_error_line(jsonschema.Draft202012Validator(SCHEMA).iter_errors([])) == (
        "/: expected an object, got array"
    )
    assert _lines({"layers": [0], "lr": 0.1}) == []


def test_pointers_follow_rfc_6901() -> None:
    assert json_pointer([]) == ""
    assert json_pointer(["per_edit", 3, "a/b~c"]) == "/per_edit/3/a~1b~0c"
