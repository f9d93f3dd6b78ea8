"""Reading and writing dataset files: rows (JSON, JSON Lines, Parquet), alias maps, canonical JSON, hashes.

Every read error becomes :class:`UnreadableInput` naming the file and the place (line, column or byte);
every write goes to a temporary file first and is moved into place, so nothing is left half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError

ROW_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet")


class UnreadableInput(KnowgicError):
    """A file that cannot be decoded or parsed (not UTF-8, truncated, not JSON, not Parquet): an input error
    (exit code 2); ``knowgic validate`` reports it among the problems it finds instead."""


# --- canonical JSON and hashes ---------------------------------------------------------------------


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 characters kept: the form every content hash is taken over."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def short_id(parts: Sequence[str]) -> str:
    """First 12 hex digits of the sha256 of ``json.dumps(parts)`` (the scheme of ``EditRequest.edit_id``)."""
    return sha256_text(json.dumps(list(parts), ensure_ascii=False))[:12]


# --- reading ---------------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    """The file's text, decoded as strict UTF-8 (a leading BOM is tolerated)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KnowgicError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise KnowgicError(f"{path} is a folder, expected a file") from None
    except OSError as exc:
        raise UnreadableInput(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableInput(
            f"{path}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


class _BeyondLimits(ValueError):
    """Well-formed JSON that cannot be held: nesting past the recursion limit, an integer too long for
    ``int``, a string that is not text (an unpaired UTF-16 surrogate escape)."""


def _parse_int(literal: str) -> int:
    # int() refuses literals longer than sys.get_int_max_str_digits() with a message about
    # set_int_max_str_digits; say what is wrong with the file instead.
    limit = sys.get_int_max_str_digits()
    digits = len(literal) - literal.startswith("-")
    if limit and digits > limit:
        raise _BeyondLimits(f"an integer literal has {digits} digits (at most {limit} can be read)")
    return int(literal)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_text(value: Any, text: str) -> None:
    """Raise when a string or key of ``value`` holds an unpaired surrogate (``"\\ud800"`` is valid JSON
    syntax but not Unicode text: it cannot be written as UTF-8, printed or hashed)."""
    # text decoded from UTF-8 holds no surrogates of its own: only \u escapes can make them
    if not _SURROGATE_ESCAPE.search(text):
        return
    dumped = json.dumps(value, ensure_ascii=False)
    try:
        dumped.encode("utf-8")
    except UnicodeEncodeError as exc:
        context = dumped[max(0, exc.start - 40) : exc.start + 1]
        raise _BeyondLimits(
            f"a string holds an unpaired UTF-16 surrogate escape, which is not text (near {context!a})"
        ) from None


def _loads(text: str) -> Any:
    """``json.loads``; the ways well-formed JSON can still not be read become :class:`_BeyondLimits`."""
    try:
        value = json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise _BeyondLimits("arrays or objects are nested too deeply to read") from None
    _check_text(value, text)
    return value


def parse_json(text: str, where: str) -> Any:
    try:
        return _loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableInput(
            f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except _BeyondLimits as exc:
        raise UnreadableInput(f"{where}: unreadable JSON: {exc}") from None


def read_json(path: Path) -> Any:
    text = read_text(path)
    if not text.strip():
        raise UnreadableInput(f"{path}: the file is empty")
    return parse_json(text, str(path))


def read_jsonl(path: Path) -> list[Any]:
    rows: list[Any] = []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(_loads(line))
        except json.JSONDecodeError as exc:
            raise UnreadableInput(
                f"{path}: line {lineno} is not valid JSON (column {exc.colno}: {exc.msg})"
            ) from None
        except _BeyondLimits as exc:
            raise UnreadableInput(f"{path}: line {lineno} is unreadable JSON: {exc}") from None
    return rows


def read_parquet(path: Path) -> list[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.exists():
        raise KnowgicError(f"{path} does not exist")
    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, ValueError, OverflowError, TypeError, NotImplementedError) as exc:
        # corrupt footers and pages (ArrowException, OSError), strings that are not UTF-8 (ValueError),
        # dates and timestamps out of Python's range (OverflowError), types with no Python value
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise UnreadableInput(f"{path}: not a readable Parquet file ({detail})") from None


def read_rows(path: Path) -> list[Any]:
    """Rows from a ``.json`` (an array of rows, or one row), ``.jsonl``/``.ndjson`` or ``.parquet`` file."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return read_jsonl(path)
    if suffix == ".parquet":
        return read_parquet(path)
    if suffix == ".json":
        data = read_json(path)
        if isinstance(data, list):
            return data
        return [data]
    raise KnowgicError(
        f"{path}: unsupported file type {suffix or '(none)'}; expected one of {', '.join(ROW_SUFFIXES)} "
        "or a dataset folder"
    )


def path_inside(folder: Path, rel: str) -> Path | None:
    """``folder / rel`` if it stays inside ``folder`` once ``..`` and symbolic links are resolved, else None.

    A dataset folder names its files by relative paths (card ``data_files``, ``version.json``); an absolute
    path, one climbing out with ``..``, a link leading out, or a name that is no file name (NUL, unpaired
    surrogate) must not make a reader open files elsewhere.
    """
    if not rel or "\x00" in rel or Path(rel).is_absolute():
        return None
    try:
        os.fsencode(rel)
        root = folder.resolve()
        target = (folder / rel).resolve()
    except (OSError, RuntimeError, UnicodeError, ValueError):  # RuntimeError: a symbolic-link loop
        return None
    if target != root and root not in target.parents:
        return None
    return folder / rel


def is_alias_map(data: Any) -> bool:
    """Whether parsed JSON looks like an alias map (entity -> list, or entity -> {"answer_alias": list})."""
    if not isinstance(data, dict) or not data:
        return False
    return all(
        isinstance(v, list) or (isinstance(v, dict) and set(v) == {"answer_alias"}) for v in data.values()
    )


def alias_lists(raw: Mapping[str, Any]) -> dict[str, list[str]]:
    """Alias map (schema-valid, either form) -> entity -> list of aliases as given (order and repeats kept)."""
    out: dict[str, list[str]] = {}
    for entity, value in raw.items():
        names = value["answer_alias"] if isinstance(value, dict) else value
        out[entity] = list(names)
    return out


def clean_aliases(raw: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Entity -> its distinct aliases in order, the entity itself left out (the form scorers use)."""
    out: dict[str, tuple[str, ...]] = {}
    for entity, names in raw.items():
        seen: list[str] = []
        for name in names:
            if name != entity and name not in seen:
                seen.append(name)
        out[entity] = tuple(seen)
    return out


# --- writing ---------------------------------------------------------------------------------------


def atomic_write_bytes(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` through a temporary file; returns False (and writes nothing) if unchanged."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these are ordinary package files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def atomic_write_text(path: Path, text: str) -> bool:
    return atomic_write_bytes(path, text.encode("utf-8"))


def jsonl_text(rows: Iterable[Mapping[str, Any]]) -> str:
    """One compact JSON object per line, keys in the given order, UTF-8 characters kept."""
    return "".join(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n" for row in rows)


def aliases_text(aliases: Mapping[str, Sequence[str]]) -> str:
    """The alias map as JSON with one entity per line (small, readable diffs)."""
    lines = [
        f"  {json.dumps(entity, ensure_ascii=False)}: {json.dumps(list(names), ensure_ascii=False)}"
        for entity, names in aliases.items()
    ]
    return "{\n" + ",\n".join(lines) + "\n}\n"


# --- the regeneration scripts ----------------------------------------------------------------------


def report_rebuild(rebuild: Callable[[], Mapping[str, Sequence[str]]]) -> int:
    """Run a regeneration of shipped files (``python -m knowgic.dataset.build``, ``… .tracks``): one line per
    version with the files it rewrote (or "unchanged"); one ``error:`` line and its exit code on failure."""
    try:
        changed = rebuild()
    except KnowgicError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for version, paths in changed.items():
        print(f"{version}: " + (", ".join(paths) if paths else "unchanged"))
    return 0
