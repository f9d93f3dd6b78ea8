"""Whether a model name can be loaded here, checked without loading it (a preflight of every command).

    name ──resolve_source (offline name, path or possible hub id; "did you mean" for a typo)
         ├─ offline GGUF name: its package is installed, and gguf and accelerate (the models extra)
         ├─ local GGUF file: gguf and accelerate; a local folder: its weight files
         ├─ hub id: in the local Hugging Face cache; else, with the network off (HF_HUB_OFFLINE), refused
         │          at once; else asked of the hub once, without retries: no such model, or no network
         └─> the ModelSource, or one KnowgicError line naming what is missing

:func:`model_family` tells the architecture family where it is known before loading (offline names, local
folders, cached hub configs), so that a missing hparams file is found before the model loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.models import gguf, registry
from knowgic.models.hashing import required_weight_files
from knowgic.models.hub import CONFIG_FILE, cached_hub_file, hub_problem
from knowgic.models.loading import HUB, LOCAL_FOLDER, LOCAL_GGUF, OFFLINE_GGUF, ModelSource, resolve_source


def check_model(name_or_path: str, revision: str | None = None, ask_hub: bool = True) -> ModelSource:
    """The source of ``name_or_path`` once everything its loading needs is here; else one line saying
    what is missing (see the module's docstring)."""
    source = resolve_source(name_or_path)
    if (
        source.offline is not None
        and source.kind == OFFLINE_GGUF
        and not registry.is_installed(source.offline)
    ):
        raise registry.missing_package(source.offline)
    if source.kind in (OFFLINE_GGUF, LOCAL_GGUF):
        gguf.require_gguf_support()
    if source.kind == LOCAL_FOLDER and source.path is not None:
        required_weight_files(source.path)
    if source.kind == HUB:
        problem = hub_problem(source.name, revision, ask_hub)
        if problem is not None:
            raise KnowgicError(problem)
    return source


def _config_family(config: Path) -> str | None:
    """The architecture family a ``config.json`` names (its ``model_type``), or None when unreadable."""
    try:
        data: Any = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str):
        return None
    from knowgic.editors.arch import ARCHITECTURES, MODEL_TYPES

    key = MODEL_TYPES.get(model_type)
    return ARCHITECTURES[key].family if key is not None else model_type


def model_family(source: ModelSource) -> str | None:
    """The family the loaded model will have (``gpt2``, ``llama``, ...) where it is known without loading:
    an offline name's, a local folder's or a cached hub model's ``config.json``; None otherwise (a GGUF
    file's is known only once it is read)."""
    if source.offline is not None:
        return source.offline.family
    if source.kind == LOCAL_FOLDER and source.path is not None:
        return _config_family(source.path / CONFIG_FILE)
    if source.kind == HUB:
        cached = cached_hub_file(source.name)
        return _config_family(cached) if cached is not None else None
    return None
