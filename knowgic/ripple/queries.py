"""RippleEdits' test queries of an edit, built from a graph of known facts and the relation table.

Notation (Cohen et al., 2023): a fact is (e, r, o); an edit delta = (e, r, o -> o*); r o r' is the two-hop
relation "r, then r'" (the r' of the r of e); D_r the relations that depend on r. The graph G holds the
facts the model knows; every query is a fact expected to hold after the edit, kept only while its condition
facts are known before it.

::

    facts (subject, template, object) ──Graph.of(facts, table)──> G: out-edges and in-edges by entity
    edit (e, r, o -> o*) + G + aliases ──edit_queries──> [Query], in criterion order:
      LG   symmetric r:   (o*, r, e)
           inverse r^-1:  (o*, r^-1, e)
           transitive r:  (e, r, z)    for (o*, r, z) in G     condition (o*, r, z)
                          (x, r, o*)   for (x, r, e) in G      condition (x, r, e)
      CI   (e, r o r', z*)   for (o*, r', z*) in G, z* != e             condition (o*, r', z*)
      CII  (e', r' o r, o*)  for (e', r', e) in G, e' != e,             condition (e', r', e)
                             but not the edit's old fact read backwards (o, r^-1, e)
      SA   (a, r, o*)        for each alias a of e                      condition (a, r, o)
      PV   (e, r, o')        r one-to-many, (e, r, o') in G, o' not in {o, o*}, asked as "... other
                             than o*"                                   condition (e, r, o')
      RS   (e, r', z)        (e, r', z) in G, r' != r, r' not in D_r    condition (e, r', z)

Each query names a *competitor*: the wrong answer its probability form compares the target against
(p'(target) > p'(competitor)). Where the answer should change (LG, CI, CII, SA) it is the answer the query
had before the edit, where G gives one, else None:
      LG   symmetric, inverse:  x with (o*, r, x) / (o*, r^-1, x) in G, x != e, that relation functional
           transitive:          z' with (o, r, z') in G, z' != z (through o*); o (into e)
      CI   z with (o, r', z) in G, z != z*
      CII, SA                   o
Where the answer should stay (PV, RS) it is o*, as Specificity compares p'(true) against p'(target_new).

A one-hop query about a fact G holds is asked with that fact's own template; one G does not hold, with the
relation's own template; a two-hop query with the relations' noun phrases nested (the table's phrasing).
Each query's target comes with its aliases. Queries are deduplicated per edit and criterion on (subject,
prompt, target), in the order G lists its facts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.ripple.relations import Relation, RelationTable

CRITERIA: dict[str, str] = {
    "LG": "Logical Generalization",
    "CI": "Compositionality I",
    "CII": "Compositionality II",
    "SA": "Subject Aliasing",
    "PV": "Preservation",
    "RS": "Relation Specificity",
}
"""The six criteria, by the short name the rows use, in RippleEdits' order."""


@dataclass(frozen=True)
class Fact:
    """(subject, relation, object), phrased: ``template.format(subject)`` answered by ``object``."""

    subject: str
    template: str
    object: str


@dataclass(frozen=True)
class Edit:
    """delta = (e, r, o -> o*): ``subject`` e, ``template`` phrasing r, ``old`` o, ``new`` o*."""

    edit_id: str
    subject: str
    template: str
    old: str
    new: str


@dataclass(frozen=True)
class Query:
    """A fact expected after the edit: ``prompt.format(subject)`` (a cloze) or ``question.format(subject)``
    answered by ``target`` or one of ``target_aliases``; ``relations`` the path (one relation, or r then r'
    for a two-hop query); ``conditions`` the facts the model must know before the edit for the query to
    count; ``rule`` the reason it is expected."""

    criterion: str
    rule: str
    subject: str
    relations: tuple[str, ...]
    prompt: str
    question: str
    target: str
    target_aliases: tuple[str, ...]
    conditions: tuple[Fact, ...]
    competitor: str | None = None
    """The wrong answer the probability form compares ``target`` against (module docstring); None: none."""


