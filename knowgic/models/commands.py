"""``knowgic models``: list the offline models, and prepare one (build / dequantize and cache it now)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from knowgic.argtypes import add_subcommands
from knowgic.models import registry


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("models", help="offline models: list them, prepare one for fast loading")
    sub = add_subcommands(parser, "models_command", "what to do with models")

    list_parser = sub.add_parser("list", help="offline model names, whether installed and cached")
    list_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    list_parser.set_defaults(func=_list)

    prepare = sub.add_parser(
        "prepare",
        help="build or dequantize a model and cache it now (offline name, GGUF file, folder or hub id)",
    )
    prepare.add_argument("name", help="offline name (see 'knowgic models list'), path or hub id")
    prepare.add_argument("--revision", default=None, help="hub revision, or the expected local sha256")
    prepare.add_argument("--quiet", action="store_true", help="no progress bars")
    prepare.set_defaults(func=_prepare)


def _flag(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _list(args: argparse.Namespace) -> int:
    rows = registry.list_models()
    if args.json:
        out = [
            {
                "name": r.entry.name,
                "display_name": r.entry.display_name,
                "family": r.entry.family,
                "chat": r.entry.is_chat,
                "installed": r.installed,
                "cached": r.cached,
                "install": r.entry.install,
                "upstream": r.entry.upstream,
            }
            for r in rows
        ]
        print(json.dumps(out, indent=2))
        return 0
    header = ("name", "family", "chat", "installed", "cached", "description")
    table = [
        (
            r.entry.name,
            r.entry.family,
            _flag(r.entry.is_chat),
            _flag(r.installed) if r.installed else f"no ({r.entry.install})",
            _flag(r.cached),
            r.entry.display_name,
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in (header, *table)) for i in range(len(header) - 1)]
    for row in (header, *table):
        cells = [str(c).ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, str(row[-1])]).rstrip())
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from knowgic.models.loading import load_model

    started = time.perf_counter()
    loaded = load_model(args.name, device="cpu", revision=args.revision, progress=not args.quiet)
    info = loaded.info
    where = info.get("cache_folder") or info.get("path") or "the Hugging Face cache"
    built = "built now" if info.get("cache_built") else "ready"
    print(
        f"{loaded.model_id}: {built} in {time.perf_counter() - started:.1f} s; family {loaded.family}, "
        f"chat {_flag(loaded.is_chat)}, revision {loaded.revision}, files in {where}"
    )
    return 0
