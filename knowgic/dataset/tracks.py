"""Tracks: a graph ``knowgic build`` grew for one model, shipped as a dataset version of its own, less a
reserved part kept for a private split.

    knowgic dataset track --from BUILD --track growth --version 1.0.0 --reserved-out DIR
                          [--reserve-share 0.2] [--seed 0]
    python -m knowgic.dataset.tracks     (every shipped track version made again from its own rows: the
                                          derived configs, ripple included, follow the spec; the hash stays)

    BUILD (a knowgic build output folder; its content hash is checked)
      --families: connected components of the fact graph, every edited fact, chain step and broader-context
        entry an edge subject -- answer, each named by its first node (as build/build.json names them)
      --reserve: families in the order of sha256(seed, family); a family is reserved, whole, when the
        reserved edits stay at or below round(share x edits)
      --> public part:   knowgic/dataset/hub/TRACK-X.Y.Z/ and its entry in spec/benchmark.yaml
      --> reserved part: DIR (refused inside the package or its repository), never shipped

A family holds every fact about each of its entities, so the two parts share no fact (no subject,
relation and object, hence no chain step) and no entity; :func:`split_track` checks it and refuses
otherwise. Each part keeps the build's rows unchanged (``case_id`` and ``flags`` included), and the aliases
of the entities its rows name. Both folders record the rule, the counts of both parts and the reserved
part's content hash, so the operator can show which reserved part a public version was cut from.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.dataset.card import SOURCE_COMMIT, SOURCE_REPO, ChangelogEntry
from knowgic.dataset.checks import restates_edit
from knowgic.dataset.derive import edit_id
from knowgic.dataset.io import canonical_json, read_json, sha256_text
from knowgic.dataset.versions import (
    HUB_DIR,
    MAIN_TRACK,
    VERSION_FILE,
    parse_version_key,
    version_key,
    version_tag,
)
from knowgic.errors import KnowgicError
from knowgic.paths import PACKAGE_DIR

Row = Mapping[str, Any]
FactKey = tuple[str, str, str]

DEFAULT_RESERVE_SHARE = 0.2
DEFAULT_SEED = 0
RESERVED_NAME = "knowgic-reserved"
BUILD_RECORD = "build/build.json"
RULE = (
    "families (connected components of the fact graph) in the order of sha256('<seed>\\x1f<family>'), "
    "a family being named by its first node in sorted order; each family is reserved whole when the "
    "reserved edits stay at or below round(share x edits)"
)


def row_facts(row: Row) -> set[FactKey]:
    """Every fact a chains row edits or asks: the edited fact (subject, prompt, ``target_true``), each
    chain step and each broader-context entry, as (subject, prompt, answer)."""
    request = row["requested_rewrite"][0]
    facts = {(request["subject"], request["prompt"], request["target_true"]["str"])}
    for block in (row["chain"], row["broader_context"]):
        facts.update(zip(block["subjects"], block["prompts"], block["answers"], strict=True))
    return facts


def fact_entities(facts: set[FactKey]) -> set[str]:
    return {s for s, _p, _a in facts} | {a for _s, _p, a in facts}


def fact_families(rows: Sequence[Row]) -> dict[str, str]:
    """Entity -> its family: the connected component of the rows' fact graph (edges taken both ways),
    named by its first node in sorted order."""
    import networkx as nx

    graph = nx.Graph()
    for row in rows:
        graph.add_edges_from((s, a) for s, _p, a in row_facts(row))
    return {node: min(c) for c in nx.connected_components(graph) for node in c}


def row_family(row: Row, family_of: Mapping[str, str]) -> str:
    return family_of[row["requested_rewrite"][0]["subject"]]


def reserved_families(edits: Mapping[str, int], share: float, seed: int) -> list[str]:
    """The families to reserve (see :data:`RULE`), in the order they were taken; ``edits``: family ->
    its number of edits."""
    target = round(share * sum(edits.values()))
    order = sorted(edits, key=lambda f: hashlib.sha256(f"{seed}\x1f{f}".encode()).hexdigest())
    taken: list[str] = []
    count = 0
    for family in order:
        if count + edits[family] <= target:
            taken.append(family)
            count += edits[family]
    return taken


def phrasing_duplicate_chains(rows: Sequence[Row]) -> int:
    """Chains of an edit that walk the same entities as another chain of it (phrasing variants of one
    path; the builder's one edge per fact makes this 0)."""
    paths = [(edit_id(r), *r["chain"]["subjects"], r["chain"]["answers"][-1]) for r in rows]
    return len(paths) - len(set(paths))


@dataclass(frozen=True)
class Part:
    """One part of a track: its rows (the build's, unchanged, in ``case_id`` order) and alias map."""

    rows: list[dict[str, Any]]
    aliases: dict[str, list[str]]
    families: dict[str, int]  # family -> chains, most first

    @property
    def facts(self) -> set[FactKey]:
        return set().union(*(row_facts(r) for r in self.rows)) if self.rows else set()

    def sha256(self) -> str:
        """The part's canonical content hash (the one its folder's ``version.json`` records)."""
        from knowgic.dataset.derive import edit_rows, fact_rows

        content = {
            "aliases": self.aliases,
            "chains": self.rows,
            "edits": edit_rows(self.rows),
            "facts": fact_rows(self.rows, self.aliases),
        }
        return sha256_text(canonical_json(content))

    def counts(self, name_largest: bool = True) -> dict[str, Any]:
        from knowgic.dataset.derive import fact_rows

        largest = next(iter(self.families.items()), ("", 0))
        share = round(largest[1] / len(self.rows), 4) if self.rows else 0.0
        return {
            "families": len(self.families),
            "edits": len({edit_id(r) for r in self.rows}),
            "chains": len(self.rows),
            "facts": len(fact_rows(self.rows, self.aliases)),
            "chains_restating_edit": sum(restates_edit(r) for r in self.rows),
            "phrasing_duplicate_chains": phrasing_duplicate_chains(self.rows),
            "largest_family": {
                **({"family": largest[0]} if name_largest else {}),
                "chains": largest[1],
                "share": share,
            },
        }


@dataclass(frozen=True)
class TrackSplit:
    public: Part
    reserved: Part
    share: float
    seed: int


def _part(rows: Sequence[Row], aliases: Mapping[str, Sequence[str]], family_of: Mapping[str, str]) -> Part:
    named: set[str] = set()
    for row in rows:
        request = row["requested_rewrite"][0]
        named |= fact_entities(row_facts(row)) | {request["target_new"]["str"]}
    chains = Counter(row_family(r, family_of) for r in rows)
    return Part(
        rows=sorted((dict(r) for r in rows), key=lambda r: r["case_id"]),
        aliases={k: list(v) for k, v in aliases.items() if k in named},
        families=dict(sorted(chains.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def split_track(
    rows: Sequence[Row],
    aliases: Mapping[str, Sequence[str]],
    share: float = DEFAULT_RESERVE_SHARE,
    seed: int = DEFAULT_SEED,
    build_families: Mapping[str, int] | None = None,
) -> TrackSplit:
    """The public and reserved parts of a build's chains rows (see the module docstring).
    ``build_families``: the build's chains per family (build/build.json), checked against the families
    found here."""
    if not 0.0 < share < 1.0:
        raise KnowgicError(f"--reserve-share must lie strictly between 0 and 1, got {share:g}")
    family_of = fact_families(rows)
    chains = Counter(row_family(r, family_of) for r in rows)
    if build_families is not None and dict(chains) != {k: v for k, v in build_families.items() if v}:
        raise KnowgicError(
            f"the fact graph's families ({len(chains)}, {sum(chains.values())} chains) differ from those "
            f"{BUILD_RECORD} records ({len(build_families)}); is the folder the build's own output?"
        )
    edits: dict[str, set[str]] = {}
    for row in rows:
        edits.setdefault(row_family(row, family_of), set()).add(edit_id(row))
    sizes = {f: len(e) for f, e in edits.items()}
    reserved = set(reserved_families(sizes, share, seed))
    if not reserved:
        raise KnowgicError(
            f"--reserve-share {share:g} reserves no family: round({share:g} x {sum(sizes.values())} edits) is "
            f"below the smallest family's {min(sizes.values())} edits"
        )
    if reserved == set(edits):
        raise KnowgicError(f"--reserve-share {share:g} reserves every family: nothing would be published")
    public = _part([r for r in rows if row_family(r, family_of) not in reserved], aliases, family_of)
    kept = _part([r for r in rows if row_family(r, family_of) in reserved], aliases, family_of)
    check_disjoint(public.rows, kept.rows)
    return TrackSplit(public=public, reserved=kept, share=share, seed=seed)


def check_disjoint(public: Sequence[Row], reserved: Sequence[Row]) -> None:
    """Refuse two parts that share a fact or an entity of a fact (a chain step is a fact)."""
    pub = set().union(*(row_facts(r) for r in public)) if public else set()
    res = set().union(*(row_facts(r) for r in reserved)) if reserved else set()
    shared = sorted(pub & res)
    if shared:
        s, p, a = shared[0]
        raise KnowgicError(
            f"the public and reserved parts share {len(shared)} facts, e.g. {p.format(s)!r} -> {a!r}"
        )
    entities = sorted(fact_entities(pub) & fact_entities(res))
    if entities:
        raise KnowgicError(
            f"the public and reserved parts share {len(entities)} entities, e.g. {entities[0]!r}"
        )


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_reserved_out(out: Path) -> Path:
    """The reserved part's folder: new or empty, and outside the package and its repository (it is never
    shipped)."""
    resolved = out.expanduser().resolve()
    repo = PACKAGE_DIR.parent
    if _inside(resolved, PACKAGE_DIR) or ((repo / ".git").exists() and _inside(resolved, repo)):
        raise KnowgicError(
            f"--reserved-out {out} is inside {repo if _inside(resolved, repo) else PACKAGE_DIR}: the reserved "
            "part is never shipped, so write it outside the package and its repository"
        )
    if resolved.exists() and (not resolved.is_dir() or any(resolved.iterdir())):
        raise KnowgicError(
            f"--reserved-out {out} already exists and is not an empty folder: choose a new one"
        )
    return resolved


def _build_source(info: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    settings = record.get("settings") or {}
    return {
        "builder": "knowgic build",
        "model": record.get("model") or (info.get("source") or {}).get("model"),
        "seeds": (record.get("seeds") or {}).get("source"),
        "build_key": record.get("build_key"),
        "build_sha256": info["sha256"],
        "protocol": record.get("protocol"),
        "expand": record.get("expand"),
        "edits": record.get("edits"),
        "max_chain_steps": settings.get("max_chain_steps"),
        "max_chains_per_edit": settings.get("max_chains_per_edit"),
        "max_chains_per_family": settings.get("max_chains_per_family"),
        "phrasings_merged": (record.get("counts") or {}).get("phrasings_merged"),
    }


def _base_facts(based_on: str | None) -> set[FactKey]:
    if not based_on:
        return set()
    from knowgic.dataset.loading import load_rows

    return {(f["subject"], f["prompt"], f["answer"]) for f in load_rows("facts", based_on)}


def _table(rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| | public (this version) | reserved (not published) |", "| --- | --- | --- |"]
    return "\n".join(lines + [f"| {' | '.join(str(x) for x in r)} |" for r in rows])


def track_card(key: str, source: Mapping[str, Any], track: Mapping[str, Any], overlap: int) -> str:
    """The card's section on what the track is, its two parts and its flags; ``overlap``: how many of its
    facts are facts of the version it was seeded from."""
    parts, reserve = track["parts"], track["reserve"]
    model = source.get("model") or {}
    protocol = source.get("protocol") or {}
    based_on = track["based_on"]
    pub, res = parts["public"], parts["reserved"]
    largest = pub["largest_family"]
    others = (
        "the others are facts of it asked in a reworded form (question refinement): the build grew no new "
        "facts"
        if source.get("expand") is False
        else "the others were grown from the model's own chains of thought"
    )
    return "\n".join(
        [
            f"## The {track['name']} track\n",
            f"`{key}` is a track of its own: the graph `knowgic build` grew for the model `{model.get('id')}` "
            f"(revision `{model.get('revision')}`) from the facts of {source.get('seeds')} that it knows "
            f"(protocol `{protocol.get('name')}`, known rule `{(protocol.get('params') or {}).get('known_rule')}`), "
            "every fact's edge an edit request with a drawn counterfactual, its chains the paths through the "
            f"whole graph (one edge per fact, {source.get('phrasings_merged')} phrasings merged into another "
            f"fact's edge; at most {source.get('max_chains_per_edit')} chains per edit and "
            f"{source.get('max_chains_per_family')} per family). Build `{str(source.get('build_key'))[:12]}`, "
            f"content sha256 `{source.get('build_sha256')}`.\n",
            f"Its facts are the ones `{model.get('id')}` knows: on another model most chains are inactive. Its "
            f"values are not comparable with {based_on}'s: other edits (new counterfactuals), one graph shared "
            "by every edit instead of each edit's own, and one-step chains that restate the edit. A results "
            "file records the version and its content hash, and a ranking holds runs of one version only. "
            f"{overlap} of this version's {pub['facts']} facts are facts of {based_on} ({others}), so a split "
            f"disjoint from this track is not disjoint from {based_on}.\n",
            "### Public and reserved parts\n",
            "A share of the build's families is reserved for a private split and not published: "
            f"{reserve['rule']}, with share {reserve['share']:g} and seed {reserve['seed']}. The two parts share "
            "no fact, no chain step and no entity of a fact (an edit's counterfactual `target_new` may name an "
            "entity of the other part; it is no fact). The reserved part's content sha256 is "
            f"`{res['sha256']}`.\n",
            _table(
                [
                    ["families", pub["families"], res["families"]],
                    ["edits", pub["edits"], res["edits"]],
                    ["chains", pub["chains"], res["chains"]],
                    ["facts", pub["facts"], res["facts"]],
                    [
                        "chains restating the edit (`flags.chain_restates_edit`)",
                        pub["chains_restating_edit"],
                        res["chains_restating_edit"],
                    ],
                    [
                        "chains that are phrasing variants of another",
                        pub["phrasing_duplicate_chains"],
                        res["phrasing_duplicate_chains"],
                    ],
                    [
                        "largest family's chains (share)",
                        f"{largest['chains']} ({100 * largest['share']:.1f}%, the family of {largest['family']})",
                        f"{res['largest_family']['chains']} ({100 * res['largest_family']['share']:.1f}%)",
                    ],
                ]
            ),
            "",
            "A chain that restates the edit is the one-step chain asking the edited fact itself, so its IFR "
            "measures the edit's efficacy: the metric `ifr_indirect` leaves these chains out. Published on "
            f"the hub under the tag `{version_tag(key)}`.\n",
        ]
    )


def _texts(key: str, track: Mapping[str, Any], source: Mapping[str, Any]) -> tuple[str, str, ChangelogEntry]:
    """The summary, the card's source paragraph and the changelog entry of a track's public version."""
    track_name, _ = parse_version_key(key)
    model = (source.get("model") or {}).get("id", "?")
    pub, res = track["parts"]["public"], track["parts"]["reserved"]
    summary = (
        f"The `{track_name}` track of KnowGIC: the graph `knowgic build` grew for `{model}`, {pub['edits']} "
        f"edits and {pub['chains']} chains over {pub['facts']} facts that `{model}` knows, less the "
        f"{res['edits']} edits of the families reserved for a private split."
    )
    card_source = (
        f"The rows were built by `knowgic build` from the facts of {source.get('seeds')} that `{model}` knows; "
        f"those come from the public repository `{SOURCE_REPO}` (commit `{SOURCE_COMMIT}`), MIT license, "
        "copyright 2025 manitbaser99; the notice is in `LICENSE`. The rows are released under the same "
        "license.\n"
    )
    entry = ChangelogEntry(
        key,
        summary,
        (
            f"First version of the track: build `{str(source['build_key'])[:12]}` (content sha256 "
            f"{source['build_sha256']}), {pub['families']} of its {pub['families'] + res['families']} "
            "families published.",
        ),
    )
    return summary, card_source, entry


def public_files(
    key: str,
    rows: Sequence[Row],
    aliases: Mapping[str, Sequence[str]],
    source: Mapping[str, Any],
    track: Mapping[str, Any],
) -> dict[str, str]:
    """The files of a track's public version folder from its rows and alias map, its build ``source`` and
    ``track`` record; with the ``ripple`` config (``spec/relations.yaml``), outside the content hash."""
    from knowgic.dataset.build import folder_files
    from knowgic.ripple.relations import relation_table

    based_on = track["based_on"]
    summary, card_source, entry = _texts(key, track, source)
    head = {"name": "knowgic", "version": key, "source": dict(source), "based_on": based_on}
    facts = set().union(*(row_facts(r) for r in rows)) if rows else set()
    overlap = len(facts & _base_facts(based_on))
    return folder_files(
        key,
        summary,
        rows,
        {k: list(v) for k, v in aliases.items()},
        [entry],
        head=head,
        tail={"track": dict(track)},
        card_extra=track_card(key, source, track, overlap),
        card_source=card_source,
        ripple=relation_table(),
    )


def track_files(
    key: str, split: TrackSplit, info: Mapping[str, Any], record: Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, str]]:
    """The files of the public version folder and of the reserved part's folder."""
    from knowgic.dataset.build import folder_files

    track_name, _ = parse_version_key(key)
    source = _build_source(info, record)
    track = {
        "name": track_name,
        "based_on": info.get("based_on"),
        "reserve": {"unit": "family", "rule": RULE, "share": split.share, "seed": split.seed},
        "parts": {
            "public": split.public.counts(),
            "reserved": {**split.reserved.counts(name_largest=False), "sha256": split.reserved.sha256()},
        },
    }
    public = public_files(key, split.public.rows, split.public.aliases, source, track)
    _, card_source, entry = _texts(key, track, source)
    res = track["parts"]["reserved"]
    reserved_summary = (
        f"The reserved part of KnowGIC {key}: {res['edits']} edits and {res['chains']} chains of the families "
        "reserved for a private split. Never publish it: keep it where submitted code never runs."
    )
    reserved = folder_files(
        key,
        reserved_summary,
        split.reserved.rows,
        split.reserved.aliases,
        [ChangelogEntry(key, reserved_summary, entry.lines)],
        head={"name": RESERVED_NAME, "version": key, "source": source, "based_on": info.get("based_on")},
        tail={"track": track},
        card_source=card_source,
    )
    return public, reserved


def rebuilt_public_files(folder: Path) -> dict[str, str]:
    """A shipped track version's files made again from its own rows, alias map and ``version.json`` (its
    build is not shipped): what :func:`public_files` writes now, the ``ripple`` config included. Refuses,
    naming the folder, when the content hash would change."""
    from knowgic.dataset.io import alias_lists, read_rows

    info = read_json(folder / VERSION_FILE)
    rows = [dict(r) for r in read_rows(folder / info["configs"]["chains"]["path"])]
    aliases = alias_lists(read_json(folder / info["aliases"]["path"]))
    files = public_files(info["version"], rows, aliases, info["source"], info["track"])
    if json.loads(files[VERSION_FILE])["sha256"] != info["sha256"]:
        raise KnowgicError(
            f"{folder}: rebuilding the track version from its own rows changes its content hash"
        )
    return files


def spec_file() -> Path:
    """``spec/benchmark.yaml``, where a track's version is declared."""
    from knowgic.paths import spec_dir

    return spec_dir() / "benchmark.yaml"


def write_track(
    build_dir: str | Path,
    track: str,
    semver: str,
    reserved_out: str | Path,
    share: float = DEFAULT_RESERVE_SHARE,
    seed: int = DEFAULT_SEED,
    hub_dir: Path | None = None,
    spec_path: Path | None = None,
) -> tuple[str, Path, Path, TrackSplit]:
    """Cut a build into its public and reserved parts, write the public version folder into ``hub_dir``
    with its entry in the benchmark spec, and the reserved part into ``reserved_out``; returns the version
    key, both folders and the split. Every check runs before anything is written. ``hub_dir`` and
    ``spec_path`` default to the package's dataset folder and ``spec/benchmark.yaml``."""
    from knowgic.dataset.build import update_spec, write_version
    from knowgic.dataset.folder import open_dataset

    hub_dir = hub_dir or HUB_DIR
    spec_path = spec_path or spec_file()

    if track == MAIN_TRACK:
        raise KnowgicError(
            f"--track {track}: the main track's versions are made by python -m knowgic.dataset.build; "
            "name another track (e.g. growth)"
        )
    key = version_key(track, semver)
    out = check_reserved_out(Path(reserved_out))
    dataset = open_dataset(Path(build_dir))  # a folder: its content hash is checked
    record_path = dataset.folder / BUILD_RECORD
    if not record_path.is_file():
        raise KnowgicError(f"{dataset.folder} has no {BUILD_RECORD}: not the output of knowgic build")
    record = read_json(record_path)
    families = ((record.get("families") or {}).get("chains")) if isinstance(record, dict) else None
    split = split_track(dataset.rows("chains"), dataset.aliases(), share, seed, families)
    public, reserved = track_files(key, split, dataset.info, record)
    out.mkdir(parents=True, exist_ok=True)
    write_version(out, reserved)
    write_version(hub_dir / key, public)
    update_spec(spec_path, {key: json.loads(public[VERSION_FILE])})
    return key, hub_dir / key, out, split


def track_folders(hub_dir: Path = HUB_DIR) -> list[Path]:
    """The shipped versions of tracks other than the main one."""
    from knowgic.dataset.versions import version_sort_key

    return sorted(
        (
            d
            for d in hub_dir.iterdir()
            if (d / VERSION_FILE).is_file() and parse_version_key(d.name)[0] != MAIN_TRACK
        ),
        key=lambda d: version_sort_key(d.name),
    )


def rebuild_tracks(hub_dir: Path = HUB_DIR, spec_path: Path | None = None) -> dict[str, list[str]]:
    """Make every shipped track version again from its own rows (:func:`rebuilt_public_files`) and record it
    in the spec; returns the changed files per version."""
    from knowgic.dataset.build import update_spec, write_version

    changed: dict[str, list[str]] = {}
    records: dict[str, dict[str, Any]] = {}
    for folder in track_folders(hub_dir):
        files = rebuilt_public_files(folder)
        records[folder.name] = json.loads(files[VERSION_FILE])
        changed[folder.name] = write_version(folder, files)
    spec = spec_path or spec_file()
    if records and update_spec(spec, records):
        changed["spec"] = [str(spec)]
    return changed


def main() -> int:
    from knowgic.dataset.io import report_rebuild

    return report_rebuild(rebuild_tracks)


if __name__ == "__main__":
    raise SystemExit(main())
