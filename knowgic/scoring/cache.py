"""On-disk cache of pre-edit scores.

The unedited model's scores depend only on (model revision, the dtype and the kind of device the model
runs in, protocol and its parameters (for the generation protocols the chat-template decision is one of
them), dataset version, the exact queries, the prompt prefix), so they are computed once and reused by
every later run with the same key. A bfloat16 run never reuses float32 scores: the numbers differ, and
whether a fact is known can flip.
An entry is two files under ``root/<key[:2]>/``: ``<key>.npz`` (arrays ``p``, ``known``) and
``<key>.json`` (the key's parts, the row count and the sha256 of the npz). Each is written to a temporary
file and renamed into place, the json last, so a reader sees a whole entry or none. An entry whose json is
unreadable, whose npz is missing or has another checksum, or whose arrays are malformed is reported
(warning) and treated as absent, so the caller recomputes and overwrites it; it is never used.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from knowgic.errors import KnowgicError
from knowgic.paths import cache_dir
from knowgic.scoring.base import Query, Scores

log = logging.getLogger(__name__)

# Bumped whenever a change to the scorers changes their numbers, so old entries are not reused.
SCORING_CACHE_VERSION = 1

# Parameters that change speed or display, not scores (batched = one-at-a-time to 1e-5, and the generate
# protocol's samples do not depend on batch size): left out of the key so a smaller batch reuses entries.
RESULT_NEUTRAL_PARAMS = frozenset({"batch_size", "progress"})


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def queries_sha256(queries: Sequence[Query]) -> str:
    """Content hash of an ordered list of queries (every field, so any change gives a new key)."""
    rows = [asdict(q) for q in queries]
    for row in rows:
        row["answers"] = list(row["answers"])
    return hashlib.sha256(_canonical(rows)).hexdigest()


class ScoreCache:
    """Pre-edit scores on disk, keyed by :meth:`key`."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir() / "scores"

    @staticmethod
    def key(
        model_revision: str,
        protocol: str,
        params: dict[str, Any],
        dataset_sha256: str,
        queries_sha256: str,
        prefix: str = "",
        *,
        dtype: str,
        device_type: str,
    ) -> str:
        """A sha256 hex key over every input the scores depend on (``RESULT_NEUTRAL_PARAMS`` excepted).

        ``dtype`` is the model's weight dtype ("float32", "bfloat16", ...); ``device_type`` the kind of
        device it runs on ("cpu", "cuda", "mps"; not the index: two GPUs of a kind compute alike).
        """
        try:
            material = _canonical(
                {
                    "cache_version": SCORING_CACHE_VERSION,
                    "model_revision": model_revision,
                    "dtype": dtype,
                    "device_type": device_type,
                    "protocol": protocol,
                    "params": {k: v for k, v in params.items() if k not in RESULT_NEUTRAL_PARAMS},
                    "dataset_sha256": dataset_sha256,
                    "queries_sha256": queries_sha256,
                    "prefix": prefix,
                }
            )
        except (TypeError, ValueError) as exc:
            raise KnowgicError(f"score cache key: parameters must be JSON values ({exc})") from None
        return hashlib.sha256(material).hexdigest()

    def _paths(self, key: str) -> tuple[Path, Path]:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise KnowgicError(f"not a score cache key: {key!r}")
        folder = self.root / key[:2]
        return folder / f"{key}.npz", folder / f"{key}.json"

    def get(self, key: str) -> Scores | None:
        """The cached scores, or None when absent or corrupt (corruption is logged as a warning)."""
        npz_path, meta_path = self._paths(key)
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            data = npz_path.read_bytes()
            if not isinstance(meta, dict) or meta.get("key") != key:
                raise ValueError("metadata does not belong to this key")
            if hashlib.sha256(data).hexdigest() != meta.get("npz_sha256"):
                raise ValueError("checksum mismatch")
            with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
                p = np.asarray(arrays["p"])
                known = np.asarray(arrays["known"])
            n = meta.get("n")
            if p.dtype != np.float64 or known.dtype != np.bool_ or p.shape != (n,) or known.shape != (n,):
                raise ValueError("arrays have the wrong dtype or shape")
            if not np.all((p >= 0.0) & (p <= 1.0)):
                raise ValueError("scores outside [0, 1]")
        except Exception as exc:  # any failure to read an entry back means it cannot be trusted
            log.warning("ignoring corrupt score cache entry %s (%s); it will be recomputed", meta_path, exc)
            return None
        return Scores(p, known)

    def get_or_compute(
        self, key: str, compute: Callable[[], Scores], info: dict[str, Any] | None = None
    ) -> tuple[Scores, bool]:
        """The cached scores, or ``compute()`` stored under ``key``; the flag says whether it was a hit."""
        cached = self.get(key)
        if cached is not None:
            return cached, True
        scores = compute()
        self.put(key, scores, info)
        return scores, False

    def put(self, key: str, scores: Scores, info: dict[str, Any] | None = None) -> None:
        """Store ``scores`` under ``key`` atomically; ``info`` (JSON) is kept in the metadata for people."""
        npz_path, meta_path = self._paths(key)
        p = np.asarray(scores.p, dtype=np.float64)
        known = np.asarray(scores.known, dtype=bool)
        if p.ndim != 1 or p.shape != known.shape:
            raise ValueError("scores.p and scores.known must be 1-D arrays of the same length")
        buffer = io.BytesIO()
        np.savez(buffer, p=p, known=known)
        data = buffer.getvalue()
        meta = {
            "key": key,
            "n": len(p),
            "npz_sha256": hashlib.sha256(data).hexdigest(),
            "cache_version": SCORING_CACHE_VERSION,
            "info": info or {},
        }
        npz_path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(npz_path, data)
        _atomic_write(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode("utf-8"))


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
