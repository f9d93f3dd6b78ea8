"""A submission's files, unpacked safely: a folder, ``.tar.gz`` or ``.zip`` is untrusted input.

Unpacking never writes outside its target and never follows a link:

- member names must be relative, with no ``..`` component, no backslash, no drive letter and no NUL;
- only regular files and folders are accepted (symbolic links, hard links, devices and FIFOs are refused:
  a link is never needed to ship Python code, and refusing them all is simpler than checking targets);
- the total unpacked size, the number of files and the compression ratio are limited, and the ratio is
  checked *while* unpacking so that a zip bomb is stopped before it fills the disk::

      ratio = unpacked bytes so far / archive bytes  >  max_ratio   ->  refused

A loaded submission is re-packed as a *normalised* ``.tar.gz`` (:func:`write_normalised_archive`: members
sorted, mtime 0, owner 0, modes 0644/0755, gzip header without name or time), so the same content always
has the same sha256, whichever way it was packed; that archive is what the store keeps and what workers run.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from knowgic.errors import KnowgicError

MiB = 1 << 20
_COPY_BLOCK = 1 << 16
# Below this many unpacked bytes the ratio is not checked: tiny archives of text have high ratios too.
_RATIO_FLOOR_BYTES = 1 * MiB


class SubmissionError(KnowgicError):
    """A submission is unsafe or invalid; the message names the file (and field, line) that is wrong."""


@dataclass(frozen=True)
class SubmissionLimits:
    """What a submission may hold. ``max_ratio`` = unpacked bytes / archive bytes."""

    max_total_bytes: int = 200 * MiB
    max_files: int = 2000
    max_ratio: float = 100.0
    max_manifest_bytes: int = 64 * 1024
    max_path_length: int = 255


# -- member names ---------------------------------------------------------------------------------------
def _safe_member_name(name: str, where: str, limits: SubmissionLimits) -> PurePosixPath | None:
    """The member's relative path, or None for the archive's own root ("." or ""); raises when unsafe."""
    if "\x00" in name:
        raise SubmissionError(f"{where}: a member name contains a NUL byte")
    if "\\" in name:
        raise SubmissionError(f"{where}: member {name!r} contains a backslash; use '/' in paths")
    if name.startswith("/") or (len(name) >= 2 and name[1] == ":"):
        raise SubmissionError(f"{where}: member {name!r} is an absolute path; paths must be relative")
    if len(name) > limits.max_path_length:
        raise SubmissionError(f"{where}: member name {name[:60]!r}… is longer than {limits.max_path_length}")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SubmissionError(
            f"{where}: member {name!r} contains '..'; paths must stay inside the submission"
        )
    if not parts:
        return None
    return PurePosixPath(*parts)


class _Budget:
    """Counts files and bytes while unpacking, and stops at the first limit crossed."""

    def __init__(self, where: str, limits: SubmissionLimits, packed_bytes: int | None) -> None:
        self.where = where
        self.limits = limits
        self.packed_bytes = packed_bytes
        self.files = 0
        self.total = 0

    def add_file(self, name: PurePosixPath) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise SubmissionError(
                f"{self.where}: more than {self.limits.max_files} files (at {name}); ship only what the "
                "editor needs"
            )

    def add_bytes(self, count: int, name: PurePosixPath) -> None:
        self.total += count
        if self.total > self.limits.max_total_bytes:
            raise SubmissionError(
                f"{self.where}: unpacks to more than {self.limits.max_total_bytes // MiB} MiB (at {name})"
            )
        if self.packed_bytes and self.total > _RATIO_FLOOR_BYTES:
            ratio = self.total / self.packed_bytes
            if ratio > self.limits.max_ratio:
                raise SubmissionError(
                    f"{self.where}: compression ratio above {self.limits.max_ratio:g} (at {name}, "
                    f"{self.total} bytes from a {self.packed_bytes}-byte archive): refused as a zip bomb"
                )


def _copy_bounded(
    source: IO[bytes], target: Path, declared: int, name: PurePosixPath, budget: _Budget
) -> None:
    """Copy a member's bytes, counting them against the budget; never more than its declared size."""
    written = 0
    # O_EXCL: a member written twice (a duplicate name) is refused, never silently replaced.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as out:
        while True:
            block = source.read(_COPY_BLOCK)
            if not block:
                break
            written += len(block)
            if written > declared:
                raise SubmissionError(f"{budget.where}: member {name} holds more bytes than its header says")
            budget.add_bytes(len(block), name)
            out.write(block)
    if written != declared:
        raise SubmissionError(f"{budget.where}: member {name} is truncated ({written} of {declared} bytes)")


