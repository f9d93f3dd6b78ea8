"""The results store: every accepted run, content-addressed, written atomically and never overwritten.

The runner writes it (one signed *verified* entry per finished job), ``knowgic store add`` adds *local* runs
(a ``results.json`` someone made with ``knowgic evaluate``), and the leaderboard reads it. One folder::

    STORE/
      results/<sha256>.json        results.json as written; <sha256> is the document's own "sha256" field
                                   (knowgic.results.content_sha256), so the name proves the content
      submissions/<sha256>.<ext>   a submission archive (.tar.gz or .zip), by the sha256 of its bytes
      entries/<entry_id>.json      one accepted run: source, results sha256, manifest, job record, date,
                                   and for a runner run the worker's signature (store_entry.schema.json)
      queue.sqlite                 the runner's default queue database

Nothing in the folder is believed for being there. A results file passes :mod:`knowgic.runner.store.checks` (size,
finite numbers, declared ranges, intervals, every headline value recomputed from its records) when it is
stored and again when it is read. An entry is *verified* only when a worker's Ed25519 signature over it
checks against a key the reader trusts (:mod:`knowgic.runner.store.signing`); any other entry, whatever its ``source``
says, is read as *local*, with the reason.

Every file is first written beside its final name and then hard-linked into place, which fails when the
name exists: a second writer can never replace what a first one stored. Reading never raises on a bad file:
:meth:`ResultsStore.scan` puts malformed, forged (hash does not match content or name), unreadable or
dangling files, and results files that no entry names, into ``skipped`` with a reason a person can act on.

Nothing read is believed for its name, its size or its modification time either. Every results file and
submission archive is hashed against what its entry names when it is read: a listing (``scan``, which
``knowgic store list`` and the leaderboard read) hashes each file once per change of its *stat key*
(device, inode, size, modification and change time: the kernel sets the change time on every write and
every ``utime``, so an edit whose modification time was put back still changes the key; a file changed less
than ``RACY_SECONDS`` before it was hashed is hashed again next time, since a second change within the
clock's granularity could leave the key as it was), and serving a file (:attr:`StoreEntry.document`,
:meth:`ResultsStore.submission_path`) hashes it in full every time. A submission archive whose bytes no
longer hash to the sha256 its entry names (another archive copied over it) makes its run *local*, with the
reason, and is never served; a results file that holds another valid results document than its entry names
(edited, its own sha256 recomputed) makes its run local, with the reason, and one that fails a check is
skipped.

Verifying a full results file (schema, hash, recomputed metrics) costs most of a second, so a store of
thousands of runs remembers what it verified: per process in memory, and across processes as small summary
files in the user cache (never in the store) keyed by the sha256 of the file's bytes and the checks'
version, so a summary is only ever reused for the very bytes it was made from.
``scan(verify=False)`` returns at once with what is already verified and lists the rest as ``unverified``,
for a reader that verifies them in the background (the leaderboard).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import multiprocessing
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from stat import S_ISREG
from typing import Any

import jsonschema

from knowgic.dataset.schemas import load_schema
from knowgic.errors import KnowgicError
from knowgic.paths import cache_dir
from knowgic.results import ResultsDocument, results_document
from knowgic.runner.options import sqlite_queue_url, store_root
from knowgic.runner.store.checks import (
    LIMITS,
    CheckFailed,
    check_sizes,
    check_values,
    parse_json,
    read_capped,
    read_capped_stat,
)
from knowgic.runner.store.signing import Signer, TrustedKeys
from knowgic.schema_errors import first_error_line

STORE_VERSION = 1
SOURCES = ("verified", "local")
# Bumped whenever the checks a results file passes change: summaries verified by older checks are redone.
CHECKS_VERSION = 2
# A file changed this recently when it was hashed may change again within the clock's granularity without
# changing its stat key: its hash is not remembered (git's "racy" rule).
RACY_SECONDS = 2.0
# Parts of a results document that a table row needs; per-edit records and chains are read on demand.
_ENTRY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ARCHIVE_SUFFIXES = (".tar.gz", ".zip")


class StoreFileError(CheckFailed):
    """A file in the store is malformed, forged, unreadable, too large or points at something missing."""


def default_store_root() -> Path:
    """``$KNOWGIC_STORE``, else ``./knowgic-store``."""
    return store_root(None)


# The cheap check of a file: (device, inode, size, mtime_ns, ctime_ns).
FileStat = tuple[int, int, int, int, int]


def _file_stat(stat: os.stat_result) -> FileStat:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _stable(before: os.stat_result, after: os.stat_result) -> FileStat | None:
    """The stat key to remember a hash by: None when the file changed while it was read, or so recently
    that another change could leave the key as it is."""
    key = _file_stat(before)
    if key != _file_stat(after):
        return None
    changed = max(before.st_mtime_ns, before.st_ctime_ns) / 1e9
    return key if time.time() - changed > RACY_SECONDS else None


def _read_hashed(path: Path, what: str, max_bytes: int) -> tuple[bytes, str, FileStat | None]:
    """The bytes of ``path`` (refused before reading when over ``max_bytes``), their sha256, and the stat
    key to remember that hash by (:func:`_stable`). Raises :class:`StoreFileError`."""
    try:
        data, before, after = read_capped_stat(path, what, max_bytes, missing="is missing")
    except CheckFailed as exc:
        raise StoreFileError(str(exc)) from None
    return data, hashlib.sha256(data).hexdigest(), _stable(before, after)


def _hash_file(path: Path, what: str) -> tuple[str, FileStat | None]:
    """The sha256 of a file's bytes, streamed, and the stat key to remember it by (:func:`_stable`)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            before = os.fstat(handle.fileno())
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
            after = os.fstat(handle.fileno())
    except FileNotFoundError:
        raise StoreFileError(f"{what} {path} is missing") from None
    except OSError as exc:
        raise StoreFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return digest.hexdigest(), _stable(before, after)


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
    source: str  # "verified" only with a trusted signature; else "local"
    results_sha256: str
    summary: dict[str, Any]
    manifest: dict[str, Any] | None
    job: dict[str, Any] | None
    submission_sha256: str | None
    added_at: str
    label: str | None
    path: Path
    results_file: Path
    trust: str = ""  # who signed a verified entry, or why an entry is read as local
    # Why the run is shown as local although its entry claims more, or why its files disagree with its
    # entry (a replaced archive, other results); None when nothing is wrong.
    warning: str | None = None

    @property
    def document(self) -> dict[str, Any]:
        """The full results document, read, hashed and verified again (every check of
        :mod:`knowgic.runner.store.checks`); raises :class:`StoreFileError` when the file no longer holds
        the results this entry was listed with."""
        return _read_results(self.results_file, expected_sha=self.results_sha256)

    @property
    def submitter(self) -> str | None:
        """Who submitted the run (``token:NAME``, ``huggingface:USER``), as its job record says; None for a
        local run and for a job queued without an account."""
        value = (self.job or {}).get("submitter")
        return value if isinstance(value, str) else None


