"""The JSON Schemas in ``spec/schemas/``: registry, validators, and what is derived from them.

The schemas are the single source of truth for the dataset's shape: rows are validated against them, the
dataset card's ``dataset_info`` features and its field tables are generated from them.

Beyond draft 2020-12 the schemas use one keyword of their own, ``x-equalLength``: a list of property names
whose array values must all have the same length (the parallel lists of a chain). Standard validators
ignore it; :func:`validator` enforces it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin

import jsonschema
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir

SCHEMA_BASE = "https://knowgic.org/schemas/"

# Row schema of each dataset config.
CONFIG_SCHEMAS: dict[str, str] = {"chains": "case", "edits": "edit", "facts": "fact"}
"""The configs of a version's content hash."""
DERIVED_CONFIG_SCHEMAS: dict[str, str] = {"ripple": "ripple"}
"""Configs built from the hashed ones and a spec table, outside the content hash (``version.json`` records
their own hash): adding one leaves a published version's hash as it was."""
ROW_SCHEMAS: dict[str, str] = {**CONFIG_SCHEMAS, **DERIVED_CONFIG_SCHEMAS}
"""Every config a version folder may hold, with its row schema."""


def schemas_dir() -> Path:
    return spec_dir() / "schemas"


def schema_path(name: str) -> Path:
    return schemas_dir() / f"{name}.schema.json"


@cache
def _read_schemas() -> dict[str, dict[str, Any]]:
    """Every top-level ``spec/schemas/*.schema.json`` by short name (``case``, ``chain``, ...)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(schemas_dir().glob("*.schema.json")):
        try:
            out[path.name.removesuffix(".schema.json")] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KnowgicError(f"cannot read JSON Schema {path}: {exc}") from None
    return out


def load_schema(name: str) -> dict[str, Any]:
    """The schema ``spec/schemas/<name>.schema.json`` (``name`` without the suffix)."""
    schemas = _read_schemas()
    if name not in schemas:
        raise KnowgicError(f"unknown schema {name!r}; known: {', '.join(sorted(schemas))}")
    return schemas[name]


def _without_dialect(schema: dict[str, Any]) -> dict[str, Any]:
    # jsonschema picks the validator class from "$schema" when it follows a $ref into another file, which
    # would swap our extended class for the stock one (dropping x-equalLength); every file is draft
    # 2020-12, so the registry states the dialect instead.
    return {k: v for k, v in schema.items() if k != "$schema"}


@cache
def schema_registry() -> Registry:
    """A :mod:`referencing` registry of every schema by its ``$id``, so ``$ref``s between files resolve."""
    resources = [
        (schema["$id"], Resource.from_contents(_without_dialect(schema), default_specification=DRAFT202012))
        for schema in _read_schemas().values()
        if "$id" in schema
    ]
    return Registry().with_resources(resources)


def _equal_length(
    validator: Any, fields: list[str], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    lengths = {f: len(instance[f]) for f in fields if isinstance(instance.get(f), list)}
    if len(set(lengths.values())) > 1:
        got = ", ".join(f"{f}={n}" for f, n in lengths.items())
        yield ValidationError(f"expected lists {', '.join(fields)} of equal length, got {got}")


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"x-equalLength": _equal_length})


_ANNOTATIONS = ("description", "title", "$comment")


def inline_refs(schema: Any, base: str) -> Any:
    """``schema`` with every ``$ref`` replaced by its target (resolved through the registry), recursively.

    Validation gives the same verdicts and instance paths; it is several times faster because no reference
    is looked up per row. The schemas have no recursive references, so this terminates.
    """
    if isinstance(schema, list):
        return [inline_refs(item, base) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    node = {k: v for k, v in schema.items() if k not in ("$schema", "$id", "$defs")}
    ref = node.pop("$ref", None)
    out = {
        k: inline_refs(v, base) if k not in ("properties", "enum", "const") else v for k, v in node.items()
    }
    if "properties" in node:
        out["properties"] = {k: inline_refs(v, base) for k, v in node["properties"].items()}
    if ref is None:
        return out
    resolved = schema_registry().resolver(base_uri=base).lookup(ref)
    target = inline_refs(resolved.contents, urldefrag(urljoin(base, ref)).url)
    if not isinstance(target, dict) or set(target) & (set(out) - set(_ANNOTATIONS)):
        return {**out, "allOf": [*out.get("allOf", []), target]}
    return {**target, **out}  # the referring node's own description wins


@cache
def validator(name: str) -> Any:
    """A draft 2020-12 validator (plus ``x-equalLength``) for the schema ``name``, references inlined."""
    schema = load_schema(name)
    return _Validator(inline_refs(schema, schema["$id"]), registry=schema_registry())


def resolve(schema: Mapping[str, Any], base: str) -> tuple[dict[str, Any], str]:
    """Follow ``$ref`` (and merge ``allOf`` members) until a schema with content; returns it and its base."""
    merged: dict[str, Any] = {}
    stack: list[tuple[Mapping[str, Any], str]] = [(schema, base)]
    out_base = base
    while stack:
        node, node_base = stack.pop(0)
        if "$ref" in node:
            resolved = schema_registry().resolver(base_uri=node_base).lookup(node["$ref"])
            target_base = urldefrag(urljoin(node_base, node["$ref"])).url
            stack.insert(0, (resolved.contents, target_base))
            out_base = target_base
        for member in node.get("allOf", ()):
            stack.append((member, node_base))
        for key, value in node.items():
            if key in ("$ref", "allOf"):
                continue
            if key == "properties" and key in merged:
                merged[key] = {**value, **merged[key]}  # the first (outermost) definition wins
            else:
                merged.setdefault(key, value)
    return merged, out_base


# --- features for the dataset card ---------------------------------------------------------------


@dataclass(frozen=True)
class FieldDoc:
    """One row of a dataset card's field table."""

    name: str
    type: str
    description: str


