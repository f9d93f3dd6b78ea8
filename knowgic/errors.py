"""Errors that the command line turns into one-line messages (exit code 2)."""

from __future__ import annotations


class KnowgicError(Exception):
    """A user-facing error: bad input, unknown name, unwritable path.

    The CLI prints ``error: <message>`` and exits with ``exit_code``; no traceback.
    """

    exit_code: int = 2


class ValidationFailed(KnowgicError):
    """Input rows break the JSON Schemas (``knowgic validate`` exits 1 on this)."""

    exit_code = 1


class RestoreError(KnowgicError):
    """An editor's restore left the model's parameters changed."""

    exit_code = 3
