"""Stage 6, graph and chains: the accepted facts as a directed multigraph, and each edit's chains.

    facts --networkx.MultiDiGraph (edge subject -> answer, key fact_id)-->
    edit (s, r, o_true, o_new) --all_simple_edge_paths(s, o_true, cutoff=5)--> fact paths
        --deduplicated, enumeration capped, seeded sample of at most max_chains_per_edit--> chains

A chain is a simple path (no node twice, so cycles end nowhere) of 1 to ``max_steps`` facts whose first
subject is the edited subject and whose last answer is the edited fact's old object, each step's answer
being the next step's subject. ``scope``: ``graph`` walks only the facts of the edit's own graph (the
graph grown from its seed, as the published versions are built), ``global`` the union of all graphs.

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


def build_graph(facts: Sequence[Mapping[str, Any]]) -> nx.MultiDiGraph:
    graph = nx.MultiDiGraph()
    for f in facts:
        graph.add_edge(f["subject"], f["answer"], key=f["fact_id"], fact=f)
    return graph


def subgraph(graph: nx.MultiDiGraph, graph_ids: Sequence[str]) -> nx.MultiDiGraph:
    """The facts of the given grown graphs (those listing one of ``graph_ids`` in their ``graphs``)."""
    wanted = set(graph_ids)
    edges = [(u, v, k) for u, v, k, f in graph.edges(keys=True, data="fact") if wanted & set(f["graphs"])]
    return graph.edge_subgraph(edges)


def enumerate_chains(
    graph: nx.MultiDiGraph, subject: str, target: str, max_steps: int, limit: int
) -> tuple[list[tuple[str, ...]], bool]:
    """Fact-id paths from ``subject`` to ``target`` (1..max_steps facts), at most ``limit`` of them
    (True when the limit cut the enumeration short)."""
    if subject not in graph or target not in graph or subject == target:
        return [], False
    paths = nx.all_simple_edge_paths(graph, subject, target, cutoff=max_steps)
    found: dict[tuple[str, ...], None] = {}
    for path in itertools.islice(paths, limit + 1):
        found.setdefault(tuple(key for _, _, key in path))
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


def chains_for_edits(
    facts: Sequence[Mapping[str, Any]],
    edits: Sequence[EditSpec],
    scope: str,
    max_steps: int,
    cap: int,
    limit: int,
    seed: int,
) -> dict[str, Any]:
    """Per edit: its chains (fact-id paths) and what the enumeration found."""
    graph = build_graph(facts)
    out = []
    for edit in edits:
        g = subgraph(graph, edit.graphs) if scope == "graph" else graph
        paths, truncated = enumerate_chains(g, edit.subject, edit.target_true, max_steps, limit)
        chosen = sample_chains(paths, cap, seed, edit.edit_id)
        out.append(
            {
                "edit": {**vars(edit), "graphs": list(edit.graphs)},
                "paths_found": len(paths),
                "enumeration_truncated": truncated,
                "chains": [list(p) for p in chosen],
            }
        )
    return {"nodes": graph.number_of_nodes(), "facts": graph.number_of_edges(), "edits": out}
