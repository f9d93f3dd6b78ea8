"""The derived configs, computed from the chains rows (and the alias map) of a version.

- ``edits``: one row per distinct edit request, in order of first appearance, with the ``case_id`` and
  chain of every row that asks it and the union of their broader contexts (one entry per distinct fact
  ``(subject, prompt, answer)``, first occurrence kept).
- ``facts``: one row per distinct atomic fact ``(subject, prompt, answer)`` of the chains and broader
  contexts, in order of first appearance, with every question that asks it, the answer's aliases, and
  ``n_gold``: the number of distinct answers the version lists for that ``(subject, prompt)``.
- ``ripple``: RippleEdits' test queries of every edit (:mod:`knowgic.ripple.queries`) on the graph of the
  version's facts, with ``spec/relations.yaml`` and the alias map; edits in ``edits`` order, each edit's
  queries in criterion order. Outside the content hash (``version.json`` records its own, and the relation
  table's). A shipped version's templates must all be declared (:func:`ripple_rows`); a builder output's
  are completed by proposed relations (:func:`ripple_config`), which its ``version.json`` names, and its
  Subject Aliasing queries use the subject aliases the build validated (``subject_aliases.json``) instead
  of the alias map, which names answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knowgic.dataset.io import canonical_json, clean_aliases, sha256_text, short_id
from knowgic.records import EditRequest
from knowgic.ripple.queries import CRITERIA, Edit, Fact, Graph, Query, edit_queries, query_row
from knowgic.ripple.relations import RelationTable, with_proposals

Row = Mapping[str, Any]
BLOCK_KEYS = ("questions", "answers", "prompts", "subjects")


def edit_id(row: Row) -> str:
    return EditRequest.from_upstream(row["requested_rewrite"][0]).edit_id


def fact_id(subject: str, prompt: str, answer: str) -> str:
    return short_id([subject, prompt, answer])


def _empty_block() -> dict[str, list[str]]:
    return {k: [] for k in BLOCK_KEYS}


def _block(chain: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    return {k: list(chain[k]) for k in BLOCK_KEYS}


def edit_rows(chains: Sequence[Row]) -> list[dict[str, Any]]:
    """The ``edits`` config of the given chains rows."""
    order: list[str] = []
    by_id: dict[str, dict[str, Any]] = {}
    seen_facts: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for row in sorted(chains, key=lambda r: r["case_id"]):
        eid = edit_id(row)
        if eid not in by_id:
            order.append(eid)
            by_id[eid] = {
                "edit_id": eid,
                "requested_rewrite": [dict(row["requested_rewrite"][0])],
                "case_ids": [],
                "chains": [],
                "broader_context": _empty_block(),
            }
        out = by_id[eid]
        out["case_ids"].append(row["case_id"])
        out["chains"].append(_block(row["chain"]))
        b = row["broader_context"]
        for q, a, p, s in zip(b["questions"], b["answers"], b["prompts"], b["subjects"], strict=True):
            if (s, p, a) in seen_facts[eid]:
                continue
            seen_facts[eid].add((s, p, a))
            for key, value in zip(BLOCK_KEYS, (q, a, p, s), strict=True):
                out["broader_context"][key].append(value)
    return [by_id[e] for e in order]


def aliases_of(name: str, aliases: Mapping[str, Sequence[str]]) -> list[str]:
    """The distinct aliases of ``name`` (exact entry, else one spelled with other capitals), itself excluded."""
    names = aliases.get(name)
    if names is None:
        folded = name.casefold()
        names = next((v for k, v in aliases.items() if k.casefold() == folded), ())
    out: list[str] = []
    for alias in names:
        if alias != name and alias not in out:
            out.append(alias)
    return out


def fact_rows(chains: Sequence[Row], aliases: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The ``facts`` config of the given chains rows and alias map."""
    facts: dict[tuple[str, str, str], dict[str, Any]] = {}
    gold: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in sorted(chains, key=lambda r: r["case_id"]):
        eid = edit_id(row)
        for block_name, counter in (("chain", "n_chain_steps"), ("broader_context", "n_broader")):
            b = row[block_name]
            for q, a, p, s in zip(b["questions"], b["answers"], b["prompts"], b["subjects"], strict=True):
                key = (s, p, a)
                gold[(s, p)].add(a)
                fact = facts.get(key)
                if fact is None:
                    fact = facts[key] = {
                        "fact_id": fact_id(s, p, a),
                        "subject": s,
                        "prompt": p,
                        "answer": a,
                        "questions": [],
                        "aliases": aliases_of(a, aliases),
                        "n_gold": 0,
                        "n_chain_steps": 0,
                        "n_broader": 0,
                        "edit_ids": set(),
                    }
                if q not in fact["questions"]:
                    fact["questions"].append(q)
                fact[counter] += 1
                fact["edit_ids"].add(eid)
    out = []
    for (s, p, _a), fact in facts.items():
        fact["n_gold"] = len(gold[(s, p)])
        fact["edit_ids"] = sorted(fact["edit_ids"])
        out.append(fact)
    return out


