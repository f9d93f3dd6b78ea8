"""``knowgic store``: put local runs into a results store, list what it holds, and manage signing keys.

knowgic store add RESULTS...     verify each results.json (sizes, schema, hash, values, recomputed
                                 metrics) and store it as a local run
knowgic store list               every run (verified only with a trusted signature) and skipped file
knowgic store keygen [--key P]   a worker's Ed25519 signing key; its public line joins the trusted keys
knowgic store trust KEY.pub      add a worker's public key to this host's trusted keys

Whatever a store holds is printed as text: every value from an entry, a results file or a reason passes
:func:`knowgic.printable.printable` (terminal escapes, separators and bidirectional controls shown as escapes),
and ``--json`` writes them as JSON escapes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from knowgic.argtypes import add_subcommands
from knowgic.errors import KnowgicError
from knowgic.printable import printable, printable_json
from knowgic.runner.options import add_store_option, store_root
from knowgic.runner.store.signing import (
    TrustedKeys,
    add_trusted_keys_option,
    default_signing_key_path,
    default_trusted_keys_path,
    generate_key,
    parse_public_line,
)
from knowgic.runner.store.store import ResultsStore, local_entry_id

PRIVATE_KEY_MARK = "PRIVATE KEY-----"
"""What the first line of every private key file holds (OpenSSH and PEM: ``-----BEGIN ... PRIVATE KEY-----``)."""


def _store_folder(given: Path | None, exists: bool) -> Path:
    """The store's folder (``--store``, ``$KNOWGIC_STORE`` or the default), refused in one line when it is a
    file, or missing and ``exists`` asks for it."""
    root = store_root(given)
    if root.exists() and not root.is_dir():
        raise KnowgicError(f"results store {root} is a file, not a folder (--store names the store's folder)")
    if exists and not root.is_dir():
        raise KnowgicError(f"results store {root} does not exist")
    return root


def _add(args: argparse.Namespace) -> int:

    from knowgic.evaluation.sweep import results_paths  # imports torch: only for the command that needs it

    root = _store_folder(args.store, exists=False)
    paths = results_paths(args.results)  # every path named exists before the store is touched
    store = ResultsStore(root)
    added = 0
    for path in paths:
        new = not store.entry_path(local_entry_id(store.put_results(path))).exists()
        entry = store.add_local(path, label=args.label)
        config = entry.summary["config"]
        added += new
        state = "added" if new else "already in the store"
        print(
            printable(
                f"{state}: {entry.entry_id} ({config['model']}, {config['editor']}, {config['protocol']}, "
                f"{config['mode']}) from {path}"
            )
        )
    print(f"{added} of {len(paths)} run(s) added to {store.root}")
    return 0


def _list(args: argparse.Namespace) -> int:

    root = _store_folder(args.store, exists=True)
    store = ResultsStore(root, trusted_keys=TrustedKeys.load(args.trusted_keys))
    scan = store.scan()
    if args.json:
        report = {
            "store": str(store.root),
            "runs": [
                {
                    "entry_id": e.entry_id,
                    "source": e.source,
                    "trust": e.trust,
                    "warning": e.warning,
                    "submitter": e.submitter,
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
        print(printable_json(report, indent=2))
        return 0
    for entry in scan.entries:
        config = entry.summary["config"]
        cells = (
            entry.entry_id,
            entry.source,
            config["model"],
            config["editor"],
            config["protocol"],
            config["mode"],
            entry.summary["dataset"]["version"],
            entry.results_sha256[:12],
        )
        print("\t".join(printable(str(cell)) for cell in cells))
    for entry in scan.entries:
        if entry.warning is not None:
            print(printable(f"note: {entry.entry_id}: {entry.trust}"))
    for skipped in scan.skipped:
        print(printable(f"skipped: {skipped.path}: {skipped.reason}"))
    verified = sum(e.source == "verified" for e in scan.entries)
    print(
        f"{len(scan.entries)} run(s) ({verified} verified), {len(scan.skipped)} skipped file(s) in {store.root}"
    )
    return 0


def _keygen(args: argparse.Namespace) -> int:

    path = args.key or default_signing_key_path()
    signer = generate_key(path, args.comment)
    print(f"signing key: {path} (keep it on worker hosts only; mode 0600)")
    print(f"public key:  {path}.pub ({signer.fingerprint})")
    if not args.no_trust:
        trusted = args.trusted_keys or default_trusted_keys_path()
        _append_trusted(trusted, Path(f"{path}.pub").read_text(encoding="utf-8").strip())
        print(f"trusted on this host: added to {trusted}")
    return 0


def _append_trusted(trusted: Path, line: str) -> bool:
    """Add a public key line to a trusted keys file unless a key with its fingerprint is there."""

    key = parse_public_line(line, "the public key")
    if trusted.exists() and key.fingerprint in TrustedKeys.load(trusted).keys:
        return False
    trusted.parent.mkdir(parents=True, exist_ok=True)
    with trusted.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return True


def _trust(args: argparse.Namespace) -> int:

    try:
        text = args.public_key.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowgicError(f"cannot read the public key {args.public_key}: {exc}") from None
    if PRIVATE_KEY_MARK in text:
        public = Path(f"{args.public_key}.pub")
        hint = f"trust its public line, {public}" if public.is_file() else "trust the KEY.pub beside it"
        raise KnowgicError(
            f"{args.public_key} is a private key, not a public one: {hint} (a private key stays on its worker)"
        )
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if len(lines) != 1:
        raise KnowgicError(
            f"{args.public_key}: expected one 'ssh-ed25519 KEY comment' line, found {len(lines)}"
        )
    trusted = args.trusted_keys or default_trusted_keys_path()
    fingerprint = parse_public_line(lines[0], str(args.public_key)).fingerprint
    added = _append_trusted(trusted, lines[0])
    print(f"{fingerprint}: {'now trusted' if added else 'already trusted'} in {trusted}")
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
        description="Verify each results.json (sizes, schema, content hash, finite values in their "
        "declared ranges, every headline metric and interval recomputed from its records) and add it to "
        "the store. Adding the same results twice is a no-op; nothing in the store is ever overwritten.",
    )
    add.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS",
        help="results.json files, run folders, or sweep folders of run folders",
    )
    add.add_argument("--label", default=None, help="a short note shown with these runs (e.g. a commit)")
    add_store_option(add)
    add.set_defaults(func=_add)
    ls = sub.add_parser(
        "list",
        help="list the runs in a store, and the files it skips with their reasons",
        description="One line per run (id, source, model, editor, protocol, mode, dataset version, sha256). "
        "A run is 'verified' only when a worker's signature over its entry checks against a trusted key.",
    )
    add_store_option(ls)
    add_trusted_keys_option(ls)
    ls.add_argument("--json", action="store_true", help="print the runs and skipped files as JSON")
    ls.set_defaults(func=_list)
    keygen = sub.add_parser(
        "keygen",
        help="make a worker's Ed25519 signing key (and trust it on this host)",
        description="Write a new Ed25519 private key (OpenSSH format, mode 0600; never over an existing "
        "file) and its public line beside it (KEY.pub), and add the public line to this host's trusted "
        "keys. On a leaderboard host that runs no worker, add the workers' KEY.pub with `knowgic store "
        "trust` instead.",
    )
    keygen.add_argument(
        "--key",
        type=Path,
        default=None,
        metavar="PATH",
        help="where to write the private key (default: $KNOWGIC_SIGNING_KEY, else "
        "~/.config/knowgic/signing-key)",
    )
    keygen.add_argument(
        "--comment", default=None, help="comment of the public line (default: knowgic-worker@HOST)"
    )
    keygen.add_argument("--no-trust", action="store_true", help="do not add the key to the trusted keys")
    add_trusted_keys_option(keygen)
    keygen.set_defaults(func=_keygen)
    trust = sub.add_parser(
        "trust",
        help="trust a worker's public key (KEY.pub) on this host",
        description="Check a public key line (ssh-ed25519 KEY comment) and add it to the trusted keys file.",
    )
    trust.add_argument("public_key", type=Path, metavar="KEY.pub", help="the worker's public key file")
    add_trusted_keys_option(trust)
    trust.set_defaults(func=_trust)
