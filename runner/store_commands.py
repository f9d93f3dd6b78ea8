"""``knowgic store add`` and ``knowgic store list``: put local runs into a results store and list what it holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from knowgic.argtypes import add_subcommands
from knowgic.errors import KnowgicError


def _store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="PATH",
        help="results store folder (default: $KNOWGIC_STORE, else ./knowgic-store)",
    )


def _add(args: argparse.Namespace) -> int:
    from knowgic.evaluation.sweep import results_paths
    from runner.store import ResultsStore, default_store_root, local_entry_id

    store = ResultsStore(args.store or default_store_root())
    paths = results_paths(args.results)
    added = 0
    for path in paths:
        new = not store.entry_path(local_entry_id(store.put_results(path))).exists()
        entry = store.add_local(path, label=args.label)
        config = entry.summary["config"]
        added += new
        state = "added" if new else "already in the store"
        print(
            f"{state}: {entry.entry_id} ({config['model']}, {config['editor']}, {config['protocol']}, "
            f"{config['mode']}) from {path}"
        )
    print(f"{added} of {len(paths)} run(s) added to {store.root}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from runner.store import ResultsStore, default_store_root

    store = ResultsStore(args.store or default_store_root())
    if not store.root.is_dir():
        raise KnowgicError(f"results store {store.root} does not exist")
    scan = store.scan()
    if args.json:
        report = {
            "store": str(store.root),
            "runs": [
                {
                    "entry_id": e.entry_id,
                    "source": e.source,
                    "model": e.summary["config"]["model"],
                    "editor": e.summary["config"]["editor"],
                    "protocol": e.summary["config"]["protocol"],
                    "mode": e.summary["config"]["mode"],
                    "dataset_version": e.summary["dataset"]["version"],
                    "results_sha256": e.results_sha256,
                    "results_file": str(e.results_file),
                    "added_at": e.added_at,
                    "label": e.label,
                }
                for e in scan.entries
            ],
            "skipped": [{"path": str(k.path), "reason": k.reason} for k in scan.skipped],
        }
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    for entry in scan.entries:
        config = entry.summary["config"]
        print(
            f"{entry.entry_id}\t{entry.source}\t{config['model']}\t{config['editor']}\t{config['protocol']}\t"
            f"{config['mode']}\t{entry.summary['dataset']['version']}\t{entry.results_sha256[:12]}"
        )
    for skipped in scan.skipped:
        print(f"skipped: {skipped.path}: {skipped.reason}")
    print(f"{len(scan.entries)} run(s), {len(scan.skipped)} skipped file(s) in {store.root}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "store",
        help="add local runs to a results store, list what a store holds",
        description="The results store that the runner writes and the leaderboard reads.",
    )
    sub = add_subcommands(p, "store_command", "what to do with the store")
    add = sub.add_parser(
        "add",
        help="store results.json files made by `knowgic evaluate` or `sweep` (shown as 'local' runs)",
        description="Verify each results.json (schema and content hash) and add it to the store. Adding "
        "the same results twice is a no-op; nothing in the store is ever overwritten.",
    )
    add.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS",
        help="results.json files, run folders, or sweep folders of run folders",
    )
    add.add_argument("--label", default=None, help="a short note shown with these runs (e.g. a commit)")
    _store_argument(add)
    add.set_defaults(func=_add)
    ls = sub.add_parser(
        "list",
        help="list the runs in a store, and the files it skips with their reasons",
        description="One line per run (id, source, model, editor, protocol, mode, dataset version, sha256).",
    )
    _store_argument(ls)
    ls.add_argument("--json", action="store_true", help="print the runs and skipped files as JSON")
    ls.set_defaults(func=_list)