def ripple_rows(
    chains: Sequence[Row],
    aliases: Mapping[str, Sequence[str]],
    table: RelationTable,
    subject_aliases: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """The ``ripple`` config: every edit's queries on the graph of the version's distinct facts.
    ``subject_aliases`` (a builder output's, validated on its model): Subject Aliasing asks each edit under
    its subject's names there, none for a subject absent; without it, under the alias map's."""
    graph = Graph.of(
        (Fact(f["subject"], f["prompt"], f["answer"]) for f in fact_rows(chains, aliases)), table
    )
    names = clean_aliases(aliases)
    subjects = clean_aliases(subject_aliases) if subject_aliases is not None else None
    rows: list[dict[str, Any]] = []
    for e in edit_rows(chains):
        r = e["requested_rewrite"][0]
        edit = Edit(e["edit_id"], r["subject"], r["prompt"], r["target_true"]["str"], r["target_new"]["str"])
        queries = edit_queries(edit, graph, table, names)
        if subjects is not None:
            queries = _subject_aliasing(queries, edit, graph, table, names, subjects)
        rows.extend(query_row(edit.edit_id, q) for q in queries)
    return rows


def _subject_aliasing(
    queries: Sequence[Query],
    edit: Edit,
    graph: Graph,
    table: RelationTable,
    names: Mapping[str, Sequence[str]],
    subjects: Mapping[str, Sequence[str]],
) -> list[Query]:
    """``queries`` with their SA queries made under the subject's own aliases: the edit's queries with the
    subject's entry of the alias map replaced (only SA reads it as the subject's names; a target's aliases
    are looked up for the target), in criterion order."""
    under = {**names, edit.subject: tuple(subjects.get(edit.subject, ()))}
    sa = [q for q in edit_queries(edit, graph, table, under) if q.criterion == "SA"]
    kept = [q for q in queries if q.criterion != "SA"]
    order = list(CRITERIA)
    return sorted(kept + sa, key=lambda q: order.index(q.criterion))  # stable: order within kept


def ripple_record(rows: Sequence[Row], table: RelationTable) -> dict[str, Any]:
    """What ``version.json`` records of the ``ripple`` config: the sha256 of its rows (canonical JSON, file
    order) and the version and sha256 of the relation table it was built with (with the names of the
    relations proposed for it, if any)."""
    record: dict[str, Any] = {
        "sha256": sha256_text(canonical_json(list(rows))),
        "relations": {"version": table.version, "sha256": table.sha256},
    }
    proposed = sorted(r.name for r in table.relations.values() if r.proposed)
    if proposed:
        record["relations"]["proposed"] = proposed
    return record


def chain_templates(chains: Sequence[Row]) -> set[str]:
    """Every template the chains use: their steps', broader contexts' and edit requests'."""
    out: set[str] = set()
    for row in chains:
        out.update(row["chain"]["prompts"], row["broader_context"]["prompts"])
        out.update(r["prompt"] for r in row["requested_rewrite"])
    return out


@dataclass(frozen=True)
class RippleConfig:
    """A version's ``ripple`` rows, the relation table they were built with (``table`` plus ``proposals``:
    one proposed relation per template it lacks) and what ``version.json`` records of them."""

    rows: list[dict[str, Any]]
    table: RelationTable
    proposals: dict[str, Any]

    @property
    def record(self) -> dict[str, Any]:
        return ripple_record(self.rows, self.table)


def ripple_config(
    chains: Sequence[Row],
    aliases: Mapping[str, Sequence[str]],
    table: RelationTable,
    subject_aliases: Mapping[str, Sequence[str]] | None = None,
) -> RippleConfig:
    """The ``ripple`` config of a builder output: a template ``table`` lacks gets a proposed relation
    (:func:`knowgic.ripple.relations.with_proposals`) instead of failing the build; Subject Aliasing uses
    the build's ``subject_aliases`` (``subject_aliases.json``) when given."""
    extended, proposals = with_proposals(table, chain_templates(chains))
    return RippleConfig(ripple_rows(chains, aliases, extended, subject_aliases), extended, proposals)
