"""Stage 6, graph and chains: the accepted facts as a directed graph, and each edit's chains.

    facts --networkx.DiGraph (one edge subject -> answer; phrasings of it merged as the edge's aliases)-->
    edit (s, r, o_true, o_new) --all_simple_edge_paths(s, o_true, cutoff=5)--> fact paths
        --enumeration capped, seeded sample of at most max_chains_per_edit, at most
          max_chains_per_family per family (shared evenly by its edits)--> chains

A chain is a simple path (no node twice, so cycles end nowhere) of 1 to ``max_steps`` facts whose first
subject is the edited subject and whose last answer is the edited fact's old object, each step's answer
being the next step's subject. As in the ThinkEval paper there is a single link between two nodes, so no
chain is a phrasing variant of another. ``scope``: ``graph`` walks only the facts of the edit's own graph
(the graph grown from its seed, as the published versions are built), ``global`` the union of all graphs.
A family is a connected component of the graph: the cap keeps one family from holding most chains.

The broader context of a chain (Preservation) is its facts whose subject is not the edited subject, as in
the published versions, where an edit's broader context is its graph's facts about other subjects.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from knowgic.dataset.io import sha256_text


@dataclass(frozen=True)
class EditSpec:
    edit_id: str
    subject: str
    prompt: str
    target_true: str
    target_new: str
    origin: str  # "published" or "drawn"
    graphs: tuple[str, ...]  # the grown graphs its chains may walk under scope "graph"


def _preference(f: Mapping[str, Any]) -> tuple[float, str]:
    """The phrasing an edge is posed in: the one the model gives the highest score, ties by fact id."""
    p = (f.get("validation") or {}).get("p")
    return (-(float(p) if p is not None else 0.0), str(f["fact_id"]))


def build_graph(facts: Sequence[Mapping[str, Any]]) -> nx.DiGraph:
    """One edge per (subject, answer) pair, the paper's single link between two nodes: every fact between
    the same two nodes (phrasing variants such as "{} is father of" / "{} is the father of") merges into one
    edge, posed by its preferred fact (``fact``) with the others kept as ``aliases`` (their facts)."""
    graph = nx.DiGraph()
    for f in sorted(facts, key=_preference):
        u, v = f["subject"], f["answer"]
        if graph.has_edge(u, v):
            edge = graph.edges[u, v]
            edge["aliases"].append(f)
            edge["graphs"] = sorted(set(edge["graphs"]) | set(f["graphs"]))
        else:
            graph.add_edge(u, v, fact=f, aliases=[], graphs=sorted(set(f["graphs"])))
    return graph


def edge_facts(facts: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The fact that poses each edge, in the order of ``facts``."""
    chosen = {d["fact"]["fact_id"] for _, _, d in build_graph(facts).edges(data=True)}
    return [f for f in facts if f["fact_id"] in chosen]


def merged_aliases(graph: nx.DiGraph) -> dict[str, str]:
    """Fact id of every merged phrasing -> the fact id of the edge that poses it."""
    return {a["fact_id"]: d["fact"]["fact_id"] for _, _, d in graph.edges(data=True) for a in d["aliases"]}


def subgraph(graph: nx.DiGraph, graph_ids: Sequence[str]) -> nx.DiGraph:
    """The edges of the given grown graphs (an edge belongs to every graph one of its facts belongs to)."""
    wanted = set(graph_ids)
    edges = [(u, v) for u, v, g in graph.edges(data="graphs") if wanted & set(g)]
    return graph.edge_subgraph(edges)


def enumerate_chains(
    graph: nx.DiGraph, subject: str, target: str, max_steps: int, limit: int
) -> tuple[list[tuple[str, ...]], bool]:
    """Fact-id paths from ``subject`` to ``target`` (1..max_steps edges), at most ``limit`` of them
    (True when the limit cut the enumeration short)."""
    if subject not in graph or target not in graph or subject == target:
        return [], False
    paths = nx.all_simple_edge_paths(graph, subject, target, cutoff=max_steps)
    found: dict[tuple[str, ...], None] = {}
    for path in itertools.islice(paths, limit + 1):
        found.setdefault(tuple(graph.edges[u, v]["fact"]["fact_id"] for u, v in path))
    out = list(found)
    return out[:limit], len(out) > limit