@dataclass(frozen=True)
class Graph:
    """G: the facts, each with its relation, indexed by subject (out-edges) and by object (in-edges)."""

    facts: tuple[tuple[Fact, Relation], ...]
    out_edges: dict[str, tuple[tuple[Fact, Relation], ...]] = field(repr=False)
    in_edges: dict[str, tuple[tuple[Fact, Relation], ...]] = field(repr=False)

    @classmethod
    def of(cls, facts: Iterable[Fact], table: RelationTable) -> Graph:
        """G from ``facts`` (duplicates kept once); a template no relation declares is an error naming it."""
        unique = list(dict.fromkeys(facts))
        missing = table.undeclared(f.template for f in unique)
        if missing:
            raise KnowgicError(
                f"{table.path}: no relation declares the template(s) {', '.join(map(repr, missing))}"
            )
        pairs = tuple((f, table.by_template[f.template]) for f in unique)
        out: dict[str, list[tuple[Fact, Relation]]] = {}
        inc: dict[str, list[tuple[Fact, Relation]]] = {}
        for pair in pairs:
            out.setdefault(pair[0].subject, []).append(pair)
            inc.setdefault(pair[0].object, []).append(pair)
        return cls(pairs, {k: tuple(v) for k, v in out.items()}, {k: tuple(v) for k, v in inc.items()})

    def about(self, entity: str) -> tuple[tuple[Fact, Relation], ...]:
        """The facts (entity, r', z)."""
        return self.out_edges.get(entity, ())

    def pointing_at(self, entity: str) -> tuple[tuple[Fact, Relation], ...]:
        """The facts (e', r', entity)."""
        return self.in_edges.get(entity, ())

    def object_of(self, entity: str, relation: Relation, other_than: str) -> str | None:
        """The first z with (entity, relation, z) in G and z != ``other_than``; None when there is none."""
        return next(
            (f.object for f, rel in self.about(entity) if rel is relation and f.object != other_than), None
        )


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _nested(path: Sequence[Relation]) -> str:
    """The noun phrase of r1 o r2 o ...: the last relation's phrase around the previous ones'."""
    phrase = "{}"
    for rel in path:
        phrase = rel.noun_phrase.format(phrase)
    return phrase


def _phrased(table: RelationTable, phrase: str, answers: str) -> tuple[str, str]:
    """(cloze, question) around a noun phrase with one ``{}`` for the subject."""
    ph = table.phrasing
    return _capitalized(ph.prompt.format(phrase)), ph.question[answers].format(phrase)


def _question(table: RelationTable, rel: Relation) -> str:
    return _phrased(table, rel.noun_phrase, rel.answers)[1]


class _Builder:
    """Collects one edit's queries, deduplicated per criterion on (subject, prompt, target)."""

    def __init__(self, aliases: Mapping[str, Sequence[str]]) -> None:
        self.aliases = aliases
        self.queries: list[Query] = []
        self.seen: set[tuple[str, str, str, str]] = set()

    def add(
        self,
        criterion: str,
        rule: str,
        subject: str,
        relations: Sequence[Relation],
        prompt: str,
        question: str,
        target: str,
        competitor: str | None,
        conditions: Sequence[Fact] = (),
    ) -> None:
        key = (criterion, subject, prompt, target)
        if key in self.seen:
            return
        self.seen.add(key)
        self.queries.append(
            Query(
                criterion=criterion,
                rule=rule,
                subject=subject,
                relations=tuple(r.name for r in relations),
                prompt=prompt,
                question=question,
                target=target,
                target_aliases=tuple(a for a in self.aliases.get(target, ()) if a != target),
                conditions=tuple(conditions),
                competitor=None if competitor == target else competitor,
            )
        )


def _edit_relation(edit: Edit, table: RelationTable) -> Relation:
    rel = table.of_template(edit.template)
    if rel is None:
        raise KnowgicError(f"edit {edit.edit_id}: no relation in {table.path} declares {edit.template!r}")
    return rel


def _functional_object(graph: Graph, entity: str, rel: Relation, other_than: str) -> str | None:
    """The object G gives (entity, rel, ?) when rel is functional (one answer to replace), else None."""
    return None if rel.one_to_many else graph.object_of(entity, rel, other_than)


def logical_generalization(b: _Builder, edit: Edit, r: Relation, graph: Graph, table: RelationTable) -> None:
    e, new = edit.subject, edit.new
    if r.symmetric:
        rival = _functional_object(graph, new, r, e)
        b.add("LG", "symmetric", new, [r], r.template, _question(table, r), e, rival)
    if r.inverse is not None and r.inverse != r.name:
        inv = table.relations[r.inverse]
        rival = _functional_object(graph, new, inv, e)
        b.add("LG", "inverse", new, [inv], inv.template, _question(table, inv), e, rival)
    if r.transitive:
        for fact, rel in graph.about(new):
            if rel is r and fact.object != e:  # (e, r, o*) and (o*, r, z) => (e, r, z)
                rival = graph.object_of(edit.old, r, fact.object)  # before: (e, r, o), (o, r, z')
                b.add("LG", "transitive", e, [r], r.template, _question(table, r), fact.object, rival, [fact])
        for fact, rel in graph.pointing_at(e):
            if rel is r and fact.subject != new:  # (x, r, e) and (e, r, o*) => (x, r, o*)
                old = edit.old  # before the edit: (x, r, e) and (e, r, o) => (x, r, o)
                b.add(
                    "LG",
                    "transitive",
                    fact.subject,
                    [r],
                    fact.template,
                    _question(table, r),
                    new,
                    old,
                    [fact],
                )


