"""Argument types shared by the command lines: each refuses bad input with a message naming the value."""

from __future__ import annotations

import argparse
import re
from typing import Any


def positive_int(text: str) -> int:
    """A whole number >= 1 (counts, limits, repeats)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (a quota, where 0 means no limit)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive_seconds(text: str) -> float:
    """A duration in seconds, > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 seconds")
    return value


def open_unit_fraction(text: str) -> float:
    """A number strictly between 0 and 1 (an interval's level)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must lie strictly between 0 and 1")
    return value


SUBCOMMAND_METAVAR = "COMMAND"
"""The placeholder of every sub-command choice in usage lines (``knowgic runner COMMAND ...``)."""


def add_subcommands(parser: argparse.ArgumentParser, dest: str, help: str = "what to do") -> Any:
    """A command group's required sub-commands (``knowgic runner COMMAND``), under the one placeholder."""
    sub = parser.add_subparsers(dest=dest, metavar=SUBCOMMAND_METAVAR, help=help)
    sub.required = True
    return sub


DEFAULT_MODEL = "knowgic-tiny"
"""The model of ``evaluate``, ``sweep`` and ``probe`` when ``--model`` is left out: the offline default."""


def add_model_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--model``, with the one default (:data:`DEFAULT_MODEL`) every command that loads a model shares."""
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"offline name (knowgic-tiny, gemma3-270m, smollm2-135m; `knowgic models list`), hub id "
        f"OWNER/NAME or local path{what} (default: {DEFAULT_MODEL})",
    )


DATASET_VERSION_HELP = (
    "dataset version: X.Y.Z of the paper's edits, or a track's TRACK-X.Y.Z or name for its latest (growth: "
    "the graph grown for knowgic-tiny); `knowgic --version` lists them"
)
"""The help of every option that names a shipped dataset version (``knowgic.dataset.versions``)."""


def add_dataset_version_argument(
    parser: argparse.ArgumentParser, folders: bool = True, default: str = "the latest of the paper's edits"
) -> None:
    """``--dataset-version`` (alias ``--dataset``): a shipped version by name, or (``folders``) a dataset
    folder's path; ``default`` says what leaving it out means. The name is resolved, with a guess at a
    typo, before the command's work starts."""
    names = ["--dataset-version", "--dataset"] if folders else ["--dataset-version"]
    folder = "; or a dataset folder, e.g. one knowgic build wrote" if folders else ""
    parser.add_argument(
        *names,
        dest="dataset_version",
        default=None,
        metavar="VERSION|PATH" if folders else "VERSION",
        help=f"{DATASET_VERSION_HELP}{folder} (default: {default})",
    )


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"512M"``, ``"2G"``, ``"1048576"`` -> bytes (binary units)."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 1048576, 512M, 2G)")
    number, unit = float(match.group(1)), match.group(2).lower()
    value = int(number * (1 << (10 * " kmgt".index(unit or " "))))
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value