def _type_of(schema: Mapping[str, Any], base: str) -> tuple[str, dict[str, Any], str]:
    node, node_base = resolve(schema, base)
    kind = node.get("type")
    if isinstance(kind, list) and len([k for k in kind if k != "null"]) == 1:
        kind = next(k for k in kind if k != "null")  # a nullable field: every dataset feature is nullable
    if kind is None and "anyOf" in node:
        raise KnowgicError("a dataset feature cannot be derived from a schema with anyOf")
    return str(kind), node, node_base


def features_from_schema(
    name: str, present: set[str] | None = None
) -> Any:  # -> datasets.Features; typed loosely so importing this module stays cheap
    """:class:`datasets.Features` for rows of schema ``name``.

    ``present``: the top-level properties the data actually has (optional ones absent from a version are
    left out, so the declared features match the files); default all required properties.
    """
    import datasets

    schema = load_schema(name)
    base = schema["$id"]

    def convert(node_schema: Mapping[str, Any], node_base: str) -> Any:
        kind, node, nb = _type_of(node_schema, node_base)
        if kind == "string":
            return datasets.Value("string")
        if kind == "integer":
            return datasets.Value("int64")
        if kind == "boolean":
            return datasets.Value("bool")
        if kind == "number":
            return datasets.Value("float64")
        if kind == "array":
            return datasets.List(convert(node.get("items", {}), nb))
        if kind == "object":
            props = node.get("properties", {})
            return {key: convert(sub, nb) for key, sub in props.items()}
        raise KnowgicError(f"schema {name}: cannot derive a dataset feature from type {kind!r}")

    root, root_base = resolve(schema, base)
    keep = present if present is not None else set(root.get("required", ()))
    props = root.get("properties", {})
    unknown = keep - set(props)
    if unknown:
        raise KnowgicError(f"schema {name} has no properties {sorted(unknown)}")
    return datasets.Features({key: convert(sub, root_base) for key, sub in props.items() if key in keep})


def yaml_features(name: str, present: set[str] | None = None) -> list[dict[str, Any]]:
    """The ``dataset_info.features`` list of a dataset card (the YAML form of :func:`features_from_schema`),
    computed without importing :mod:`datasets`."""
    schema = load_schema(name)

    def convert(node_schema: Mapping[str, Any], node_base: str) -> dict[str, Any]:
        kind, node, nb = _type_of(node_schema, node_base)
        scalar = {"string": "string", "integer": "int64", "boolean": "bool", "number": "float64"}
        if kind in scalar:
            return {"dtype": scalar[kind]}
        if kind == "array":
            inner = convert(node.get("items", {}), nb)
            return {"list": inner.get("dtype", inner.get("struct", inner))}
        if kind == "object":
            return {
                "struct": [{"name": k, **convert(sub, nb)} for k, sub in node.get("properties", {}).items()]
            }
        raise KnowgicError(f"schema {name}: cannot derive a dataset feature from type {kind!r}")

    root, root_base = resolve(schema, schema["$id"])
    keep = present if present is not None else set(root.get("required", ()))
    return [
        {"name": k, **convert(sub, root_base)} for k, sub in root.get("properties", {}).items() if k in keep
    ]


def field_docs(name: str, present: set[str] | None = None) -> list[FieldDoc]:
    """The field table of schema ``name`` (nested fields dotted, list items as ``[]``), from descriptions."""
    schema = load_schema(name)
    root, root_base = resolve(schema, schema["$id"])
    keep = present if present is not None else set(root.get("required", ()))
    docs: list[FieldDoc] = []

    def walk(prefix: str, node_schema: Mapping[str, Any], node_base: str, description: str) -> None:
        kind, node, nb = _type_of(node_schema, node_base)
        desc = description or str(node.get("description", ""))
        if kind == "array":
            item_kind, item, ib = _type_of(node.get("items", {}), nb)
            if item_kind == "object":
                docs.append(FieldDoc(prefix, "list of objects", desc))
                for key, sub in item.get("properties", {}).items():
                    walk(f"{prefix}[].{key}", sub, ib, str(sub.get("description", "")))
                return
            docs.append(FieldDoc(prefix, f"list of {item_kind}", desc))
            return
        if kind == "object":
            docs.append(FieldDoc(prefix, "object", desc))
            for key, sub in node.get("properties", {}).items():
                walk(f"{prefix}.{key}", sub, nb, str(sub.get("description", "")))
            return
        docs.append(FieldDoc(prefix, kind, desc))

    for key, sub in root.get("properties", {}).items():
        if key in keep:
            walk(key, sub, root_base, str(sub.get("description", "")))
    return docs
