"""Submissions: a folder, ``.tar.gz`` or ``.zip`` with ``submission.yaml`` at its root, loaded safely.

A submission is untrusted input. Loading it never writes outside ``workdir`` and never follows a link:

- member names must be relative, with no ``..`` component, no backslash, no drive letter and no NUL;
- only regular files and folders are accepted (symbolic links, hard links, devices and FIFOs are refused:
  a link is never needed to ship Python code, and refusing them all is simpler than checking targets);
- the total unpacked size, the number of files and the compression ratio are limited, and the ratio is
  checked *while* unpacking so that a zip bomb is stopped before it fills the disk::

      ratio = unpacked bytes so far / archive bytes  >  max_ratio   ->  refused

- ``submission.yaml`` is at most ``max_manifest_bytes``, parsed as YAML (duplicate keys refused, errors
  name the line and column) and validated against ``spec/schemas/submission.schema.json``.

The loaded submission is re-packed as a *normalised* ``.tar.gz`` (members sorted, mtime 0, owner 0,
modes 0644/0755, gzip header without name or time), so the same content always has the same sha256,
whichever way it was packed; that archive is what the store keeps and what workers run.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

import yaml

from knowgic.errors import KnowgicError

if TYPE_CHECKING:
    from knowgic.runner.queue import Job, JobQueue
    from knowgic.runner.store import ResultsStore

MANIFEST_NAME = "submission.yaml"
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


@dataclass(frozen=True)
class Submission:
    """A loaded, validated submission.

    ``manifest``: ``submission.yaml`` validated, with defaults filled (``modes``: [independent],
    ``dataset_version``: the latest). ``root``: the unpacked safe copy (``submission.yaml`` at its root).
    ``archive``: the normalised ``.tar.gz`` of ``root``; ``sha256``: the sha256 of its bytes.
    """

    manifest: dict[str, Any]
    root: Path
    archive: Path
    sha256: str

    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    @property
    def version(self) -> str:
        return str(self.manifest["version"])

    def hparams_for(self, model: str) -> dict[str, Any]:
        """The hyper-parameters this submission gives for ``model`` (see :func:`hparams_for`)."""
        return hparams_for(self.manifest, self.root, model)


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


def _manifest_root(unpacked: Path, where: str) -> Path:
    """``unpacked`` when it holds submission.yaml, else its single top-level folder when that one does."""
    if (unpacked / MANIFEST_NAME).is_file():
        return unpacked
    children = [p for p in unpacked.iterdir()]
    if len(children) == 1 and children[0].is_dir() and (children[0] / MANIFEST_NAME).is_file():
        return children[0]
    raise SubmissionError(f"{where}: no {MANIFEST_NAME} at its root (or in its single top-level folder)")


# -- the manifest -----------------------------------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice (PyYAML would silently keep the last one)."""


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice", mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)  # type: ignore[no-untyped-call]


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_error_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    text = f"{context}, {problem}" if context else str(problem)
    text = " ".join(text.split())
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {text}"
    return text


def read_yaml_file(path: Path, shown: str, max_bytes: int) -> Any:
    """Parse a small YAML file of a submission; errors name ``shown`` with the line and column."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise SubmissionError(f"{shown} is {size} bytes; at most {max_bytes} are allowed")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SubmissionError(f"{shown} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SubmissionError(f"cannot read {shown}: {exc.strerror or exc}") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise SubmissionError(f"{shown} {_yaml_error_line(exc)}") from None


def _node_line(text: str, path: list[Any]) -> int | None:
    """The 1-based line of the YAML node at ``path`` (keys and indices), or of its closest parent."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None if node is None else node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


def _validate_manifest(manifest: Any, manifest_path: Path, shown: str) -> None:
    import jsonschema

    from knowgic.dataset.schemas import validator

    if not isinstance(manifest, dict):
        kind = "empty" if manifest is None else f"a YAML {type(manifest).__name__}"
        raise SubmissionError(
            f"{shown}: expected a mapping of fields (name, version, editor, ...), found {kind}"
        )
    error = jsonschema.exceptions.best_match(validator("submission").iter_errors(manifest))
    if error is None:
        return
    path = list(error.absolute_path)
    pointer = "/".join(str(p) for p in path) or "(top level)"
    line = _node_line(manifest_path.read_text(encoding="utf-8"), path)
    at = f" line {line}," if line else ""
    message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
    raise SubmissionError(f"{shown}{at} field {pointer}: {message}")