def sample_chains(
    paths: Sequence[tuple[str, ...]], cap: int, seed: int, edit_id: str
) -> list[tuple[str, ...]]:
    """At most ``cap`` paths: all when there are few enough, else a sample drawn with a generator seeded by
    (seed, edit); kept in enumeration order either way."""
    if cap <= 0 or len(paths) <= cap:
        return list(paths)
    rng = random.Random(sha256_text(f"{seed}\x1f{edit_id}"))
    keep = sorted(rng.sample(range(len(paths)), cap))
    return [paths[i] for i in keep]


def fair_shares(counts: Sequence[int], cap: int) -> list[int]:
    """At most ``cap`` in all, split over the items as evenly as their counts allow (water-filling: an item
    with fewer than its share keeps them all, the rest is shared by the others; the remainder of an uneven
    split goes to the first items)."""
    if cap <= 0 or sum(counts) <= cap:
        return list(counts)
    shares = [0] * len(counts)
    open_items = [i for i, c in enumerate(counts) if c > 0]
    left = cap
    while open_items and left > 0:
        each, extra = divmod(left, len(open_items))
        if each == 0:
            for i in open_items[:extra]:
                shares[i] += 1
            break
        still = []
        for i in open_items:
            give = min(each, counts[i] - shares[i])
            shares[i] += give
            left -= give
            if shares[i] < counts[i]:
                still.append(i)
        open_items = still
    return shares


def families(graph: nx.DiGraph) -> dict[str, str]:
    """Node -> its family: the connected component of the graph (edges taken both ways) it belongs to,
    named by its first node in sorted order."""
    out: dict[str, str] = {}
    for component in nx.weakly_connected_components(graph):
        name = min(component)
        out.update(dict.fromkeys(component, name))
    return out


def chains_for_edits(
    facts: Sequence[Mapping[str, Any]],
    edits: Sequence[EditSpec],
    scope: str,
    max_steps: int,
    cap: int,
    limit: int,
    seed: int,
    family_cap: int = 0,
) -> dict[str, Any]:
    """Per edit: its chains (fact-id paths) and what the enumeration found; at most ``cap`` chains per edit
    and ``family_cap`` per family (0: no cap), a family's chains shared evenly by its edits."""
    graph = build_graph(facts)
    family_of = families(graph)
    found = []
    for edit in edits:
        g = subgraph(graph, edit.graphs) if scope == "graph" else graph
        paths, truncated = enumerate_chains(g, edit.subject, edit.target_true, max_steps, limit)
        found.append((edit, paths, truncated, len(sample_chains(paths, cap, seed, edit.edit_id))))
    by_family: dict[str, list[int]] = {}
    for i, (edit, *_rest) in enumerate(found):
        by_family.setdefault(family_of.get(edit.subject, edit.subject), []).append(i)
    allowed = [n for *_rest, n in found]
    for members in by_family.values():
        for i, share in zip(members, fair_shares([allowed[i] for i in members], family_cap), strict=True):
            allowed[i] = share
    out = []
    for (edit, paths, truncated, _n), keep in zip(found, allowed, strict=True):
        chosen = sample_chains(paths, keep, seed, edit.edit_id) if keep else []
        out.append(
            {
                "edit": {**vars(edit), "graphs": list(edit.graphs)},
                "family": family_of.get(edit.subject, edit.subject),
                "paths_found": len(paths),
                "enumeration_truncated": truncated,
                "chains": [list(p) for p in chosen],
            }
        )
    family_chains: dict[str, int] = {}
    for e in out:
        family_chains[e["family"]] = family_chains.get(e["family"], 0) + len(e["chains"])
    return {
        "nodes": graph.number_of_nodes(),
        "facts": len(facts),
        "edges": graph.number_of_edges(),
        "merged_phrasings": merged_aliases(graph),
        "family_chains": dict(sorted(family_chains.items(), key=lambda kv: (-kv[1], kv[0]))),
        "edits": out,
    }
