"""GGUF files: their header metadata, and a cache of their dequantized weights as a transformers folder.

transformers loads a GGUF by dequantizing every tensor (``from_pretrained(folder, gguf_file=...)``, which
needs the ``gguf`` and ``accelerate`` packages); for Gemma 3 270M that takes tens of seconds to minutes on a
CPU, on every load. So the first load writes the dequantized model (float32, exact) with its tokenizer as a
safetensors folder under ``cache_dir()/gguf/<sha256 of the GGUF file>/`` and later loads read that folder.

The cache is written into a temporary folder and renamed into place only when complete; its metadata file
``knowgic-gguf.json`` (written last) records the source file's sha256 and the size and sha256 of every file
in the folder. A folder whose metadata is missing, unreadable, for another source, or whose files differ
from it is reported by :func:`check_cache` and rebuilt by :func:`ensure_dequantized`, never used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import mmap
import os
import re
import shutil
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.models.hashing import remember_sha256, sha256_file
from knowgic.paths import cache_dir

CACHE_FORMAT = 1
META_NAME = "knowgic-gguf.json"
MODELS_EXTRA_HINT = "pip install 'knowgic[models]' (or: pip install gguf accelerate)"

# GGUF value types (ggml's gguf.h): type id -> struct format of a scalar; 8 = string, 9 = array.
_SCALARS: dict[int, str] = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9
# Arrays longer than this (token lists, merges) are summarised by their length only.
_MAX_ARRAY = 64
_INSTRUCT = re.compile(r"instruct|chat|(^|[-_. /])(it|sft|dpo|rlhf)($|[-_. ])", re.IGNORECASE)


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF header says about its model (``general.*`` keys and the tokenizer's chat template)."""

    architecture: str
    name: str | None
    basename: str | None
    finetune: str | None
    size_label: str | None
    file_type: int | None
    tokenizer_model: str | None
    has_chat_template: bool
    tensor_count: int

    def looks_instruct(self, file_name: str = "") -> bool:
        """Whether the name, fine-tune tag or file name marks an instruction/chat-tuned model."""
        return any(looks_instruct(t) for t in (self.name, self.finetune, self.basename, file_name))


def looks_instruct(text: str | None) -> bool:
    """Whether a model name says instruction/chat tuning (``-Instruct``, ``-chat``, ``-it``, ``sft``, ...)."""
    return bool(text) and _INSTRUCT.search(text or "") is not None


class _Cursor:
    """Little-endian reads over a memory-mapped GGUF header."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buf):
            raise KnowgicError(f"{self.path}: truncated GGUF header")
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.unpack("Q")
        if self.pos + n > len(self.buf):
            raise KnowgicError(f"{self.path}: truncated GGUF header")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack("I"), self.unpack("Q")
            if count <= _MAX_ARRAY:
                return [self.value(etype) for _ in range(count)]
            if etype in _SCALARS:
                self.pos += count * struct.calcsize("<" + _SCALARS[etype])
            elif etype == _STRING:
                for _ in range(count):
                    n = self.unpack("Q")  # read first: it advances pos past the length prefix
                    self.pos += n
            else:
                for _ in range(count):
                    self.value(etype)
            return {"array_length": count}
        raise KnowgicError(f"{self.path}: unknown GGUF value type {vtype} at byte {self.pos}")


def read_gguf_metadata(path: Path) -> tuple[dict[str, Any], int]:
    """The header's key/value pairs (long arrays as ``{"array_length": n}``) and the tensor count.

    Follows the GGUF v2/v3 layout: magic ``GGUF``, u32 version, u64 tensor count, u64 key/value count,
    then per pair a u64-length key, a u32 value type and the value. Reads only the header, so it takes
    milliseconds where a full reader parses every token string.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, path)
            if len(buf) < 24 or bytes(buf[:4]) != b"GGUF":
                raise KnowgicError(f"{path}: not a GGUF file (bad magic bytes)")
            cur.pos = 4
            version = cur.unpack("I")
            if version not in (2, 3):
                raise KnowgicError(f"{path}: GGUF version {version} is not supported (2 or 3 expected)")
            tensor_count, kv_count = cur.unpack("Q"), cur.unpack("Q")
            meta: dict[str, Any] = {}
            for _ in range(kv_count):
                key = cur.string()
                meta[key] = cur.value(cur.unpack("I"))
            return meta, tensor_count
    except (OSError, ValueError) as exc:
        raise KnowgicError(f"cannot read GGUF file {path}: {exc}") from None


