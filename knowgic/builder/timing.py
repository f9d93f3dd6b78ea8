"""The builder's cost per seed fact, and what batched generation saves: ``python -m knowgic.builder.timing``.

    first N seed facts of a version --full build (fresh folder, every stage timed)--> seconds per seed fact
    the same chain-of-thought prompts --batch B vs one at a time--> batched_vs_single ratio (< 1: faster)

Prints one JSON line. Stage times depend on the machine and its load; run it on an idle machine for
figures to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    from knowgic.builder.expand import cot_prompt
    from knowgic.builder.generation import Generator
    from knowgic.builder.pipeline import Build, BuildConfig
    from knowgic.dataset.io import read_json

    parser = argparse.ArgumentParser(
        prog="python -m knowgic.builder.timing", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", default="knowgic-tiny")
    parser.add_argument("--from", dest="source", default="1.1.0")
    parser.add_argument("--seeds", type=int, default=16, help="seed facts to build from (default: 16)")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = BuildConfig(
            model=args.model, build_dir=Path(tmp) / "build", source=args.source, max_seeds=args.seeds,
            edits="all", batch_size=args.batch_size, progress=False,
        )  # fmt: skip
        build = Build(cfg)
        started = time.perf_counter()
        result = build.run()
        total = time.perf_counter() - started
        known = [f for f in read_json(Path(tmp) / "build" / "stages" / "query_validation.json")["facts"]
                 if f["validation"]["known"]]  # fmt: skip
        gen = Generator(build.models.get(args.model), batch_size=args.batch_size)
        prompts = [cot_prompt(build.spec, f, gen.loaded.is_chat) for f in known]
        n_tokens = int(build.spec.defaults["cot_max_new_tokens"])
        t0 = time.perf_counter()
        gen.generate(prompts, n_tokens)
        batched = time.perf_counter() - t0
        single = Generator(gen.loaded, batch_size=1)
        t0 = time.perf_counter()
        single.generate(prompts, n_tokens)
        one_at_a_time = time.perf_counter() - t0
    line = {
        "model": args.model,
        "seed_facts": args.seeds,
        "seed_facts_known": len(known),
        "build_seconds": round(total, 2),
        "seconds_per_seed_fact": round(total / args.seeds, 3),
        "stage_seconds_per_seed_fact": {k: round(v / args.seeds, 4) for k, v in result.stage_seconds.items()},
        "counts": result.counts,
        "cot_batched_seconds": round(batched, 2),
        "cot_one_at_a_time_seconds": round(one_at_a_time, 2),
        "batched_vs_single": round(batched / one_at_a_time, 3) if one_at_a_time else None,
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
