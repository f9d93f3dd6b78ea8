"""The results document: building it, validating it against ``spec/schemas/results.schema.json``, hashing
it, and writing it atomically.

Like lm-evaluation-harness's results files, a document records everything needed to reproduce and compare
a run: dataset version and content hash, model and its revision, editor and the sha256 of its hparams,
protocol and parameters, mode, seed, package versions and hardware, alongside the metrics.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir

RESULTS_SCHEMA_VERSION = "1.0"
_PACKAGES = (
    "knowgic",
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "numpy",
    "peft",
    "accelerate",
    "gguf",
)


def results_schema() -> dict[str, Any]:
    return json.loads((spec_dir() / "schemas" / "results.schema.json").read_text(encoding="utf-8"))


def environment() -> dict[str, Any]:
    """Package versions, Python, platform and accelerator of this process."""
    import torch

    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    gpu = None
    if torch.cuda.is_available():
        gpu = {
            "name": torch.cuda.get_device_name(0),
            "count": torch.cuda.device_count(),
            "cuda": torch.version.cuda,
        }
    return {
        "packages": versions,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": gpu,
    }


def canonical_json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def content_sha256(document: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the document without its own ``sha256`` field."""
    body = {k: v for k, v in document.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def validation_errors(document: Any) -> list[str]:
    """Schema errors as ``"<json pointer>: <message>"`` lines (empty when valid)."""
    validator = jsonschema.Draft202012Validator(results_schema())
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    return ["/" + "/".join(str(p) for p in e.absolute_path) + f": {e.message}" for e in errors]


def validate_results(document: Any, where: str = "results") -> None:
    """Raise :class:`KnowgicError` naming the first problems when ``document`` breaks the schema or its hash."""
    errors = validation_errors(document)
    if errors:
        shown = "; ".join(errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise KnowgicError(f"{where} does not follow results.schema.json: {shown}{more}")
    if document["sha256"] != content_sha256(document):
        raise KnowgicError(
            f"{where}: recorded sha256 does not match its content (edited after it was written?)"
        )


def finalize(document: dict[str, Any]) -> dict[str, Any]:
    document["sha256"] = content_sha256(document)
    validate_results(document)
    return document


def load_results(path: str | Path) -> dict[str, Any]:
    """Read and verify a results file (schema and content hash)."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnowgicError(f"results file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowgicError(f"cannot read results file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise KnowgicError(f"results file {path} is not valid JSON: {exc}") from None
    validate_results(document, where=str(path))
    return document


def check_writable(out_dir: Path) -> None:
    """Fail before any work when ``out_dir`` cannot take the results."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".knowgic-probe-"):
            pass
    except OSError as exc:
        raise KnowgicError(f"output folder {out_dir} is not writable: {exc.strerror or exc}") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` and rename it into place: never a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(document: Mapping[str, Any], out_dir: Path) -> Path:
    path = out_dir / "results.json"
    write_atomic(path, json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")
    return path
