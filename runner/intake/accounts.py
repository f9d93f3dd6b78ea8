"""Submitters: who queues a submission, established before anything of it is read.

A deployment's submit policy (:class:`knowgic.runner.options.SubmitPolicy`, ``--accounts``) says how::

    none          one person's local leaderboard        no submitter, no quota
    token         a self-hosted deployment              the submitter's token -> token:NAME
                                                          (the tokens file holds NAME sha256:HEX per line)
    huggingface   a Hugging Face Space (OAuth sign-in)  the signed-in user's name, passed in by the
                                                          leaderboard -> huggingface:USER

:func:`identify` turns what the caller holds into a :class:`Submitter` (or refuses in one line);
:func:`knowgic.runner.intake.submission.submit` refuses an anonymous submission where the policy needs an
account, and the queue records the submitter with each job and enforces the quotas
(:meth:`knowgic.runner.queue.queue.JobQueue.enqueue`). A worker's signed store entry holds the job record,
so the submitter of a verified run is signed too.

Tokens are 256 random bits; the file keeps only their sha256 (a token is shown once, when it is made), and a
presented token is compared with every line in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from knowgic.errors import KnowgicError
from knowgic.runner.options import SubmitPolicy

TOKEN_PREFIX = "kgs_"
# A submitter's name: a Hugging Face user name or the name an operator gives a token.
SUBMITTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_LINE = re.compile(r"^(?P<name>\S+)\s+sha256:(?P<digest>[0-9a-f]{64})$")


class AccountError(KnowgicError):
    """A submission without the account its deployment requires, or with one it does not know."""


@dataclass(frozen=True)
class Submitter:
    """Who submits: ``via`` is how it was established (``token`` or ``huggingface``)."""

    via: str
    name: str

    @property
    def id(self) -> str:
        """``token:NAME`` or ``huggingface:USER``: what the job and the signed entry record."""
        return f"{self.via}:{self.name}"


def _checked_name(name: str, what: str) -> str:
    if not SUBMITTER_NAME.match(name):
        raise AccountError(
            f"{what} {name[:100]!r} is not a submitter name (letters, digits, '.', '_', '-'; at most 96)"
        )
    return name


def _token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def read_tokens(path: Path) -> list[tuple[str, str]]:
    """(name, sha256 of the token) per line of a tokens file; ``#`` comments. One line per problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise AccountError(f"cannot read the submitter tokens file {path}: {exc}") from None
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None or not SUBMITTER_NAME.match(match["name"]):
            raise AccountError(f"{path}:{number}: expected 'NAME sha256:HEX' (a line `add-submitter` writes)")
        found.append((match["name"], match["digest"]))
    return found


def submitter_from_token(token: str, tokens_file: Path) -> Submitter:
    """The submitter whose token this is; one line when the file holds no such token."""
    presented = _token_digest(token.strip())
    known = None
    for name, digest in read_tokens(tokens_file):  # every line compared: the time says nothing
        if hmac.compare_digest(presented, digest):
            known = name
    if known is None:
        raise AccountError("this submitter token is not one this deployment knows (ask its operator for one)")
    return Submitter("token", known)


def identify(
    policy: SubmitPolicy, *, token: str | None = None, hub_username: str | None = None
) -> Submitter | None:
    """The submitter of a submission under ``policy``: None where the policy needs no account; else from
    the token (``token``) or the signed-in Hugging Face user name (``huggingface``). Refuses an anonymous
    submission in one line."""
    if not policy.requires_account:
        return None
    if policy.accounts == "token" and token and token.strip():
        return submitter_from_token(token, policy.tokens_file)
    if policy.accounts == "huggingface" and hub_username:
        return Submitter("huggingface", _checked_name(hub_username, "Hugging Face user name"))
    refusal = policy.refusal(None)
    assert refusal is not None  # an account is required
    raise AccountError(refusal)


def add_submitter(tokens_file: Path, name: str) -> str:
    """Make a token for ``name``, add its sha256 to ``tokens_file`` (mode 0600) and return the token (the
    only time it is shown). A name may hold several tokens; deleting a line revokes that token."""
    _checked_name(name, "submitter name")
    read_tokens(tokens_file)  # a damaged file is refused before it is added to
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    tokens_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(tokens_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise AccountError(
            f"cannot write the submitter tokens file {tokens_file}: {exc.strerror or exc}"
        ) from None
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(f"{name} sha256:{_token_digest(token)}\n")
    return token
