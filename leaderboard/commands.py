"""``knowgic leaderboard``: serve the leaderboard over a results store."""

from __future__ import annotations

import argparse
from pathlib import Path

from knowgic.errors import KnowgicError

DEFAULT_REFRESH_SECONDS = 5.0  # leaderboard.app's default; not imported from there, which loads gradio


def _serve(args: argparse.Namespace) -> int:
    if args.store is not None and not args.store.is_dir():  # checked before importing gradio (seconds)
        raise KnowgicError(f"results store {args.store} does not exist (fill one with `knowgic store add`)")
    if args.port is not None and not 0 < args.port < 65536:
        raise KnowgicError(f"--port {args.port} is not a TCP port (1-65535)")
    if args.refresh <= 0:
        raise KnowgicError(f"--refresh {args.refresh} must be a positive number of seconds")
    from leaderboard.app import build_app, launch_app, resolve_store

    store = resolve_store(args.store)
    app = build_app(
        store,
        queue_url=args.db,
        include_reported=not args.no_reported,
        refresh_seconds=args.refresh,
        trusted_keys=args.trusted_keys,
    )
    launch_app(app, host=args.host, port=args.port)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from runner.signing import add_trusted_keys_option

    p = subparsers.add_parser(
        "leaderboard",
        help="serve the leaderboard (a web app) over a results store",
        description="Browse, plot and compare the runs of a results store, submit editors and follow the "
        "queue. Only results that pass the store's checks are shown (other files are listed as skipped), "
        "and a run is verified only when a trusted worker key signed it.",
    )
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="PATH",
        help="results store folder (default: $KNOWGIC_STORE, else ./knowgic-store; a Space may name a hub "
        "dataset repository in $KNOWGIC_STORE_REPO instead)",
    )
    p.add_argument("--host", default=None, metavar="H", help="address to listen on (default: 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=None, metavar="P", help="port (default: 7860, or the next free)"
    )
    p.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="job queue database URL (default: the store's queue.sqlite)",
    )
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
