"""The options of every command over a results store and its queue, each with its environment default,
defined once.

    --store PATH   the results store folder    argument, else $KNOWGIC_STORE, else ./knowgic-store
    --db URL       the job queue's database    argument, else $KNOWGIC_QUEUE_URL, else STORE/queue.sqlite

``knowgic store``, ``knowgic runner`` and ``knowgic leaderboard`` add them with :func:`add_store_option` and
:func:`add_queue_option` and resolve them with :func:`store_root` and :func:`queue_url`, so a variable set
for one command holds for all: the leaderboard's submit form queues where the workers claim.

Who may queue jobs, and how many (the *submit policy*; ``knowgic runner submit`` takes the options, the
leaderboard reads the same variables)::

    --accounts KIND            none | token | huggingface     else $KNOWGIC_ACCOUNTS, else huggingface on a
                                                              Hugging Face Space ($SPACE_ID set), else none
    --submitter-tokens FILE    the submitters' token hashes   else $KNOWGIC_SUBMITTER_TOKENS, else
                                                              ~/.config/knowgic/submitter-tokens
    --max-jobs-per-day N       quota per submitter (0: none)  else $KNOWGIC_MAX_JOBS_PER_DAY, else 24
    --max-open-jobs N          quota per submitter (0: none)  else $KNOWGIC_MAX_OPEN_JOBS, else 12

``none`` is one person's local leaderboard: no account, no quota. Otherwise every submission names its
submitter (``token:NAME`` or ``huggingface:USER``), an anonymous one is refused, and the queue enforces each
quota in the transaction that inserts the jobs (:meth:`knowgic.runner.queue.queue.JobQueue.enqueue`). The
quotas are declared once, in :data:`QUOTA_OPTIONS`. Importing this module costs nothing (no SQLAlchemy, no
gradio), so every command's parser can be built from the base install.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from knowgic.argtypes import non_negative_int
from knowgic.errors import KnowgicError

STORE_ENV = "KNOWGIC_STORE"
QUEUE_URL_ENV = "KNOWGIC_QUEUE_URL"
DEFAULT_STORE = Path("knowgic-store")
QUEUE_FILE = "queue.sqlite"


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/knowgic`` (``~/.config/knowgic``): keys and tokens, never in the store folder."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "knowgic"


def add_store_option(parser: argparse.ArgumentParser, *, more: str = "") -> None:
    """``--store PATH``; ``more`` adds to its help (a command's own fallback, e.g. a hub repository)."""
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"results store folder (default: ${STORE_ENV}, else ./{DEFAULT_STORE}{more})",
    )


def add_queue_option(parser: argparse.ArgumentParser) -> None:
    """``--db URL``."""
    parser.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="queue database: sqlite:///FILE or postgresql+psycopg://USER@HOST/DB (default: "
        f"${QUEUE_URL_ENV}, else {QUEUE_FILE} in the store)",
    )


def store_root(given: Path | None) -> Path:
    """The store folder: ``given``, else ``$KNOWGIC_STORE``, else ``./knowgic-store``."""
    if given is not None:
        return Path(given)
    return Path(os.environ.get(STORE_ENV) or DEFAULT_STORE)


def sqlite_queue_url(store: Path) -> str:
    """The store's own queue: an SQLite file in the store folder."""
    return f"sqlite:///{Path(store).absolute() / QUEUE_FILE}"


def queue_url(given: str | None, store: Path) -> str:
    """The queue database URL: ``given``, else ``$KNOWGIC_QUEUE_URL``, else the SQLite file in ``store``."""
    return given or os.environ.get(QUEUE_URL_ENV) or sqlite_queue_url(store)


# -- who may submit, and how much ---------------------------------------------------------------------------
ACCOUNTS_ENV = "KNOWGIC_ACCOUNTS"
ACCOUNT_KINDS = ("none", "token", "huggingface")
SPACE_ENV = "SPACE_ID"  # set by Hugging Face on every Space
SUBMITTER_TOKENS_ENV = "KNOWGIC_SUBMITTER_TOKENS"
SUBMITTER_TOKEN_ENV = "KNOWGIC_SUBMITTER_TOKEN"  # the token `knowgic runner submit` submits with


@dataclass(frozen=True)
class QuotaOption:
    """One quota per submitter: its field of :class:`Quotas`, option, variable, default and unit."""

    field: str
    flag: str
    env: str
    default: int
    unit: str  # how a refusal names it: "24 jobs per day"
    help: str