def compositionality_one(b: _Builder, edit: Edit, r: Relation, graph: Graph, table: RelationTable) -> None:
    """(e, r o r', z*) for every (o*, r', z*) in G."""
    for fact, r2 in graph.about(edit.new):
        if fact.object == edit.subject:
            continue  # back to e: no hop through the edit is tested
        prompt, question = _phrased(table, _nested([r, r2]), r2.answers)
        rival = graph.object_of(edit.old, r2, fact.object)  # before the edit: (e, r, o), (o, r', z)
        b.add("CI", "compose_object", edit.subject, [r, r2], prompt, question, fact.object, rival, [fact])


def compositionality_two(b: _Builder, edit: Edit, r: Relation, graph: Graph, table: RelationTable) -> None:
    """(e', r' o r, o*) for every (e', r', e) in G."""
    backwards = {r.name} if r.symmetric else ({r.inverse} if r.inverse else set())
    for fact, r1 in graph.pointing_at(edit.subject):
        if fact.subject == edit.subject or fact.subject == edit.new:
            continue
        if fact.subject == edit.old and r1.name in backwards:
            continue  # (o, r^-1, e) is the old fact itself, which the edit retracts
        prompt, question = _phrased(table, _nested([r1, r]), r.answers)
        b.add("CII", "compose_subject", fact.subject, [r1, r], prompt, question, edit.new, edit.old, [fact])


def subject_aliasing(b: _Builder, edit: Edit, r: Relation, table: RelationTable) -> None:
    """(a, r, o*) for every alias a of e; known before the edit: (a, r, o)."""
    for alias in b.aliases.get(edit.subject, ()):
        if alias == edit.subject:
            continue
        condition = Fact(alias, edit.template, edit.old)
        b.add("SA", "alias", alias, [r], edit.template, _question(table, r), edit.new, edit.old, [condition])


def preservation(b: _Builder, edit: Edit, r: Relation, graph: Graph, table: RelationTable) -> None:
    """(e, r, o') for every other object o' of a one-to-many r, asked as "the r of e other than o*"."""
    if not r.one_to_many:
        return
    phrase = table.phrasing.other_than.format(r.noun_phrase, edit.new)
    prompt, question = _phrased(table, phrase, r.answers)
    for fact, rel in graph.about(edit.subject):
        if rel is r and fact.object not in (edit.old, edit.new):
            b.add("PV", "preserve", edit.subject, [r], prompt, question, fact.object, edit.new, [fact])


def relation_specificity(b: _Builder, edit: Edit, r: Relation, graph: Graph, table: RelationTable) -> None:
    """(e, r', z) for every (e, r', z) in G with r' != r and r' not in D_r."""
    for fact, rel in graph.about(edit.subject):
        if rel is not r and rel.name not in r.dependents:
            b.add(
                "RS",
                "unrelated_relation",
                edit.subject,
                [rel],
                fact.template,
                _question(table, rel),
                fact.object,
                edit.new,
                [fact],
            )


def edit_queries(
    edit: Edit, graph: Graph, table: RelationTable, aliases: Mapping[str, Sequence[str]]
) -> list[Query]:
    """Every test query of ``edit`` on ``graph``, LG, CI, CII, SA, PV, RS in that order (module docstring);
    ``aliases``: entity -> its other names."""
    r = _edit_relation(edit, table)
    b = _Builder(aliases)
    logical_generalization(b, edit, r, graph, table)
    compositionality_one(b, edit, r, graph, table)
    compositionality_two(b, edit, r, graph, table)
    subject_aliasing(b, edit, r, table)
    preservation(b, edit, r, graph, table)
    relation_specificity(b, edit, r, graph, table)
    return b.queries


def query_id(edit_id: str, query: Query) -> str:
    """12 hex digits of the sha256 of (edit, criterion, subject, prompt, target): stable across builds."""
    key = json.dumps(
        [edit_id, query.criterion, query.subject, query.prompt, query.target], ensure_ascii=False
    )
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def query_row(edit_id: str, query: Query) -> dict[str, Any]:
    """The ``ripple`` config's row of a query (``spec/schemas/ripple.schema.json``)."""
    return {
        "query_id": query_id(edit_id, query),
        "edit_id": edit_id,
        "criterion": query.criterion,
        "rule": query.rule,
        "subject": query.subject,
        "relations": list(query.relations),
        "prompt": query.prompt,
        "question": query.question,
        "target": query.target,
        "target_aliases": list(query.target_aliases),
        "conditions": [
            {"subject": c.subject, "prompt": c.template, "answer": c.object} for c in query.conditions
        ],
        "competitor": query.competitor,
    }