@dataclass
class StoreScan:
    entries: list[StoreEntry] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    unverified: list[Path] = field(default_factory=list)  # entry files whose results are not verified yet


@lru_cache(maxsize=1)
def _entry_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema("store_entry"))


def _schema_problem(document: Any, validator: jsonschema.Draft202012Validator) -> str | None:
    return first_error_line(validator.iter_errors(document))


def _verify_document(document: Any, where: str) -> ResultsDocument:
    """The bounds of :mod:`knowgic.runner.store.checks` first (sizes, before anything walks the document),
    then the results format's own checks (:func:`knowgic.results.results_document`: schema version, schema,
    self-hash), then the values (ranges, recomputed metrics). Raises :class:`StoreFileError` naming the
    problem."""
    if not isinstance(document, dict):
        raise StoreFileError(f"{where}: a results document is a JSON object, found {type(document).__name__}")
    try:
        check_sizes(document, where)
        checked = results_document(document, where)
        check_values(checked, where)
    except (CheckFailed, KnowgicError) as exc:
        raise StoreFileError(str(exc)) from None
    return checked


def verify_results(document: Any, where: str) -> str:
    """Check a results document as the store does (sizes, schema, self-hash, values, recomputed metrics);
    return its sha256. Raises :class:`StoreFileError` naming the problem (``where``: which file it is)."""
    return _verify_document(document, where).sha256


def _read_json(path: Path, what: str, max_bytes: int) -> Any:
    try:
        return parse_json(read_capped(path, what, max_bytes), f"{what} {path}")
    except CheckFailed as exc:
        raise StoreFileError(str(exc)) from None


def _verify_bytes(data: bytes, path: Path) -> ResultsDocument:
    try:
        document = parse_json(data, f"results file {path}")
    except CheckFailed as exc:
        raise StoreFileError(str(exc)) from None
    return _verify_document(document, str(path))


