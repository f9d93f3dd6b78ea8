"""``knowgic publish``: the dry run (no network), refusals, and the upload/tag sequence."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from knowgic.cli import main
from knowgic.dataset.io import file_sha256
from knowgic.dataset.publish import plan_publish, publish
from knowgic.dataset.versions import version_dir, version_sha256
from knowgic.errors import KnowgicError


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


class NetworkUsed(RuntimeError):
    """Raised by every patched network entry point: a dry run must reach none of them."""


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """HF_HUB_OFFLINE, and every public HfApi method, the hub's module-level upload/tag/repo functions and
    socket connections made to raise; returns the names of those that were called."""
    import socket

    import huggingface_hub

    called: list[str] = []

    def forbid(name: str) -> Callable[..., Any]:
        def refuse(*_args: Any, **_kwargs: Any) -> Any:
            called.append(name)
            raise NetworkUsed(f"{name} called")

        return refuse

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in dir(huggingface_hub.HfApi):
        if not name.startswith("_") and callable(getattr(huggingface_hub.HfApi, name)):
            monkeypatch.setattr(huggingface_hub.HfApi, name, forbid(f"HfApi.{name}"))
    for name in (
        "create_repo",
        "list_repo_refs",
        "upload_folder",
        "upload_file",
        "create_commit",
        "create_tag",
    ):
        monkeypatch.setattr(huggingface_hub, name, forbid(f"huggingface_hub.{name}"))
    monkeypatch.setattr(socket.socket, "connect", forbid("socket.connect"))
    monkeypatch.setattr(socket, "create_connection", forbid("socket.create_connection"))
    return called


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0"])
def test_dry_run_prints_every_file_with_size_and_hash_and_the_tag(
    capsys, no_network: list[str], version: str
) -> None:
    code, out, _ = run(capsys, "publish", "--repo-id", "org/knowgic", "--version", version, "--dry-run")
    assert code == 0
    assert no_network == []
    folder = version_dir(version)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert folder / "version.json" in files and folder / "data" / "chains-test.jsonl" in files
    for path in files:
        rel = path.relative_to(folder).as_posix()
        line = next(line for line in out.splitlines() if line.strip().startswith(rel + " "))
        assert f"{path.stat().st_size} bytes" in line and file_sha256(path) in line
    assert f"tag: v{version}" in out
    assert version_sha256(version) in out
    assert "nothing is uploaded" in out


def test_the_network_guard_catches_a_real_publish(capsys, no_network: list[str]) -> None:
    """Without --dry-run the same command reaches the patched HfApi at once: the guard above is not idle."""
    code, _out, err = run(
        capsys, "publish", "--repo-id", "org/knowgic", "--version", "1.0.0", "--token", "hf_x"
    )
    assert code == 2
    assert no_network == ["HfApi.create_repo"]
    assert err == "error: publishing to org/knowgic failed: NetworkUsed: HfApi.create_repo called\n"


def test_bad_arguments_are_one_line_errors(capsys) -> None:
    code, _out, err = run(capsys, "publish", "--repo-id", "no-slash", "--version", "1.1.0", "--dry-run")
    assert code == 2 and "ORG/NAME" in err
    code, _out, err = run(capsys, "publish", "--repo-id", "org/x", "--version", "3.0.0", "--dry-run")
    assert code == 2 and "unknown dataset version '3.0.0'" in err


@pytest.fixture
def folder_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "1.0.0"
    shutil.copytree(version_dir("1.0.0"), dest)
    return dest


def test_untouched_copy_plans_fine(folder_copy: Path) -> None:
    plan = plan_publish("org/knowgic", "1.0.0", folder=folder_copy)
    assert plan.tag == "v1.0.0" and plan.sha256 == version_sha256("1.0.0")
    assert {f.path for f in plan.files} >= {"README.md", "data/chains-test.jsonl", "version.json"}


def test_refuses_a_tampered_data_file(folder_copy: Path) -> None:
    path = folder_copy / "aliases.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["USA"].append("Yankland")
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"content hash .* differs from the recorded"):
        plan_publish("org/knowgic", "1.0.0", folder=folder_copy)


def test_refuses_a_tampered_card_or_an_extra_file(folder_copy: Path) -> None:
    readme = folder_copy / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nedited\n", encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"README\.md differs from its recorded sha256"):
        plan_publish("org/knowgic", "1.0.0", folder=folder_copy)
    shutil.copy(version_dir("1.0.0") / "README.md", readme)
    (folder_copy / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"files not recorded in version\.json: notes\.txt"):
        plan_publish("org/knowgic", "1.0.0", folder=folder_copy)


def test_refuses_a_version_record_listing_a_file_outside_the_folder(folder_copy: Path) -> None:
    outside = folder_copy.parent / "secret.txt"
    outside.write_text("not part of the dataset", encoding="utf-8")
    record_path = folder_copy / "version.json"
    record = json.loads(record_path.read_text(encoding="utf-8"))
    record["files"]["../secret.txt"] = {"size": outside.stat().st_size, "sha256": file_sha256(outside)}
    record_path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"version\.json lists '\.\./secret\.txt', outside the folder"):
        plan_publish("org/knowgic", "1.0.0", folder=folder_copy)


def test_refuses_a_folder_of_another_version(folder_copy: Path) -> None:
    with pytest.raises(KnowgicError, match=r"holds version '1\.0\.0', not '1\.1\.0'"):
        plan_publish("org/knowgic", "1.1.0", folder=folder_copy)


@dataclass
class _Tag:
    name: str


@dataclass
class _Refs:
    tags: list[_Tag]


@dataclass
class _Commit:
    oid: str


@dataclass
class RecordingHub:
    """Stands in for the Hugging Face Hub, which this machine cannot reach: records what is asked of it."""

    tags: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def create_repo(self, repo_id: str, **kwargs: Any) -> None:
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def list_repo_refs(self, repo_id: str, **kwargs: Any) -> _Refs:
        self.calls.append(("list_repo_refs", {"repo_id": repo_id, **kwargs}))
        return _Refs([_Tag(t) for t in self.tags])

    def upload_folder(self, **kwargs: Any) -> _Commit:
        self.calls.append(("upload_folder", kwargs))
        return _Commit("c0ffee" * 6 + "abcd")

    def create_tag(self, repo_id: str, **kwargs: Any) -> None:
        self.calls.append(("create_tag", {"repo_id": repo_id, **kwargs}))
        self.tags.append(kwargs["tag"])


def test_upload_then_tag_the_commit_and_refuse_a_second_time() -> None:
    hub = RecordingHub()
    plan = plan_publish("org/knowgic", "1.0.0")
    oid = publish(plan, api=hub)
    assert [name for name, _ in hub.calls] == ["create_repo", "list_repo_refs", "upload_folder", "create_tag"]
    create, _refs, upload, tag = (kwargs for _n, kwargs in hub.calls)
    assert create["repo_type"] == "dataset" and create["exist_ok"] is True
    assert upload["folder_path"] == str(version_dir("1.0.0")) and upload["repo_type"] == "dataset"
    assert upload["delete_patterns"] == ["*"]
    assert tag == {
        "repo_id": "org/knowgic",
        "tag": "v1.0.0",
        "revision": oid,
        "repo_type": "dataset",
        "tag_message": "KnowGIC 1.0.0",
    }
    with pytest.raises(KnowgicError, match=r"already has tag v1\.0\.0"):
        publish(plan, api=hub)
    assert [name for name, _ in hub.calls][-1] == "list_repo_refs", "nothing uploaded after the refusal"


def test_without_network_publishing_fails_in_one_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _out, err = run(
        capsys, "publish", "--repo-id", "org/knowgic", "--version", "1.0.0", "--token", "hf_x"
    )
    assert code == 2
    assert err.startswith("error: publishing to org/knowgic failed") and err.count("\n") == 1
