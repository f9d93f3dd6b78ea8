"""Compare a built version's chains with a reference version's, as fact paths, per edit.

    reference chains (s, p, a)* ─┐
                                 ├─> reproduced · missing (and why) · extra
    built chains     (s, p, a)* ─┘

A missing chain is put down to the first reason that holds: it has a fact the model does not know
(query validation), a fact dropped by the final check (known with the graph's n_gold, not with the
version's), else the per-edit cap. Used for the round trip on ``knowgic-tiny`` (docs/builder.md).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from knowgic.dataset.folder import open_dataset
from knowgic.dataset.io import read_json

Fact = tuple[str, str, str]


def _paths(rows: list[dict[str, Any]]) -> set[tuple[str, tuple[Fact, ...]]]:
    return {
        (
            r["edit_id"],
            tuple(zip(r["chain"]["subjects"], r["chain"]["prompts"], r["chain"]["answers"], strict=True)),
        )
        for r in rows
    }


def compare(built: str | Path, reference: str, build_dir: Path | None = None) -> dict[str, Any]:
    ref = _paths(open_dataset(reference).rows("chains"))
    new = _paths(open_dataset(built).rows("chains"))
    unknown: set[Fact] = set()
    dropped: set[Fact] = set()
    if build_dir is not None:
        facts = read_json(build_dir / "stages" / "query_validation.json")["facts"]
        by_id = {f["fact_id"]: (f["subject"], f["prompt"], f["answer"]) for f in facts}
        unknown = {by_id[f["fact_id"]] for f in facts if not f["validation"]["known"]}
        graph = read_json(build_dir / "stages" / "graph.json")
        dropped = {by_id[i] for i in graph.get("dropped_by_final_check", []) if i in by_id}
    reasons: Counter[str] = Counter()
    for _, path in ref - new:
        if any(f in unknown for f in path):
            reasons["has a fact the model does not know"] += 1
        elif any(f in dropped for f in path):
            reasons["has a fact dropped by the final check"] += 1
        else:
            reasons["other (the per-edit cap, or no build folder given)"] += 1
    per_edit = Counter(e for e, _ in new - ref)
    return {
        "reference": len(ref),
        "built": len(new),
        "reproduced": len(ref & new),
        "missing": len(ref - new),
        "extra": len(new - ref),
        "missing_reasons": dict(reasons),
        "extra_by_edit": dict(per_edit),
        "unknown_facts": sorted(unknown),
        "dropped_facts": sorted(dropped),
    }