def _make_parents(root: Path, name: PurePosixPath, where: str) -> Path:
    target = root.joinpath(*name.parts)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    # Every member is checked, and links are never created, so this only guards against a bug.
    if not parent.resolve().is_relative_to(root.resolve()):
        raise SubmissionError(f"{where}: member {name} would be written outside the submission")
    if target.exists():
        raise SubmissionError(f"{where}: member {name} appears twice")
    return target


class _BoundedStream(io.RawIOBase):
    """The decompressed bytes of an archive, read in blocks of at most 1 MiB and counted.

    tarfile reads some things whole (a PAX header of any declared size, for one): through this stream a
    bomb hidden there is stopped by the same ratio and size limits as member data, before it is in memory.
    """

    def __init__(self, raw: IO[bytes], where: str, limits: SubmissionLimits, packed_bytes: int) -> None:
        self.raw, self.where, self.limits, self.packed_bytes = raw, where, limits, packed_bytes
        # Member data plus what tar adds around it: a header and padding per member, PAX records.
        self.cap = limits.max_total_bytes + limits.max_files * 2048 + MiB
        self.count = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = size if size is not None and size >= 0 else self.cap + 1
        parts = []
        while want > 0:
            block = self.raw.read(min(want, MiB))
            if not block:
                break
            self.count += len(block)
            if self.count > self.cap:
                raise SubmissionError(
                    f"{self.where}: unpacks to more than {self.limits.max_total_bytes // MiB} MiB"
                )
            if self.count > _RATIO_FLOOR_BYTES and self.count / self.packed_bytes > self.limits.max_ratio:
                raise SubmissionError(
                    f"{self.where}: compression ratio above {self.limits.max_ratio:g} ({self.count} bytes from a "
                    f"{self.packed_bytes}-byte archive): refused as a zip bomb"
                )
            parts.append(block)
            want -= len(block)
        return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _unpack_tar(archive: Path, root: Path, limits: SubmissionLimits) -> None:
    where = str(archive)
    packed = archive.stat().st_size
    budget = _Budget(where, limits, packed)
    try:
        with (
            archive.open("rb") as raw,
            gzip.GzipFile(fileobj=raw, mode="rb") as unzipped,
            tarfile.open(fileobj=_BoundedStream(unzipped, where, limits, max(packed, 1)), mode="r|") as tar,
        ):
            # A stream, header by header: a member's data is only decompressed once its header passed.
            for member in tar:
                name = _safe_member_name(member.name, where, limits)
                if member.issym() or member.islnk():
                    raise SubmissionError(
                        f"{where}: member {member.name!r} is a link; submissions hold only files and folders"
                    )
                if member.isdir():
                    if name is not None:
                        root.joinpath(*name.parts).mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise SubmissionError(
                        f"{where}: member {member.name!r} is a device, FIFO or other special file; "
                        "submissions hold only files and folders"
                    )
                if name is None:
                    raise SubmissionError(f"{where}: a file member has an empty name")
                budget.add_file(name)
                if budget.total + member.size > limits.max_total_bytes:
                    budget.add_bytes(member.size, name)  # raises with the size message
                target = _make_parents(root, name, where)
                source = tar.extractfile(member)
                if source is None:  # pragma: no cover - isfile() members always have data
                    raise SubmissionError(f"{where}: cannot read member {member.name!r}")
                _copy_bounded(source, target, member.size, name, budget)
                if member.mode & 0o111:
                    target.chmod(0o755)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError, zipfile.BadZipFile) as exc:
        raise SubmissionError(f"{where}: not a readable .tar.gz archive ({exc})") from None


