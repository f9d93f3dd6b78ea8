"""The relation table, ``spec/relations.yaml``, read in one place into typed records.

::

    spec/relations.yaml ──read_yaml──> mapping ──relations.schema.json──> checked shapes
        ──cross-checks (every inverse and dependent names a declared relation, an inverse's inverse is the
          relation itself, a symmetric relation has no other inverse, no template phrases two relations)
        ──> RelationTable
              .relations[name]          Relation: templates, noun phrase, cardinality, logic, D_r
              .of_template(template)    the relation a dataset template phrases (None: undeclared)
              .phrasing                 how a noun phrase becomes a cloze, a question, Preservation's cloze
    RelationTable + templates it lacks ──with_proposals──> the table extended by a proposed entry per
        template (PROPOSED_DEFAULTS: one-to-many, no logic, empty D_r, marked ``proposed: true``) + the
        proposals, written by :func:`proposals_text` for review to accept into spec/relations.yaml

:func:`relation_table` is the shipped table, read once on first use; :func:`read_relations` reads another.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir
from knowgic.schema_errors import first_error_line
from knowgic.yamlfile import read_yaml

CARDINALITIES = ("functional", "one-to-many")
PROPOSED_DEFAULTS: dict[str, Any] = {"answers": "thing", "cardinality": "one-to-many", "dependents": []}
"""The semantics a proposed relation gets until review declares its own: several objects per subject (so
Preservation asks about the others), no logic (no LG query), and an empty D_r (every other relation of the
subject is tested by Relation Specificity)."""


@dataclass(frozen=True)
class Relation:
    """One relation r: ``templates`` phrase facts (e, r, o) as ``template.format(e)`` answered by o (the first
    phrases queries of r the graphs do not hold); ``noun_phrase`` names o around e ("a child of {}");
    ``inverse``: r' with (e, r, o) => (o, r', e); ``dependents``: D_r."""

    name: str
    meaning: str
    templates: tuple[str, ...]
    noun_phrase: str
    answers: str
    cardinality: str
    symmetric: bool
    inverse: str | None
    transitive: bool
    dependents: frozenset[str]
    proposed: bool = False

    @property
    def template(self) -> str:
        """The relation's own cloze template."""
        return self.templates[0]

    @property
    def one_to_many(self) -> bool:
        return self.cardinality == "one-to-many"


@dataclass(frozen=True)
class Phrasing:
    """How a noun phrase NP becomes a query: ``prompt.format(NP)`` (a cloze), ``question[answers].format(NP)``,
    and Preservation's noun phrase ``other_than.format(NP, o*)``."""

    prompt: str
    question: dict[str, str]
    other_than: str


@dataclass(frozen=True)
class RelationTable:
    path: Path
    version: int
    sha256: str
    phrasing: Phrasing
    relations: dict[str, Relation]
    by_template: dict[str, Relation]
    data: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    """The table as read (what its sha256 is of)."""

    def of_template(self, template: str) -> Relation | None:
        """The relation ``template`` phrases; None when no relation declares it."""
        return self.by_template.get(template)

    def undeclared(self, templates: Iterable[str]) -> list[str]:
        """The templates of ``templates`` that no relation declares, sorted."""
        return sorted({t for t in templates if t not in self.by_template})


def relations_file() -> Path:
    """The shipped table's file, ``spec/relations.yaml``."""
    return spec_dir() / "relations.yaml"


def _schema_problem(data: Any) -> str | None:
    schema = json.loads((spec_dir() / "schemas" / "relations.schema.json").read_text(encoding="utf-8"))
    return first_error_line(jsonschema.Draft202012Validator(schema).iter_errors(data))


def _cross_problem(relations: dict[str, Relation]) -> str | None:
    seen: dict[str, str] = {}
    for name, rel in relations.items():
        for template in rel.templates:
            if template in seen:
                return f"/relations/{name}/templates: {template!r} already phrases {seen[template]}"
            seen[template] = name
        if rel.inverse is not None:
            other = relations.get(rel.inverse)
            if other is None:
                return f"/relations/{name}/inverse: {rel.inverse!r} is not a declared relation"
            if rel.symmetric and rel.inverse != name:
                return (
                    f"/relations/{name}/inverse: a symmetric relation is its own inverse, not {rel.inverse!r}"
                )
            if other.inverse != name:
                return f"/relations/{name}/inverse: {rel.inverse!r} must name {name!r} as its inverse"
        for dep in sorted(rel.dependents):
            if dep not in relations:
                return f"/relations/{name}/dependents: {dep!r} is not a declared relation"
            if dep == name:
                return f"/relations/{name}/dependents: a relation is not its own dependent"
    return None


