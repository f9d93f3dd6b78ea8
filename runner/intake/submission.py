"""Submissions: a folder, ``.tar.gz`` or ``.zip`` with ``submission.yaml`` at its root, loaded safely.

A submission is untrusted input. :func:`load_submission` unpacks it within limits
(:mod:`knowgic.runner.intake.archive`), validates its ``submission.yaml``
(:mod:`knowgic.runner.intake.manifest`) and packs the normalised ``.tar.gz`` whose sha256 names it;
:func:`submit` stores that archive and enqueues the submission's jobs.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.dataset.versions import resolve_version
from knowgic.runner.intake.archive import SubmissionError, SubmissionLimits, unpack, write_normalised_archive
from knowgic.runner.intake.manifest import (
    MANIFEST_NAME,
    check_characters,
    check_manifest,
    hparams_for,
    manifest_root,
    read_yaml_file,
    validate_manifest,
)
from knowgic.runner.queue.keys import JobKey, QuotaExceeded

if TYPE_CHECKING:
    from knowgic.runner.intake.accounts import Submitter
    from knowgic.runner.options import SubmitPolicy
    from knowgic.runner.queue.queue import Job, JobQueue
    from knowgic.runner.store.store import ResultsStore

DEFAULT_LIMITS = SubmissionLimits()


@dataclass(frozen=True)
class Submission:
    """A loaded, validated submission.

    ``manifest``: ``submission.yaml`` validated, with defaults filled (``modes``: the benchmark spec's
    default mode, ``dataset_version``: the latest). ``root``: the unpacked safe copy (``submission.yaml`` at its root).
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


def load_submission(path: str | Path, workdir: Path, limits: SubmissionLimits = DEFAULT_LIMITS) -> Submission:
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
    unpack(source, unpacked, limits)
    root = manifest_root(unpacked, str(source))
    shown = f"{source}: {MANIFEST_NAME}" if not source.is_dir() else str(source / MANIFEST_NAME)
    manifest_path = root / MANIFEST_NAME
    raw = read_yaml_file(manifest_path, shown, limits.max_manifest_bytes)
    validate_manifest(raw, manifest_path, shown)
    check_characters(raw, manifest_path, shown)
    manifest = check_manifest(raw, root, shown)
    archive = workdir / "submission.tar.gz"
    sha = write_normalised_archive(root, archive)
    return Submission(manifest=manifest, root=root, archive=archive, sha256=sha)


def job_keys(
    submission: Submission, limit: int | None = None, dataset_version: str | None = None
) -> list[JobKey]:
    """The submission's jobs: one per model x protocol x mode its manifest asks for (modes and dataset
    version already resolved by :func:`~knowgic.runner.intake.manifest.check_manifest`), resolved here,
    once; ``limit`` (smoke runs only) scores the first N cases of each; ``dataset_version`` (a version key
    or a track's name, resolved) puts them on that version instead of the manifest's."""
    manifest = submission.manifest
    version = resolve_version(dataset_version) if dataset_version else manifest["dataset_version"]
    return [
        JobKey(submission.sha256, model, protocol, mode, version, limit)
        for model in manifest["models"]
        for protocol in manifest["protocols"]
        for mode in manifest["modes"]
    ]


def submit(
    path: str | Path,
    store: ResultsStore,
    queue: JobQueue | Callable[[], JobQueue],
    *,
    limit: int | None = None,
    workdir: Path | None = None,
    limits: SubmissionLimits = DEFAULT_LIMITS,
    submitter: Submitter | None = None,
    policy: SubmitPolicy | None = None,
    dataset_version: str | None = None,
) -> tuple[Submission, list[Job]]:
    """Validate a submission, store its normalised archive and enqueue its jobs for ``submitter``.

    Under a ``policy`` that requires accounts, an anonymous submission is refused before the upload is
    read, and one whose jobs would take its submitter over a quota before the archive is stored (the
    queue checks again as it inserts them, atomically). Without ``workdir`` the unpacked copy is removed
    afterwards and the returned ``archive`` is the store's copy. ``limit`` (smoke runs only) scores the
    first N cases. ``dataset_version``: the jobs' dataset version instead of the manifest's (checked
    before anything is unpacked). ``queue`` may be a function that opens it: called only once the submission
    is valid, so a refused one leaves no store or queue behind.
    """
    if dataset_version is not None:
        resolve_version(dataset_version)  # an unknown name fails here, in one line
    submitter_id = submitter.id if submitter is not None else None
    refusal = policy.refusal(submitter_id) if policy is not None else None
    if refusal is not None:
        raise QuotaExceeded(refusal)
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="knowgic-submit-")) if own else Path(workdir)  # type: ignore[arg-type]
    try:
        submission = load_submission(path, work, limits)
        keys = job_keys(submission, limit, dataset_version)
        if callable(queue):
            queue = queue()
        if policy is not None:
            queue.check_quotas(submission, keys, submitter=submitter_id, policy=policy)
        sha = store.put_submission(submission.archive)
        if sha != submission.sha256:  # pragma: no cover - the store hashes the same bytes
            raise SubmissionError(f"stored archive hash {sha} differs from {submission.sha256}")
        jobs = queue.enqueue(submission, keys, submitter=submitter_id, policy=policy)
        if own:
            stored = store.submission_path(sha)
            assert stored is not None
            submission = replace(submission, archive=stored)
        return submission, jobs
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def unpack_stored_archive(
    archive: Path, workdir: Path, limits: SubmissionLimits = DEFAULT_LIMITS
) -> Submission:
    """Load a stored (normalised) archive again, e.g. on a worker; same checks as :func:`load_submission`."""
    return load_submission(archive, workdir, limits)
