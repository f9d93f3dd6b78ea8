"""``knowgic leaderboard``: serve the leaderboard over a results store.

    --store / $KNOWGIC_STORE_REPO / $KNOWGIC_STORE / ./knowgic-store --> serving_store() --> a folder that exists
    --db / $KNOWGIC_QUEUE_URL / STORE/queue.sqlite ------------------> queue_url() ------> the submit form's queue
                                                                     build_app() + launch_app()

A Hugging Face Space runs ``python leaderboard/app.py``, which is this command: the same store, the same queue
and the same one-line errors (exit 2) when the store is missing or its hub repository cannot be fetched.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from knowgic.clip import clip
from knowgic.errors import KnowgicError
from knowgic.runner.options import add_queue_option, add_store_option, queue_url, store_root

DEFAULT_REFRESH_SECONDS = (
    5.0  # knowgic.leaderboard.app's default; not imported from there, which loads gradio
)
STORE_REPO_ENV = "KNOWGIC_STORE_REPO"


def _hub_snapshot(repo: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=repo, repo_type="dataset"))
    except Exception as exc:  # the hub's errors are many; say which repository failed and why, on one line
        reason = clip(" ".join(f"{type(exc).__name__}: {exc}".split()), 400)
        raise KnowgicError(
            f"cannot fetch the results store {repo!r} (${STORE_REPO_ENV}) from the hub: {reason}"
        ) from None


def serving_store(given: Path | None) -> Path:
    """The store folder to serve: ``given``; else a snapshot of the hub dataset repository named by
    ``$KNOWGIC_STORE_REPO`` (a Space's configuration); else ``$KNOWGIC_STORE`` or ``./knowgic-store``.
    A folder that does not exist is an error: an empty board would hide a wrong path."""
    repo = os.environ.get(STORE_REPO_ENV) if given is None else None
    path = _hub_snapshot(repo) if repo else store_root(given)
    if path.exists() and not path.is_dir():
        raise KnowgicError(
            f"results store {path} is a file, not a folder: name the store's folder with --store"
        )
    if not path.is_dir():
        raise KnowgicError(
            f"results store {path} does not exist (fill one with `knowgic store add`, or name one with "
            f"--store, $KNOWGIC_STORE or ${STORE_REPO_ENV})"
        )
    return path


def _serve(args: argparse.Namespace) -> int:
    if args.port is not None and not 0 < args.port < 65536:
        raise KnowgicError(f"--port {args.port} is not a TCP port (1-65535)")
    if args.refresh <= 0:
        raise KnowgicError(f"--refresh {args.refresh} must be a positive number of seconds")
    store = serving_store(args.store)  # checked before importing gradio (seconds)
    from knowgic.leaderboard.app import build_app, launch_app

    app = build_app(
        store,
        queue_url=queue_url(args.db, store),
        include_reported=not args.no_reported,
        refresh_seconds=args.refresh,
        trusted_keys=args.trusted_keys,
    )
    launch_app(app, host=args.host, port=args.port)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from knowgic.runner.store.signing import add_trusted_keys_option

    p = subparsers.add_parser(
        "leaderboard",
        help="serve the leaderboard (a web app) over a results store",
        description="Browse, plot and compare the runs of a results store, submit editors and follow the "
        "queue. Only results that pass the store's checks are shown (other files are listed as skipped), "
        "and a run is verified only when a trusted worker key signed it.",
    )
    add_store_option(p, more=f"; a Space may name a hub dataset repository in ${STORE_REPO_ENV} instead")
    p.add_argument(
        "--host",
        default=None,
        metavar="H",
        help="address to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="P",
        help="port (default: $GRADIO_SERVER_PORT, else 7860 or the next free)",
    )
    add_queue_option(p)
    p.add_argument(
        "--refresh",
        type=float,
        default=DEFAULT_REFRESH_SECONDS,
        metavar="SECONDS",
        help=f"how often the page re-reads the store and the queue (default: {DEFAULT_REFRESH_SECONDS:g})",
    )
    add_trusted_keys_option(p)
    p.add_argument(
        "--no-reported",
        action="store_true",
        help="leave out the numbers published by the KnowGIC paper's authors",
    )
    p.set_defaults(func=_serve)