def read_relations(path: Path | None = None) -> RelationTable:
    """Read and check a relation table (``path`` defaults to :func:`relations_file`).

    Raises :class:`KnowgicError` with one line naming the file, the field and the problem."""
    path = path or relations_file()
    return _table_of(path, read_yaml(path, "the relation table"))


def _table_of(path: Path, data: Any) -> RelationTable:
    problem = _schema_problem(data)
    if problem is not None:
        raise KnowgicError(f"{path}: {problem}")
    relations = {
        str(name): Relation(
            name=str(name),
            meaning=str(entry["meaning"]),
            templates=tuple(entry["templates"]),
            noun_phrase=entry["noun_phrase"],
            answers=entry["answers"],
            cardinality=entry["cardinality"],
            symmetric=bool(entry.get("symmetric", False)),
            inverse=entry.get("inverse"),
            transitive=bool(entry.get("transitive", False)),
            dependents=frozenset(entry["dependents"]),
            proposed=bool(entry.get("proposed", False)),
        )
        for name, entry in data["relations"].items()
    }
    problem = _cross_problem(relations)
    if problem is not None:
        raise KnowgicError(f"{path}: {problem}")
    phrasing = data["phrasing"]
    canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return RelationTable(
        path=path,
        version=int(data["version"]),
        sha256=hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        phrasing=Phrasing(phrasing["prompt"], dict(phrasing["question"]), phrasing["other_than"]),
        relations=relations,
        by_template={t: r for r in relations.values() for t in r.templates},
        data=data,
    )


def _proposed_name(template: str, taken: set[str]) -> str:
    """A relation name from the template's words ("{} was knighted by" -> "was_knighted_by"), unique."""
    words = re.findall(r"[a-z0-9]+", template.replace("{}", " ").lower())
    base = "_".join(words) or "relation"
    base = base if base[0].isalpha() else f"r_{base}"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _proposed_noun_phrase(template: str) -> str:
    """The object as a noun phrase: a cloze "The X of {} is" gives "the X of {}"; any other, "what <cloze>"
    ("what {} was knighted by")."""
    head = template.strip()
    if re.match(r"(?i)^the\b", head) and re.search(r"\s(is|are)$", head):
        return "t" + re.sub(r"\s(is|are)$", "", head)[1:]
    return f"what {head}"


def with_proposals(table: RelationTable, templates: Iterable[str]) -> tuple[RelationTable, dict[str, Any]]:
    """``table`` extended by one proposed relation per template of ``templates`` it lacks
    (:data:`PROPOSED_DEFAULTS`, ``proposed: true``), and those entries by name. ``table`` itself when it
    lacks none; the extended table's sha256 is of the extended data."""
    missing = table.undeclared(templates)
    if not missing:
        return table, {}
    taken = set(table.relations)
    proposals: dict[str, Any] = {}
    for template in missing:
        name = _proposed_name(template, taken)
        taken.add(name)
        proposals[name] = {
            "meaning": f"the object answers the cloze {template!r} (proposed: kind unknown)",
            "templates": [template],
            "noun_phrase": _proposed_noun_phrase(template),
            **copy.deepcopy(PROPOSED_DEFAULTS),
            "proposed": True,
        }
    data = {**table.data, "relations": {**table.data["relations"], **proposals}}
    return _table_of(table.path, data), proposals


def proposals_text(table: RelationTable, proposals: Mapping[str, Any]) -> str:
    """The proposed entries as a relation table of their own (``relations.schema.json``), for review."""
    import yaml

    header = (
        "# Relations proposed by knowgic build for templates spec/relations.yaml lacks, with default\n"
        "# semantics (one-to-many, no logic, empty D_r); this build's ripple queries use them. To accept one,\n"
        "# set its cardinality, logic, dependents, answers and noun phrase, drop `proposed`, and add it to\n"
        "# spec/relations.yaml.\n"
    )
    body = {"version": table.version, "phrasing": table.data["phrasing"], "relations": dict(proposals)}
    return header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=110)


@cache
def relation_table() -> RelationTable:
    """The shipped table, read and checked once per process, on first use."""
    return read_relations()
