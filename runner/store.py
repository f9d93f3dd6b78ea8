"""The results store: every accepted run, content-addressed, written atomically and never overwritten.

The runner writes it (one *verified* entry per finished job), ``knowgic store add`` adds *local* runs (a
``results.json`` someone made with ``knowgic evaluate``), and the leaderboard reads it. One folder::

    STORE/
      results/<sha256>.json        results.json as written; <sha256> is the document's own "sha256" field
                                   (knowgic.evaluation.results.content_sha256), so the name proves the content
      submissions/<sha256>.<ext>   a submission archive (.tar.gz or .zip), by the sha256 of its bytes
      entries/<entry_id>.json      one accepted run: source, results sha256, manifest, job record, date
      queue.sqlite                 the runner's default queue database

Every file is first written beside its final name and then hard-linked into place, which fails when the
name exists: a second writer can never replace what a first one stored. Reading never raises on a bad file:
:meth:`ResultsStore.scan` puts malformed, forged (hash does not match content or name), unreadable or
dangling files into ``skipped`` with a reason a person can act on.

Verification (schema and content hash) of a large results file costs tens of milliseconds, so a store of
thousands of runs remembers what it verified: per process in memory, and across processes as small summary
files in the user cache keyed by the file's sha256, size and modification time. A file changed on disk
after it was verified gets new stat values and is verified again.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.errors import KnowgicError
from knowgic.evaluation.results import content_sha256, results_schema
from knowgic.paths import cache_dir
from runner.options import sqlite_queue_url, store_root

STORE_VERSION = 1
SOURCES = ("verified", "local")
# Parts of a results document that a table row needs; per-edit records and chains are read on demand.
_SUMMARY_DROPS = ("per_edit", "chains")
_ENTRY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ARCHIVE_SUFFIXES = (".tar.gz", ".zip")
_ENTRY_KEYS = ("store_version", "entry_id", "source", "results_sha256", "added_at")


class StoreFileError(KnowgicError):
    """A file in the store is malformed, forged, unreadable or points at something missing."""


def default_store_root() -> Path:
    """``$KNOWGIC_STORE``, else ``./knowgic-store``."""
    return store_root(None)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_entry_id(results_sha256: str) -> str:
    """The entry id of a local run: one entry per distinct results document."""
    return f"local-{results_sha256[:16]}"


@dataclass(frozen=True)
class SkippedFile:
    """A store file that is not shown, and why."""

    path: Path
    reason: str


@dataclass(frozen=True)
class StoreEntry:
    """One accepted run.

    ``summary`` is the verified results document without its per-edit records and chains (what a table
    row needs); :attr:`document` reads and verifies the whole document from disk when asked.
    """

    entry_id: str
    source: str
    results_sha256: str
    summary: dict[str, Any]
    manifest: dict[str, Any] | None
    job: dict[str, Any] | None
    submission_sha256: str | None
    added_at: str
    label: str | None
    path: Path
    results_file: Path

    @property
    def document(self) -> dict[str, Any]:
        """The full results document, read and verified again (schema, content hash, file name)."""
        return _read_results(self.results_file, expected_sha=self.results_sha256, validator=_validator())


@dataclass
class StoreScan:
    entries: list[StoreEntry] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    """The results schema's validator, built once per process (building it resolves every $ref)."""
    return jsonschema.Draft202012Validator(results_schema())


def _schema_problem(document: Any, validator: jsonschema.Draft202012Validator) -> str | None:
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is None:
        return None
    pointer = "/" + "/".join(str(p) for p in error.absolute_path)
    message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
    return f"{pointer}: {message}"


def _verify_document(document: Any, where: str, validator: jsonschema.Draft202012Validator) -> str:
    """Check schema and self-hash; return the sha256. Raises :class:`StoreFileError` naming the problem."""
    if not isinstance(document, dict):
        raise StoreFileError(f"{where}: a results document is a JSON object, found {type(document).__name__}")
    problem = _schema_problem(document, validator)
    if problem is not None:
        raise StoreFileError(f"{where} does not follow results.schema.json: {problem}")
    sha = content_sha256(document)
    if document["sha256"] != sha:
        raise StoreFileError(
            f"{where}: recorded sha256 does not match its content (edited after it was written?)"
        )
    return sha