def read_gguf_info(path: Path) -> GGUFInfo:
    meta, tensor_count = read_gguf_metadata(path)

    def text(key: str) -> str | None:
        value = meta.get(key)
        return value if isinstance(value, str) else None

    arch = text("general.architecture")
    if arch is None:
        raise KnowgicError(f"{path}: GGUF header has no general.architecture")
    file_type = meta.get("general.file_type")
    return GGUFInfo(
        architecture=arch,
        name=text("general.name"),
        basename=text("general.basename"),
        finetune=text("general.finetune"),
        size_label=text("general.size_label"),
        file_type=file_type if isinstance(file_type, int) else None,
        tokenizer_model=text("tokenizer.ggml.model"),
        has_chat_template=bool(text("tokenizer.chat_template")),
        tensor_count=tensor_count,
    )


def require_gguf_support() -> None:
    """GGUF loading in transformers needs ``gguf`` and ``accelerate``; say how to get them if missing."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise KnowgicError(
            f"loading GGUF files needs the package(s) {', '.join(missing)}: {MODELS_EXTRA_HINT}"
        )


def cache_root() -> Path:
    return cache_dir() / "gguf"


def cache_folder(source_sha256: str) -> Path:
    """Where the dequantized model of the GGUF file with this sha256 lives."""
    return cache_root() / source_sha256


def _read_meta(folder: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((folder / META_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def check_cache(folder: Path, source_sha256: str) -> str | None:
    """``None`` when ``folder`` is a complete cache of that GGUF file, else why it is not.

    File contents are compared by sha256; the digests come from the hash cache while a file's size and
    mtime are unchanged, so a valid cache is confirmed in milliseconds and a rewritten file is rehashed.
    """
    if not folder.is_dir():
        return "missing"
    meta = _read_meta(folder)
    if meta is None:
        return f"no readable {META_NAME} (incomplete or corrupt)"
    if meta.get("format") != CACHE_FORMAT:
        return f"cache format {meta.get('format')!r}, expected {CACHE_FORMAT}"
    if meta.get("source_sha256") != source_sha256:
        return "built from another GGUF file"
    files = meta.get("files")
    if not isinstance(files, dict) or "config.json" not in files:
        return "metadata lists no config.json"
    if not any(name.endswith(".safetensors") for name in files):
        return "metadata lists no safetensors file"
    for name, expected in files.items():
        path = folder / name
        if not isinstance(expected, dict) or not path.is_file():
            return f"missing file {name}"
        if path.stat().st_size != expected.get("size"):
            return f"{name} has the wrong size"
        if sha256_file(path) != expected.get("sha256"):
            return f"{name} has the wrong sha256"
    return None


def cached_info(folder: Path) -> dict[str, Any]:
    """The metadata recorded with a cache folder (source file, GGUF header summary, build time)."""
    return _read_meta(folder) or {}


@contextlib.contextmanager
def transformers_progress(progress: bool) -> Iterator[None]:
    """Hide transformers' own progress bars unless ``progress`` (restoring the previous setting)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not progress and was_enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if not progress and was_enabled:
            hf_logging.enable_progress_bar()


def _dequantize_kwargs() -> dict[str, Any]:
    """Ask for a dense model where transformers could otherwise keep GGUF blocks packed (v5 kernels)."""
    try:
        from transformers import GgufConfig
    except ImportError:  # older transformers always dequantize GGUF files
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def dtype_kwargs(torch_dtype: Any) -> dict[str, Any]:
    import transformers
    from packaging.version import Version

    key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    return {key: torch_dtype}


