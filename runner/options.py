"""The two options of every command over a results store, each with its environment default, defined once.

    --store PATH   the results store folder    argument, else $KNOWGIC_STORE, else ./knowgic-store
    --db URL       the job queue's database    argument, else $KNOWGIC_QUEUE_URL, else STORE/queue.sqlite

``knowgic store``, ``knowgic runner`` and ``knowgic leaderboard`` add them with :func:`add_store_option` and
:func:`add_queue_option` and resolve them with :func:`store_root` and :func:`queue_url`, so a variable set
for one command holds for all: the leaderboard's submit form queues where the workers claim. Importing this
module costs nothing (no SQLAlchemy, no gradio), so every command's parser can be built from the base install.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

STORE_ENV = "KNOWGIC_STORE"
QUEUE_URL_ENV = "KNOWGIC_QUEUE_URL"
DEFAULT_STORE = Path("knowgic-store")
QUEUE_FILE = "queue.sqlite"


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
