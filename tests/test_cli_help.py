"""Every command, option and positional of ``knowgic`` says what it is for in ``--help``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from knowgic.cli import build_parser


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    """(command path, action) for every action of ``parser`` and of its sub-commands, at any depth."""
    for action in parser._actions:
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest: choice for choice in action._choices_actions}
            for name, sub in action.choices.items():
                # A sub-command's own help is the line `knowgic ... --help` lists it with.
                yield f"{path} {name}", helped.get(name, argparse.Action([], name, help=None))
                yield from _walk(sub, f"{path} {name}")


def _name(action: argparse.Action) -> str:
    return "/".join(action.option_strings) or action.metavar or action.dest


def _missing_help() -> list[str]:
    return [
        f"{path}: {_name(action)}"
        for path, action in _walk(build_parser(), "knowgic")
        if action.help != argparse.SUPPRESS and not (action.help or "").strip()
    ]


def test_the_walk_reaches_every_level() -> None:
    paths = {path for path, _ in _walk(build_parser(), "knowgic")}
    assert {"knowgic evaluate", "knowgic dataset path", "knowgic store add"} <= paths
    names = {_name(action) for _, action in _walk(build_parser(), "knowgic evaluate")}
    assert {"--out", "--overwrite", "--model", "-h/--help"} <= names


def test_a_missing_help_is_found() -> None:
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="command", help="the command")
    deeper = sub.add_parser("a", help="command a").add_subparsers(dest="inner", help="a's command")
    deeper.add_parser("b", help="command b").add_argument("--bare")
    found = [f"{path}: {_name(a)}" for path, a in _walk(parser, "x") if not (a.help or "").strip()]
    assert found == ["x a b: --bare"]


def test_every_option_and_positional_has_help() -> None:
    missing = _missing_help()
    assert not missing, "options without a help text:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "command", [["evaluate"], ["sweep"], ["summarize"], ["validate"], ["dataset", "path"], ["store", "list"]]
)
def test_help_prints_without_error(capsys, command: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([*command, "--help"])
    assert info.value.code == 0
    assert "usage: knowgic " + " ".join(command) in capsys.readouterr().out


def test_an_error_message_is_bounded(capsys, tmp_path) -> None:
    """Whatever a message quotes (here a 1 MB editor name), the error printed stays a bounded line."""
    from knowgic.cli import ERROR_LIMIT, main

    code = main(["evaluate", "--model", "knowgic-tiny", "--editor", "x" * 1_000_000])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert len(err) <= ERROR_LIMIT + 40 and "chars]…" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["evaluate", "--modle", "knowgic-tiny"],
            "knowgic evaluate has no option --modle: did you mean --model?",
        ),
        (["evaluate", "--editor", "rome", "--limt", "2"], "did you mean --limit?"),
        (["runner", "submit", "--datset-version", "1.1.0", "x.tgz"], "did you mean --dataset-version?"),
        (["build", "--zzzzzz"], "knowgic build has no option --zzzzzz (see knowgic build --help)"),
    ],
)
def test_a_mistyped_flag_gets_one_line_with_the_closest_flag(argv: list[str], says: str, capsys) -> None:
    from knowgic.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_the_top_level_help_lists_every_exit_code(capsys) -> None:
    """The one convention of the command line, printed from its one declaration."""
    from knowgic.errors import EXIT_CODES

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--help"])
    assert info.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())  # the entries are wrapped
    listed = help_text.partition("exit codes (of every command):")[2]
    for code, meaning in EXIT_CODES:
        assert f"{code} {' '.join(meaning.split())}" in listed


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["evalute"], "knowgic has no command 'evalute': did you mean evaluate?"),
        (["runner", "sbmit", "x"], "knowgic runner has no command 'sbmit': did you mean submit?"),
        (["zzzz"], "knowgic has no command 'zzzz' (see knowgic --help)"),
        (["evaluate", "--limit", "0"], "argument --limit: '0' must be 1 or more"),
    ],
)
def test_a_usage_error_is_one_line(argv: list[str], says: str, capsys) -> None:
    from knowgic.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0] == f"error: {says}", err