QUOTA_OPTIONS = (
    QuotaOption(
        "jobs_per_day",
        "--max-jobs-per-day",
        "KNOWGIC_MAX_JOBS_PER_DAY",
        24,
        "jobs per day",
        "jobs one submitter may queue in any 24 hours",
    ),
    QuotaOption(
        "open_jobs",
        "--max-open-jobs",
        "KNOWGIC_MAX_OPEN_JOBS",
        12,
        "open jobs",
        "PENDING or RUNNING jobs one submitter may have at once",
    ),
)


@dataclass(frozen=True)
class Quotas:
    """Each quota of :data:`QUOTA_OPTIONS`; 0 is no limit."""

    jobs_per_day: int
    open_jobs: int

    def describe(self, field: str) -> str:
        """``12 open jobs (--max-open-jobs, $KNOWGIC_MAX_OPEN_JOBS)``."""
        option = next(q for q in QUOTA_OPTIONS if q.field == field)
        return f"{getattr(self, field)} {option.unit} ({option.flag}, ${option.env})"


@dataclass(frozen=True)
class SubmitPolicy:
    """Who may queue jobs (``accounts``), where the submitters' tokens are, and each submitter's quotas."""

    accounts: str
    tokens_file: Path
    quotas: Quotas

    @property
    def requires_account(self) -> bool:
        return self.accounts != "none"

    def refusal(self, submitter: str | None) -> str | None:
        """Why a submission by ``submitter`` (None: anonymous) is refused before anything else, or None."""
        if submitter is not None or not self.requires_account:
            return None
        if self.accounts == "huggingface":
            return (
                "this leaderboard queues jobs for signed-in submitters only: sign in with Hugging Face first"
            )
        return (
            "this deployment queues jobs for submitters with a token only: give yours (the form's token "
            f"field, or ${SUBMITTER_TOKEN_ENV} for `knowgic runner submit`); its operator makes one with "
            "`knowgic runner add-submitter NAME`"
        )


def default_accounts() -> str:
    """``$KNOWGIC_ACCOUNTS``, else ``huggingface`` on a Hugging Face Space, else ``none``."""
    value = os.environ.get(ACCOUNTS_ENV)
    if value:
        if value not in ACCOUNT_KINDS:
            raise KnowgicError(f"${ACCOUNTS_ENV} is {value!r}; expected one of {', '.join(ACCOUNT_KINDS)}")
        return value
    return "huggingface" if os.environ.get(SPACE_ENV) else "none"


def default_tokens_file() -> Path:
    """``$KNOWGIC_SUBMITTER_TOKENS``, else ``$XDG_CONFIG_HOME/knowgic/submitter-tokens``."""
    return Path(os.environ.get(SUBMITTER_TOKENS_ENV) or config_dir() / "submitter-tokens")


def _quota_default(option: QuotaOption) -> int:
    text = os.environ.get(option.env)
    if not text:
        return option.default
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError as exc:
        raise KnowgicError(f"${option.env}: {exc}") from None


def add_tokens_option(parser: argparse.ArgumentParser) -> None:
    """``--submitter-tokens FILE``."""
    parser.add_argument(
        "--submitter-tokens",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"the submitters' tokens, hashed (default: ${SUBMITTER_TOKENS_ENV}, else "
        "~/.config/knowgic/submitter-tokens)",
    )


def add_submit_policy_options(parser: argparse.ArgumentParser) -> None:
    """``--accounts``, ``--submitter-tokens`` and one option per quota of :data:`QUOTA_OPTIONS`."""
    parser.add_argument(
        "--accounts",
        choices=ACCOUNT_KINDS,
        default=None,
        help=f"who may queue jobs: anyone (none), holders of a submitter token (token), signed-in Hugging Face "
        f"users (huggingface) (default: ${ACCOUNTS_ENV}, else huggingface on a Space, else none)",
    )
    add_tokens_option(parser)
    for option in QUOTA_OPTIONS:
        parser.add_argument(
            option.flag,
            dest=option.field,
            type=non_negative_int,
            default=None,
            metavar="N",
            help=f"{option.help}, with an account; 0: no limit (default: ${option.env}, else {option.default})",
        )


def submit_policy(args: argparse.Namespace | None = None) -> SubmitPolicy:
    """The submit policy: each value from ``args`` (options of :func:`add_submit_policy_options`), else its
    variable, else its default. ``args`` None: variables and defaults only (the leaderboard)."""

    def given(name: str) -> object:
        return getattr(args, name, None) if args is not None else None

    accounts = given("accounts") or default_accounts()
    tokens = given("submitter_tokens") or default_tokens_file()
    quotas = {
        option.field: value if (value := given(option.field)) is not None else _quota_default(option)
        for option in QUOTA_OPTIONS
    }
    return SubmitPolicy(accounts=str(accounts), tokens_file=Path(str(tokens)), quotas=Quotas(**quotas))
