"""Loading a causal LM: an offline name, a local folder or GGUF file, or a Hugging Face hub id.

Resolution order for ``name_or_path``: an offline name (:mod:`knowgic.models.registry`), then an existing
path (a transformers folder, a ``.gguf`` file, or a folder holding exactly one ``.gguf``), then a hub id.
GGUF files are dequantized once and cached as safetensors (:mod:`knowgic.models.gguf`).

``revision`` in the result says exactly which weights were loaded: the hub commit for hub models, the
GGUF file's sha256 for GGUF files, and for local folders a sha256 over the weight files
(:func:`knowgic.models.hashing.folder_sha256`). Passed in, it selects a hub revision, or pins local weights
(a prefix of at least 7 hex digits must match, else :class:`~knowgic.errors.KnowgicError`).
"""

from __future__ import annotations

import difflib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from knowgic.errors import KnowgicError
from knowgic.models import gguf, registry
from knowgic.models.base import LoadedModel
from knowgic.models.hashing import folder_sha256, sha256_file
from knowgic.models.hub import hub_problem

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

# Source kinds recorded in ``LoadedModel.info["source"]``.
OFFLINE_TINY, OFFLINE_GGUF, LOCAL_GGUF, LOCAL_FOLDER, HUB = (
    "offline-tiny",
    "offline-gguf",
    "gguf",
    "folder",
    "hub",
)


@dataclass(frozen=True)
class ModelSource:
    """Where a model name points: its kind, the local path (folder or GGUF file) and the offline entry."""

    kind: str
    name: str
    path: Path | None = None
    offline: registry.OfflineModel | None = None