def _resolve_inside(root: Path, relative: str, shown: str, what: str) -> Path:
    """``root / relative`` when it is a regular file inside ``root``; raises otherwise."""
    if relative.startswith("/") or "\\" in relative or ".." in PurePosixPath(relative).parts:
        raise SubmissionError(f"{shown}: {what} {relative!r} must be a relative path inside the submission")
    path = root.joinpath(*PurePosixPath(relative).parts)
    if not path.is_file():
        raise SubmissionError(f"{shown}: {what} {relative!r} does not exist in the submission")
    return path


def _model_family(model: str) -> str | None:
    from knowgic.models.registry import get_offline_model

    entry = get_offline_model(model)
    return entry.family if entry is not None else None


def hparams_key(manifest: dict[str, Any], model: str) -> str | None:
    """The ``hparams`` key that applies to ``model``: the model id itself, else its family when known."""
    hparams = manifest.get("hparams") or {}
    if model in hparams:
        return model
    family = _model_family(model)
    if family is not None and family in hparams:
        return family
    return None


def hparams_for(manifest: dict[str, Any], root: Path, model: str) -> dict[str, Any]:
    """The hyper-parameters a submission gives for ``model``: inline, or read from its YAML file."""
    key = hparams_key(manifest, model)
    if key is None:
        raise SubmissionError(
            f"{MANIFEST_NAME}: hparams has no entry for model {model!r} (keys: "
            f"{', '.join(sorted(manifest.get('hparams') or {})) or 'none'}); key it by the model id or family"
        )
    value = manifest["hparams"][key]
    if isinstance(value, dict):
        return dict(value)
    shown = f"hparams file {value!r}"
    path = _resolve_inside(root, value, f"{MANIFEST_NAME} hparams/{key}", "hparams file")
    data = read_yaml_file(path, shown, 1 * MiB)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SubmissionError(f"{shown}: expected a mapping of hyper-parameters, found {type(data).__name__}")
    return data


def _check_editor_module(manifest: dict[str, Any], root: Path, shown: str) -> None:
    """The editor's module must be in the submission, unless a packaging file or requirement provides it."""
    module = str(manifest["editor"]).split(":", 1)[0]
    parts = module.split(".")
    for base in (root, root / "src"):
        if (
            base.joinpath(*parts).with_suffix(".py").is_file()
            or (base.joinpath(*parts) / "__init__.py").is_file()
        ):
            return
    if manifest.get("requirements"):
        return  # a requirement may provide it (a wheel from the index); a missing module then fails the job
    raise SubmissionError(
        f"{shown} field editor: module {module!r} is not in the submission (looked for "
        f"{'/'.join(parts)}.py and {'/'.join(parts)}/__init__.py, also under src/; the submission itself "
        "is never built or installed, it is put on the path as it is)"
    )


# A model the sandbox can load: an offline model name or a hub id (owner/name); a path on the worker host
# means nothing inside the container.
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def _check_models(manifest: dict[str, Any], shown: str) -> None:
    for index, model in enumerate(manifest["models"]):
        if not _MODEL_ID.match(model) or ".." in model:
            raise SubmissionError(
                f"{shown} field models/{index}: {model!r} is not a hub id (owner/name) or an offline model name; "
                "a submission cannot name files of the machine that runs it"
            )


def _check_requirements(manifest: dict[str, Any], shown: str) -> None:
    """Each requirement is one PEP 508 specifier of a package on the index: no pip options (``-r``,
    ``--index-url``, ``-e``), no direct reference (``name @ URL``: a file, a folder, an archive, a VCS
    checkout), whose build would run the submission's code; the runner installs wheels from the index only."""
    from packaging.requirements import InvalidRequirement, Requirement

    for index, text in enumerate(manifest.get("requirements") or []):
        where = f"{shown} field requirements/{index}"
        if text.lstrip().startswith("-"):
            raise SubmissionError(f"{where}: {text!r} is a pip option; list package requirements only")
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            reason = " ".join(str(exc).split())
            raise SubmissionError(
                f"{where}: {text!r} is not a requirement specifier ({reason}); local paths and VCS URLs "
                "are not accepted"
            ) from None
        if requirement.url:
            raise SubmissionError(
                f"{where}: {text!r} is a direct reference (name @ URL); the runner installs wheels from the "
                "package index only: name a released package, or put the code into the submission"
            )


