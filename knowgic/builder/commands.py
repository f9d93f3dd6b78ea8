"""``knowgic build`` (the graph builder) and ``knowgic review`` (its review page and CSV round trip).

The build's own dependencies (pysbd, rapidfuzz, lm-format-enforcer, networkx) are the ``build`` extra;
``--help`` works without them, and a stage that needs one says which extra to install.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from knowgic.argtypes import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "build",
        help="build a model-specific KnowGIC version from the model's own chain of thought (ThinkEval)",
        description="Grow a graph of facts the model knows from seed facts, through its chain of thought, "
        "triplet extraction, validation and review, and write its implication chains as a dataset "
        "version folder (loads with datasets.load_dataset, runs under knowgic evaluate --dataset). "
        "Each stage is cached in --build-dir; a rerun redoes only what changed. Needs the extra: "
        'pip install "knowgic[build]".',
    )
    p.add_argument(
        "--model", required=True, help="the model whose graph is built (offline name, hub id, path)"
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--from", dest="source", metavar="VERSION|FOLDER", help="seed from a dataset version's facts"
    )
    src.add_argument(
        "--seeds", type=Path, metavar="FILE", help="seed triplets: CSV/JSONL with subject,relation,object"
    )
    p.add_argument(
        "--templates", type=Path, metavar="FILE", help="YAML: relation -> {prompt, question} (with --seeds)"
    )
    p.add_argument(
        "--build-dir", type=Path, required=True, help="folder of the stages' outputs and the review file"
    )
    p.add_argument("--out", type=Path, help="write the dataset version folder here")
    p.add_argument("--overwrite", action="store_true", help="replace the dataset folder --out names")
    p.add_argument(
        "--seed-subjects",
        default="all",
        choices=["all", "edits"],
        help="seed facts: all of the source's, or only those about its edits' subjects (default: all)",
    )
    p.add_argument("--max-seeds", type=positive_int, metavar="N", help="use only the first N seed facts")
    p.add_argument(
        "--edits",
        default="published",
        choices=["published", "all"],
        help="edit requests: the source's own, or one per graph fact with a counterfactual target drawn "
        "from the same relation's objects (default: published)",
    )
    p.add_argument(
        "--scope",
        choices=["graph", "global"],
        help="chains walk the edit's own grown graph or all facts (default: graph for published edits, "
        "global for drawn ones)",
    )
    p.add_argument(
        "--no-expand", dest="expand", action="store_false", help="skip the chain-of-thought growth"
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        metavar="N",
        help="growth rounds: the facts accepted in round k are expanded in round k+1 (default: spec)",
    )
    p.add_argument(
        "--extractor",
        help="a separate model for triplet extraction, 'spacy' for deterministic dependency rules "
        "(spaCy and its en_core_web_sm pipeline), or 'templates' for sentences read as the build's "
        "relation templates (no model; default: --model)",
    )
    p.add_argument("--judge", metavar="MODEL", help="an LLM judge decides the review instead of a person")
    p.add_argument(
        "--protocol", help="the scoring protocol whose 'known' rule validates facts (default: logprob)"
    )
    p.add_argument("--name", default="knowgic-build", help="the dataset's name in version.json")
    p.add_argument("--version", default="0.1.0", help="the dataset's version X.Y.Z (default: 0.1.0)")
    p.add_argument(
        "--max-chains-per-edit", type=int, metavar="N", help="cap per edit, 0 = no cap (default: spec)"
    )
    p.add_argument("--max-steps", type=positive_int, metavar="N", help="longest chain (default: 5)")
    p.add_argument(
        "--seed", type=int, help="seed of the chain sample and the counterfactual draw (default: 0)"
    )
    p.add_argument("--batch-size", type=positive_int, help="prompts per generation batch (default: spec)")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, ...")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    p.set_defaults(func=run_build_command)

    r = subparsers.add_parser(
        "review",
        help="review a build's new triplets and templates: a keyboard-driven page, or a CSV round trip",
        description="Open the review page of a build folder (a: accept, r: reject, e: save edits, "
        "n/p: next/previous; every decision is saved at once), or export/import the decisions as CSV.",
    )
    r.add_argument("build_dir", type=Path, help="the --build-dir of a build")
    r.add_argument("--export", type=Path, metavar="CSV", help="write the pending and decided rows to a CSV")
    r.add_argument("--import", dest="import_", type=Path, metavar="CSV", help="apply the decisions of a CSV")
    r.add_argument("--reviewer", help="who decides (default: your user name)")
    r.add_argument("--port", type=int, default=7861, help="port of the page (default: 7861)")
    r.add_argument("--host", default="127.0.0.1", help="address of the page (default: 127.0.0.1)")
    r.set_defaults(func=run_review_command)


def run_build_command(args: argparse.Namespace) -> int:
    from knowgic.builder.pipeline import BuildConfig, run_build

    cfg = BuildConfig(
        model=args.model,
        build_dir=args.build_dir,
        out=args.out,
        source=args.source,
        seeds_file=args.seeds,
        templates_file=args.templates,
        seed_subjects=args.seed_subjects,
        max_seeds=args.max_seeds,
        edits=args.edits,
        scope=args.scope,
        expand=args.expand,
        rounds=args.rounds,
        extractor=args.extractor,
        judge=args.judge,
        protocol=args.protocol,
        name=args.name,
        version=args.version,
        max_chains_per_edit=args.max_chains_per_edit,
        max_steps=args.max_steps,
        seed=args.seed,
        batch_size=args.batch_size,
        dtype=args.dtype,
        device=args.device,
        overwrite=args.overwrite,
    )
    result = run_build(cfg)
    if args.json:
        print(
            json.dumps(
                {
                    "counts": result.counts,
                    "ran": result.ran,
                    "skipped": result.skipped,
                    "seconds": round(result.seconds, 2),
                    "out": str(result.out),
                },
                indent=1,
            )
        )
        return 0
    for key, value in result.counts.items():
        print(f"{key.replace('_', ' ')}: {value}")
    print(f"stages run: {', '.join(result.ran) or 'none'}; cached: {', '.join(result.skipped) or 'none'}")
    if result.out is not None:
        print(f"dataset folder: {result.out}")
    return 0


def run_review_command(args: argparse.Namespace) -> int:
    import getpass

    from knowgic.builder import review as rv
    from knowgic.errors import KnowgicError

    path = args.build_dir / rv.REVIEW_FILE
    if not path.is_file():
        raise KnowgicError(
            f"{path} does not exist: run knowgic build with --build-dir {args.build_dir} first"
        )
    reviewer = f"person:{args.reviewer or getpass.getuser()}"
    rows = rv.read_review(path)
    if args.export is not None:
        rv.export_csv(rows, args.export)
        print(f"wrote {args.export}")
        return 0
    if args.import_ is not None:
        changed = rv.import_csv(rows, args.import_, reviewer)
        rv.write_review(path, rows)
        print(f"{changed} decisions applied to {path}; {len(rv.pending(rows))} pending")
        return 0
    from knowgic.builder.review_app import KEYS, make_app

    make_app(path, reviewer).launch(server_name=args.host, server_port=args.port, js=KEYS)
    return 0