def verify_results(document: Any, where: str) -> str:
    """Check a results document's schema and self-hash as the store does; return its sha256.

    Raises :class:`StoreFileError` naming the problem (``where`` says which file or upload it is)."""
    return _verify_document(document, where, _validator())


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise StoreFileError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise StoreFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreFileError(f"{what} {path} is not valid JSON: {exc}") from None


def _read_results(
    path: Path, expected_sha: str, validator: jsonschema.Draft202012Validator
) -> dict[str, Any]:
    document = _read_json(path, "results file")
    sha = _verify_document(document, str(path), validator)
    if sha != expected_sha:
        raise StoreFileError(f"{path}: its content hash {sha[:12]}… is not the one its name/entry gives")
    return document


def _summary(document: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in _SUMMARY_DROPS}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


class ResultsStore:
    """A results store folder (see the module docstring). Nothing is created until the first write."""

    def __init__(self, root: str | Path, verified_cache: Path | None = None) -> None:
        self.root = Path(root)
        # Summaries of verified results files, shared by every process of this user.
        self._cache_root = verified_cache
        self._memo: dict[tuple[str, int, int], dict[str, Any]] = {}
        self._records: dict[tuple[str, int, int], dict[str, Any]] = {}  # entry files by (name, size, mtime)

    # -- layout ---------------------------------------------------------------------------------------
    @property
    def results_dir(self) -> Path:
        return self.root / "results"

    @property
    def submissions_dir(self) -> Path:
        return self.root / "submissions"

    @property
    def entries_dir(self) -> Path:
        return self.root / "entries"

    def queue_url(self) -> str:
        """The default queue database: SQLite beside the store."""
        return sqlite_queue_url(self.root)

    def results_path(self, sha256: str) -> Path:
        return self.results_dir / f"{sha256}.json"

    def entry_path(self, entry_id: str) -> Path:
        return self.entries_dir / f"{entry_id}.json"

    def submission_path(self, sha256: str) -> Path | None:
        for suffix in _ARCHIVE_SUFFIXES:
            path = self.submissions_dir / f"{sha256}{suffix}"
            if path.is_file():
                return path
        return None

    # -- writing --------------------------------------------------------------------------------------
    def _create(self, path: Path, data: bytes) -> bool:
        """Write ``data`` to ``path`` unless it exists; True when this call created it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            try:
                os.link(tmp, path)  # atomic, and fails when the name exists: never overwrites
            except FileExistsError:
                return False
            return True
        except OSError as exc:
            raise KnowgicError(f"cannot write {path} into the store: {exc.strerror or exc}") from None
        finally:
            Path(tmp).unlink(missing_ok=True)

    def put_results(self, results: str | Path | Mapping[str, Any]) -> str:
        """Verify a results document (schema and content hash) and store it by its sha256; return it.

        A path is stored byte for byte; a document is written as ``knowgic evaluate`` writes it. Storing
        the same document twice is a no-op; a different file already under that name is an error.
        """
        if isinstance(results, Mapping):
            document: Any = dict(results)
            where = "results document"
            data = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
        else:
            path = Path(results)
            where = str(path)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise KnowgicError(f"results file {path} does not exist") from None
            except OSError as exc:
                raise KnowgicError(f"cannot read results file {path}: {exc.strerror or exc}") from None
            try:
                document = json.loads(data)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise KnowgicError(f"results file {path} is not valid JSON: {exc}") from None
        sha = _verify_document(document, where, _validator())
        target = self.results_path(sha)
        if not self._create(target, data):
            try:
                _read_results(target, sha, _validator())
            except StoreFileError as exc:
                raise KnowgicError(f"the store already holds a damaged file under this name: {exc}") from None
        return sha

    def put_submission(self, archive_path: str | Path) -> str:
        """Store a submission archive (.tar.gz or .zip) by the sha256 of its bytes; return it."""
        path = Path(archive_path)
        suffix = next((s for s in _ARCHIVE_SUFFIXES if path.name.endswith(s)), None)
        if suffix is None:
            raise KnowgicError(f"{path}: a submission archive ends in .tar.gz or .zip")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise KnowgicError(f"cannot read submission archive {path}: {exc.strerror or exc}") from None
        sha = hashlib.sha256(data).hexdigest()
        self._create(self.submissions_dir / f"{sha}{suffix}", data)
        return sha

    def _add_entry(self, record: dict[str, Any]) -> StoreEntry:
        entry_id = record["entry_id"]
        if not _ENTRY_ID.match(entry_id):
            raise KnowgicError(f"entry id {entry_id!r} is not a safe name (letters, digits, '.', '_', '-')")
        path = self.entry_path(entry_id)
        data = json.dumps(record, indent=2, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
        if not self._create(path, data):
            existing = _read_json(path, "store entry")
            if existing.get("results_sha256") != record["results_sha256"]:
                raise KnowgicError(
                    f"the store already has an entry {entry_id!r} for other results "
                    f"({str(existing.get('results_sha256'))[:12]}…); entries are never overwritten"
                )
        return self.load_entry(path)

    def add_verified(
        self,
        results: str | Path | Mapping[str, Any],
        *,
        archive_path: str | Path,
        manifest: Mapping[str, Any],
        job: Mapping[str, Any],
    ) -> StoreEntry:
        """Store a run made by the runner: its results, the submission archive and the job record.

        The entry id is the job id, so a job whose worker died after storing is recorded once.
        """
        job_id = str(job.get("job_id", ""))
        results_sha = self.put_results(results)
        submission_sha = self.put_submission(archive_path)
        return self._add_entry(
            {
                "store_version": STORE_VERSION,
                "entry_id": job_id,
                "source": "verified",
                "results_sha256": results_sha,
                "submission_sha256": submission_sha,
                "manifest": dict(manifest),
                "job": dict(job),
                "added_at": _now(),
                "label": None,
            }
        )

    def add_local(self, results_path: str | Path, *, label: str | None = None) -> StoreEntry:
        """Store a ``results.json`` someone ran locally; adding the same results again is a no-op."""
        results_sha = self.put_results(results_path)
        return self._add_entry(
            {
                "store_version": STORE_VERSION,
                "entry_id": local_entry_id(results_sha),
                "source": "local",
                "results_sha256": results_sha,
                "submission_sha256": None,
                "manifest": None,
                "job": None,
                "added_at": _now(),
                "label": label,
            }
        )

    # -- reading --------------------------------------------------------------------------------------
    def _verified_summary(self, path: Path, sha: str) -> dict[str, Any]:
        """The summary of a results file, verified once per (sha256, size, mtime)."""
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise StoreFileError(f"results file {path} is missing") from None
        except OSError as exc:
            raise StoreFileError(f"cannot read results file {path}: {exc.strerror or exc}") from None
        key = (sha, stat.st_size, stat.st_mtime_ns)
        if key in self._memo:
            return self._memo[key]
        cache_file = self._summary_cache_dir() / f"{sha}-{stat.st_size}-{stat.st_mtime_ns}.json"
        summary = None
        try:
            cached = json.loads(cache_file.read_bytes())
            if isinstance(cached, dict) and cached.get("sha256") == sha:
                summary = cached
        except (OSError, ValueError):
            pass
        if summary is None:
            summary = _summary(_read_results(path, sha, _validator()))
            try:
                cache_file.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=cache_file.parent, prefix=".summary.")
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(summary, handle, ensure_ascii=False)
                os.replace(tmp, cache_file)
            except OSError:
                pass  # a read-only cache only costs speed
        self._memo[key] = summary
        return summary

    def _summary_cache_dir(self) -> Path:
        if self._cache_root is None:
            self._cache_root = cache_dir() / "store-summaries"
        return self._cache_root

    def _entry_record(self, path: Path) -> dict[str, Any]:
        """An entry file's record, checked (not its results); raises :class:`StoreFileError`."""
        record = _read_json(path, "store entry")
        if not isinstance(record, dict):
            raise StoreFileError(f"store entry {path} is not a JSON object")
        missing = [k for k in _ENTRY_KEYS if k not in record]
        if missing:
            raise StoreFileError(f"store entry {path} lacks {', '.join(missing)}")
        if record["store_version"] != STORE_VERSION:
            raise StoreFileError(
                f"store entry {path} has store_version {record['store_version']!r}; this knowgic reads "
                f"{STORE_VERSION}"
            )
        if record["source"] not in SOURCES:
            raise StoreFileError(f"store entry {path}: unknown source {record['source']!r}")
        if f"{record['entry_id']}.json" != path.name:
            raise StoreFileError(f"store entry {path} names itself {record['entry_id']!r}")
        sha = record["results_sha256"]
        if not isinstance(sha, str) or not _SHA256.match(sha):
            raise StoreFileError(f"store entry {path}: results_sha256 {sha!r} is not a sha256")
        submission_sha = record.get("submission_sha256")
        if submission_sha is not None and (
            not isinstance(submission_sha, str) or not _SHA256.match(submission_sha)
        ):
            raise StoreFileError(f"store entry {path}: submission_sha256 {submission_sha!r} is not a sha256")
        if record["source"] == "verified" and submission_sha is None:
            raise StoreFileError(f"store entry {path}: a verified run names no submission archive")
        for key in ("manifest", "job"):
            if record.get(key) is not None and not isinstance(record[key], dict):
                raise StoreFileError(f"store entry {path}: {key} is not a JSON object")
        return record

    def _entry(self, record: dict[str, Any], path: Path) -> StoreEntry:
        submission_sha = record.get("submission_sha256")
        if submission_sha is not None and self.submission_path(submission_sha) is None:
            raise StoreFileError(
                f"store entry {path}: its submission archive {submission_sha[:12]}… is missing"
            )
        results_file = self.results_path(record["results_sha256"])
        return StoreEntry(
            entry_id=record["entry_id"],
            source=record["source"],
            results_sha256=record["results_sha256"],
            summary=self._verified_summary(results_file, record["results_sha256"]),
            manifest=record.get("manifest"),
            job=record.get("job"),
            submission_sha256=submission_sha,
            added_at=str(record["added_at"]),
            label=record.get("label"),
            path=path,
            results_file=results_file,
        )

    def load_entry(self, path: str | Path) -> StoreEntry:
        """Read one entry file and verify the results it names; raises :class:`StoreFileError`."""
        path = Path(path)
        return self._entry(self._entry_record(path), path)

    def scan(self) -> StoreScan:
        """Every entry, verified; bad files in ``skipped``. Unchanged files are not read again."""
        scan = StoreScan()
        try:
            paths = sorted(p for p in self.entries_dir.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            return scan
        except OSError as exc:
            scan.skipped.append(
                SkippedFile(self.entries_dir, f"cannot list the entries: {exc.strerror or exc}")
            )
            return scan
        for path in paths:
            if path.suffix != ".json":
                scan.skipped.append(SkippedFile(path, "not an entry file (entries end in .json)"))
                continue
            try:
                stat = path.stat()
                key = (path.name, stat.st_size, stat.st_mtime_ns)
                record = self._records.get(key)
                if record is None:
                    record = self._records[key] = self._entry_record(path)
                # The results file is checked every time (a stat, then the memo): it may have changed.
                scan.entries.append(self._entry(record, path))
            except StoreFileError as exc:
                scan.skipped.append(SkippedFile(path, str(exc)))
            except OSError as exc:
                scan.skipped.append(SkippedFile(path, f"cannot read it: {exc.strerror or exc}"))
        return scan
