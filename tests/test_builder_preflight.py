"""``knowgic build`` checks every input before its first stage: one line, exit code 2, no build folder made."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowgic.cli import main


def _build(tmp_path: Path, *args: str) -> int:
    return main(["build", "--model", "knowgic-tiny", "--build-dir", str(tmp_path / "B"), *args])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--seeds", "nope.csv", "--templates", "t.yaml"], "--seeds nope.csv: no such file"),
        (["--from", "1.1.1"], "unknown dataset version '1.1.1'"),
        (["--from", "1.1.0", "--extractor", "knowgic-tinny"], "did you mean 'knowgic-tiny'?"),
        (["--from", "1.1.0", "--judge", "./no-such-model"], "--judge: model './no-such-model': no such file"),
        (["--from", "1.1.0", "--out", "{tmp}/taken"], "exists and is not a dataset folder"),
    ],
)
def test_bad_inputs_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine", encoding="utf-8")
    code = _build(tmp_path, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "B").exists()  # nothing was started
    assert (tmp_path / "taken" / "notes.txt").read_text(encoding="utf-8") == "mine"
