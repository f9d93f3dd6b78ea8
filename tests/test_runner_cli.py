"""``knowgic runner``: the commands, their help texts, and one clear line with exit 2 on bad input."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import yaml

from knowgic.cli import build_parser, main
from knowgic.runner.queue.queue import JobQueue, JobState
from tests.test_submission import EXAMPLE, MANIFEST, make_submission


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(code: int, err: str, expected: str) -> None:
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], err
    assert "Traceback" not in err


@pytest.fixture
def submitted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, list[str]]:
    folder = make_submission(tmp_path / "sub", {**MANIFEST, "modes": ["independent", "sequential"]})
    store = tmp_path / "store"
    code, out, err = run(capsys, "runner", "submit", str(folder), "--store", str(store), "--limit", "1")
    assert code == 0, err
    ids = [line.split("\t")[0] for line in out.splitlines()[1:]]
    return store, ids


def test_submit_prints_one_job_per_model_protocol_mode(submitted, capsys) -> None:
    store, ids = submitted
    assert len(ids) == 4 and all(i.startswith("rank-one-ft-0.1.0-") for i in ids)
    code, out, _ = run(capsys, "runner", "status", "--store", str(store))
    assert code == 0 and out.count("\tPENDING for ") == 4 and "4 PENDING, 0 RUNNING" in out
    code, out, _ = run(capsys, "runner", "status", "--store", str(store), "--json")
    records = json.loads(out)
    assert [r["job_id"] for r in records] == ids and {r["state"] for r in records} == {"PENDING"}
    assert {(r["protocol"], r["mode"]) for r in records} == {
        (p, m) for p in ("logprob", "generate") for m in ("independent", "sequential")
    }


def test_cancel_requeue_logs(submitted, capsys) -> None:
    store, ids = submitted
    code, out, _ = run(capsys, "runner", "cancel", ids[0], "--store", str(store))
    assert code == 0 and out.strip() == f"{ids[0]}: CANCELLED"
    code, out, _ = run(capsys, "runner", "status", "--store", str(store), "--state", "CANCELLED")
    assert code == 0 and out.splitlines()[0].startswith(ids[0]) and len(out.splitlines()) == 2
    code, out, _ = run(capsys, "runner", "requeue", ids[0], "--store", str(store))
    assert code == 0 and out.strip() == f"{ids[0]}: PENDING"
    code, out, _ = run(capsys, "runner", "logs", ids[0], "--store", str(store))
    assert code == 0 and "cancelled while PENDING" in out and "requeued from CANCELLED" in out


def test_the_queue_url_comes_from_db_or_the_environment(tmp_path: Path, capsys, monkeypatch) -> None:
    folder = make_submission(tmp_path / "sub")
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'q.sqlite'}"
    monkeypatch.setenv("KNOWGIC_QUEUE_URL", url)
    code, _, err = run(capsys, "runner", "submit", str(folder), "--store", str(tmp_path / "store"))
    assert code == 0, err
    assert not (tmp_path / "store" / "queue.sqlite").exists()
    assert len(JobQueue(url).jobs([JobState.PENDING])) == 2
    monkeypatch.delenv("KNOWGIC_QUEUE_URL")
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    code, _, err = run(
        capsys, "runner", "submit", str(folder), "--store", str(tmp_path / "store"), "--db", other
    )
    assert code == 0 and len(JobQueue(other).jobs()) == 2


def test_the_example_submission_is_complete_and_accepted(tmp_path: Path, capsys) -> None:
    """examples/custom_editor is a submission as it stands: its manifest fills every field the schema knows
    (optional ones at least in a comment), and `runner submit` queues its job."""
    from knowgic.dataset.schemas import load_schema, validator

    manifest_path = EXAMPLE / "submission.yaml"
    text = manifest_path.read_text(encoding="utf-8")
    manifest = yaml.safe_load(text)
    assert list(validator("submission").iter_errors(manifest)) == []
    assert text in (EXAMPLE.parent.parent / "docs" / "runner.md").read_text(encoding="utf-8")  # shown whole
    for field in load_schema("submission")["properties"]:
        assert re.search(rf"^#? ?{field}:", text, re.M), f"the example does not show {field}"
    store = tmp_path / "store"
    code, out, err = run(capsys, "runner", "submit", str(EXAMPLE), "--store", str(store))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("submission rank-one-ft 1.0.0: archive ") and lines[0].endswith("; 1 job(s)")
    (job,) = JobQueue(f"sqlite:///{store / 'queue.sqlite'}").jobs()
    assert (job.model, job.protocol, job.mode, job.state) == (
        "knowgic-tiny",
        "logprob",
        "independent",
        "PENDING",
    )
    assert lines[1].startswith(f"{job.job_id}\tPENDING\tknowgic-tiny\tlogprob\tindependent")
    (archive,) = (store / "submissions").iterdir()
    assert archive.name.startswith(job.submission_sha256)


def test_bad_submissions_are_one_line(tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    code, _, err = run(capsys, "runner", "submit", str(tmp_path / "missing"), "--store", store)
    assert_one_error_line(code, err, "does not exist")
    folder = make_submission(tmp_path / "sub", {**MANIFEST, "version": "one"})
    code, _, err = run(capsys, "runner", "submit", str(folder), "--store", store)
    assert_one_error_line(
        code, err, "line 2, field version: expected version of the submission (semver X.Y.Z), got 'one'"
    )
    code, _, err = run(capsys, "runner", "submit", str(folder), "--store", store, "--limit", "0")
    assert_one_error_line(code, err, "'0' must be 1 or more")
    code, _, err = run(capsys, "runner", "submit", str(folder), "--store", store, "--db", "nonsense")
    assert_one_error_line(code, err, "is not a database URL")
    code, _, err = run(capsys, "runner", "submit", "--store", store)
    assert_one_error_line(code, err, "the following arguments are required: PATH")


def test_bad_worker_options_are_one_line(tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    cases = [
        (("--gpus", "some"), "argument --gpus: invalid choice: 'some'"),
        (("--heartbeat", "-1"), "'-1' must be more than 0 seconds"),
        (("--grace", "soon"), "'soon' is not a number of seconds"),
        (
            ("--heartbeat", "30", "--grace", "10", "--gpus", "none"),
            "--grace 10 must be longer than --heartbeat 30",
        ),
        (("--workdir", str(tmp_path / "nope"), "--gpus", "none"), "is not a folder"),
        (("--db", "mysql://h/q"), "only sqlite:/// and postgresql"),
        (("--max-jobs", "x"), "'x' is not a whole number"),
    ]
    for extra, expected in cases:
        code, _, err = run(capsys, "runner", "worker", "--store", store, *extra)
        assert_one_error_line(code, err, expected)


def test_bad_input_to_status_logs_requeue_cancel(submitted, tmp_path: Path, capsys) -> None:
    store, ids = submitted
    missing = str(tmp_path / "no-store")
    for command in (("status",), ("logs", ids[0]), ("requeue", ids[0]), ("cancel", ids[0])):
        code, _, err = run(capsys, "runner", *command, "--store", missing)
        assert_one_error_line(code, err, "no queue database at")
    s = str(store)
    for command, expected in [
        (("logs", "nope"), "no job 'nope' in the queue"),
        (("requeue", "nope"), "no job 'nope' in the queue"),
        (("cancel", "nope"), "no job 'nope' in the queue"),
        (("requeue", ids[1]), "is already PENDING"),
        (("status", "--state", "DONE"), "argument --state: invalid choice: 'DONE'"),
        (("logs",), "the following arguments are required: JOB"),
    ]:
        code, _, err = run(capsys, "runner", *command, "--store", s)
        assert_one_error_line(code, err, expected)
    run(capsys, "runner", "cancel", ids[1], "--store", s)
    code, _, err = run(capsys, "runner", "cancel", ids[1], "--store", s)
    assert_one_error_line(code, err, "is already CANCELLED; nothing to cancel")
    code, _, err = run(
        capsys, "runner", "status", "--store", s, "--db", "postgresql+psycopg://u@127.0.0.1:1/q"
    )
    assert_one_error_line(code, err, "queue database postgresql+psycopg://u@127.0.0.1:1/q:")


def test_every_runner_option_has_help() -> None:
    parser = build_parser()
    runner = next(
        a
        for a in parser._subparsers._group_actions[0].choices.items()
        if a[0] == "runner"  # type: ignore[union-attr]
    )[1]
    commands = next(a for a in runner._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == {
        "submit",
        "add-submitter",
        "worker",
        "status",
        "logs",
        "requeue",
        "cancel",
        "build-image",
        "slurm-workers",
    }
    for name, sub in commands.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.help.strip(), f"runner {name} {action.dest}"