def _unpack_zip(archive: Path, root: Path, limits: SubmissionLimits) -> None:
    where = str(archive)
    budget = _Budget(where, limits, archive.stat().st_size)
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            if len(infos) > limits.max_files * 2:  # folders count too; refuse absurd directories early
                raise SubmissionError(f"{where}: more than {limits.max_files} files")
            for info in infos:
                name = _safe_member_name(info.filename, where, limits)
                unix_mode = info.external_attr >> 16
                file_type = stat.S_IFMT(unix_mode)
                if stat.S_ISLNK(unix_mode):
                    raise SubmissionError(
                        f"{where}: member {info.filename!r} is a link; submissions hold only files and folders"
                    )
                if info.is_dir():
                    if name is not None:
                        root.joinpath(*name.parts).mkdir(parents=True, exist_ok=True)
                    continue
                if file_type not in (0, stat.S_IFREG):
                    raise SubmissionError(
                        f"{where}: member {info.filename!r} is a special file; submissions hold only files "
                        "and folders"
                    )
                if name is None:
                    raise SubmissionError(f"{where}: a file member has an empty name")
                budget.add_file(name)
                if budget.total + info.file_size > limits.max_total_bytes:
                    budget.add_bytes(info.file_size, name)
                target = _make_parents(root, name, where)
                with zf.open(info) as source:
                    _copy_bounded(source, target, info.file_size, name, budget)
                if unix_mode & 0o111:
                    target.chmod(0o755)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as exc:
        raise SubmissionError(f"{where}: not a readable .zip archive ({exc})") from None


def _copy_folder(folder: Path, root: Path, limits: SubmissionLimits) -> None:
    where = str(folder)
    budget = _Budget(where, limits, None)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        dirnames.sort()
        for entry in sorted(dirnames + filenames):
            path = here / entry
            relative = PurePosixPath(path.relative_to(folder).as_posix())
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                raise SubmissionError(
                    f"{where}: {relative} is a link; submissions hold only files and folders"
                )
            if stat.S_ISDIR(st.st_mode):
                if relative.name in {"__pycache__", ".git"}:
                    dirnames.remove(entry)  # build output and version control: never part of a submission
                    continue
                root.joinpath(*relative.parts).mkdir(parents=True, exist_ok=True)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise SubmissionError(f"{where}: {relative} is a special file; submissions hold only files")
            _safe_member_name(str(relative), where, limits)
            budget.add_file(relative)
            if budget.total + st.st_size > limits.max_total_bytes:
                budget.add_bytes(st.st_size, relative)
            target = _make_parents(root, relative, where)
            try:
                with path.open("rb") as source:
                    _copy_bounded(source, target, st.st_size, relative, budget)
            except OSError as exc:
                raise SubmissionError(f"cannot read {path}: {exc.strerror or exc}") from None
            if st.st_mode & 0o111:
                target.chmod(0o755)


def unpack(source: Path, target: Path, limits: SubmissionLimits) -> None:
    """Copy the folder ``source``, or unpack the ``.tar.gz`` or ``.zip`` ``source``, into ``target``."""
    if source.is_dir():
        _copy_folder(source, target, limits)
        return
    kind = _archive_kind(source)
    if kind is None:
        raise SubmissionError(f"submission {source}: expected a folder, a .tar.gz or a .zip")
    if kind == "tar":
        _unpack_tar(source, target, limits)
    else:
        _unpack_zip(source, target, limits)


def _archive_kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return "tar"
    if name.endswith(".zip"):
        return "zip"
    return None


# -- the normalised archive -----------------------------------------------------------------------------
def _walk_files(root: Path) -> list[Path]:
    """Every file under ``root``, sorted by its relative POSIX path."""
    files = [Path(dirpath) / name for dirpath, _, filenames in os.walk(root) for name in filenames]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def write_normalised_archive(root: Path, target: Path) -> str:
    """Pack ``root`` into a deterministic ``.tar.gz`` at ``target``; return its sha256.

    Deterministic: members sorted by path, files only (folders are implied), mtime 0, uid/gid 0, no owner
    names, mode 0755 for executables and 0644 otherwise, gzip header with neither name nor time.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk_files(root):
            relative = path.relative_to(root).as_posix()
            info = tarfile.TarInfo(relative)
            info.size = path.stat().st_size
            info.mtime = 0
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    data = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=data, mtime=0, compresslevel=9) as gz:
        gz.write(buffer.getvalue())
    payload = data.getvalue()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(payload)
    return hashlib.sha256(payload).hexdigest()