def _read_results(path: Path, expected_sha: str) -> ResultsDocument:
    """The results file at ``path``, hashed and verified in full; its document must be ``expected_sha``."""
    data, _, _ = _read_hashed(path, "results file", LIMITS.file_bytes)
    document = _verify_bytes(data, path)
    if document.sha256 != expected_sha:
        raise StoreFileError(
            f"{path}: its content hash {document.sha256[:12]}… is not the one its name/entry gives"
        )
    return document


def _summary(document: ResultsDocument) -> dict[str, Any]:
    return dict(document.summary())


def _verify_in_child(results_file: str) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """In a worker process: every check of a results file; the sha256 of the bytes it checked and their
    summary, or why they fail."""
    path = Path(results_file)
    try:
        data, digest, _ = _read_hashed(path, "results file", LIMITS.file_bytes)
    except StoreFileError:
        return None, None, None  # the reader says why when it looks again
    try:
        return digest, _summary(_verify_bytes(data, path)), None
    except StoreFileError as exc:
        return digest, None, str(exc)
    except Exception as exc:  # a hostile file must not stop the reader: it is skipped, with the reason
        return digest, None, f"{path}: cannot verify it: {type(exc).__name__}: {exc}"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


class ResultsStore:
    """A results store folder (see the module docstring). Nothing is created until the first write."""

    def __init__(
        self,
        root: str | Path,
        verified_cache: Path | None = None,
        trusted_keys: TrustedKeys | None = None,
    ) -> None:
        """``trusted_keys``: the keys whose signatures make an entry verified (default: the trusted keys
        file of :func:`knowgic.runner.store.signing.default_trusted_keys_path`, read at the first scan)."""
        self.root = Path(root)
        # Summaries of verified results files, shared by every process of this user.
        self._cache_root = verified_cache
        self._trusted = trusted_keys
        # Summaries of verified results, and why results failed, by the sha256 of the bytes checked.
        self._memo: dict[str, dict[str, Any]] = {}
        self._failed: dict[str, str] = {}
        # The sha256 of each file hashed, with the stat key it was hashed under (see the module docstring).
        self._digests: dict[str, tuple[FileStat, str]] = {}
        # Entry files by path: their stat key, the checked record and why it is (not) verified.
        self._records: dict[Path, tuple[FileStat, tuple[dict[str, Any], str | None]]] = {}

    @property
    def trusted_keys(self) -> TrustedKeys:
        if self._trusted is None:
            self._trusted = TrustedKeys.load()
        return self._trusted

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

    def _archive_file(self, sha256: str) -> tuple[Path, os.stat_result] | None:
        """The file stored under ``sha256`` and its stat (not hashed)."""
        for suffix in _ARCHIVE_SUFFIXES:
            path = self.submissions_dir / f"{sha256}{suffix}"
            try:
                stat = path.stat()
            except OSError:
                continue
            if S_ISREG(stat.st_mode):
                return path, stat
        return None

    def submission_path(self, sha256: str) -> Path | None:
        """The submission archive stored under ``sha256``, hashed in full now: None when it is missing or its
        bytes no longer hash to ``sha256`` (another archive copied over it), so a replaced archive is never
        served or run. :meth:`submission_problem` says which."""
        found = self._archive_file(sha256)
        if found is None:
            return None
        path = found[0]
        try:
            digest, stat = _hash_file(path, "submission archive")
        except StoreFileError:
            return None
        self._remember_digest(path, stat, digest)
        return path if digest == sha256 else None

    def submission_problem(self, sha256: str, *, full: bool = True) -> str | None:
        """Why the archive stored under ``sha256`` cannot be believed (missing, unreadable, or its bytes hash
        to another sha256), or None. ``full=False``: hash only when its stat key changed since the last
        time (what a listing does)."""
        found = self._archive_file(sha256)
        if found is None:
            return f"its submission archive {sha256[:12]}… is missing"
        return self._archive_mismatch(sha256, *found, full=full)

    def _archive_mismatch(self, sha256: str, path: Path, stat: os.stat_result, *, full: bool) -> str | None:
        digest = None if full else self._known_digest(path, stat)
        if digest is None:
            try:
                digest, key = _hash_file(path, "submission archive")
            except StoreFileError as exc:
                return str(exc)
            self._remember_digest(path, key, digest)
        if digest != sha256:
            return (
                f"its submission archive {path.name[:12]}…{''.join(path.suffixes)} holds other bytes (sha256 "
                f"{digest[:12]}…) than the {sha256[:12]}… its entry names: replaced after it was stored"
            )
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
            if len(data) > LIMITS.file_bytes:
                raise StoreFileError(
                    f"{where} is {len(data):,} bytes; the store accepts at most {LIMITS.file_bytes:,}"
                )
        else:
            path = Path(results)
            where = str(path)
            data = read_capped(path, "results file", LIMITS.file_bytes)
            document = parse_json(data, f"results file {path}")
        sha = _verify_document(document, where).sha256
        target = self.results_path(sha)
        if not self._create(target, data):
            try:
                _read_results(target, sha)
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
        if not self._create(self.submissions_dir / f"{sha}{suffix}", data):
            problem = self.submission_problem(sha)
            if problem is not None:
                raise KnowgicError(f"the store already holds a damaged file under this name: {problem}")
        return sha

    def _add_entry(self, record: dict[str, Any]) -> StoreEntry:
        entry_id = record["entry_id"]
        if not _ENTRY_ID.match(entry_id):
            raise KnowgicError(f"entry id {entry_id!r} is not a safe name (letters, digits, '.', '_', '-')")
        path = self.entry_path(entry_id)
        problem = _schema_problem(record, _entry_validator())
        if problem is not None:
            raise KnowgicError(f"entry {entry_id!r} does not follow store_entry.schema.json: {problem}")
        data = json.dumps(record, indent=2, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
        if len(data) > LIMITS.entry_bytes:
            raise KnowgicError(
                f"entry {entry_id!r} is {len(data):,} bytes; the store accepts at most {LIMITS.entry_bytes:,}"
            )
        if not self._create(path, data):
            existing = _read_json(path, "store entry", LIMITS.entry_bytes)
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
        signer: Signer,
    ) -> StoreEntry:
        """Store a run made by the runner: its results, the submission archive and the job record, signed
        with the worker's key (``signer``).

        The entry id is the job id, so a job whose worker died after storing is recorded once.
        """
        job_id = str(job.get("job_id", ""))
        results_sha = self.put_results(results)
        submission_sha = self.put_submission(archive_path)
        record = {
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
        # The record is signed as it will read back (JSON round trip), so that the reader's bytes match.
        return self._add_entry(signer.sign(json.loads(json.dumps(record, ensure_ascii=False))))

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
    def _known_digest(self, path: Path, stat: os.stat_result | None = None) -> str | None:
        """The sha256 of ``path``'s bytes when it was hashed before and its stat key (``stat``, else read
        now) is unchanged since."""
        known = self._digests.get(str(path))
        if known is None:
            return None
        if stat is None:
            try:
                stat = path.stat()
            except OSError:
                return None
        return known[1] if known[0] == _file_stat(stat) else None

    def _remember_digest(self, path: Path, stat: FileStat | None, digest: str) -> None:
        if stat is None:  # hashed while it changed, or just after: hash it again next time
            self._digests.pop(str(path), None)
        else:
            self._digests[str(path)] = (stat, digest)

    def _cache_file(self, digest: str) -> Path:
        return self._summary_cache_dir() / f"{digest}-c{CHECKS_VERSION}.json"

    def _cached_summary(self, digest: str) -> dict[str, Any] | None:
        """The summary of results bytes with sha256 ``digest`` verified earlier (this process or another),
        or None; raises :class:`StoreFileError` again for bytes that failed in this process."""
        if digest in self._memo:
            return self._memo[digest]
        if digest in self._failed:
            raise StoreFileError(self._failed[digest])
        try:
            cached = json.loads(self._cache_file(digest).read_bytes())
        except (OSError, ValueError):
            return None
        if isinstance(cached, dict) and isinstance(cached.get("sha256"), str) and "config" in cached:
            self._memo[digest] = cached
            return cached
        return None

    def _results_summary(self, path: Path, *, verify: bool = True) -> dict[str, Any] | None:
        """The summary of the results file at ``path``, by the sha256 of its bytes: hashed when its stat key
        changed, verified once per content (and checks version). ``verify=False``: None when these bytes
        were never verified. Raises :class:`StoreFileError`."""
        data = None
        digest = self._known_digest(path)
        if digest is None:
            data, digest, stat = _read_hashed(path, "results file", LIMITS.file_bytes)
            self._remember_digest(path, stat, digest)
        summary = self._cached_summary(digest)
        if summary is not None or not verify:
            return summary
        if data is None:
            data, digest, stat = _read_hashed(path, "results file", LIMITS.file_bytes)
            self._remember_digest(path, stat, digest)
            summary = self._cached_summary(digest)
            if summary is not None:
                return summary
        try:
            summary = _summary(_verify_bytes(data, path))
        except StoreFileError as exc:
            self._failed[digest] = str(exc)
            raise
        self._remember(digest, summary)
        return summary

    def _remember(self, digest: str, summary: dict[str, Any]) -> None:
        """Keep a verified summary: in memory and in the cache shared with other processes."""
        cache_file = self._cache_file(digest)
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cache_file.parent, prefix=".summary.")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(summary, handle, ensure_ascii=False)
            os.replace(tmp, cache_file)
        except OSError:
            pass  # a read-only cache only costs speed
        self._memo[digest] = summary

    def verify_entries(
        self, paths: Sequence[Path], processes: int, stop: Callable[[], bool] = lambda: False
    ) -> Iterator[tuple[Path, StoreEntry | StoreFileError]]:
        """Verify the results of entry files (``scan(verify=False).unverified``) in ``processes`` worker
        processes (0: in this one), yielding each entry, or the error that skips it, as it is done.

        Worker processes verify with the same code and return the summaries; this process keeps them
        (memory and cache) and checks the entries' signatures itself. ``stop()`` True ends it early."""
        if processes < 1:
            for path in paths:
                if stop():
                    return
                try:
                    yield path, self.load_entry(path)
                except StoreFileError as exc:
                    yield path, exc
            return
        pool = ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn"))
        try:
            futures = {}
            for path in paths:
                try:
                    record, _ = self._record(path)
                except (StoreFileError, OSError) as exc:
                    yield (
                        path,
                        exc if isinstance(exc, StoreFileError) else StoreFileError(f"cannot read it: {exc}"),
                    )
                    continue
                sha = record["results_sha256"]
                futures[pool.submit(_verify_in_child, str(self.results_path(sha)))] = path
            for future in as_completed(futures):
                if stop():
                    return
                path = futures[future]
                digest, summary, reason = future.result()
                if digest is not None and summary is not None:
                    self._remember(digest, summary)
                elif digest is not None and reason is not None:
                    self._failed[digest] = reason
                try:
                    yield path, self.load_entry(path)
                except StoreFileError as exc:
                    yield path, exc
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _summary_cache_dir(self) -> Path:
        if self._cache_root is None:
            self._cache_root = cache_dir() / "store-summaries"
        return self._cache_root

    def _entry_record(self, path: Path) -> tuple[dict[str, Any], str | None]:
        """An entry file's record, checked (not its results), and why it is not verified (None when it
        is); raises :class:`StoreFileError`."""
        record = _read_json(path, "store entry", LIMITS.entry_bytes)
        if not isinstance(record, dict):
            raise StoreFileError(f"store entry {path} is not a JSON object")
        if "store_version" in record and record["store_version"] != STORE_VERSION:
            raise StoreFileError(
                f"store entry {path} has store_version {record['store_version']!r}; this knowgic reads "
                f"{STORE_VERSION}"
            )
        try:
            check_sizes(record, f"store entry {path}")
        except CheckFailed as exc:
            raise StoreFileError(str(exc)) from None
        problem = _schema_problem(record, _entry_validator())
        if problem is not None:
            raise StoreFileError(f"store entry {path} does not follow store_entry.schema.json: {problem}")
        if f"{record['entry_id']}.json" != path.name:
            raise StoreFileError(f"store entry {path} names itself {record['entry_id']!r}")
        if record["source"] == "verified" and record.get("submission_sha256") is None:
            raise StoreFileError(f"store entry {path}: a verified run names no submission archive")
        untrusted = None
        if record["source"] == "verified":
            untrusted = self.trusted_keys.check(record)
        return record, untrusted

    def _entry(
        self, record: dict[str, Any], untrusted: str | None, path: Path, summary: dict[str, Any]
    ) -> StoreEntry:
        """The run an entry record stands for, with what its files say: its results (``summary``, by
        content) must be the ones it names and its submission archive must hash to the sha256 it names;
        otherwise it is shown as local, with the reason."""
        problems = [] if untrusted is None else [untrusted]
        named_results, results_sha = record["results_sha256"], str(summary["sha256"])
        if results_sha != named_results:
            problems.append(
                f"its results file {named_results[:12]}….json holds other results (sha256 {results_sha[:12]}…) "
                "than its entry names: changed after it was stored"
            )
        submission_sha = record.get("submission_sha256")
        if submission_sha is not None:
            found = self._archive_file(submission_sha)
            if found is None:
                raise StoreFileError(
                    f"store entry {path}: its submission archive {submission_sha[:12]}… is missing"
                )
            problem = self._archive_mismatch(submission_sha, *found, full=False)
            if problem is not None:
                problems.append(problem)
        warning = "; ".join(problems) or None
        if record["source"] != "verified":
            source, trust = "local", "a local run (not made by a worker)"
            if warning:
                trust += f"; {warning}"
        elif warning is None:
            source = "verified"
            trust = f"signed by {self.trusted_keys.describe(record['signature']['key'])}"
        else:
            source, trust = "local", f"shown as local: it claims to be verified, but {warning}"
        return StoreEntry(
            entry_id=record["entry_id"],
            source=source,
            results_sha256=results_sha,
            summary=summary,
            manifest=record.get("manifest"),
            job=record.get("job"),
            submission_sha256=submission_sha,
            added_at=str(record["added_at"]),
            label=record.get("label"),
            path=path,
            results_file=self.results_path(named_results),
            trust=trust,
            warning=warning,
        )

    def _record(self, path: Path) -> tuple[dict[str, Any], str | None]:
        """An entry file's checked record (:meth:`_entry_record`), read again whenever its stat key
        changed."""
        before = path.stat()
        known = self._records.get(path)
        if known is not None and known[0] == _file_stat(before):
            return known[1]
        checked = self._entry_record(path)
        stable = _stable(before, path.stat())
        if stable is None:
            self._records.pop(path, None)
        else:
            self._records[path] = (stable, checked)
        return checked

    def load_entry(self, path: str | Path) -> StoreEntry:
        """Read one entry file and verify the results it names; raises :class:`StoreFileError`."""
        path = Path(path)
        try:
            record, untrusted = self._record(path)
        except FileNotFoundError:
            raise StoreFileError(f"store entry {path} does not exist") from None
        except OSError as exc:
            raise StoreFileError(f"cannot read store entry {path}: {exc.strerror or exc}") from None
        summary = self._results_summary(self.results_path(record["results_sha256"]))
        assert summary is not None  # verify=True
        return self._entry(record, untrusted, path, summary)

    def scan(self, *, verify: bool = True) -> StoreScan:
        """Every entry, verified; bad files in ``skipped``. Unchanged files are not read again.

        ``verify=False``: entries whose results were verified before (by this process or, through the
        cache, by another) are returned at once; the others are listed in ``unverified`` (give each to
        :meth:`load_entry`). Results files that no readable entry names are skipped files too."""
        scan = StoreScan()
        try:
            paths = sorted(p for p in self.entries_dir.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            paths = []
        except OSError as exc:
            scan.skipped.append(
                SkippedFile(self.entries_dir, f"cannot list the entries: {exc.strerror or exc}")
            )
            return scan
        named: set[str] = set()
        for path in paths:
            if path.suffix != ".json":
                scan.skipped.append(SkippedFile(path, "not an entry file (entries end in .json)"))
                continue
            try:
                record, untrusted = self._record(path)
                sha = record["results_sha256"]
                named.add(sha)
                # The results file is checked every time (its stat key, else its hash, then the memo).
                summary = self._results_summary(self.results_path(sha), verify=verify)
                if summary is None:
                    scan.unverified.append(path)
                    continue
                scan.entries.append(self._entry(record, untrusted, path, summary))
            except StoreFileError as exc:
                scan.skipped.append(SkippedFile(path, str(exc)))
            except OSError as exc:
                scan.skipped.append(SkippedFile(path, f"cannot read it: {exc.strerror or exc}"))
        scan.skipped.extend(self._orphans(named))
        return scan

    def _orphans(self, named: set[str]) -> list[SkippedFile]:
        """Files in ``results/`` that no readable entry names: never shown, so listed with the reason."""
        try:
            paths = sorted(p for p in self.results_dir.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            return []
        except OSError as exc:
            return [SkippedFile(self.results_dir, f"cannot list the results: {exc.strerror or exc}")]
        orphans = []
        for path in paths:
            if path.name.endswith(".json") and path.name[:-5] in named:
                continue
            if path.suffix != ".json" or not _SHA256.match(path.name[:-5]):
                reason = "not a results file of the store (results/<sha256>.json)"
            else:
                reason = "no entry names this results file; add it with `knowgic store add`"
            orphans.append(SkippedFile(path, reason))
        return orphans