def _check_manifest(manifest: dict[str, Any], root: Path, shown: str) -> dict[str, Any]:
    """Semantic checks the schema cannot express; returns the manifest with defaults filled."""
    from knowgic.dataset.versions import available_versions, latest_version

    filled = dict(manifest)
    filled.setdefault("modes", ["independent"])
    if "dataset_version" not in filled:
        filled["dataset_version"] = latest_version()
    elif filled["dataset_version"] not in available_versions():
        raise SubmissionError(
            f"{shown} field dataset_version: {filled['dataset_version']!r} is not a dataset version of this "
            f"benchmark (known: {', '.join(available_versions())})"
        )
    _check_models(filled, shown)
    _check_requirements(filled, shown)
    for key, value in filled["hparams"].items():
        if isinstance(value, str):
            _resolve_inside(root, value, f"{shown} field hparams/{key}", "hparams file")
    missing = [model for model in filled["models"] if hparams_key(filled, model) is None]
    if missing:  # the schema asks for one entry at least; which keys cover which models it cannot know
        raise SubmissionError(
            f"{shown} field hparams: no entry for the model(s) {', '.join(map(repr, missing))} asked for in "
            f"models (keys: {', '.join(map(repr, filled['hparams']))}); key hparams by the model id or its "
            "family (gpt2, gptj, llama, qwen), with {} for an editor that takes no hyper-parameters"
        )
    for model in filled["models"]:
        hparams_for(filled, root, model)  # every referenced file parses
    _check_editor_module(filled, root, shown)
    return filled


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


def _archive_kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return "tar"
    if name.endswith(".zip"):
        return "zip"
    return None


def load_submission(
    path: str | Path, workdir: Path, limits: SubmissionLimits = SubmissionLimits()
) -> Submission:
    """Unpack (or copy) a submission safely into ``workdir``, validate it and pack it normalised.

    ``workdir`` must be empty or missing; it receives ``unpacked/`` and ``submission.tar.gz``.
    Raises :class:`SubmissionError` with one line naming the problem.
    """
    source = Path(path)
    workdir = Path(workdir)
    if not source.exists():
        raise SubmissionError(f"submission {source} does not exist")
    workdir.mkdir(parents=True, exist_ok=True)
    unpacked = workdir / "unpacked"
    if unpacked.exists():
        raise SubmissionError(f"working folder {workdir} already holds an unpacked submission")
    unpacked.mkdir()
    if source.is_dir():
        _copy_folder(source, unpacked, limits)
    else:
        kind = _archive_kind(source)
        if kind is None:
            raise SubmissionError(f"submission {source}: expected a folder, a .tar.gz or a .zip")
        if kind == "tar":
            _unpack_tar(source, unpacked, limits)
        else:
            _unpack_zip(source, unpacked, limits)
    root = _manifest_root(unpacked, str(source))
    shown = f"{source}: {MANIFEST_NAME}" if not source.is_dir() else str(source / MANIFEST_NAME)
    manifest_path = root / MANIFEST_NAME
    raw = read_yaml_file(manifest_path, shown, limits.max_manifest_bytes)
    _validate_manifest(raw, manifest_path, shown)
    manifest = _check_manifest(raw, root, shown)
    archive = workdir / "submission.tar.gz"
    sha = write_normalised_archive(root, archive)
    return Submission(manifest=manifest, root=root, archive=archive, sha256=sha)


def submit(
    path: str | Path,
    store: ResultsStore,
    queue: JobQueue,
    *,
    limit: int | None = None,
    workdir: Path | None = None,
    limits: SubmissionLimits = SubmissionLimits(),
) -> tuple[Submission, list[Job]]:
    """Validate a submission, store its normalised archive and enqueue its jobs.

    Without ``workdir`` the unpacked copy is removed afterwards and the returned ``archive`` is the
    store's copy. ``limit`` (smoke runs only) scores the first N cases.
    """
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="knowgic-submit-")) if own else Path(workdir)  # type: ignore[arg-type]
    try:
        submission = load_submission(path, work, limits)
        sha = store.put_submission(submission.archive)
        if sha != submission.sha256:  # pragma: no cover - the store hashes the same bytes
            raise SubmissionError(f"stored archive hash {sha} differs from {submission.sha256}")
        jobs = queue.enqueue(submission, limit=limit)
        if own:
            stored = store.submission_path(sha)
            assert stored is not None
            submission = replace(submission, archive=stored)
        return submission, jobs
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def unpack_stored_archive(
    archive: Path, workdir: Path, limits: SubmissionLimits = SubmissionLimits()
) -> Submission:
    """Load a stored (normalised) archive again, e.g. on a worker; same checks as :func:`load_submission`."""
    return load_submission(archive, workdir, limits)
