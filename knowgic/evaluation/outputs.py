"""A run's output folder: ``results.json`` and its plots, written atomically, and the checks made before a
run starts (the folder is writable, holds no run unless ``--overwrite``, is not a folder of runs).

The document itself (schema, hash, the one reader) is :mod:`knowgic.results`; what it records, the
environment of the process among it, is built by ``knowgic evaluate``.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from knowgic.clip import clip
from knowgic.errors import KnowgicError

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


RUN_FILE_NAMES = ("results.json", "ifr_by_length.png", "per_edit.png")
"""What one run writes into its folder (results.json and the plots of :mod:`knowgic.evaluation.plots`)."""
_STAGING_PREFIX = ".knowgic-run-"


def describe_run(out_dir: Path) -> str | None:
    """A short description of the run ``out_dir`` holds (editor, model, date), None when it holds none.

    A folder holds a run when any of :data:`RUN_FILE_NAMES` is in it; a results.json that cannot be read
    is still a run (it is someone's file), described as such.
    """
    present = [name for name in RUN_FILE_NAMES if os.path.lexists(out_dir / name)]
    if not present:
        return None
    if "results.json" not in present:
        return f"the files {', '.join(present)} of a run"
    try:
        document = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
        config = document["config"]
        created = str(document["created_at"]).replace("T", " ").replace("+00:00", " UTC")
        return f"editor {clip(str(config['editor']), 80)} on {clip(str(config['model']), 80)}, {created}"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return "a results.json that cannot be read as a run"


def check_no_run(out_dir: Path, overwrite: bool, flag: str = "--overwrite") -> None:
    """Refuse, before any work, to replace the run ``out_dir`` holds unless ``overwrite`` allows it."""
    existing = None if overwrite else describe_run(out_dir)
    if existing is not None:
        raise KnowgicError(
            f"{out_dir} already holds a run ({existing}); pass {flag} to replace it, or choose another folder"
        )


def check_not_a_runs_folder(out_dir: Path) -> None:
    """Refuse an ``--out`` that holds other runs in sub-folders (a sweep's or a results folder).

    A run written there would land loose among them, and ``knowgic summarize`` of the folder would show it
    alone. Refused whatever ``--overwrite`` says: it replaces a run, not a folder of runs.
    """
    if not out_dir.is_dir():
        return
    try:
        children = sorted(out_dir.iterdir())
    except OSError:
        return  # check_writable reports an unreadable folder
    held = [c for c in children if c.is_dir() and (c / "results.json").is_file()]
    if held or (out_dir / "summary.md").is_file():
        example = held[0].name if held else "summary.md"
        raise KnowgicError(
            f"{out_dir} holds other runs ({len(held)} run folder(s), e.g. {example}); give this run a folder "
            f"of its own, e.g. --out {out_dir / 'NAME'}"
        )


def _holds_only_run_files(folder: Path) -> bool:
    """True when everything in ``folder`` is a run's file (or a run's leftover staging folder)."""
    return all(entry in RUN_FILE_NAMES or entry.startswith(_STAGING_PREFIX) for entry in os.listdir(folder))


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is not offered.

    Nobody looking at either path ever sees it missing or mixed.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):  # old kernel or a file system without it
        return False
    raise OSError(err, os.strerror(err), str(second))


def _replace_folder(staging: Path, out_dir: Path) -> None:
    """Put the folder ``staging`` where the folder ``out_dir`` is and delete the old one.

    One atomic exchange where the system offers it; else two renames, between which ``out_dir`` is briefly
    absent but never half-written.
    """
    if _exchange(staging, out_dir):
        shutil.rmtree(staging, ignore_errors=True)  # staging now holds the old run
        return
    old = out_dir.with_name(f"{_STAGING_PREFIX}old-{out_dir.name}")
    os.rename(out_dir, old)
    try:
        os.rename(staging, out_dir)
    except OSError:
        os.rename(old, out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _keep_beside(staging: Path, out_dir: Path) -> Path:
    """Give a staged run a visible name beside where it was going, so a refused run is not lost."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kept = staging.with_name(f"{out_dir.name}-{stamp}-{os.getpid()}")
    os.rename(staging, kept)
    return kept


def write_run_outputs(
    document: Mapping[str, Any],
    out_dir: Path,
    write_extras: Callable[[Path], list[Path]] | None = None,
    overwrite: bool = False,
) -> tuple[Path, list[Path]]:
    """Write a run's files into ``out_dir`` all or nothing; return the paths of results.json and extras.

    Everything is first written into a temporary folder on the same file system (``write_extras(folder)``
    writes the plots and returns their paths, then results.json), then put in place:

    - ``out_dir`` does not exist: the folder is renamed into place in one step;
    - ``out_dir`` holds a run (:func:`describe_run`): refused unless ``overwrite``, and then the old run is
      replaced whole: when the folder holds nothing but run files, the staged folder is exchanged with it in
      one step; else (the user keeps other files there) each file is replaced by a rename, results.json
      last, and the other files are left alone;
    - ``out_dir`` exists without a run: the files are moved in, results.json last.

    Any failure before the move removes the temporary folder and leaves nothing new behind. A run refused
    at the end (another process wrote a run into ``out_dir`` meanwhile) is kept in a folder beside it.
    """
    out_dir = Path(out_dir)
    whole_folder = (
        overwrite
        and out_dir.is_dir()
        and not out_dir.is_symlink()
        and _holds_only_run_files(out_dir)
        and os.access(out_dir.absolute().parent, os.W_OK | os.X_OK)
    )
    base = out_dir.absolute().parent if whole_folder else _staging_parent(out_dir)
    staging = Path(tempfile.mkdtemp(dir=base, prefix=_STAGING_PREFIX))
    try:
        extras = list(write_extras(staging)) if write_extras is not None else []
        results = write_results(document, staging)
        names = [p.relative_to(staging) for p in extras] + [results.relative_to(staging)]
        os.chmod(staging, DIR_MODE & ~_umask())
        placed = out_dir / names[-1], [out_dir / n for n in names[:-1]]
        if not os.path.lexists(out_dir):
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, out_dir)
                return placed
            except OSError:
                if not out_dir.is_dir():  # created meanwhile as a file, or unwritable: give up cleanly
                    raise
        existing = describe_run(out_dir)
        if existing is not None and not overwrite:
            kept = _keep_beside(staging, out_dir)
            raise KnowgicError(
                f"{out_dir} got a run while this one ran ({existing}); this run was kept in {kept}"
            )
        if whole_folder and _holds_only_run_files(out_dir):
            _replace_folder(staging, out_dir)
            return placed
        for name in names:
            os.replace(staging / name, out_dir / name)
        for stale in set(RUN_FILE_NAMES) - {str(n) for n in names}:  # the old run's, this one has none
            (out_dir / stale).unlink(missing_ok=True)
        staging.rmdir()
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise KnowgicError(f"cannot write the results to {out_dir}: {exc.strerror or exc}") from None
    except BaseException:
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return placed
