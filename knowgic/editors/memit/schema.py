"""MEMIT's hparams schema, and extending it for methods built on MEMIT (AlphaEdit, PRUNE, RECT, ...).

The schema file is ``spec/schemas/hparams/memit.schema.json`` (``additionalProperties: false``). A subclass
adds its own keys with :func:`extend_memit_schema` and uses the result as its editor's ``hparams_schema``
(or writes a schema file that copies MEMIT's ``properties`` and adds its own).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from knowgic.paths import spec_dir


def memit_schema() -> dict[str, Any]:
    """A fresh copy of MEMIT's hparams schema."""
    path = spec_dir() / "schemas" / "hparams" / "memit.schema.json"
    return json.loads(path.read_text(encoding="utf-8"))


def extend_memit_schema(
    properties: Mapping[str, Any],
    required: Sequence[str] = (),
    *,
    title: str | None = None,
    schema_id: str | None = None,
) -> dict[str, Any]:
    """MEMIT's schema plus ``properties`` (which may also override MEMIT's definitions) and ``required``."""
    schema = memit_schema()
    schema["properties"].update(copy.deepcopy(dict(properties)))
    schema["required"] = list(dict.fromkeys([*schema.get("required", []), *required]))
    schema.pop("$comment", None)
    if title is not None:
        schema["title"] = title
    if schema_id is not None:
        schema["$id"] = schema_id
    else:
        schema.pop("$id", None)
    return schema
