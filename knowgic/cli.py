"""The ``knowgic`` command line.

Each stage owns its sub-commands in a ``commands`` module exposing ``register(subparsers)``; this file only
wires them together and turns :class:`~knowgic.errors.KnowgicError` into one-line errors.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
import textwrap
from collections.abc import Sequence

from knowgic.argtypes import SUBCOMMAND_METAVAR
from knowgic.clip import clip
from knowgic.errors import EXIT_CODES, EXIT_INPUT, EXIT_INTERRUPTED, KnowgicError
from knowgic.extras import missing_extra_message
from knowgic.printable import printable

ERROR_LIMIT = 4000
"""Characters of an error line at most (a message listing many problems, each quoted briefly, fits)."""

COMMAND_MODULES = (
    "knowgic.dataset.commands",  # dataset path, validate, publish
    "knowgic.models.commands",  # models list, prepare
    "knowgic.editors.commands",  # editors list
    "knowgic.evaluation.commands",  # evaluate, timing
    "knowgic.builder.commands",  # build, review
    "knowgic.runner.store.commands",  # store add, store list
    "knowgic.runner.commands",  # runner submit, worker, status, logs, requeue, cancel
    "knowgic.leaderboard.commands",  # leaderboard
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        """argparse's usage errors: one line naming the argument (the usage is ``--help``'s), exit 2."""
        self.exit(EXIT_INPUT, f"error: {printable(clip(message, ERROR_LIMIT))}\n")


def exit_codes_text(width: int = 100) -> str:
    """The exit codes of every command, as ``knowgic --help`` ends: one entry each, wrapped to ``width``."""
    digits = max(len(str(code)) for code, _ in EXIT_CODES)
    entries = [
        textwrap.fill(
            meaning,
            width,
            initial_indent=f"  {code:>{digits}}  ",
            subsequent_indent=" " * (digits + 4),
        )
        for code, meaning in EXIT_CODES
    ]
    return "\n".join(["exit codes (of every command):", *entries])


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="knowgic",
        description="KnowGIC: deep knowledge-editing benchmark",
        epilog=exit_codes_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=_VersionAction, nargs=0, help="print the package and dataset versions and exit"
    )
    sub = parser.add_subparsers(
        dest="command",
        metavar=SUBCOMMAND_METAVAR,
        parser_class=_Parser,
        help="what to do (COMMAND --help: its options)",
    )
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _version() -> str:
    """``knowgic X.Y.Z (dataset versions A, B)``: the package and the dataset versions it ships."""
    from knowgic import __version__
    from knowgic.dataset.versions import available_versions

    return f"knowgic {__version__} (dataset versions {', '.join(str(v) for v in available_versions())})"


class _VersionAction(argparse.Action):
    """``--version``, its text computed only when asked (it reads the benchmark spec)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_version())
        parser.exit()


def _command_line(args: argparse.Namespace) -> str:
    """``knowgic runner status``: the command and sub-command that ran (for one-line errors)."""
    words = [args.command] + [
        str(value) for name, value in vars(args).items() if name.endswith("_command") and value
    ]
    return " ".join(["knowgic", *words])


def _command_parsers(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[list[argparse.ArgumentParser], str]:
    """The parsers that ``argv``'s command words pass through (``knowgic``, ``runner``, ``submit``: each may
    declare options), and those words."""
    parsers, words = [parser], ["knowgic"]
    for word in argv:
        if word.startswith("-"):
            continue
        actions = [a for a in parsers[-1]._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or word not in actions[0].choices:
            break
        parsers.append(actions[0].choices[word])
        words.append(word)
    return parsers, " ".join(words)


def _command_typo(parsers: list[argparse.ArgumentParser], words: str, argv: Sequence[str]) -> str | None:
    """One line for a command word the selected command group does not have, with the closest one."""
    actions = [a for a in parsers[-1]._actions if isinstance(a, argparse._SubParsersAction)]
    word = next((w for w in argv[len(words.split()) - 1 :] if not w.startswith("-")), None)
    if not actions or word is None or word in actions[0].choices:
        return None
    close = difflib.get_close_matches(word, list(actions[0].choices), n=1, cutoff=0.6)
    hint = f": did you mean {close[0]}?" if close else f" (see {words} --help)"
    return f"{words} has no command {word!r}{hint}"


def _flag_typo(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """One line for the first ``--flag`` the selected command does not have (nor abbreviates), with the
    closest of its flags: argparse would say only that another argument is required, or print the top-level
    usage with "unrecognized arguments". A command word it does not have is named the same way."""
    parsers, words = _command_parsers(parser, argv)
    flags = [f for p in parsers for a in p._actions for f in a.option_strings if f.startswith("--")]
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--") or token == "--":
            continue
        name = token.split("=", 1)[0]
        if name in flags or any(f.startswith(name) for f in flags):  # argparse takes unique prefixes
            continue
        # swapped letters first (--modle is --model, not --mode), then the closest spelling
        close = [f for f in flags if sorted(f) == sorted(name)] or difflib.get_close_matches(
            name, flags, n=1, cutoff=0.6
        )
        hint = f": did you mean {close[0]}?" if close else f" (see {words} --help)"
        return f"{words} has no option {name}{hint}"
    return _command_typo(parsers, words, argv)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    typo = _flag_typo(parser, argv)
    if typo is not None:
        print(f"error: {printable(clip(typo, ERROR_LIMIT))}", file=sys.stderr)
        return EXIT_INPUT
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as exc:
        # A module of an optional extra: name the extra in one line; any other missing module is a bug.
        message = missing_extra_message(exc, _command_line(args))
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return EXIT_INPUT
    except KnowgicError as exc:
        # A bounded message, whatever the input quoted in it.
        print(f"error: {printable(clip(str(exc), ERROR_LIMIT))}", file=sys.stderr)  # shown, never obeyed
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
