"""``knowgic editors list``: the editors ``--editor`` takes by name, and the models they ship hparams for."""

from __future__ import annotations

import argparse
import json
from typing import Any

from knowgic.argtypes import add_subcommands


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("editors", help="editing methods: list the names --editor takes")
    sub = add_subcommands(parser, "editors_command", "what to do")
    list_parser = sub.add_parser(
        "list",
        help="built-in editors and installed plug-ins, with the models their shipped hparams are for",
        description="Every name `--editor` takes: the built-ins, then editors installed packages register "
        "under the `knowgic.editors` entry point. Any `module:Class` works too without being listed.",
    )
    list_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    list_parser.set_defaults(func=_list)


def _rows() -> list[dict[str, Any]]:
    from knowgic.editors.hparams import HPARAMS_DIR
    from knowgic.editors.registry import BUILTIN_EDITORS, plugin_editors

    rows = []
    for name, target in BUILTIN_EDITORS.items():
        folder = HPARAMS_DIR / name
        shipped = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
        rows.append({"name": name, "source": "built-in", "class": target, "hparams_for": shipped})
    for name, target in sorted(plugin_editors().items()):
        if name not in BUILTIN_EDITORS:
            rows.append({"name": name, "source": "plug-in", "class": target, "hparams_for": []})
    return rows


def _list(args: argparse.Namespace) -> int:
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("name", "source", "class", "shipped hparams for")
    table = [
        (r["name"], r["source"], r["class"], ", ".join(r["hparams_for"]) or "– (none needed, or --hparams)")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in (header, *table)) for i in range(len(header) - 1)]
    for row in (header, *table):
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]).rstrip())
    return 0
