"""The job contract: what the worker host, the container executor and the two stages hand each other.

Light on purpose (no torch, no model code): the worker host imports it, and so do both stages::

    worker host (trusted)          job/job.json        JobSpec: model, editor entry point, hparams, protocol,
                                                       mode, dataset version, limit, the submission
    prepare stage (trusted image)  job/requests.json   EditRequests: what an editing method is entitled to
                                   job/stats/          the key statistics its hparams name (read-only later)
    edit stage (untrusted)         reads job.json, requests.json, stats/; writes deltas (sidecar schema)
    score stage (trusted image)    reads job.json and the deltas; writes results.json

Every document is validated against its schema in ``spec/schemas/`` where it is read: ``job``,
``edit_requests`` and ``delta_sidecar``. An executor (:class:`JobExecutor`) runs a job somewhere other
than the worker's process and raises :class:`JobFailure` when the submission is at fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from knowgic.errors import KnowgicError
from knowgic.jsonbounds import loads_bounded
from knowgic.schema_errors import first_error_line

if TYPE_CHECKING:
    from knowgic.runner.queue.queue import Job

# A job's folder on the worker host: <root>/knowgic-<job id>-<random>/, with an owner record naming the queue,
# job and worker, so that a worker starting later can tell a dead worker's folder from a live one's.
JOB_FOLDER_PREFIX = "knowgic-"
JOB_FOLDER_OWNER = ".knowgic-owner.json"
JOB_FILE = "job.json"
REQUESTS_FILE = "requests.json"
STATS_FOLDER = "stats"
# Markers the edit stage leaves in its deltas folder: every delta written, or why it stopped.
DONE_MARKER = "done"
FAILED_MARKER = "failed"
REQUESTS_FORMAT = "knowgic-edit-requests"
REQUESTS_FORMAT_VERSION = 2  # 2: groups (a private split's edits, applied as a run of their own)
MAX_REASON_CHARS = 2000


class JobFailure(Exception):
    """The job cannot succeed as submitted; ``reason`` tells a person what to change."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class JobExecutor(Protocol):
    """Runs one job somewhere other than the worker's process and returns the path of its results.json.

    An executor that leaves things outside the job folder while it runs (containers) also has
    ``reap(queue_id, alive) -> int``: remove those of queue ``queue_id`` whose (job id, worker id) is not
    ``alive``, and say how many; a starting worker calls it (:func:`knowgic.runner.host.worker.reap_dead`).
    """

    def execute(self, job: Job, submission_archive: Path, workdir: Path, log: Callable[[str], None]) -> Path:
        """Raises :class:`JobFailure` with a reason when the submission fails."""
        ...


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def check_document(document: Any, schema: str, where: str) -> None:
    """Raise one line naming ``where``, the JSON pointer and what ``spec/schemas/<schema>.schema.json``
    expected, when ``document`` breaks the schema."""
    from knowgic.dataset.schemas import validator

    problem = first_error_line(validator(schema).iter_errors(document))
    if problem is not None:
        pointer, _, what = problem.partition(": ")
        raise KnowgicError(f"{where} at {pointer}: {one_line(what, 300)}")


