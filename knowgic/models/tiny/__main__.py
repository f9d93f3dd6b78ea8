"""``python -m knowgic.models.tiny [--out DIR]``: rebuild ``knowgic-tiny`` from the script and report it.

Without ``--out`` the model goes into the user cache (and is used from there instead of the shipped copy
only if the shipped copy's recipe hash no longer matches); with ``--out`` into DIR, e.g. to refresh
``knowgic/models/tiny/prebuilt`` after a recipe change.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from knowgic.errors import KnowgicError
from knowgic.models.tiny.build import build_tiny_model, ensure_tiny_model, read_stats

REPORTED = ("recipe_hash", "known_share", "rewrite_true_beats_new", "final_loss", "build_seconds")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m knowgic.models.tiny", description=__doc__)
    parser.add_argument("--out", type=Path, help="write the model here instead of the user cache")
    args = parser.parse_args(argv)
    try:
        if args.out is not None:
            if args.out.exists() and any(args.out.iterdir()):
                raise KnowgicError(f"--out {args.out} is not empty; give a new or empty folder")
            stats = build_tiny_model(args.out)
            folder = args.out
        else:
            folder = ensure_tiny_model(rebuild=True)
            stats = read_stats(folder) or {}
    except KnowgicError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps({"folder": str(folder), **{k: stats.get(k) for k in REPORTED}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
