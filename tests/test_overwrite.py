"""A run in an --out folder is never replaced unless the user asks (--overwrite), and then atomically."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.evaluation.outputs import RUN_FILE_NAMES, write_run_outputs

EVALUATE = ["evaluate", "--model", "knowgic-tiny", "--limit", "1"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `none` run on one edit, made once through the CLI; tests copy it."""
    out = tmp_path_factory.mktemp("first") / "run"
    assert main([*EVALUATE, "--editor", "none", "--out", str(out)]) == 0
    return out


@pytest.fixture
def existing(first_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    return out


def test_evaluate_refuses_to_replace_a_run(capsys, existing: Path) -> None:
    before = _snapshot(existing)
    created = json.loads((existing / "results.json").read_text(encoding="utf-8"))["created_at"]
    code, out, err = run(capsys, *EVALUATE, "--editor", "ice", "--out", str(existing))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    day, clock = created.replace("+00:00", "").split("T")
    assert err == (
        f"error: {existing} already holds a run (editor none on knowgic-tiny, {day} {clock} UTC); "
        "pass --overwrite to replace it, or choose another folder\n"
    )
    assert _snapshot(existing) == before
    assert sorted(p.name for p in existing.parent.iterdir()) == ["run"]  # nothing staged left behind


def test_overwrite_replaces_the_run_whole(capsys, existing: Path) -> None:
    code, out, _ = run(capsys, *EVALUATE, "--editor", "ice", "--out", str(existing), "--overwrite")
    assert code == 0 and f"results: {existing / 'results.json'}" in out
    document = json.loads((existing / "results.json").read_text(encoding="utf-8"))
    assert document["config"]["editor"] == "ice"
    assert sorted(p.name for p in existing.iterdir()) == sorted(RUN_FILE_NAMES)
    assert sorted(p.name for p in existing.parent.iterdir()) == ["run"]


def test_overwrite_keeps_the_users_other_files(capsys, existing: Path) -> None:
    (existing / "notes.txt").write_text("my notes", encoding="utf-8")
    code, _, err = run(capsys, *EVALUATE, "--editor", "ice", "--out", str(existing))
    assert code == 2 and "--overwrite" in err
    code, _, _ = run(capsys, *EVALUATE, "--editor", "ice", "--out", str(existing), "--overwrite")
    assert code == 0
    assert (existing / "notes.txt").read_text(encoding="utf-8") == "my notes"
    assert json.loads((existing / "results.json").read_text(encoding="utf-8"))["config"]["editor"] == "ice"
    assert sorted(p.name for p in existing.iterdir()) == sorted([*RUN_FILE_NAMES, "notes.txt"])


def test_a_folder_without_a_run_is_written_into(capsys, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("my notes", encoding="utf-8")
    code, _, _ = run(capsys, *EVALUATE, "--editor", "none", "--out", str(out))
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*RUN_FILE_NAMES, "notes.txt"])


def test_an_unreadable_results_file_is_not_replaced_either(capsys, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json").write_text("{ half a document", encoding="utf-8")
    code, _, err = run(capsys, *EVALUATE, "--editor", "none", "--out", str(out))
    assert code == 2
    assert "already holds a run (a results.json that cannot be read as a run)" in err
    assert (out / "results.json").read_text(encoding="utf-8") == "{ half a document"


def test_without_out_the_summary_says_nothing_was_saved(capsys) -> None:
    code, out, _ = run(capsys, *EVALUATE, "--editor", "none")
    assert code == 0
    assert out.rstrip().endswith(
        "not saved: no --out given (pass --out DIR to keep results.json and the plots)"
    )
    code, out, err = run(capsys, *EVALUATE, "--editor", "none", "--json")
    assert code == 0 and json.loads(out)["config"]["editor"] == "none"  # stdout stays one document
    assert "not saved: no --out given" in err


def test_help_says_that_without_out_nothing_is_saved(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "without --out nothing is saved" in text and "--overwrite" in text


def test_readers_never_see_a_missing_or_mixed_run(tmp_path: Path) -> None:
    """While a run is overwritten again and again, a reader always finds a whole results.json and its plot:
    never a missing, empty or half-written file."""
    out = tmp_path / "run"
    documents = [{"run": i, "padding": "x" * 200_000} for i in range(2)]

    def write(document: dict, overwrite: bool) -> None:
        def plot(folder: Path) -> list[Path]:
            path = folder / "per_edit.png"
            path.write_text(str(document["run"]), encoding="utf-8")
            return [path]

        write_run_outputs(document, out, plot, overwrite=overwrite)

    write(documents[0], overwrite=False)
    stop, seen, problems = threading.Event(), set(), []

    def read() -> None:
        while not stop.is_set():
            try:
                document = json.loads((out / "results.json").read_text(encoding="utf-8"))
                plot = (out / "per_edit.png").read_text(encoding="utf-8")
            except (OSError, ValueError) as exc:
                problems.append(repr(exc))
                continue
            seen.add(document["run"])
            if plot not in ("0", "1"):
                problems.append(f"plot {plot!r} of no run")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 60):
            write(documents[i % 2], overwrite=True)
    finally:
        stop.set()
        reader.join()
    assert problems == []
    assert seen == {0, 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_sweep_refuses_to_replace_runs_of_another_request(capsys, tmp_path: Path) -> None:
    """A rerun of the same sweep resumes (tests/test_newcomer.py); one of another request is refused, and
    --overwrite runs every editor anew."""
    out = tmp_path / "sweep"
    sweep = ["sweep", "--model", "knowgic-tiny", "--editors", "none", "--limit", "1", "--out", str(out)]
    assert run(capsys, *sweep)[0] == 0
    before = (out / "summary.md").read_bytes(), _snapshot(out / "none")

    code, _, err = run(capsys, *sweep, "--seed", "1")
    assert code == 2 and err.count("\n") == 1
    assert f"{out / 'none'} holds a finished run of another request (seed 0 there, 1 asked)" in err
    assert "--overwrite" in err
    assert _snapshot(out / "none") == before[1] and (out / "summary.md").read_bytes() == before[0]

    code, _, _ = run(capsys, *sweep, "--overwrite")
    assert code == 0
    assert (out / "summary.md").is_file()
    after = json.loads((out / "none" / "results.json").read_text(encoding="utf-8"))
    assert after["created_at"] >= json.loads(before[1]["results.json"])["created_at"]
    assert after["sha256"] != json.loads(before[1]["results.json"])["sha256"]  # timings differ: a new run


def test_sweep_refuses_a_folder_that_is_one_run(capsys, existing: Path) -> None:
    code, _, err = run(capsys, "sweep", "--editors", "none", "--limit", "1", "--out", str(existing))
    assert code == 2 and "holds a single run (results.json)" in err


def test_overwrite_without_an_atomic_exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system offers no exchange of two folders, two renames replace the run, leaving nothing."""
    import knowgic.evaluation.outputs as outputs

    monkeypatch.setattr(outputs, "_exchange", lambda first, second: False)
    out = tmp_path / "run"
    write_run_outputs({"run": 0}, out)
    write_run_outputs({"run": 1}, out, overwrite=True)
    assert json.loads((out / "results.json").read_text(encoding="utf-8")) == {"run": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
