"""Named bounds on what a submission hands the runner: JSON nested too deep ends in one line naming the
bound (not a RecursionError), and a control or separator character in the manifest is refused at submit
with one line naming the character, the field and its line (not a job that later fails with "ERROR:
Exception:"). Real delta folders, the real intake and the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from knowgic.jsonbounds import MAX_DEPTH, TooDeep, loads_bounded
from knowgic.printable import printable
from knowgic.runner.queue.queue import JobQueue
from knowgic.runner.stages.deltas import DeltaError
from tests.test_deltas import _edited, _read, _write
from tests.test_runner_cli import assert_one_error_line, run
from tests.test_submission import MANIFEST, make_submission


@pytest.fixture
def model(random_gpt2):
    return random_gpt2[0]


def _nested(depth: int) -> str:
    return '{"a":' * depth + "0" + "}" * depth


@pytest.mark.parametrize("depth", [200_000, 2_000, MAX_DEPTH + 1])
def test_a_sidecar_nested_too_deep_fails_the_job_with_the_bound_named(model, tmp_path, depth: int) -> None:
    key = _write(tmp_path, _edited(model))
    path = tmp_path / f"{key}.json"
    sidecar = path.read_text(encoding="utf-8")
    # The editor's own diagnostics ("info": a free object in the schema) nested `depth` levels.
    path.write_text(sidecar.replace('"info": {"loss": 0.5}', f'"info": {_nested(depth)}'), encoding="utf-8")
    assert len(path.read_text(encoding="utf-8")) > len(sidecar)
    with pytest.raises(DeltaError) as failed:
        _read(tmp_path, model, key)
    message = str(failed.value)
    assert "\n" not in message
    assert re.fullmatch(
        rf"delta sidecar {key}\.json nests arrays or objects deeper than {MAX_DEPTH} levels \(.+\)", message
    ), message


def test_the_bound_admits_what_it_names() -> None:
    assert loads_bounded(_nested(MAX_DEPTH), "x")["a"] is not None  # MAX_DEPTH objects, one in another
    with pytest.raises(TooDeep, match=rf"deeper than {MAX_DEPTH} levels \(at /a/a/a/a/a/a/…\)"):
        loads_bounded(_nested(MAX_DEPTH + 1), "x")
    assert loads_bounded(json.dumps([[1], {"k": [2]}]), "x") == [[1], {"k": [2]}]


@pytest.mark.parametrize(
    ("field", "value", "name", "where"),
    [
        (
            "requirements",
            ['einops; python_version == "3.11\u2028"'],
            "U+2028 LINE SEPARATOR",
            "requirements/0",
        ),
        ("requirements", ["einops\u2029>=0.8"], "U+2029 PARAGRAPH SEPARATOR", "requirements/0"),
        ("requirements", ["einops\x85>=0.8"], "U+0085 (control)", "requirements/0"),
        ("requirements", ["ein\u202eops"], "U+202E RIGHT-TO-LEFT OVERRIDE", "requirements/0"),
        ("requirements", ["einops\u00a0>=0.8"], "U+00A0 NO-BREAK SPACE", "requirements/0"),
        ("authors", ["A. Author\x1b]0;owned\x07"], "U+001B (control)", "authors/0"),
        ("description", "two\nlines are fine, a carriage return\r is not", "U+000D (control)", "description"),
        ("hparams", {"knowgic-tiny\u200b": {}}, "U+200B ZERO WIDTH SPACE", "hparams/knowgic-tiny\u200b"),
    ],
    ids=["u2028-marker", "u2029", "c1-next-line", "bidi-override", "nbsp", "esc-author", "cr", "zwsp-key"],
)
def test_control_and_separator_characters_are_refused_at_submit(
    tmp_path: Path, capsys, field: str, value: object, name: str, where: str
) -> None:
    folder = make_submission(
        tmp_path / "sub", manifest_text=yaml.safe_dump({**MANIFEST, field: value}, sort_keys=False)
    )
    store = tmp_path / "store"
    code, _, err = run(capsys, "runner", "submit", str(folder), "--store", str(store))
    assert_one_error_line(code, err, f"field {printable(where)}: character {name} at position")
    line = err.strip()
    assert re.search(r"submission\.yaml line \d+, field", line) and "holds plain text only" in line, line
    assert line.isprintable()  # the error itself shows the character as an escape
    assert JobQueue(f"sqlite:///{store / 'queue.sqlite'}").jobs() == []


def test_multi_line_text_is_kept_where_it_belongs(tmp_path: Path, capsys) -> None:
    manifest = {
        **MANIFEST,
        "description": "First line.\nSecond line,\tindented.",
        "hparams": {"knowgic-tiny": {"template": "Imagine that:\n{fact}\n"}},
    }
    folder = make_submission(tmp_path / "sub", manifest_text=yaml.safe_dump(manifest, sort_keys=False))
    code, out, err = run(capsys, "runner", "submit", str(folder), "--store", str(tmp_path / "store"))
    assert code == 0, err
    assert "submission rank-one-ft 0.1.0" in out
