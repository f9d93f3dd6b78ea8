"""Command-line sub-commands of the dataset stage: ``dataset path|summary|holdout|track``, ``validate``,
``publish``."""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from knowgic.argtypes import DATASET_VERSION_HELP as VERSION_HELP
from knowgic.argtypes import add_subcommands, open_unit_fraction, positive_int
from knowgic.dataset.private import DEFAULT_FRACTION, MIN_PRIVATE_EDITS
from knowgic.dataset.tracks import DEFAULT_RESERVE_SHARE, DEFAULT_SEED
from knowgic.errors import KnowgicError


def _cmd_path(args: argparse.Namespace) -> int:
    from knowgic.dataset.versions import version_dir

    print(version_dir(args.version))
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from knowgic.dataset.checks import check_aliases, check_chains
    from knowgic.dataset.io import alias_lists, read_json
    from knowgic.dataset.loading import dataset_ref, load_rows
    from knowgic.dataset.versions import ALIASES_FILE, available_versions, version_dir

    ref = dataset_ref(args.version)
    chains = load_rows("chains", ref.version)
    edits = load_rows("edits", ref.version)
    facts = load_rows("facts", ref.version)
    aliases = alias_lists(read_json(version_dir(ref.version) / ALIASES_FILE))
    findings = check_chains(chains) + check_aliases(aliases, chains)
    lengths = Counter(len(r["chain"]["answers"]) for r in chains)
    summary: dict[str, Any] = {
        "version": ref.version,
        "versions": available_versions(),
        "folder": str(version_dir(ref.version)),
        "sha256": ref.sha256,
        "rows": len(chains),
        "edits": len(edits),
        "facts": len(facts),
        "one_to_many_facts": sum(1 for f in facts if f["n_gold"] > 1),
        "broader_context_entries": sum(len(r["broader_context"]["answers"]) for r in chains),
        "alias_entities": len(aliases),
        "chain_lengths": {str(n): lengths[n] for n in sorted(lengths)},
        "warnings": {f.code: f.count for f in findings},
    }
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0
    print(f"KnowGIC {ref.version} (available: {', '.join(summary['versions'])})")
    print(f"  folder:   {summary['folder']}")
    print(f"  sha256:   {ref.sha256}")
    print(
        f"  rows:     {summary['rows']} chains, {summary['edits']} distinct edits, {summary['facts']} facts "
        f"({summary['one_to_many_facts']} of them one-to-many), "
        f"{summary['broader_context_entries']} broader-context entries, {summary['alias_entities']} alias entities"
    )
    print("  chain lengths: " + ", ".join(f"{n}: {c}" for n, c in summary["chain_lengths"].items()))
    if findings:
        print(f"  validation warnings ({len(findings)}):")
        for f in findings:
            print(f"    - {f.code} ({f.count})")
    else:
        print("  validation warnings: none")
    return 0


def _cmd_holdout(args: argparse.Namespace) -> int:
    from knowgic.dataset.private import read_private_split, write_disjoint, write_drill

    if (args.build is None) == (not args.drill):
        raise KnowgicError("dataset holdout: give --from BUILD (a private split) or --drill (a drill)")
    if args.drill:
        out = write_drill(args.out, args.version, args.fraction, args.seed)
    else:
        draw = write_disjoint(args.build, args.out, max_edits=args.max_edits, seed=args.seed)
        out = draw.out
        if draw.dropped_rows:
            print(
                f"dropped {draw.dropped_rows} chains that share a fact or an edit subject with the published "
                f"data, e.g. {draw.first_problem}"
            )
    split = read_private_split(out)
    print(split.describe())
    print(f"content sha256 {split.ref.sha256}")
    print("keep it where submitted code never runs: knowgic runner worker --private-dataset " + str(out))
    return 0


def _cmd_track(args: argparse.Namespace) -> int:
    from knowgic.dataset.tracks import write_track

    key, folder, reserved, split = write_track(
        args.build, args.track, args.version, args.reserved_out, args.reserve_share, args.seed
    )
    for label, part, where in (("public", split.public, folder), ("reserved", split.reserved, reserved)):
        c = part.counts()
        print(
            f"{label}: {c['families']} families, {c['edits']} edits, {c['chains']} chains, {c['facts']} facts, "
            f"content sha256 {part.sha256()[:12]} -> {where}"
        )
    print(f"{key} is declared in spec/benchmark.yaml; run knowgic validate {folder}")
    print(f"keep {reserved} where submitted code never runs; never publish it")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from knowgic.dataset.validate import validate_path

    report = validate_path(Path(args.path), Path(args.aliases) if args.aliases else None, config=args.config)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(report.render_text())
    return report.exit_code


def _cmd_publish(args: argparse.Namespace) -> int:
    from knowgic.dataset.publish import plan_publish, publish

    plan = plan_publish(args.repo_id, args.version)
    if args.dry_run:
        print("dry run: nothing is uploaded")
        print(plan.render())
        return 0
    token = args.token or os.environ.get("HF_TOKEN")
    print(plan.render())
    oid = publish(plan, token=token)
    print(f"uploaded {len(plan.files)} files to {plan.repo_id} as commit {oid}, tagged {plan.tag}")
    print(f'load it with datasets.load_dataset("{plan.repo_id}", revision="{plan.tag}")')
    return 0


