"""Errors that the command line turns into one-line messages, and the exit codes of the whole command line.

Every ``knowgic`` command exits with one of :data:`EXIT_CODES` (``knowgic --help`` lists them): an input
the command cannot use is found before any work and exits 2 with one ``error:`` line; a check that ran and
found what it checked wrong exits 1.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED_CHECK = 1
EXIT_INPUT = 2
EXIT_REVIEW_PENDING = 4
EXIT_INTERRUPTED = 130

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done"),
    (
        EXIT_FAILED_CHECK,
        "a check ran and found what it checked wrong (validate's problems, the build judge's control check, "
        "an editor's restore check, a worker host that failed its job)",
    ),
    (
        EXIT_INPUT,
        "a usage or input error (an unknown option or name, a missing, unreadable or malformed file, an "
        "output path that cannot be used), reported in one line before any work",
    ),
    (EXIT_REVIEW_PENDING, "knowgic build stopped for review decisions"),
    (EXIT_INTERRUPTED, "interrupted"),
)
"""Each exit code of the command line and what it means, in the order ``knowgic --help`` lists them."""


class KnowgicError(Exception):
    """A user-facing error: bad input, unknown name, unwritable path.

    The CLI prints ``error: <message>`` and exits with ``exit_code``; no traceback.
    """

    exit_code: int = EXIT_INPUT


class FailedCheck(KnowgicError):
    """A check that ran and found what it checked wrong (exit code :data:`EXIT_FAILED_CHECK`)."""

    exit_code = EXIT_FAILED_CHECK


class RestoreError(FailedCheck):
    """An editor's restore left the model's parameters changed."""