def dequantize_to_folder(gguf_path: Path, out: Path, progress: bool = True) -> None:
    """Load ``gguf_path`` through transformers (dequantizing, float32) and save model + tokenizer to ``out``.

    The saved weights are read back and compared tensor by tensor, and a sample text is tokenized by both
    tokenizers, so a folder that would not reproduce the GGUF model is never published.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    require_gguf_support()
    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        with transformers_progress(progress):
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, **dtype_kwargs(torch.float32), **_dequantize_kwargs()
            )
    except (OSError, ValueError, KeyError, NotImplementedError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise KnowgicError(f"transformers cannot load GGUF file {gguf_path}: {first}") from None
    # The weights are plain tensors now; drop the GGUF quantizer so that save_pretrained writes them.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)

    with transformers_progress(False):
        reloaded = AutoModelForCausalLM.from_pretrained(str(out), **dtype_kwargs(torch.float32))
        retok = AutoTokenizer.from_pretrained(str(out))
    saved, original = reloaded.state_dict(), model.state_dict()
    if saved.keys() != original.keys() or any(not torch.equal(saved[k], original[k]) for k in original):
        raise KnowgicError(f"dequantized weights of {gguf_path} did not survive saving to {out}")
    sample = "Harry Potter studied at Hogwarts. 1234 ÄÖü 東京"
    if retok(sample)["input_ids"] != tokenizer(sample)["input_ids"]:
        raise KnowgicError(f"the tokenizer of {gguf_path} did not survive saving to {out}")


def _publish(tmp: Path, final: Path, source_sha256: str) -> None:
    """Move a finished ``tmp`` folder to ``final``, replacing an invalid one there; keep a valid one."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        if check_cache(final, source_sha256) is None:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
            return
        trash = final.with_name(f".trash-{final.name}-{uuid.uuid4().hex[:8]}")
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.replace(tmp, final)
    except OSError:
        if check_cache(final, source_sha256) is None:
            shutil.rmtree(tmp, ignore_errors=True)
            return
        raise


def build_cache(gguf_path: Path, source_sha256: str, progress: bool = True) -> Path:
    """Dequantize ``gguf_path`` into a fresh cache folder (atomic: temp folder, metadata last, rename)."""
    final = cache_folder(source_sha256)
    tmp = final.parent / f".tmp-{source_sha256[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise KnowgicError(f"cannot create the GGUF cache folder {tmp}: {exc.strerror or exc}") from None
    started = time.perf_counter()
    try:
        info = read_gguf_info(gguf_path)
        dequantize_to_folder(gguf_path, tmp, progress=progress)
        files = {
            p.name: {"size": p.stat().st_size, "sha256": sha256_file(p, progress=progress, remember=False)}
            for p in sorted(tmp.iterdir())
            if p.is_file()
        }
        meta = {
            "format": CACHE_FORMAT,
            "source_sha256": source_sha256,
            "source_name": gguf_path.name,
            "source_size": gguf_path.stat().st_size,
            "gguf": asdict(info),
            "dtype": "float32",
            "transformers_version": _transformers_version(),
            "build_seconds": round(time.perf_counter() - started, 1),
            "files": files,
        }
        (tmp / META_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True), encoding="utf-8")
        _publish(tmp, final, source_sha256)
    except OSError as exc:  # disk full, permissions: say where, without a traceback
        shutil.rmtree(tmp, ignore_errors=True)
        raise KnowgicError(f"cannot write the GGUF cache {final}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # The rename keeps sizes and mtimes; record the digests under the final paths so the next check is cheap.
    meta = _read_meta(final) or {}
    for name, expected in (meta.get("files") or {}).items():
        path = final / name
        if path.is_file() and path.stat().st_size == expected.get("size"):
            remember_sha256(path, expected["sha256"])
    return final


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


@dataclass(frozen=True)
class CacheResult:
    """The dequantized folder of a GGUF file, and whether it had to be built now (with the reason)."""

    folder: Path
    built: bool
    reason: str | None = None
    seconds: float = 0.0


def ensure_dequantized(
    gguf_path: Path | Callable[[], Path], source_sha256: str, progress: bool = True
) -> CacheResult:
    """The cache folder for the GGUF file with sha256 ``source_sha256``, building it if needed.

    ``gguf_path`` may be a callable giving the file, so that a file which must first be produced (a split
    GGUF assembled from chunk packages) is only produced when the cache has to be built.
    """
    folder = cache_folder(source_sha256)
    reason = check_cache(folder, source_sha256)
    if reason is None:
        return CacheResult(folder=folder, built=False)
    started = time.perf_counter()
    path = Path(gguf_path()) if callable(gguf_path) else Path(gguf_path)
    built = build_cache(path, source_sha256, progress=progress)
    return CacheResult(folder=built, built=True, reason=reason, seconds=time.perf_counter() - started)