def _read_json(path: Path, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KnowgicError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowgicError(f"cannot read {what} {path}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KnowgicError(f"{what} {path} is not valid JSON: {exc}") from None


@dataclass(frozen=True)
class JobSpec:
    """One job as the stages see it (``job.json``): what ``knowgic evaluate`` takes, plus the submission.

    ``editor`` is the submission's entry point ``module:Class`` (or a built-in name); ``hparams`` are the
    hyper-parameters for ``model``, already read from the manifest. ``protocol`` and ``mode`` None: the
    benchmark's defaults (spec/benchmark.yaml), filled in by the stages.
    """

    model: str
    editor: str
    hparams: dict[str, Any] = field(default_factory=dict)
    protocol: str | None = None
    protocol_params: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None
    dataset_version: str | None = None
    limit: int | None = None
    seed: int = 0
    dtype: str = "float32"
    device: str = "auto"
    submission_name: str = ""
    submission_version: str = ""
    submission_sha256: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, where: str = "job") -> JobSpec:
        """Parse and validate a job document; raise one line naming the problem and ``where``."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise KnowgicError(f"{where} is not valid JSON: {exc}") from None
        check_document(data, "job", where)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls, path: str | Path) -> JobSpec:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KnowgicError(f"job file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KnowgicError(f"cannot read job file {path}: {exc}") from None
        return cls.from_json(text, where=f"job file {path}")


@dataclass(frozen=True)
class RequestedEdit:
    """One distinct edit request at its position in the run: ``prompt.format(subject)`` should complete to
    ``target_new`` instead of ``target_true``; ``edit_id`` names it in the deltas."""

    position: int
    edit_id: str
    prompt: str
    subject: str
    target_true: str
    target_new: str


@dataclass(frozen=True)
class EditRequests:
    """Everything the edit stage is told about the benchmark: the distinct edit requests in the order they
    are applied, and how they are grouped (``mode``): ``independent``, each alone on the pristine model and
    restored after; ``sequential``, all of a group in this order, each on top of the ones before.

    ``groups``: the sizes of the consecutive runs the requests form, each applied on the pristine model
    (the public edits, then a private split's: the two sequences never mix). One group by default.

    No chain, question, answer, alias or neighbourhood fact: those stay with the trusted stages.
    """

    mode: str
    edits: tuple[RequestedEdit, ...]
    dataset_version: str
    groups: tuple[int, ...] = ()

    def group_sizes(self) -> tuple[int, ...]:
        return self.groups or (len(self.edits),)

    def group_of(self) -> list[int]:
        """The group of each edit, by position."""
        return [g for g, size in enumerate(self.group_sizes()) for _ in range(size)]

    def to_document(self) -> dict[str, Any]:
        return {
            "format": REQUESTS_FORMAT,
            "format_version": REQUESTS_FORMAT_VERSION,
            "mode": self.mode,
            "dataset_version": self.dataset_version,
            "groups": list(self.group_sizes()),
            "edits": [
                {
                    "position": e.position,
                    "edit_id": e.edit_id,
                    "request": {
                        "prompt": e.prompt,
                        "subject": e.subject,
                        "target_true": {"str": e.target_true},
                        "target_new": {"str": e.target_new},
                    },
                }
                for e in self.edits
            ],
        }

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_document(), indent=1, ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def from_document(cls, document: Any, where: str = "edit requests") -> EditRequests:
        """Validated against ``spec/schemas/edit_requests.schema.json``; positions must count 0, 1, ..."""
        check_document(document, "edit_requests", where)
        edits = tuple(
            RequestedEdit(
                position=item["position"],
                edit_id=item["edit_id"],
                prompt=item["request"]["prompt"],
                subject=item["request"]["subject"],
                target_true=item["request"]["target_true"]["str"],
                target_new=item["request"]["target_new"]["str"],
            )
            for item in document["edits"]
        )
        for index, edit in enumerate(edits):
            if edit.position != index:
                raise KnowgicError(
                    f"{where} at /edits/{index}/position: expected {index}, got {edit.position}"
                )
        groups = tuple(document.get("groups") or (len(edits),))
        if sum(groups) != len(edits):
            raise KnowgicError(
                f"{where} at /groups: the group sizes {list(groups)} add up to {sum(groups)}, there are "
                f"{len(edits)} edits"
            )
        return cls(
            mode=document["mode"],
            edits=edits,
            dataset_version=document["dataset_version"],
            groups=groups,
        )

    @classmethod
    def read(cls, path: str | Path) -> EditRequests:
        return cls.from_document(_read_json(Path(path), "edit requests file"), where=f"edit requests {path}")

    @classmethod
    def of(cls, mode: str, dataset_version: str, *groups: Sequence[Any]) -> EditRequests:
        """From groups of :class:`knowgic.records.EditRequest` objects, each in plan order (empty groups
        are left out)."""
        requests = [r for group in groups for r in group]
        return cls(
            mode=mode,
            dataset_version=dataset_version,
            edits=tuple(
                RequestedEdit(i, r.edit_id, r.prompt, r.subject, r.target_true, r.target_new)
                for i, r in enumerate(requests)
            ),
            groups=tuple(len(g) for g in groups if len(g)),
        )


def read_sidecar(data: bytes, name: str) -> dict[str, Any]:
    """A delta sidecar's JSON, nested at most :data:`knowgic.jsonbounds.MAX_DEPTH` levels (checked before
    anything walks it) and validated against ``spec/schemas/delta_sidecar.schema.json``."""
    document = loads_bounded(data, f"delta sidecar {name}")
    check_document(document, "delta_sidecar", f"delta sidecar {name} breaks the delta schema")
    return document
