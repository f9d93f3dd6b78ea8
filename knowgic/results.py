"""The results document: its schema, its hash, and the one reader every part of KnowGIC shares.

Like inspect_ai's eval log, a run is one typed, versioned document (``spec/schemas/results.schema.json``),
built once by ``knowgic evaluate`` and hashed, and read back by one function::

    results.json ──read (size-capped)──> JSON ──migrate (schema version, one place)──> schema + sha256 check
                 ──> ResultsDocument: .config (RunConfig), .dataset (RunDataset), .metrics, .metric(path),
                                      .records() (knowgic.measure.records.Records), .summary()
        knowgic evaluate / summarize / compare   read_results(path)
        knowgic validate                         validation_errors(document)
        the store and the leaderboard            results_document(data, where) after their own size checks,
                                                 read_results(path, summary_only=True) for the tables

A :class:`ResultsDocument` is the JSON object it was read from (a ``dict``), with typed accessors for what
every reader needs. Nothing here writes a document: it is built and
hashed in one place (:func:`finalize`, called by ``knowgic evaluate``) and never patched afterwards.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.clip import clip
from knowgic.errors import KnowgicError
from knowgic.measure.compute import metric_entry_at
from knowgic.measure.records import Records
from knowgic.paths import spec_dir
from knowgic.schema_errors import error_lines

RESULTS_SCHEMA_VERSION = "1.6"
"""The version ``knowgic evaluate`` writes."""
READABLE_SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6")
"""Versions this package reads (``spec/schemas/CHANGELOG.md``): 1.0 documents carry no intervals and no
per-edit sums (shown, never recomputed); 1.1 adds intervals and the per-edit sums; 1.2 the optional
``submission`` and ``runner`` objects of runner jobs; 1.3 each metric's interval method, edits, effective
edits and few-edits flag, and each edit's ``preservation_facts``; 1.4 each interval's ``coverage_unmet``;
1.5 a private block that publishes only what ranking needs (edit keys, per-edit sums, the flag
``ifr_gap``); 1.6 the ripple records and RippleEdits' metrics (``ripple_accuracy``,
``ripple_probability``)."""
PRIVATE_SUMS_FROM = "1.5"
"""The oldest schema whose private block ranks: edit keys and per-edit sums, scored on edits of its own. A
private block of an older schema holds chains of the public edits (a same-edit holdout), per-chain records
and the interval-overlap ``ifr_check``: it is read and shown, never ranked from or flagged
(:data:`knowgic.measure.private.OLD_BLOCK`)."""
INTERVALS_FROM = "1.4"
"""The oldest schema whose intervals this package's methods make (results schema 1.5 changed the private
block, not an interval): :func:`knowgic.recompute.check_results` checks the interval fields of documents
of this schema and later."""
RECOMPUTABLE_FROM = "1.1"
"""The oldest schema whose records give back its metrics (:meth:`ResultsDocument.records`)."""
MAX_PROBLEMS_SHOWN = 10
"""Schema problems an error lists (each with its JSON pointer, values quoted briefly) before "and N more"."""
SUMMARY_DROPS = ("per_edit", "chains", "ripple")
"""What a summary leaves out: the records, which tables and rankings never show."""
PRIVATE_SUMMARY_DROPS = ("sums", "per_edit", "chains")
"""What a summary leaves out of a private block: its per-edit sums (1.5) or records (1.4 and before)."""


def results_schema() -> dict[str, Any]:
    return json.loads((spec_dir() / "schemas" / "results.schema.json").read_text(encoding="utf-8"))


@cache
def _validator() -> jsonschema.Draft202012Validator:
    """Built once per process (building it resolves every $ref)."""
    return jsonschema.Draft202012Validator(results_schema())


def canonical_json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def content_sha256(document: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the document without its own ``sha256`` field."""
    body = {k: v for k, v in document.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def validation_errors(document: Any) -> list[str]:
    """Schema errors as ``"<json pointer>: <what was expected>"`` lines (empty when valid)."""
    return error_lines(_validator().iter_errors(document))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def intervals_current(document: Mapping[str, Any]) -> bool:
    """Whether ``document``'s intervals were made by this package's methods (:data:`INTERVALS_FROM`)."""
    version = document.get("schema_version")
    return (
        isinstance(version, str)
        and version in READABLE_SCHEMA_VERSIONS
        and (_version_key(version) >= _version_key(INTERVALS_FROM))
    )


def migrate(data: Any, where: str) -> Any:
    """Bring a document of any readable schema version to what this package reads, in one place.

    Every readable version is a subset of the current one's shape (fields were only ever added), so no
    field needs rewriting; what differs is what a version lets a reader do, which
    :attr:`ResultsDocument.recomputable` says. The one shape that changed is the private block: before
    1.5 it held chains of the public edits with their per-chain and per-edit records and an ``ifr_check``;
    it lacks edit keys, per-edit sums and the flag ``ifr_gap``, so it is left as it is, read and shown, and
    :attr:`ResultsDocument.private_ranks` is false for it (the schema reads each shape by its version).
    Before 1.6 a document has no ripple records: its RippleEdits metrics read as null with the reason
    ``written before ripple scoring`` (:func:`knowgic.measure.compute.metric_entry_at`, for every reader;
    the hashed content is never rewritten). A
    version this package does not know is refused here, in one line, before the schema's longer message."""
    if isinstance(data, dict):
        version = data.get("schema_version")
        if isinstance(version, str) and version not in READABLE_SCHEMA_VERSIONS:
            newer = all(p.isdigit() for p in version.split(".")) and _version_key(version) > _version_key(
                RESULTS_SCHEMA_VERSION
            )
            hint = " (written by a newer knowgic: upgrade the package)" if newer else ""
            raise KnowgicError(
                f"{where}: results schema {version!r} is not one this package reads "
                f"({', '.join(READABLE_SCHEMA_VERSIONS)}){hint}"
            )
    return data


def check_document(data: Any, where: str) -> None:
    """Raise :class:`KnowgicError` naming the first problems when ``data`` breaks the schema or its hash."""
    errors = validation_errors(migrate(data, where))
    if errors:
        shown = "; ".join(clip(e) for e in errors[:MAX_PROBLEMS_SHOWN])
        more = f"; and {len(errors) - MAX_PROBLEMS_SHOWN} more" if len(errors) > MAX_PROBLEMS_SHOWN else ""
        raise KnowgicError(f"{where} does not follow results.schema.json: {shown}{more}")
    if data["sha256"] != content_sha256(data):
        raise KnowgicError(
            f"{where}: recorded sha256 does not match its content (edited after it was written?)"
        )


def finalize(document: dict[str, Any]) -> dict[str, Any]:
    """Hash a document that has just been built, and check it: the last step of building one."""
    document["sha256"] = content_sha256(document)
    check_document(document, "results")
    return document


@dataclass(frozen=True)
class RunDataset:
    """The data a run was computed on: dataset name, version, config and content hash."""

    name: str
    version: str
    config: str
    sha256: str


@dataclass(frozen=True)
class RunConfig:
    """How a run was made: model, editor and its hparams, protocol and its parameters, mode, seed, limit."""

    model: str
    model_revision: str | None
    model_family: str | None
    editor: str
    editor_class: str | None
    hparams: Mapping[str, Any]
    hparams_source: str | None
    hparams_sha256: str | None
    protocol: str
    protocol_params: Mapping[str, Any]
    mode: str
    seed: int
    dtype: str | None
    device: str | None
    limit: int | None

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> RunConfig:
        return cls(**{name: config.get(name) for name in cls.__dataclass_fields__})


class ResultsDocument(dict[str, Any]):
    """A results document that passed its schema and hash check: its JSON object (a ``dict``, so that it
    serialises and reads as one), with typed accessors. ``summary_only``: its records (``per_edit``,
    ``chains``) were left out after the check. Readers never change it: its hash is its identity."""

    def __init__(self, data: Mapping[str, Any], where: str, summary: bool = False) -> None:
        super().__init__(data)
        self.where = where
        self.summary_only = summary

    def __repr__(self) -> str:
        return f"ResultsDocument({self.where!r}, sha256={self.sha256[:12]}…)"

    @property
    def _data(self) -> Mapping[str, Any]:
        return self

    @property
    def schema_version(self) -> str:
        return str(self._data["schema_version"])

    @property
    def sha256(self) -> str:
        return str(self._data["sha256"])

    @property
    def config(self) -> RunConfig:
        return RunConfig.from_dict(self._data["config"])

    @property
    def dataset(self) -> RunDataset:
        d = self._data["dataset"]
        return RunDataset(str(d["name"]), str(d["version"]), str(d["config"]), str(d["sha256"]))

    @property
    def metrics(self) -> Mapping[str, Any]:
        return self._data["metrics"]

    def metric(self, path: str) -> Mapping[str, Any]:
        """The metric entry at ``path`` (``"ifr"``, ``"ifr_by_length.2"``); a RippleEdits metric of a
        document written before ripple scoring reads as null with its reason."""
        return metric_entry_at(self._data["metrics"], path)

    @property
    def recomputable(self) -> bool:
        """Whether its records give its metrics back (results schema 1.1 and later, records kept)."""
        return not self.summary_only and _version_key(self.schema_version) >= _version_key(RECOMPUTABLE_FROM)

    @property
    def private_ranks(self) -> bool:
        """Whether its private block can rank: one of results schema 1.5 or later (edit keys and per-edit
        sums; :data:`PRIVATE_SUMS_FROM`)."""
        return isinstance(self._data.get("private"), Mapping) and _version_key(
            self.schema_version
        ) >= _version_key(PRIVATE_SUMS_FROM)

    def records(self) -> Records:
        """The typed chain and edit records every metric is computed from (:mod:`knowgic.measure`)."""
        if self.summary_only:
            raise KnowgicError(f"{self.where}: read as a summary, without its records")
        return Records.from_document(self._data)

    def summary(self) -> ResultsDocument:
        """The same document without its records, nor its private block's sums or records (for tables and
        caches; rankings read the whole document)."""
        kept = {k: v for k, v in self._data.items() if k not in SUMMARY_DROPS}
        if isinstance(kept.get("private"), Mapping):
            kept["private"] = {k: v for k, v in kept["private"].items() if k not in PRIVATE_SUMMARY_DROPS}
        return ResultsDocument(kept, self.where, summary=True)


def results_document(data: Any, where: str) -> ResultsDocument:
    """``data`` (parsed JSON) as a checked :class:`ResultsDocument`; :class:`KnowgicError` names the problem."""
    if not isinstance(data, dict):
        raise KnowgicError(f"{where}: a results document is a JSON object, found {type(data).__name__}")
    check_document(data, where)
    return ResultsDocument(data, where)


def read_results(path: str | Path, *, summary_only: bool = False) -> ResultsDocument:
    """Read, migrate and check a results file (schema and content hash): the one reader of the format.

    ``summary_only`` drops the records after the check (:meth:`ResultsDocument.summary`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnowgicError(f"results file {path} does not exist") from None
    except IsADirectoryError:
        raise KnowgicError(f"{path} is a folder, not a results file (its results.json?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowgicError(f"cannot read results file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise KnowgicError(f"results file {path} is not valid JSON: {exc}") from None
    document = results_document(data, str(path))
    return document.summary() if summary_only else document
