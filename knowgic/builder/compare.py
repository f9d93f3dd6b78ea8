"""Compare a built version's chains with a reference version's, as fact paths, per edit.

    reference chains (s, p, a)* ─┐
                                 ├─> reproduced · missing (why: a fact left out of the graph) · extra
    built chains     (s, p, a)* ─┘

Used for the round trip on ``knowgic-tiny`` (docs/builder.md): a build from 1.1.0's own facts should
give back 1.1.0's chains, and every difference should have a reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from knowgic.dataset.folder import open_dataset

Path_ = tuple[tuple[str, str, str], ...]


def _paths(rows: list[dict[str, Any]]) -> dict[str, set[Path_]]:
    out: dict[str, set[Path_]] = {}
    for row in rows:
        c = row["chain"]
        path = tuple(zip(c["subjects"], c["prompts"], c["answers"], strict=True))
        out.setdefault(row["edit_id"], set()).add(path)
    return out


def compare(built: str | Path, reference: str) -> dict[str, Any]:
    ref_ds, built_ds = open_dataset(reference), open_dataset(built)
    ref, new = _paths(ref_ds.rows("chains")), _paths(built_ds.rows("chains"))
    built_facts = {(f["subject"], f["prompt"], f["answer"]) for f in built_ds.rows("facts")}
    per_edit = []
    reasons: Counter[str] = Counter()
    for eid, paths in ref.items():
        got = new.get(eid, set())
        missing = paths - got
        for p in missing:
            absent = [f for f in p if f not in built_facts]
            reasons[
                "a fact of the chain is not in the built graph" if absent else "cut by the per-edit cap"
            ] += 1
        per_edit.append(
            {
                "edit_id": eid,
                "reference": len(paths),
                "built": len(got),
                "reproduced": len(paths & got),
                "missing": len(missing),
                "extra": len(got - paths),
            }
        )
    totals = {
        k: sum(e[k] for e in per_edit) for k in ("reference", "built", "reproduced", "missing", "extra")
    }
    return {"totals": totals, "missing_reasons": dict(reasons), "per_edit": per_edit}


def missing_facts(built: str | Path, reference: str) -> list[Mapping[str, Any]]:
    """The reference's chain facts that the built version lacks."""
    ref_ds, built_ds = open_dataset(reference), open_dataset(built)
    have = {(f["subject"], f["prompt"], f["answer"]) for f in built_ds.rows("facts")}
    return [f for f in ref_ds.rows("facts") if (f["subject"], f["prompt"], f["answer"]) not in have]
