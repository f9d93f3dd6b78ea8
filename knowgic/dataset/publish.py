"""``knowgic publish``: upload a version folder to a Hugging Face dataset repo and tag it ``vX.Y.Z``.

After ``publish --repo-id ORG/NAME --version X.Y.Z``, ``datasets.load_dataset("ORG/NAME",
revision="vX.Y.Z")`` gives exactly that version: the upload replaces every file of the repo (except
``.gitattributes``) by the folder's, in one commit, and the tag points at that commit. A version of another
track is tagged with the track's name (``growth-1.0.0`` as ``growth-v1.0.0``): publish a track to a repo of
its own, so that the repo's main branch holds one track.

Refuses (before any network call) when the folder's content hash or any file's sha256 differs from what
``version.json`` records, and (before uploading) when the tag already exists. ``--dry-run`` prints the
plan and touches no network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from knowgic.dataset.io import file_sha256, path_inside, read_json
from knowgic.dataset.versions import (
    VERSION_FILE,
    content_sha256,
    parse_version_key,
    version_dir,
    version_tag,
)
from knowgic.errors import KnowgicError

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class PlannedFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class PublishPlan:
    repo_id: str
    version: str
    tag: str
    folder: Path
    sha256: str
    files: tuple[PlannedFile, ...]

    def render(self) -> str:
        lines = [
            f"dataset repo: {self.repo_id} (type dataset)",
            f"version: {self.version} (content sha256 {self.sha256})",
            f"folder: {self.folder}",
            f"files ({len(self.files)}):",
        ]
        width = max((len(f.path) for f in self.files), default=0)
        lines += [f"  {f.path:<{width}}  {f.size:>9} bytes  sha256 {f.sha256}" for f in self.files]
        lines.append(f"tag: {self.tag}")
        return "\n".join(lines)


class HubApi(Protocol):
    """The part of :class:`huggingface_hub.HfApi` the publisher uses."""

    def create_repo(self, repo_id: str, **kwargs: Any) -> Any: ...
    def list_repo_refs(self, repo_id: str, **kwargs: Any) -> Any: ...
    def upload_folder(self, **kwargs: Any) -> Any: ...
    def create_tag(self, repo_id: str, **kwargs: Any) -> Any: ...


def check_repo_id(repo_id: str) -> str:
    if not _REPO_ID.match(repo_id):
        raise KnowgicError(f"--repo-id must look like ORG/NAME, got {repo_id!r}")
    return repo_id


def verify_folder(folder: Path) -> dict[str, Any]:
    """The folder's ``version.json``, after checking its content hash and every file's sha256 against it."""
    record_path = folder / VERSION_FILE
    if not record_path.is_file():
        raise KnowgicError(f"{folder} has no {VERSION_FILE}; build it with python -m knowgic.dataset.build")
    record = read_json(record_path)
    if not isinstance(record, dict) or "sha256" not in record:
        raise KnowgicError(f"{record_path} is not a KnowGIC version file")
    computed = content_sha256(folder)
    if computed != record["sha256"]:
        raise KnowgicError(
            f"refusing to publish {folder}: its content hash {computed} differs from the recorded "
            f"{record['sha256']} (the data were changed after the build)"
        )
    recorded = record.get("files") or {}
    if not isinstance(recorded, dict):
        raise KnowgicError(f"{record_path}: `files` must map each file to its size and sha256")
    actual = sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != VERSION_FILE
    )
    extra = sorted(set(actual) - set(recorded))
    if extra:
        raise KnowgicError(
            f"refusing to publish {folder}: files not recorded in {VERSION_FILE}: {', '.join(extra)}"
        )
    for rel, meta in sorted(recorded.items()):
        path = path_inside(folder, str(rel))
        if path is None:
            raise KnowgicError(
                f"refusing to publish {folder}: {VERSION_FILE} lists {rel!r}, outside the folder"
            )
        if not path.is_file():
            raise KnowgicError(f"refusing to publish {folder}: {rel} is missing")
        if not isinstance(meta, dict) or file_sha256(path) != meta.get("sha256"):
            raise KnowgicError(f"refusing to publish {folder}: {rel} differs from its recorded sha256")
    return record


def plan_publish(repo_id: str, version: str, folder: Path | None = None) -> PublishPlan:
    """What would be uploaded and tagged; checks the folder first (no network)."""
    check_repo_id(repo_id)
    parse_version_key(version)
    folder = folder if folder is not None else version_dir(version)
    record = verify_folder(folder)
    if record.get("version") != version:
        raise KnowgicError(f"{folder} holds version {record.get('version')!r}, not {version!r}")
    files = tuple(
        PlannedFile(p.relative_to(folder).as_posix(), p.stat().st_size, file_sha256(p))
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    )
    return PublishPlan(repo_id, version, version_tag(version), folder, str(record["sha256"]), files)


def _tags(api: HubApi, repo_id: str) -> set[str]:
    refs = api.list_repo_refs(repo_id, repo_type="dataset")
    return {getattr(t, "name", str(t)) for t in getattr(refs, "tags", [])}


def publish(plan: PublishPlan, api: HubApi | None = None, token: str | None = None) -> str:
    """Upload ``plan.folder`` and tag the commit; returns the commit id. Refuses when the tag exists."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    try:
        api.create_repo(plan.repo_id, repo_type="dataset", exist_ok=True)
        if plan.tag in _tags(api, plan.repo_id):
            raise KnowgicError(
                f"refusing to publish: {plan.repo_id} already has tag {plan.tag}; a published version is immutable, "
                "bump the version instead"
            )
        commit = api.upload_folder(
            repo_id=plan.repo_id,
            repo_type="dataset",
            folder_path=str(plan.folder),
            commit_message=f"KnowGIC {plan.version}",
            commit_description=f"Dataset version {plan.version}, content sha256 {plan.sha256}.",
            delete_patterns=["*"],  # the repo holds exactly this version afterwards (.gitattributes is kept)
        )
        oid = str(getattr(commit, "oid", "") or "")
        if not oid:
            raise KnowgicError(f"upload to {plan.repo_id} returned no commit id; tag {plan.tag} not created")
        api.create_tag(
            plan.repo_id,
            tag=plan.tag,
            revision=oid,
            repo_type="dataset",
            tag_message=f"KnowGIC {plan.version}",
        )
    except KnowgicError:
        raise
    except Exception as exc:  # network, auth and hub errors all become one line
        raise KnowgicError(f"publishing to {plan.repo_id} failed: {type(exc).__name__}: {exc}") from exc
    return oid
