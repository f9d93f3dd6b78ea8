"""Hparams: YAML per method and model (or family), each validated against the method's JSON Schema.

Lookup for ``--editor M`` on a model with key ``K`` (offline name or hub id's last part, lower-cased) and
family ``F``: ``--hparams FILE`` if given; else ``knowgic/editors/hparams/M/K.yaml``; else ``M/F.yaml``.
Schemas live in ``spec/schemas/hparams/M.schema.json`` (or on the editor class as ``hparams_schema``);
an unknown key is an error, both when a file is loaded and when an editor is built from a dict in Python
(:func:`check_editor_hparams`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.clip import clip
from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir
from knowgic.schema_errors import explain, flatten, json_pointer
from knowgic.yamlfile import read_yaml

HPARAMS_DIR = Path(__file__).resolve().parent
MAX_PROBLEMS_SHOWN = 10
"""Schema problems an error lists before it says how many more there are."""


# Hub names of the models the shipped files were written for -> the file key they use. The papers' values
# hold for the instruct variants too (same weights' shapes, same layers hold the facts).
MODEL_KEY_ALIASES = {
    "meta-llama-3-8b": "llama-3-8b",
    "meta-llama-3-8b-instruct": "llama-3-8b",
    "llama-3-8b-instruct": "llama-3-8b",
    "qwen2.5-7b-instruct": "qwen2.5-7b",
    "gemma-3-270m": "gemma3-270m",
    "gemma-3-270m-it": "gemma3-270m",
    "smollm2-135m-instruct": "smollm2-135m",
}


def model_key(model_id: str) -> str:
    """``meta-llama/Meta-Llama-3-8B`` -> ``llama-3-8b``; ``/path/to/gpt2-xl`` -> ``gpt2-xl``."""
    key = model_id.rstrip("/").split("/")[-1].lower()
    return MODEL_KEY_ALIASES.get(key, key)


def schema_for(method: str, editor_schema: Mapping[str, Any] | None = None) -> Mapping[str, Any] | None:
    if editor_schema is not None:
        return editor_schema
    path = spec_dir() / "schemas" / "hparams" / f"{method}.schema.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return None


def read_hparams_file(path: Path) -> dict[str, Any]:
    data = read_yaml(path, "hparams file")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise KnowgicError(
            f"hparams file {path}: expected a mapping of keys to values, got {type(data).__name__}"
        )
    return data


def _listed(problems: list[str]) -> str:
    """``problems`` joined into one line, at most :data:`MAX_PROBLEMS_SHOWN` of them, each clipped."""
    shown = "; ".join(clip(p) for p in problems[:MAX_PROBLEMS_SHOWN])
    rest = len(problems) - MAX_PROBLEMS_SHOWN
    return shown + (f"; and {rest} more" if rest > 0 else "")


def hparams_problems(
    hparams: Mapping[str, Any], method: str, editor_schema: Mapping[str, Any] | None = None
) -> list[str]:
    """Every way ``hparams`` breaks the method's schema, as ``"<JSON pointer>: <message>"``, in key order."""
    schema = schema_for(method, editor_schema)
    if schema is None:
        return []
    validator = jsonschema.Draft202012Validator(schema)
    problems: list[tuple[list[str], str]] = []
    for error in (f for e in validator.iter_errors(dict(hparams)) for f in flatten(e)):
        path = [str(p) for p in error.absolute_path]
        if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
            # jsonschema reports all unknown keys of a mapping as one error; one per key, each with its
            # own pointer and the closest known key, says what to fix.
            known = [str(k) for k in error.schema.get("properties", {})]
            for key in (str(k) for k in error.instance if k not in known):
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(([*path, key], f"unknown key{hint}"))
            continue
        problems.append((path, explain(error)))
    order = {str(k): i for i, k in enumerate(hparams)}  # the file's order; problems of the whole first

    def position(problem: tuple[list[str], str]) -> tuple[int, list[str]]:
        path = problem[0]
        return (order.get(path[0], len(order)) if path else -1, path)

    return [f"{json_pointer(path) or '/'}: {message}" for path, message in sorted(problems, key=position)]


def validate_hparams(
    hparams: Mapping[str, Any], method: str, where: str, editor_schema: Mapping[str, Any] | None = None
) -> None:
    """Raise one line listing every schema problem of ``hparams`` (up to a cap), each with its pointer."""
    problems = hparams_problems(hparams, method, editor_schema)
    if len(problems) == 1:
        raise KnowgicError(f"hparams {where} at {clip(problems[0])}")
    if problems:
        raise KnowgicError(f"hparams {where} has {len(problems)} problems: {_listed(problems)}")


def check_editor_hparams(
    hparams: Mapping[str, Any], method: str, where: str, editor_schema: Mapping[str, Any] | None = None
) -> None:
    """What an editor checks when it is constructed: first that every key is one the schema knows (the error
    names the key and the closest known one), then the whole schema (:func:`validate_hparams`)."""
    schema = schema_for(method, editor_schema)
    if schema is None:
        return
    known = [str(k) for k in schema.get("properties", {})]
    if schema.get("additionalProperties") is False:
        unknown = [str(k) for k in hparams if k not in known]
        if len(unknown) == 1:
            key = unknown[0]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(known))}"
            raise KnowgicError(f"hparams {where}: unknown key {clip(key, 80)!r}; {hint}")
        if unknown:
            named = []
            for key in unknown:
                close = difflib.get_close_matches(key, known, n=1)
                named.append(f"{clip(key, 80)!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise KnowgicError(f"hparams {where}: {len(unknown)} unknown keys: {_listed(named)}")
    validate_hparams(hparams, method, where, editor_schema)


def find_default_hparams(method: str, model_id: str, family: str) -> Path | None:
    for key in (model_key(model_id), family):
        candidate = HPARAMS_DIR / method / f"{key}.yaml"
        if candidate.is_file():
            return candidate
    return None


def load_hparams(
    method: str,
    model_id: str,
    family: str,
    path: str | Path | None = None,
    editor_schema: Mapping[str, Any] | None = None,
    required: bool = True,
) -> tuple[dict[str, Any], str | None]:
    """Returns (hparams, source) where source is the file used (None when there is none)."""
    if path is not None:
        source = Path(path)
    else:
        source = find_default_hparams(method, model_id, family)
        if source is None:
            if not required:
                return {}, None
            raise KnowgicError(
                f"no hparams for editor {method!r} on model {model_id!r} (family {family!r}): looked for "
                f"{method}/{model_key(model_id)}.yaml and {method}/{family}.yaml in {HPARAMS_DIR}; "
                "pass --hparams FILE"
            )
    hparams = read_hparams_file(source)
    validate_hparams(hparams, method, str(source), editor_schema)
    return hparams, str(source)


def hparams_sha256(hparams: Mapping[str, Any]) -> str:
    canonical = json.dumps(dict(hparams), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