def register(subparsers: Any) -> None:
    """Add ``dataset``, ``validate`` and ``publish`` to the ``knowgic`` command line."""
    ds = subparsers.add_parser("dataset", help="where the dataset versions are, and what is in them")
    ds_sub = add_subcommands(ds, "dataset_command", "what to show")
    p = ds_sub.add_parser(
        "path", help="print the folder of a dataset version (a Hugging Face dataset folder)"
    )
    p.add_argument(
        "--version", default=None, help=f"{VERSION_HELP} (default: the latest of the paper's edits)"
    )
    p.set_defaults(func=_cmd_path)
    s = ds_sub.add_parser("summary", help="counts of a dataset version and its validation warnings")
    s.add_argument(
        "--version", default=None, help=f"{VERSION_HELP} (default: the latest of the paper's edits)"
    )
    s.add_argument("--json", action="store_true", help="print a JSON object")
    s.set_defaults(func=_cmd_summary)
    h = ds_sub.add_parser(
        "holdout",
        help="write a private split: new edits of a build that share no fact with the published data",
        description="--from BUILD: keeps every chain of a knowgic build output (facts one model knows, grown "
        "from seeds the published data does not use) that shares no fact (subject, relation, object) and no "
        "edit subject with any shipped version, and refuses a build that leaves fewer than "
        f"{MIN_PRIVATE_EDITS} edits. --drill: holds out a share of each published edit's chains (a seeded "
        "hash picks them), to exercise the machinery; a drill shares every graph with the public data, so it "
        "never ranks.",
    )
    h.add_argument("--out", required=True, help="the new folder (must not exist, or be empty)")
    h.add_argument(
        "--from", dest="build", default=None, metavar="BUILD", help="a knowgic build output folder"
    )
    h.add_argument("--drill", action="store_true", help="held-out published chains (never ranks)")
    h.add_argument(
        "--version", default=None, help="--drill: X.Y.Z of the published chains (default: the latest)"
    )
    h.add_argument(
        "--fraction",
        type=open_unit_fraction,
        default=DEFAULT_FRACTION,
        help=f"--drill: share of each edit's chains to hold out (default {DEFAULT_FRACTION:g})",
    )
    h.add_argument(
        "--max-edits",
        type=positive_int,
        default=None,
        help="--from: keep at most this many of the build's new edits, whole, picked by a seeded hash",
    )
    h.add_argument(
        "--seed", type=int, default=0, help="which chains (--drill) or edits the hash picks (default 0)"
    )
    h.set_defaults(func=_cmd_holdout)
    t = ds_sub.add_parser(
        "track",
        help="ship a knowgic build output as a dataset version of its own track, less a reserved part",
        description="Partitions the build's chains by family (connected component of its fact graph), "
        "reserves a share of the edits, whole families in a seeded hash order, for a private split (written "
        "to --reserved-out, outside the package: never published), and writes the rest as the version "
        "TRACK-VERSION in the package's dataset folder and spec/benchmark.yaml. The parts share no fact.",
    )
    t.add_argument(
        "--from", dest="build", required=True, metavar="BUILD", help="a knowgic build output folder"
    )
    t.add_argument(
        "--track", required=True, help="the track's name, e.g. growth (lower-case letters, digits)"
    )
    t.add_argument("--version", required=True, help="X.Y.Z of the track (the version key is TRACK-X.Y.Z)")
    t.add_argument(
        "--reserved-out",
        required=True,
        type=Path,
        help="new folder for the reserved part, outside the package",
    )
    t.add_argument(
        "--reserve-share",
        type=open_unit_fraction,
        default=DEFAULT_RESERVE_SHARE,
        help=f"share of the edits to reserve, whole families at a time (default {DEFAULT_RESERVE_SHARE:g})",
    )
    t.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"seed of the families' order (default {DEFAULT_SEED})"
    )
    t.set_defaults(func=_cmd_track)

    v = subparsers.add_parser(
        "validate",
        help="check rows (JSON, JSON Lines, Parquet), a dataset folder or a results.json against the schemas",
        description="Schema errors (exit 1) name the row, the JSON pointer and what was expected; "
        "semantic findings are warnings (exit 0). A results document (results.json, or a run folder holding "
        "one) is checked against results.schema.json and its own sha256.",
    )
    v.add_argument("path", help="a .json/.jsonl/.parquet file of rows, an alias map, or a dataset folder")
    v.add_argument("--json", action="store_true", help="print a machine-readable report")
    v.add_argument(
        "--aliases", default=None, help="alias map to check the rows against (default: found beside them)"
    )
    v.add_argument(
        "--config", default=None, choices=["chains", "edits", "facts"], help="row kind (default: detected)"
    )
    v.set_defaults(func=_cmd_validate)

    pub = subparsers.add_parser(
        "publish",
        help="upload a dataset version to the Hugging Face Hub and tag it vX.Y.Z (a track's: TRACK-vX.Y.Z)",
        description="Refuses when the folder's content differs from its recorded hash or the tag exists.",
    )
    pub.add_argument("--repo-id", required=True, help="ORG/NAME of the dataset repo")
    pub.add_argument("--version", required=True, help="X.Y.Z, or a track's TRACK-X.Y.Z (tagged TRACK-vX.Y.Z)")
    pub.add_argument("--dry-run", action="store_true", help="print every file and the tag; no network")
    pub.add_argument(
        "--token", default=None, help="Hugging Face token (default: $HF_TOKEN or the saved login)"
    )
    pub.set_defaults(func=_cmd_publish)
