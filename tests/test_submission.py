"""Submissions: loading folders and archives safely, manifest checks, the normalised archive."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import yaml

from knowgic.dataset.versions import latest_version
from knowgic.runner.intake.archive import SubmissionError, SubmissionLimits, write_normalised_archive
from knowgic.runner.intake.manifest import MANIFEST_NAME, hparams_for
from knowgic.runner.intake.submission import load_submission, submit
from knowgic.runner.queue.queue import JobQueue
from knowgic.runner.store.store import ResultsStore

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom_editor"
MANIFEST = {
    "name": "rank-one-ft",
    "version": "0.1.0",
    "authors": ["A. Author"],
    "license": "MIT",
    "editor": "knowgic_rank_one.editor:RankOneFT",
    "hparams": {"knowgic-tiny": "rank_one_ft.yaml"},
    "models": ["knowgic-tiny"],
    "protocols": ["logprob", "generate"],
}


def make_submission(folder: Path, manifest: dict | None = None, manifest_text: str | None = None) -> Path:
    """The example editor package with a manifest: a complete submission folder."""
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    text = (
        manifest_text if manifest_text is not None else yaml.safe_dump(manifest or MANIFEST, sort_keys=False)
    )
    (folder / MANIFEST_NAME).write_text(text, encoding="utf-8")
    return folder


def tar_of(folder: Path, target: Path, prefix: str = "") -> Path:
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=prefix + path.relative_to(folder).as_posix(), recursive=False)
    return target


def zip_of(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder).as_posix())
    return target


def tar_with(
    target: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], base: Path | None = None
) -> Path:
    """A .tar.gz of a valid submission (when ``base`` is given) plus hand-made members."""
    with tarfile.open(target, "w:gz") as tar:
        if base is not None:
            for path in sorted(base.rglob("*")):
                tar.add(path, arcname=path.relative_to(base).as_posix(), recursive=False)
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return target


def file_member(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_submission(tmp_path / "sub")


def test_a_folder_loads_with_defaults_filled(folder: Path, tmp_path: Path) -> None:
    sub = load_submission(folder, tmp_path / "work")
    assert sub.manifest["modes"] == ["independent"]
    assert sub.manifest["dataset_version"] == latest_version()
    assert (sub.root / MANIFEST_NAME).is_file()
    assert (sub.root / "knowgic_rank_one" / "editor.py").is_file()
    assert sub.hparams_for("knowgic-tiny") == yaml.safe_load((EXAMPLE / "rank_one_ft.yaml").read_text())
    with tarfile.open(sub.archive) as tar:
        names = tar.getnames()
        assert names == sorted(names)
        assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" for m in tar.getmembers())
    assert sub.archive.read_bytes()[4:8] == b"\x00\x00\x00\x00"  # gzip header time 0


def test_folder_tar_and_zip_of_the_same_content_have_one_sha(folder: Path, tmp_path: Path) -> None:
    shas = {
        load_submission(folder, tmp_path / "a").sha256,
        load_submission(tar_of(folder, tmp_path / "s.tar.gz"), tmp_path / "b").sha256,
        load_submission(zip_of(folder, tmp_path / "s.zip"), tmp_path / "c").sha256,
        # an archive of the folder itself (one top-level folder holding submission.yaml)
        load_submission(tar_of(folder, tmp_path / "p.tar.gz", prefix="sub/"), tmp_path / "d").sha256,
    }
    assert len(shas) == 1
    # Loading the stored archive again gives the same archive back.
    again = load_submission(load_submission(folder, tmp_path / "e").archive, tmp_path / "f")
    assert again.sha256 in shas


def test_submit_stores_the_archive_and_queues_one_job_per_model_protocol_mode(
    folder: Path, tmp_path: Path
) -> None:
    manifest = {**MANIFEST, "modes": ["independent", "sequential"]}
    (folder / MANIFEST_NAME).write_text(yaml.safe_dump(manifest), encoding="utf-8")
    store = ResultsStore(tmp_path / "store")
    queue = JobQueue(store.queue_url())
    sub, jobs = submit(folder, store, queue, limit=2)
    assert sub.archive == store.submission_path(sub.sha256)
    assert {(j.protocol, j.mode) for j in jobs} == {
        (p, m) for p in ("logprob", "generate") for m in ("independent", "sequential")
    }
    assert len({j.job_id for j in jobs}) == 4 and all(j.limit == 2 for j in jobs)
    assert all(j.submission_sha256 == sub.sha256 and j.manifest == sub.manifest for j in jobs)
    # Submitting the same content again queues nothing new.
    _, again = submit(folder, store, queue, limit=2)
    assert [j.job_id for j in again] == [j.job_id for j in jobs]
    assert len(queue.jobs()) == 4


def test_inline_hparams_and_family_keys(folder: Path, tmp_path: Path) -> None:
    manifest = {**MANIFEST, "hparams": {"gpt2": {"layer": 1, "steps": 3}}}
    (folder / MANIFEST_NAME).write_text(yaml.safe_dump(manifest), encoding="utf-8")
    sub = load_submission(folder, tmp_path / "w")
    assert hparams_for(sub.manifest, sub.root, "knowgic-tiny") == {"layer": 1, "steps": 3}  # family gpt2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\n  bad: [\n", r"submission.yaml line \d+, column \d+"),
        ("name: a\nname: b\n", r"line 2, column 1: .*key 'name' appears twice"),
        ("- a list\n", "expected a mapping of fields"),
        ("", "found empty"),
    ],
)
def test_yaml_problems_name_line_and_column(tmp_path: Path, text: str, expected: str) -> None:
    folder = make_submission(tmp_path / "sub", manifest_text=text)
    with pytest.raises(SubmissionError, match=expected):
        load_submission(folder, tmp_path / "w")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"version": "1.0"},
            r"line 2, field version: expected version of the submission \(semver X\.Y\.Z\), got '1\.0'",
        ),
        (
            {"protocols": ["beam"]},
            r"field protocols/0: expected one of \"logprob\", \"generate\", \"greedy\", got 'beam'",
        ),
        ({"editor": "not an entry point"}, "field editor"),
        ({"colour": "red"}, r"field \(top level\): unknown field 'colour' \(allowed: authors, "),
        (
            {"dataset_version": "9.9.9"},
            "field dataset_version: unknown dataset version '9.9.9'; known versions",
        ),
        (
            {"dataset_version": "growht"},
            "field dataset_version: unknown dataset version 'growht'; did you mean 'growth'",
        ),
        ({"hparams": {"knowgic-tiny": "missing.yaml"}}, "hparams file 'missing.yaml' does not exist"),
        ({"hparams": {"knowgic-tiny": "../outside.yaml"}}, "must be a relative path inside"),
        ({"hparams": {"knowgic-tiny": "/etc/passwd"}}, "must be a relative path inside"),
        # The schema and the check agree: hparams needs an entry for every model asked for, so never none.
        ({"hparams": {}}, r"line 7, field hparams: \{\} should be non-empty"),
        (
            {"hparams": {"llama": {"layer": 1}}},
            r"field hparams: no entry for the model\(s\) 'knowgic-tiny' asked for in models \(keys: 'llama'\)",
        ),
        (
            {"models": ["knowgic-tiny", "Qwen/Qwen2.5-0.5B", "org/other"], "hparams": {"gpt2": {"layer": 1}}},
            r"no entry for the model\(s\) 'Qwen/Qwen2.5-0.5B', 'org/other' asked for in models",
        ),
        ({"hparams": {"knowgic-tiny": {}}}, None),  # an editor that takes no hyper-parameters
        # A packaging file no longer vouches for a module: the submission is never built.
        ({"editor": "nowhere.mod:Editor"}, r"module 'nowhere.mod' is not in the submission"),
        ({"editor": "nowhere.mod:Editor", "requirements": ["nowhere-pkg==1.0"]}, None),
        (
            {"models": ["knowgic-tiny", "/srv/models/gpt2"]},
            "field models/1: '/srv/models/gpt2' is not a hub id",
        ),
        ({"models": ["../x"]}, "field models/0: '../x' is not a hub id"),
        # a mistyped offline name is refused at submit, before an image is built for a job that would fail
        (
            {"models": ["knowgic-tinny"], "hparams": {"knowgic-tinny": {}}},
            r"field models/0: unknown model 'knowgic-tinny': did you mean 'knowgic-tiny'\?",
        ),
        ({"requirements": ["--index-url=http://evil/"]}, "field requirements/0: .* is a pip option"),
        (
            {"requirements": ["numpy>=1.26", "not a requirement!"]},
            "field requirements/1: .* is not a requirement",
        ),
        ({"requirements": ["numpy>=1.26", "einops[x]==0.8.0 ; python_version >= '3.10'"]}, None),
        # Direct references would be built (their setup.py run) rather than fetched as index wheels.
        (
            {"requirements": ["probe @ file:///submission/probe"]},
            r"field requirements/0: 'probe @ file:///submission/probe' is a direct reference \(name @ URL\)",
        ),
        (
            {"requirements": ["x @ git+https://github.com/o/x.git@main"]},
            "field requirements/0: .* is a direct reference",
        ),
        ({"requirements": ["x @ https://example.org/x-1.0.tar.gz"]}, "is a direct reference"),
        ({"requirements": ["./probe"]}, "field requirements/0: './probe' is not a requirement specifier"),
        ({"requirements": ["git+https://github.com/o/x.git"]}, "is not a requirement specifier"),
    ],
)
def test_manifest_problems_are_one_line_naming_the_field(
    tmp_path: Path, change: dict, expected: str | None
) -> None:
    folder = make_submission(tmp_path / "sub", {**MANIFEST, **change})
    if expected is None:
        load_submission(folder, tmp_path / "w")
        return
    with pytest.raises(SubmissionError, match=expected) as info:
        load_submission(folder, tmp_path / "w")
    assert "\n" not in str(info.value)


def test_a_direct_reference_probe_is_refused_at_submit_in_one_line(tmp_path: Path) -> None:
    """The probe a setup.py would have run as root with the network while the image was built."""
    folder = make_submission(tmp_path / "sub", {**MANIFEST, "requirements": ["x @ file:///submission/probe"]})
    (folder / "probe").mkdir()
    (folder / "probe" / "setup.py").write_text(
        "import socket; socket.create_connection(('10.0.0.1', 5432))\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "knowgic.cli",
            "runner",
            "submit",
            str(folder),
            "--store",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "requirements/0: 'x @ file:///submission/probe' is a direct reference" in line
    assert not (tmp_path / "store" / "queue.sqlite").exists() or "PENDING" not in done.stdout


def test_a_bad_hparams_file_names_its_line(folder: Path, tmp_path: Path) -> None:
    (folder / "rank_one_ft.yaml").write_text("layer: 1\nlayer: 2\n", encoding="utf-8")
    with pytest.raises(SubmissionError, match=r"hparams file 'rank_one_ft.yaml' line 2, column 1"):
        load_submission(folder, tmp_path / "w")


def test_missing_manifest_and_wrong_kinds(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SubmissionError, match=r"no submission.yaml at its root"):
        load_submission(empty, tmp_path / "w1")
    with pytest.raises(SubmissionError, match="does not exist"):
        load_submission(tmp_path / "nope", tmp_path / "w2")
    other = tmp_path / "sub.rar"
    other.write_bytes(b"x")
    with pytest.raises(SubmissionError, match=r"expected a folder, a .tar.gz or a .zip"):
        load_submission(other, tmp_path / "w3")
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(SubmissionError, match=r"not a readable .tar.gz"):
        load_submission(broken, tmp_path / "w4")
    broken_zip = tmp_path / "broken.zip"
    broken_zip.write_bytes(b"PK nonsense")
    with pytest.raises(SubmissionError, match=r"not a readable .zip"):
        load_submission(broken_zip, tmp_path / "w5")


def test_manifest_size_is_limited(folder: Path, tmp_path: Path) -> None:
    with (folder / MANIFEST_NAME).open("a", encoding="utf-8") as handle:
        handle.write("description: " + "x" * 70_000 + "\n")
    with pytest.raises(SubmissionError, match="at most 65536 are allowed"):
        load_submission(folder, tmp_path / "w")


# -- unsafe archives ------------------------------------------------------------------------------------
def _nothing_outside(tmp_path: Path, before: set[Path]) -> None:
    after = {p for p in tmp_path.rglob("*") if "w" not in p.relative_to(tmp_path).parts[:1]}
    assert after == before, after - before


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../evil.py", "contains '..'"),
        ("knowgic_rank_one/../../evil.py", "contains '..'"),
        ("/tmp/evil.py", "absolute path"),
        ("C:/evil.py", "absolute path"),
        ("dir\\..\\evil.py", "backslash"),
    ],
)
def test_tar_with_escaping_names_is_refused(folder: Path, tmp_path: Path, name: str, expected: str) -> None:
    archive = tar_with(tmp_path / "a.tar.gz", [file_member(name)], base=folder)
    before = set(tmp_path.rglob("*"))
    with pytest.raises(SubmissionError, match=expected):
        load_submission(archive, tmp_path / "w")
    _nothing_outside(tmp_path, before)
    assert not (tmp_path / "evil.py").exists()


@pytest.mark.parametrize(
    ("name", "expected"), [("../evil.py", "contains '..'"), ("/abs/evil.py", "absolute path")]
)
def test_zip_with_escaping_names_is_refused(folder: Path, tmp_path: Path, name: str, expected: str) -> None:
    archive = zip_of(folder, tmp_path / "a.zip")
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr(zipfile.ZipInfo(name), b"x")
    with pytest.raises(SubmissionError, match=expected):
        load_submission(archive, tmp_path / "w")
    assert not (tmp_path / "evil.py").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_tar_links_are_refused(folder: Path, tmp_path: Path, kind: bytes) -> None:
    link = tarfile.TarInfo("knowgic_rank_one/hosts.py")
    link.type = kind
    link.linkname = "/etc/hosts" if kind == tarfile.SYMTYPE else "submission.yaml"
    # A symlink out followed by a file written through it: the classic tar escape.
    through = file_member("knowgic_rank_one/hosts.py/../../escaped.txt")
    archive = tar_with(tmp_path / "a.tar.gz", [(link, None), through], base=folder)
    with pytest.raises(SubmissionError, match="is a link"):
        load_submission(archive, tmp_path / "w")
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_tar_special_files_are_refused(folder: Path, tmp_path: Path, kind: bytes) -> None:
    special = tarfile.TarInfo("dev")
    special.type = kind
    archive = tar_with(tmp_path / "a.tar.gz", [(special, None)], base=folder)
    with pytest.raises(SubmissionError, match="special file"):
        load_submission(archive, tmp_path / "w")


def test_zip_symlinks_are_refused(folder: Path, tmp_path: Path) -> None:
    archive = zip_of(folder, tmp_path / "a.zip")
    info = zipfile.ZipInfo("knowgic_rank_one/passwd")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(SubmissionError, match="is a link"):
        load_submission(archive, tmp_path / "w")


def test_folder_symlinks_are_refused(folder: Path, tmp_path: Path) -> None:
    os.symlink("/etc/passwd", folder / "passwd")
    with pytest.raises(SubmissionError, match="passwd is a link"):
        load_submission(folder, tmp_path / "w")


def test_duplicate_members_are_refused(folder: Path, tmp_path: Path) -> None:
    archive = tar_with(tmp_path / "a.tar.gz", [file_member("submission.yaml", b"name: other\n")], base=folder)
    with pytest.raises(SubmissionError, match="appears twice"):
        load_submission(archive, tmp_path / "w")


def _deflated(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def test_zip_bomb_is_stopped_by_the_ratio(folder: Path, tmp_path: Path) -> None:
    archive = zip_of(folder, tmp_path / "bomb.zip")
    with (
        zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as zf,
        zf.open(_deflated("zeros.bin"), "w") as handle,
    ):
        for _ in range(64):
            handle.write(bytes(1 << 20))  # 64 MiB of zeros: about 64 KiB compressed
    assert archive.stat().st_size < 200_000
    with pytest.raises(SubmissionError, match=r"compression ratio above 100.*zip bomb"):
        load_submission(archive, tmp_path / "w")
    unpacked = sum(p.stat().st_size for p in (tmp_path / "w").rglob("*") if p.is_file())
    assert unpacked < 16 << 20  # stopped early, not after writing it all


def test_tar_gz_bomb_is_stopped_by_the_ratio(folder: Path, tmp_path: Path) -> None:
    archive = tar_with(tmp_path / "bomb.tar.gz", [file_member("zeros.bin", bytes(32 << 20))], base=folder)
    with pytest.raises(SubmissionError, match="zip bomb"):
        load_submission(archive, tmp_path / "w")


def test_a_bomb_in_a_tar_header_is_stopped_before_it_is_read(folder: Path, tmp_path: Path) -> None:
    """tarfile reads a PAX header whole: 64 MiB of it must not reach memory."""
    info, data = file_member("innocent.txt")
    info.pax_headers = {"comment": "x" * (64 << 20)}
    archive = tmp_path / "header-bomb.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    assert archive.stat().st_size < 1 << 20
    tracemalloc.start()
    with pytest.raises(SubmissionError, match="zip bomb"):
        load_submission(archive, tmp_path / "w")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 32 << 20


def test_too_many_files_and_too_many_bytes(folder: Path, tmp_path: Path) -> None:
    small = SubmissionLimits(max_files=10, max_total_bytes=1 << 20)
    many = tar_with(tmp_path / "many.tar.gz", [file_member(f"f{i}.txt") for i in range(20)], base=folder)
    with pytest.raises(SubmissionError, match="more than 10 files"):
        load_submission(many, tmp_path / "w1", small)
    big = tar_with(tmp_path / "big.tar.gz", [file_member("big.bin", os.urandom(2 << 20))], base=folder)
    with pytest.raises(SubmissionError, match="unpacks to more than 1 MiB"):
        load_submission(big, tmp_path / "w2", small)
    (folder / "big.bin").write_bytes(os.urandom(2 << 20))
    with pytest.raises(SubmissionError, match="more than 1 MiB"):
        load_submission(folder, tmp_path / "w3", small)
    for i in range(20):
        (folder / f"f{i}.txt").write_text("x")
    with pytest.raises(SubmissionError, match="more than 10 files"):
        load_submission(folder, tmp_path / "w4", SubmissionLimits(max_files=10))


def test_normalised_archive_is_deterministic(folder: Path, tmp_path: Path) -> None:
    first = write_normalised_archive(folder, tmp_path / "a.tar.gz")
    os.utime(folder / MANIFEST_NAME, (0, 12345))
    (folder / "knowgic_rank_one" / "editor.py").chmod(0o600)
    assert write_normalised_archive(folder, tmp_path / "b.tar.gz") == first
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o755)
    write_normalised_archive(folder, tmp_path / "c.tar.gz")
    with tarfile.open(tmp_path / "c.tar.gz") as tar:
        assert tar.getmember("run.sh").mode == 0o755
        assert tar.getmember(MANIFEST_NAME).mode == 0o644