def parse_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise KnowgicError(f"unknown dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def check_device_name(device: str) -> None:
    """``device`` names a device (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``), whatever this machine has."""
    try:
        if device != "auto":
            torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise KnowgicError(f"unknown device {device!r}: expected auto, cpu, cuda, cuda:N or mps") from None


def resolve_device(device: str) -> torch.device:
    """``auto`` = cuda when available, else cpu; ``cpu``, ``cuda``, ``cuda:N`` and ``mps`` are checked."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise KnowgicError(f"unknown device {device!r}: expected auto, cpu, cuda, cuda:N or mps") from None
    if resolved.type == "cpu":
        return resolved
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise KnowgicError(f"device {device!r} asked for, but CUDA is not available on this machine")
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise KnowgicError(f"device {device!r} asked for, but this machine has {count} CUDA device(s)")
        return resolved
    if resolved.type == "mps":
        if not torch.backends.mps.is_available():
            raise KnowgicError(f"device {device!r} asked for, but MPS is not available on this machine")
        return resolved
    raise KnowgicError(f"unsupported device {device!r}: expected auto, cpu, cuda, cuda:N or mps")


def _looks_like_path(name: str) -> bool:
    """Strings that cannot be hub ids (``owner/name`` or ``name``), so a missing one is a missing path."""
    return (
        name.startswith(("/", "./", "../", "~"))
        or name in (".", "..")
        or "\\" in name
        or name.count("/") > 1
        or name.lower().endswith(".gguf")
    )


def _offline_hint() -> str:
    return f"offline names: {', '.join(registry.offline_names())}"


def _first_line(exc: BaseException, limit: int = 240) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def resolve_source(name_or_path: str) -> ModelSource:
    """Classify ``name_or_path`` without loading anything (hub ids are only checked when loaded)."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise KnowgicError(f"model name must be a non-empty string, got {name_or_path!r}; {_offline_hint()}")
    name = name_or_path.strip()
    entry = registry.get_offline_model(name)
    if entry is not None:
        return ModelSource(OFFLINE_TINY if entry.kind == registry.TINY else OFFLINE_GGUF, name, offline=entry)
    path = Path(name).expanduser()
    if path.exists():
        return _local_source(name, path)
    if _looks_like_path(name):
        raise KnowgicError(f"model {name!r}: no such file or folder; {_offline_hint()}")
    _check_hub_id(name)
    return ModelSource(HUB, name)


def _check_hub_id(name: str) -> None:
    """Refuse, without going to the hub, a name that cannot be a hub id or looks like a mistyped offline name.

    A name without an owner (``knowgic-tinny``) that is close to an offline name is taken for a typo: hub ids
    without an owner are the hub's few legacy models (``gpt2``), none of them near an offline name.
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        raise KnowgicError(
            f"model {name!r} is not an offline name, an existing path or a possible hub id "
            f"({_first_line(exc)}); {_offline_hint()}"
        ) from None
    if "/" not in name:
        close = difflib.get_close_matches(name.lower(), registry.offline_names(), n=1, cutoff=0.75)
        if close:
            raise KnowgicError(
                f"unknown model {name!r}: did you mean {close[0]!r}? ({_offline_hint()}; a hub model is named "
                "OWNER/NAME)"
            )


def _local_source(name: str, path: Path) -> ModelSource:
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise KnowgicError(f"model {name!r}: a file must be a .gguf; otherwise give the model's folder")
        return ModelSource(LOCAL_GGUF, name, path=path.resolve())
    if (path / "config.json").is_file():
        return ModelSource(LOCAL_FOLDER, name, path=path.resolve())
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSource(LOCAL_GGUF, name, path=ggufs[0].resolve())
    if ggufs:
        listed = ", ".join(p.name for p in ggufs)
        raise KnowgicError(
            f"model {name!r}: folder holds several GGUF files ({listed}); give one file's path"
        )
    raise KnowgicError(f"model {name!r}: folder has no config.json and no .gguf file; not a model folder")


def _check_pin(revision: str | None, actual: str, name: str) -> None:
    if revision is None:
        return
    pin = revision.strip().lower()
    if len(pin) < 7 or not actual.startswith(pin):
        raise KnowgicError(
            f"model {name!r}: revision {revision!r} asked for, but the local weights have sha256 {actual}"
        )


def _from_pretrained(where: str, torch_dtype: torch.dtype, revision: str | None, progress: bool, name: str):
    """Model and tokenizer from a folder or hub id; any failure becomes a one-line KnowgicError."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"revision": revision} if revision is not None else {}
    with gguf.transformers_progress(progress):
        try:
            config = AutoConfig.from_pretrained(where, **kwargs)
        except Exception as exc:  # hub and config errors come in many types; all mean "cannot load this name"
            if Path(where).is_dir():
                raise KnowgicError(
                    f"model {name!r}: cannot read {where}/config.json: {_first_line(exc)}"
                ) from None
            raise KnowgicError(
                f"model {name!r}: loading it from the Hugging Face hub failed ({_first_line(exc)}); "
                f"{_offline_hint()}"
            ) from None
        try:
            model = AutoModelForCausalLM.from_pretrained(
                where, config=config, **gguf.dtype_kwargs(torch_dtype), **kwargs
            )
        except ValueError as exc:
            raise KnowgicError(
                f"model {name!r} is not a causal LM transformers can load: {_first_line(exc)}"
            ) from None
        except (OSError, RuntimeError, KeyError, ImportError) as exc:
            raise KnowgicError(f"cannot load model {name!r}: {_first_line(exc)}") from None
        try:
            tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        except Exception as exc:  # as above: tokenizer loading fails in many ways
            raise KnowgicError(f"cannot load the tokenizer of model {name!r}: {_first_line(exc)}") from None
    return model, tokenizer


def _hub_commit(name: str, revision: str | None, config: Any) -> str:
    """The commit the hub files came from: the config's record (transformers 4.x) or the snapshot folder."""
    commit = getattr(config, "_commit_hash", None)
    if isinstance(commit, str) and commit:
        return commit
    if (
        revision is not None
        and len(revision) == 40
        and all(c in "0123456789abcdef" for c in revision.lower())
    ):
        return revision.lower()
    try:
        from huggingface_hub import hf_hub_download

        cached = Path(hf_hub_download(name, "config.json", revision=revision))
        parts = cached.parts
        return parts[parts.index("snapshots") + 1]
    except Exception:  # no snapshot layout (custom cache); the name and requested revision still identify it
        return revision or "unknown"


def _prepare_tokenizer(tokenizer: Any, model: torch.nn.Module, name: str) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise KnowgicError(
            f"model {name!r}: only a slow tokenizer ({type(tokenizer).__name__}) is available; KnowGIC needs a "
            "fast (tokenizers-backed) one for offsets and batching"
        )
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.unk_token or tokenizer.bos_token
        if fallback is None:
            raise KnowgicError(f"model {name!r}: tokenizer has no pad, eos, unk or bos token to pad with")
        tokenizer.pad_token = fallback
    generation = getattr(model, "generation_config", None)
    if generation is not None and generation.pad_token_id is None:
        generation.pad_token_id = tokenizer.pad_token_id


def _family(model: torch.nn.Module) -> str:
    from knowgic.editors.arch import detect_family

    try:
        return detect_family(model)
    except KnowgicError:
        return str(getattr(model.config, "model_type", "unknown"))


def _is_chat(
    tokenizer: Any, source: ModelSource, chat: bool | None, gguf_info: dict[str, Any] | None, config: Any
) -> bool:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat is not None:
        if chat and not has_template:
            raise KnowgicError(
                f"model {source.name!r}: chat=True asked for, but its tokenizer has no chat template"
            )
        return chat
    if not has_template:
        return False
    if source.offline is not None:
        return source.offline.is_chat
    if gguf_info is not None:
        names = (gguf_info.get("name"), gguf_info.get("finetune"), gguf_info.get("basename"))
        file_name = source.path.name if source.path is not None else ""
        return any(gguf.looks_instruct(t) for t in (*names, file_name))
    texts = (source.name, str(getattr(config, "_name_or_path", "") or ""))
    return any(gguf.looks_instruct(os.path.basename(t.rstrip("/"))) for t in texts)


def load_model(
    name_or_path: str,
    dtype: str = "float32",
    device: str = "auto",
    revision: str | None = None,
    progress: bool = True,
    *,
    chat: bool | None = None,
) -> LoadedModel:
    """Load a causal LM with its tokenizer, in eval mode, on ``device`` in ``dtype``.

    ``chat`` overrides the chat/base decision (by default: the tokenizer has a chat template and the model
    is instruction-tuned, judged by the offline registry, the GGUF header or the model's name).
    """
    started = time.perf_counter()
    torch_dtype = parse_dtype(dtype)
    target = resolve_device(device)
    source = resolve_source(name_or_path)
    info: dict[str, Any] = {"source": source.kind}
    gguf_info: dict[str, Any] | None = None

    if source.kind == HUB:
        problem = hub_problem(source.name, revision)  # not cached and no network: one line, no retries
        if problem is not None:
            raise KnowgicError(problem)
        model, tokenizer = _from_pretrained(source.name, torch_dtype, revision, progress, source.name)
        rev = _hub_commit(source.name, revision, model.config)
        info["revision_kind"] = "hub-commit"
    elif source.kind in (OFFLINE_GGUF, LOCAL_GGUF):
        if source.path is not None:
            # A file that is not GGUF at all deserves that answer, not advice to install a reader for it.
            gguf.read_gguf_info(source.path)
        gguf.require_gguf_support()
        if source.offline is not None:
            entry = source.offline
            rev = registry.gguf_sha256(entry, progress=progress)
            _check_pin(revision, rev, source.name)
            cache = gguf.ensure_dequantized(
                lambda: registry.gguf_file(entry, progress=progress), rev, progress
            )
        else:
            assert source.path is not None
            rev = sha256_file(source.path, progress=progress)
            _check_pin(revision, rev, source.name)
            cache = gguf.ensure_dequantized(source.path, rev, progress=progress)
        model, tokenizer = _from_pretrained(str(cache.folder), torch_dtype, None, progress, source.name)
        meta = gguf.cached_info(cache.folder)
        gguf_info = meta.get("gguf") if isinstance(meta.get("gguf"), dict) else None
        info.update(
            revision_kind="sha256-gguf",
            gguf_file=meta.get("source_name"),
            gguf=gguf_info,
            cache_folder=str(cache.folder),
            cache_built=cache.built,
        )
        if cache.built:
            info["cache_build_seconds"] = round(cache.seconds, 1)
            info["cache_rebuild_reason"] = cache.reason
    else:
        folder = registry.tiny_folder() if source.kind == OFFLINE_TINY else source.path
        assert folder is not None
        rev = folder_sha256(folder, progress=progress)
        _check_pin(revision, rev, source.name)
        model, tokenizer = _from_pretrained(str(folder), torch_dtype, None, progress, source.name)
        info.update(revision_kind="sha256-weights", path=str(folder))

    model.to(target)
    model.eval()
    _prepare_tokenizer(tokenizer, model, source.name)
    if source.offline is not None:
        info.update(display_name=source.offline.display_name, upstream=source.offline.upstream)
    first = next(model.parameters(), None)
    info.update(
        n_parameters=sum(p.numel() for p in model.parameters()),
        load_seconds=round(time.perf_counter() - started, 2),
        transformers_version=_transformers_version(),
    )
    # Editors key cached key statistics by the model's identity (knowgic.editors.layer_stats).
    model.config._knowgic_revision = rev
    model.config._knowgic_model_id = source.name
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        model_id=source.name,
        revision=rev,
        family=_family(model),
        dtype=dtype,
        device=str(first.device) if first is not None else str(target),
        is_chat=_is_chat(tokenizer, source, chat, gguf_info, model.config),
        info=info,
    )


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)
