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
import yaml

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir

HPARAMS_DIR = Path(__file__).resolve().parent


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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KnowgicError(f"hparams file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowgicError(f"cannot read hparams file {path}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KnowgicError(f"hparams file {path} is not valid YAML: {exc}".replace("\n", " ")) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise KnowgicError(
            f"hparams file {path}: expected a mapping of keys to values, got {type(data).__name__}"
        )
    return data


def validate_hparams(
    hparams: Mapping[str, Any], method: str, where: str, editor_schema: Mapping[str, Any] | None = None
) -> None:
    schema = schema_for(method, editor_schema)
    if schema is None:
        return
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(dict(hparams)), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        pointer = "/" + "/".join(str(p) for p in first.absolute_path)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise KnowgicError(f"hparams {where} at {pointer}: {first.message}{more}")


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
        unknown = [k for k in hparams if k not in known]
        if unknown:
            key = str(unknown[0])
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(known))}"
            more = f" (and {len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""
            raise KnowgicError(f"hparams {where}: unknown key {key!r}{more}; {hint}")
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
