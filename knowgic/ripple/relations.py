"""The relation table, ``spec/relations.yaml``, read in one place into typed records.

::

    spec/relations.yaml ──read_yaml──> mapping ──relations.schema.json──> checked shapes
        ──cross-checks (every inverse and dependent names a declared relation, an inverse's inverse is the
          relation itself, a symmetric relation has no other inverse, no template phrases two relations)
        ──> RelationTable
              .relations[name]          Relation: templates, noun phrase, cardinality, logic, D_r
              .of_template(template)    the relation a dataset template phrases (None: undeclared)
              .phrasing                 how a noun phrase becomes a cloze, a question, Preservation's cloze

:func:`relation_table` is the shipped table, read once on first use; :func:`read_relations` reads another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir
from knowgic.schema_errors import first_error_line
from knowgic.yamlfile import read_yaml

CARDINALITIES = ("functional", "one-to-many")


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
    data = read_yaml(path, "the relation table")
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
    )


@cache
def relation_table() -> RelationTable:
    """The shipped table, read and checked once per process, on first use."""
    return read_relations()
