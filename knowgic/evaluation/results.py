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
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir

RESULTS_SCHEMA_VERSION = "1.2"
READABLE_SCHEMA_VERSIONS = ("1.0", "1.1", "1.2")
"""Versions this package reads: 1.0 documents carry no intervals and no per-edit sufficient statistics; 1.2
adds the optional ``submission`` and ``runner`` objects of runner jobs."""
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


# Modes of what a run writes, before the user's umask (like files made by ``open``/``mkdir``).
FILE_MODE = 0o644
DIR_MODE = 0o755


def _umask() -> int:
    """The process umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (a dangling link counts as existing: it blocks)."""
    path = path.absolute()
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor)


def _staging_parent(out_dir: Path) -> Path:
    """Where a run's files are staged: inside ``out_dir`` when it exists, else beside what will hold it."""
    base = _nearest_existing(out_dir)
    if not base.is_dir():
        what = "is not a folder" if base.exists() else "is a dangling link"
        raise KnowgicError(f"output folder {out_dir} is not writable: {base} {what}")
    return base


def check_writable(out_dir: Path) -> None:
    """Fail before any work when ``out_dir`` cannot take the results; creates nothing.

    The probe is the operation the run will need: making a (temporary) folder in ``out_dir``, or, when it
    does not exist yet, in its nearest existing ancestor.
    """
    base = _staging_parent(out_dir)
    try:
        os.rmdir(tempfile.mkdtemp(dir=base, prefix=".knowgic-probe-"))
    except OSError as exc:
        raise KnowgicError(f"output folder {out_dir} is not writable: {exc.strerror or exc}") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` and rename it into place: never a half-written file.

    The file gets the usual permissions (``FILE_MODE`` less the umask), not the owner-only mode of a
    temporary file.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, FILE_MODE & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(document: Mapping[str, Any], out_dir: Path) -> Path:
    path = out_dir / "results.json"
    write_atomic(path, json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")
    return path


def write_run_outputs(
    document: Mapping[str, Any],
    out_dir: Path,
    write_extras: Callable[[Path], list[Path]] | None = None,
) -> tuple[Path, list[Path]]:
    """Write a run's files into ``out_dir`` all or nothing; return the paths of results.json and extras.

    Everything is first written into a temporary folder on the same file system (``write_extras(folder)``
    writes the plots and returns their paths, then results.json). When ``out_dir`` does not exist yet the
    folder is renamed into place in one step; otherwise its files are moved in one by one, results.json
    last, so whoever sees the new results.json also sees the new plots. Any failure before the move
    removes the temporary folder and leaves nothing new behind.
    """
    base = _staging_parent(out_dir)
    staging = Path(tempfile.mkdtemp(dir=base, prefix=".knowgic-run-"))
    try:
        extras = list(write_extras(staging)) if write_extras is not None else []
        results = write_results(document, staging)
        names = [p.relative_to(staging) for p in extras] + [results.relative_to(staging)]
        os.chmod(staging, DIR_MODE & ~_umask())
        if base != out_dir.absolute():
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, out_dir)
                return out_dir / names[-1], [out_dir / n for n in names[:-1]]
            except OSError:
                if not out_dir.is_dir():  # created meanwhile as a file, or unwritable: give up cleanly
                    raise
        for name in names:
            os.replace(staging / name, out_dir / name)
        staging.rmdir()
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise KnowgicError(f"cannot write the results to {out_dir}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir / names[-1], [out_dir / n for n in names[:-1]]
