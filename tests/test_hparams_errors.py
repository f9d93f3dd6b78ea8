"""Errors in what a user writes in YAML: every schema problem of an hparams file, and broken YAML as one
line with its line and column, wherever the project reads YAML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.editors.hparams import MAX_PROBLEMS_SHOWN
from knowgic.yamlfile import YamlError, parse_yaml


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


def test_three_schema_problems_are_all_shown_with_their_pointers(capsys, tmp_path: Path) -> None:
    hparams = tmp_path / "rome.yaml"
    hparams.write_text('layers: "five"\nv_lr: -1\nv_num_grad_steps: "x"\n', encoding="utf-8")
    code, _, err = run(
        capsys, "evaluate", "--model", "knowgic-tiny", "--editor", "rome", "--hparams", str(hparams)
    )
    line = _one_error_line(err)
    assert code == 2
    assert f"hparams {hparams} has 3 problems: " in line
    for problem in (
        "/layers: expected an array, got string 'five'",
        "/v_lr: expected a number > 0, got -1",
        "/v_num_grad_steps: expected an integer, got string 'x'",
    ):
        assert problem in line
    assert "more" not in line


def test_many_schema_problems_are_capped(capsys, tmp_path: Path) -> None:
    hparams = tmp_path / "ft.yaml"
    # Unknown keys (one problem each) and the missing required 'layers': more problems than the cap.
    keys = [f"extra_{i}" for i in range(MAX_PROBLEMS_SHOWN + 5)]
    hparams.write_text("".join(f"{k}: 1\n" for k in keys), encoding="utf-8")
    code, _, err = run(
        capsys, "evaluate", "--model", "knowgic-tiny", "--editor", "ft", "--hparams", str(hparams)
    )
    line = _one_error_line(err)
    assert code == 2
    assert f"has {len(keys) + 1} problems: /: missing required field 'layers'; /extra_0: unknown key;" in line
    assert line.count("/extra_") == MAX_PROBLEMS_SHOWN - 1
    assert line.endswith("; and 6 more")


def test_a_huge_value_in_hparams_is_quoted_briefly(capsys, tmp_path: Path) -> None:
    hparams = tmp_path / "rome.yaml"
    hparams.write_text(f"layers: {'x' * 1_000_000}\nv_lr: -1\n", encoding="utf-8")
    code, _, err = run(
        capsys, "evaluate", "--model", "knowgic-tiny", "--editor", "rome", "--hparams", str(hparams)
    )
    assert code == 2 and len(err) < 2000
    assert "/layers: expected an array, got string 'xxx" in err and "xxx..." in err
    assert "/v_lr: expected a number > 0, got -1" in err


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ("layers: [5, 6\nv_lr: 0.5\n", "line 2, column 5", "expected ',' or ']', but got ':'"),
        ("v_lr: 0.5\n  layers: [5]\n", "line 2, column 9", "mapping values are not allowed here"),
        ('v_lr: "0.5\n', "line 2, column 1", "found unexpected end of stream"),
        ("v_lr: 0.5\nlayers:\t\x07\n", "line 2, column 9", "special characters are not allowed"),
        (
            "layers: [0]\nv_lr: 0.5\nlayers: [3]\n",
            "line 3, column 1",
            "key 'layers' appears twice (first on line 1)",
        ),
    ],
)
def test_malformed_hparams_yaml_gives_line_and_column(
    capsys, tmp_path: Path, text: str, position: str, problem: str
) -> None:
    hparams = tmp_path / "rome.yaml"
    hparams.write_text(text, encoding="utf-8")
    code, _, err = run(
        capsys, "evaluate", "--model", "knowgic-tiny", "--editor", "rome", "--hparams", str(hparams)
    )
    line = _one_error_line(err)
    assert code == 2
    assert line.startswith(f"error: hparams file {hparams} is not valid YAML: {position}: {problem}")


def test_malformed_facts_file_yaml_gives_line_and_column(capsys, tmp_path: Path) -> None:
    facts = tmp_path / "facts.yaml"
    facts.write_text("- prompt: '{} is in'\n  subject: X\n answer: Y\n", encoding="utf-8")
    code, _, err = run(
        capsys, "probe", "--editor", "none", "--subject", "Harry Potter", "--facts-file", str(facts)
    )
    line = _one_error_line(err)
    assert code == 2
    assert line.startswith(f"error: facts file {facts} is not valid YAML: line 3, column 2: ")


def test_broken_card_metadata_counts_lines_of_the_card(capsys, tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "README.md").write_text("---\nconfigs:\n  - [a\n---\n", encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(folder))
    assert code == 1
    assert f"{folder / 'README.md'}: the YAML metadata is not valid YAML: line 3, column 7: " in out


def test_parse_yaml_errors_are_one_bounded_line() -> None:
    with pytest.raises(YamlError) as info:
        parse_yaml("key: !" + "x" * 5_000 + " value\n", "a file")  # PyYAML quotes the 5,000-character tag
    message = str(info.value)
    assert (
        "\n" not in message and len(message) < 400 and message.startswith("a file is not valid YAML: line ")
    )
    with pytest.raises(YamlError, match=r"^a file cannot be read \(ValueError: day is out of range"):
        parse_yaml("created: 2020-02-30\n", "a file")
    with pytest.raises(YamlError, match=r"^a file is nested too deeply to read$"):
        parse_yaml("[" * 5000 + "]" * 5000, "a file")


def test_merge_keys_still_work() -> None:
    text = "base: &base {v_lr: 0.5, layers: [0]}\nrun:\n  <<: *base\n  layers: [1]\n"
    assert parse_yaml(text, "a file")["run"] == {"v_lr": 0.5, "layers": [1]}


def test_every_shipped_yaml_file_reads() -> None:
    """The helper refuses keys given twice: no file the package ships has one."""
    from knowgic.editors.hparams import HPARAMS_DIR
    from knowgic.paths import spec_dir
    from knowgic.yamlfile import read_yaml

    files = sorted(HPARAMS_DIR.rglob("*.yaml")) + sorted(spec_dir().rglob("*.yaml"))
    assert len(files) > 20
    for path in files:
        read_yaml(path)


def test_a_broken_results_file_lists_its_problems_with_pointers(capsys, tmp_path: Path) -> None:
    """A results.json given to summarize: every problem (up to the cap) with its pointer, quoted briefly."""
    from knowgic.results import MAX_PROBLEMS_SHOWN

    path = tmp_path / "results.json"
    path.write_text(json.dumps({"huge": "y" * 1_000_000}), encoding="utf-8")
    code, _, err = run(capsys, "summarize", str(path))
    line = _one_error_line(err)
    assert code == 2 and len(line) < 4_000
    assert f"{path} does not follow results.schema.json: /: " in line
    assert line.count("/: ") == MAX_PROBLEMS_SHOWN and re.search(r"; and \d+ more$", line)


def test_editors_built_in_python_name_every_unknown_key() -> None:
    from knowgic.editors.hparams import check_editor_hparams
    from knowgic.errors import KnowgicError

    with pytest.raises(KnowgicError) as info:
        check_editor_hparams({"layers": [0], "lyaers": [1], "v_lrr": 0.1, "zzz": 1}, "rome", "test")
    message = str(info.value)
    assert message.startswith("hparams test: 3 unknown keys: 'lyaers' (did you mean 'layers'?); ")
    assert "'v_lrr' (did you mean 'v_lr'?)" in message and message.endswith("'zzz'")
