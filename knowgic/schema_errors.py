"""JSON Schema errors in words: which place of a document (its JSON pointer) breaks the schema, and what
the schema expected there.

One formatter for every document the package validates (dataset rows, alias maps, results documents,
hparams, built rows): :func:`reportable` picks the errors worth reporting, :func:`explain` says what was
expected, :func:`error_lines` writes them as ``"<JSON pointer>: <what was expected>"``. Depends on
``jsonschema`` only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema.exceptions import ValidationError

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def short(value: Any, limit: int = 60) -> str:
    """``value`` quoted briefly: a string by its repr, anything else as JSON, cut to ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _value(value: Any) -> str:
    """`` <value>`` for a scalar worth showing, empty for null, objects and arrays."""
    return f" {short(value)}" if isinstance(value, str | int | float) and not isinstance(value, bool) else ""


def json_type(value: Any) -> str:
    """The JSON type of a parsed value (``object``, ``array``, ``string``...)."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def json_pointer(path: Iterable[Any]) -> str:
    """The JSON pointer (RFC 6901) of a path; ``""`` for the document itself."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _as_clause(description: str) -> str:
    """A field's description inside a sentence: "Version of X." -> "version of X" (an acronym kept)."""
    text = description.strip().rstrip(".")
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        text = text[0].lower() + text[1:]
    return text


def explain(error: ValidationError) -> str:
    """What the schema expected, in words."""
    kind, value, inst, schema = error.validator, error.validator_value, error.instance, error.schema
    desc = schema.get("description") if isinstance(schema, Mapping) else None
    if kind == "type":
        expected = " or ".join(value) if isinstance(value, list) else value
        article = "an" if str(expected)[0] in "aeiou" else "a"
        return f"expected {article} {expected}, got {json_type(inst)}{_value(inst)}"
    if kind == "required":
        # one error per missing property; its name is the quoted part of the message
        match = re.match(r"^'(.*)' is a required property$", error.message)
        missing = (
            [match.group(1)] if match else [k for k in value if isinstance(inst, dict) and k not in inst]
        )
        return f"missing required field {', '.join(repr(k) for k in missing)}"
    if kind == "additionalProperties" and isinstance(inst, dict):
        allowed = set(schema.get("properties", {}))
        extra = sorted(k for k in inst if k not in allowed)
        hint = f" (allowed: {', '.join(sorted(allowed))})" if allowed else ""
        return f"unknown field {', '.join(repr(k) for k in extra)}{hint}"
    if kind == "minLength":
        return "expected a non-empty string" if value == 1 else f"expected at least {value} characters"
    if kind == "pattern":
        what = _as_clause(desc) if desc else f"a string matching {value}"
        return f"expected {what}, got {short(inst)}"
    if kind == "minItems":
        return f"expected at least {value} item{'s' if value != 1 else ''}, got {len(inst)}"
    if kind == "maxItems":
        return f"expected at most {value} item{'s' if value != 1 else ''}, got {len(inst)}"
    if kind == "uniqueItems":
        return "expected distinct items, got repeats"
    if kind == "minimum":
        return f"expected a number >= {value}, got {short(inst)}"
    if kind == "exclusiveMinimum":
        return f"expected a number > {value}, got {short(inst)}"
    if kind == "maximum":
        return f"expected a number <= {value}, got {short(inst)}"
    if kind == "exclusiveMaximum":
        return f"expected a number < {value}, got {short(inst)}"
    if kind == "enum":
        return f"expected one of {', '.join(json.dumps(v) for v in value)}, got {short(inst)}"
    if kind in ("anyOf", "oneOf"):
        return f"expected {desc or 'one of the allowed shapes'}, got {json_type(inst)}{_value(inst)}"
    if kind == "x-equalLength":
        return error.message
    return f"{error.message}" + (f" (expected {desc})" if desc else "")


def flatten(error: ValidationError) -> list[ValidationError]:
    """The errors to report for ``error``: for ``anyOf``/``oneOf``, those of the one branch whose type fits
    the instance (a list of aliases with an empty string is reported at that string, not as "matches no
    shape"); else the error itself."""
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        return [error]
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    fitting = [
        errs
        for errs in branches.values()
        if not any(e.validator == "type" and not e.relative_path for e in errs)
    ]
    if len(fitting) != 1:
        return [error]
    return [f for sub in fitting[0] for f in flatten(sub)]


def reportable(errors: Iterable[ValidationError]) -> list[ValidationError]:
    """Flattened and sorted by place; a ``pattern`` error is dropped where the same string already fails
    ``minLength``."""
    flat = sorted(
        (f for e in errors for f in flatten(e)), key=lambda e: (list(map(str, e.absolute_path)), e.validator)
    )
    too_short = {tuple(e.absolute_path) for e in flat if e.validator == "minLength"}
    return [e for e in flat if not (e.validator == "pattern" and tuple(e.absolute_path) in too_short)]


def error_line(error: ValidationError) -> str:
    """``/per_edit/3/efficacy: expected a number, got string 'x'`` (``/`` for the document itself)."""
    return f"{json_pointer(error.absolute_path) or '/'}: {explain(error)}"


def error_lines(errors: Iterable[ValidationError]) -> list[str]:
    """The :func:`reportable` errors as :func:`error_line` lines (empty when there are none)."""
    return [error_line(e) for e in reportable(errors)]


def first_error_line(errors: Iterable[ValidationError]) -> str | None:
    """The first of :func:`error_lines`, or None for a valid document."""
    lines = error_lines(errors)
    return lines[0] if lines else None
