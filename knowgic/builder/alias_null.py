"""How often wrong names pass the subject alias checks (:mod:`knowgic.builder.aliases`) on a build.

    BUILD's known facts + the source's alias table --per subject, 3 wrong names of each population-->
    check_candidates (the spec's controls and min_agreement) --> one JSON line per population

Two hostile populations, drawn with a generator seeded by ``--seed``: names the alias table gives other
entities that are no node of the graph (real names the model has seen, never the subject's), and the
names of other subjects of the graph (every one a node). For each: the candidates, those whose subject has
evidence facts, those that pass the fact test, and those accepted, i.e. wrong aliases a build would keep.

    python -m knowgic.builder.alias_null BUILD [--source 1.1.0] [--per-subject 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from knowgic.builder.aliases import (
    answer_sets,
    check_candidates,
    control_names,
    distinguishing_facts,
    fold,
)
from knowgic.builder.spec import load_builder_spec
from knowgic.dataset.folder import open_dataset
from knowgic.dataset.io import alias_lists, read_json
from knowgic.dataset.versions import ALIASES_FILE


def populations(
    facts: list[dict[str, Any]], aliases: dict[str, list[str]], per_subject: int, seed: int
) -> dict[str, list[tuple[str, str]]]:
    """Population -> (subject, wrong name) pairs."""
    rng = random.Random(seed)
    subjects = list(dict.fromkeys(f["subject"] for f in facts))
    nodes = {fold(x) for f in facts for x in (f["subject"], f["answer"])}
    pool = sorted({a for k, v in aliases.items() for a in v if a != k})
    out: dict[str, list[tuple[str, str]]] = {"other entities' aliases": [], "other subjects' names": []}
    for s in subjects:
        own = {fold(a) for a in aliases.get(s, [])} | {fold(s)}
        names = [a for a in pool if fold(a) not in own and fold(a) not in nodes]
        others = [o for o in subjects if o != s]
        out["other entities' aliases"] += [(s, n) for n in rng.sample(names, min(per_subject, len(names)))]
        out["other subjects' names"] += [(s, n) for n in rng.sample(others, min(per_subject, len(others)))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build", type=Path, help="a build folder (its stages/query_validation.json)")
    parser.add_argument("--source", default="1.1.0", help="the version whose alias table gives the names")
    parser.add_argument("--model", default="knowgic-tiny")
    parser.add_argument("--per-subject", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from knowgic.models.loading import load_model
    from knowgic.scoring import make_scorer

    spec = load_builder_spec()
    conf = spec.subject_aliases
    stage = read_json(args.build / "stages" / "query_validation.json")
    facts = [f for f in stage["facts"] if f["validation"]["known"]]
    aliases = alias_lists(read_json(open_dataset(args.source).folder / ALIASES_FILE))
    subjects = list(dict.fromkeys(f["subject"] for f in facts))
    nodes = {fold(x) for f in facts for x in (f["subject"], f["answer"])}
    controls = control_names(subjects, int(conf["controls"]), args.seed)
    loaded = load_model(args.model, progress=False)
    scorer = make_scorer(str(spec.defaults["protocol"]))
    for name, pairs in populations(facts, aliases, args.per_subject, args.seed).items():
        out = check_candidates(
            pairs,
            distinguishing_facts(facts),
            answer_sets(facts),
            nodes,
            controls,
            loaded,
            scorer,
            float(conf["min_agreement"]),
        )
        passed = [
            c for c in out if c["evidence"] and c["known"] > float(conf["min_agreement"]) * c["evidence"]
        ]
        line = {
            "population": name,
            "candidates": len(out),
            "with_evidence": sum(1 for c in out if c["evidence"]),
            "pass_fact_test": len(passed),
            "accepted": [f"{c['subject']} | {c['alias']}" for c in out if c["accepted"]],
        }
        print(json.dumps(line, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
