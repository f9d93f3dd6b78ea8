"""Content hashes of weight files, remembered per (path, size, mtime) so large files are hashed once.

A local model's ``revision`` is a sha256 over its weight files; a GGUF's is the sha256 of the file itself
(the same digest its publisher lists in ``SHA256SUMS``). Hashing a 1 GB file takes seconds, so each digest
is stored in the user cache next to the file's size and modification time and reused while both match.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from knowgic.errors import KnowgicError
from knowgic.paths import cache_dir

_BLOCK = 4 * 1024 * 1024
# Files smaller than this are hashed without a progress bar (and without a cache record).
_SMALL = 16 * 1024 * 1024

# Weight files as transformers looks for them: safetensors first, pickled checkpoints only without them.
_SAFETENSORS = ("*.safetensors",)
_PICKLED = ("*.bin", "*.pt", "*.pth")
_NOT_WEIGHTS = frozenset({"training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt"})


@dataclass(frozen=True)
class FileStamp:
    """What identifies a file's content cheaply: its resolved path, size and modification time (ns)."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileStamp:
        resolved = path.resolve()
        st = resolved.stat()
        return cls(str(resolved), st.st_size, st.st_mtime_ns)


def _record_path(stamp: FileStamp) -> Path:
    key = hashlib.sha256(stamp.path.encode("utf-8")).hexdigest()[:32]
    return cache_dir() / "hashes" / f"{key}.json"


def _read_record(stamp: FileStamp) -> str | None:
    try:
        record = json.loads(_record_path(stamp).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    if (record.get("path"), record.get("size"), record.get("mtime_ns")) != (
        stamp.path,
        stamp.size,
        stamp.mtime_ns,
    ):
        return None
    digest = record.get("sha256")
    return digest if isinstance(digest, str) and len(digest) == 64 else None


def remember_sha256(path: Path, digest: str) -> None:
    """Store ``digest`` as the content hash of ``path`` as it is now (atomic write; best effort)."""
    stamp = FileStamp.of(path)
    if stamp.size < _SMALL:
        return
    target = _record_path(stamp)
    record = {"path": stamp.path, "size": stamp.size, "mtime_ns": stamp.mtime_ns, "sha256": digest}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        pass  # a read-only cache only costs a rehash next time


def sha256_file(path: Path, progress: bool = False, remember: bool = True) -> str:
    """The sha256 of ``path``'s bytes, from the hash cache when its size and mtime are unchanged.

    ``remember=False`` for temporary files about to be renamed (their records would never be used).
    """
    path = Path(path)
    try:
        stamp = FileStamp.of(path)
    except OSError as exc:
        raise KnowgicError(f"cannot read {path}: {exc.strerror or exc}") from None
    cached = _read_record(stamp) if stamp.size >= _SMALL else None
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    bar = None
    if progress and stamp.size >= _SMALL:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=stamp.size,
            unit="B",
            unit_scale=True,
            desc=f"hashing {path.name}",
            leave=False,
            disable=None,
        )
    try:
        with open(stamp.path, "rb") as handle:
            while block := handle.read(_BLOCK):
                digest.update(block)
                if bar is not None:
                    bar.update(len(block))
    except OSError as exc:
        raise KnowgicError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if bar is not None:
            bar.close()
    hexdigest = digest.hexdigest()
    # Only trust the digest if the file did not change while it was read.
    if remember and FileStamp.of(path) == stamp:
        remember_sha256(path, hexdigest)
    return hexdigest


def weight_files(folder: Path) -> list[Path]:
    """The weight files transformers would load from ``folder`` (safetensors if any, else pickles)."""
    folder = Path(folder)
    for patterns in (_SAFETENSORS, _PICKLED):
        found = sorted(
            {
                p
                for pattern in patterns
                for p in folder.glob(pattern)
                if p.is_file() and p.name not in _NOT_WEIGHTS
            }
        )
        if found:
            return found
    return []


def required_weight_files(folder: Path) -> list[Path]:
    """:func:`weight_files`, or one line saying the folder holds none."""
    files = weight_files(folder)
    if not files:
        raise KnowgicError(
            f"{folder}: no weight files (*.safetensors, *.bin, *.pt, *.pth); is this a saved transformers model?"
        )
    return files


def folder_sha256(folder: Path, progress: bool = False) -> str:
    """A sha256 over a model folder's weight files: sha256 of the lines ``<file name> <file sha256>``.

    Sorted by name, so it is independent of listing order; a folder with one weight file still gets the
    combined digest, so that renaming a shard changes the revision.
    """
    files = required_weight_files(folder)
    lines = "".join(f"{f.name} {sha256_file(f, progress=progress)}\n" for f in files)
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()
