"""From dataset rows to an evaluation plan: the distinct edits and the queries each must score.

Rows are grouped by distinct edit request, so each edit is applied (and restored) once, not once per row.
Every distinct query gets one index in ``EvalPlan.queries``; an edit lists the indices it needs after the
edit, so post-edit scoring scores each distinct query once per edit.

Decisions (documented in docs/metrics.md):
- A step is the cloze query ``prompts[i].format(subjects[i])`` -> ``answers[i]`` (its question is used by
  the generation protocols); answers are scored together with their aliases (max over them).
- ``n_gold`` of a (subject, prompt) is the number of distinct answers the whole dataset version lists for
  it; ``--limit`` never changes it.
- Broader-context facts of an edit: the distinct facts of the broader-context blocks of all its rows.
- The edit's question form (Generalization): the first step, preferring one-step chains, whose subject is
  the edit's subject and whose answer is its ``target_true`` (case-insensitive); scored as
  ``"Q: <question>\\nA:"``. Edits without one are left out of Generalization.
- Neighbourhood (Specificity): facts of the version with the edit's prompt and another subject
  (same-relation), and up to ``fallback_neighbours`` facts of the other edits' graphs, chosen by a hash
  so the choice is deterministic (fallback). Both sets are planned and scored before the edit; which one
  an edit uses is decided from the pre-edit scores (:meth:`EditPlan.neighbourhood`): the same-relation
  facts when the unedited model knows at least one of them, else the fallback. Only the chosen set is
  scored after the edit. Facts that are themselves edited by an evaluated request, and facts whose answer
  is the edit's ``target_new``, are never neighbours.
- Ripple queries (RippleEdits' criteria, the version's ``ripple`` config): each planned edit's rows, in
  their own query list (``EvalPlan.ripple_queries``), scored apart from the queries above so that adding
  them moves none of their scores. A row's condition facts are scored before the edit, as the version
  defines each fact (:class:`QueryMaker`); the row is *kept* when the protocol's known rule accepts every
  one (:meth:`RippleQueryPlan.kept`), and only kept rows are scored after the edit: the target with its
  aliases and the competitor with its own (p' under the run's protocol), and the target by its greedy
  continuation (RippleEdits' accuracy, :mod:`knowgic.scoring.continuation`).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowgic.records import Case, EditRequest, Fact
from knowgic.scoring.base import Query

QUESTION_CLOZE = "Q: {}\nA:"
"""How a question is posed to a base model under ``logprob`` (same form as the generate protocol's)."""


@dataclass(frozen=True)
class ChainPlan:
    case_id: int
    step_queries: tuple[int, ...]
    restates_edit: bool = False  # one step asking the edited fact itself (the row's flag, or the same rule)


def restates_edit(case: Case) -> bool:
    """The row's ``flags.chain_restates_edit``; for a row without flags, the same rule: one step from the
    edited subject to its old object."""
    flags = case.extra.get("flags")
    if isinstance(flags, Mapping) and isinstance(flags.get("chain_restates_edit"), bool):
        return bool(flags["chain_restates_edit"])
    facts = case.chain.facts
    return (
        len(facts) == 1
        and facts[0].subject == case.request.subject
        and facts[0].answer == case.request.target_true
    )


@dataclass(frozen=True)
class FactPlan:
    """A fact scored through query ``query`` (its true answer)."""

    fact: tuple[str, str, str]
    query: int


@dataclass(frozen=True)
class NeighbourPlan:
    fact: tuple[str, str, str]
    true_query: int
    new_query: int


@dataclass(frozen=True)
class TargetPlan:
    """The same prompt scored with the true and with the new target."""

    true_query: int
    new_query: int
    text: str


NEIGHBOURHOOD_KINDS = ("same-relation", "other-graphs", "none")


@dataclass(frozen=True)
class Neighbourhood:
    """The neighbours an edit's Specificity is measured on, and which set they come from."""

    kind: str  # one of NEIGHBOURHOOD_KINDS
    neighbours: tuple[NeighbourPlan, ...]


@dataclass(frozen=True)
class RippleQueryPlan:
    """One ripple row of an edit: its condition facts (indices into ``EvalPlan.ripple_queries``, scored
    before the edit), its target's query (p' and the greedy continuation after the edit) and its
    competitor's (p' after the edit; None where the row names none)."""

    query_id: str
    criterion: str
    conditions: tuple[int, ...]
    target: int
    competitor: int | None

    def kept(self, known_pre: Sequence[bool] | np.ndarray) -> bool:
        """Every condition fact known before the edit (``known_pre[i]`` of ``EvalPlan.ripple_queries``)."""
        return all(bool(known_pre[i]) for i in self.conditions)


@dataclass
class EditPlan:
    request: EditRequest
    case_ids: tuple[int, ...]
    chains: list[ChainPlan]
    broader: list[FactPlan]
    rewrite: TargetPlan
    question: TargetPlan | None
    same_relation: list[NeighbourPlan]
    fallback: list[NeighbourPlan]
    ripple: tuple[RippleQueryPlan, ...] = ()

    @property
    def edit_id(self) -> str:
        return self.request.edit_id

    def neighbourhood(self, known_pre: Sequence[bool] | np.ndarray) -> Neighbourhood:
        """The neighbours to use, given which plan queries the unedited model knows (``known_pre[i]``).

        Specificity is measured on neighbourhood facts known before the edit: the same-relation facts
        when the model knows at least one of them, else the fallback facts of the other edits' graphs.
        An edit with neither keeps its (unknown) same-relation facts, so its Specificity is undefined.
        """
        if any(bool(known_pre[n.true_query]) for n in self.same_relation) or not self.fallback:
            kind = "same-relation" if self.same_relation else "none"
            return Neighbourhood(kind, tuple(self.same_relation))
        return Neighbourhood("other-graphs", tuple(self.fallback))

    def post_queries(self, known_pre: Sequence[bool] | np.ndarray) -> tuple[int, ...]:
        """Every query index this edit needs scored after the edit, sorted and distinct.

        The neighbourhood set not chosen (see :meth:`neighbourhood`) is not scored.
        """
        needed: set[int] = {self.rewrite.true_query, self.rewrite.new_query}
        if self.question is not None:
            needed |= {self.question.true_query, self.question.new_query}
        for chain in self.chains:
            needed.update(chain.step_queries)
        needed.update(f.query for f in self.broader)
        for n in self.neighbourhood(known_pre).neighbours:
            needed |= {n.true_query, n.new_query}
        return tuple(sorted(needed))

    def ripple_kept(self, known_pre: Sequence[bool] | np.ndarray) -> tuple[RippleQueryPlan, ...]:
        """The ripple rows whose condition facts the unedited model knows (``known_pre`` of the ripple
        queries): the only ones scored after the edit."""
        return tuple(q for q in self.ripple if q.kept(known_pre))

    def ripple_post(self, known_pre: Sequence[bool] | np.ndarray) -> tuple[int, ...]:
        """The ripple queries scored after the edit under the run's protocol: the kept rows' targets and
        competitors, sorted and distinct."""
        needed = {q.target for q in self.ripple_kept(known_pre)}
        needed |= {q.competitor for q in self.ripple_kept(known_pre) if q.competitor is not None}
        return tuple(sorted(needed))

    def ripple_targets(self, known_pre: Sequence[bool] | np.ndarray) -> tuple[int, ...]:
        """The ripple queries whose greedy continuation is decoded after the edit: the kept rows' targets."""
        return tuple(sorted({q.target for q in self.ripple_kept(known_pre)}))


@dataclass
class EvalPlan:
    queries: list[Query]
    edits: list[EditPlan]
    total_rows: int
    info: dict[str, int] = field(default_factory=dict)
    ripple_queries: list[Query] = field(default_factory=list)
    # Whether the version has a ripple config (a private split and 1.0.0 have none).
    has_ripple: bool = False

    @property
    def n_chains(self) -> int:
        return sum(len(e.chains) for e in self.edits)

    @property
    def ripple_conditions(self) -> tuple[int, ...]:
        """The ripple queries scored before the edits: every planned row's condition facts, sorted."""
        return tuple(sorted({i for e in self.edits for q in e.ripple for i in q.conditions}))


class _QueryIndex:
    """Interns queries so that each distinct query has one index."""

    def __init__(self) -> None:
        self.queries: list[Query] = []
        self._index: dict[Query, int] = {}

    def add(self, query: Query) -> int:
        idx = self._index.get(query)
        if idx is None:
            idx = len(self.queries)
            self._index[query] = idx
            self.queries.append(query)
        return idx


def _alias_lookup(aliases: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    folded: dict[str, tuple[str, ...]] = {}
    for name, names in aliases.items():
        folded.setdefault(name.casefold(), tuple(names))
    return folded


def answer_forms(
    answer: str, aliases: Mapping[str, Sequence[str]], folded: Mapping[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """The answer followed by its aliases (exact name first, then a case-insensitive match), distinct."""
    extra = aliases.get(answer)
    if extra is None:
        extra = folded.get(answer.casefold(), ())
    forms: list[str] = [answer]
    for alias in extra:
        if alias and alias not in forms:
            forms.append(alias)
    return tuple(forms)


def _all_facts(cases: Sequence[Case]) -> list[Fact]:
    """Distinct facts of the version in dataset order (chain steps, then broader context, row by row)."""
    seen: dict[tuple[str, str, str], Fact] = {}
    for case in cases:
        for block in (case.chain, case.broader_context):
            for fact in block.facts:
                seen.setdefault(fact.key, fact)
    return list(seen.values())


class QueryMaker:
    """Makes the :class:`Query` of a fact as the whole dataset version defines it: the answer with its
    aliases, the fact's question, and ``n_gold`` (the distinct answers the version lists for the
    (subject, prompt))."""

    def __init__(self, cases: Sequence[Case], aliases: Mapping[str, Sequence[str]]) -> None:
        self.aliases = aliases
        self.folded = _alias_lookup(aliases)
        self.facts = _all_facts(cases)  # distinct facts of the version, in dataset order
        self.answers_of: dict[tuple[str, str], set[str]] = defaultdict(set)
        for fact in self.facts:
            self.answers_of[(fact.subject, fact.prompt)].add(fact.answer)
        self.question_of = {fact.key: fact.question for fact in self.facts}

    def __call__(self, prompt: str, subject: str, answer: str, question: str | None = None) -> Query:
        """``question`` None: the fact's own question in the version ("" if it has none)."""
        return Query(
            prompt=prompt,
            subject=subject,
            answers=answer_forms(answer, self.aliases, self.folded),
            question=self.question_of.get((subject, prompt, answer), "") if question is None else question,
            n_gold=max(1, len(self.answers_of.get((subject, prompt), ()))),
        )


def question_form(request: EditRequest, rows: Sequence[Case]) -> str | None:
    target = request.target_true.casefold()
    ordered = sorted(rows, key=lambda c: (len(c.chain) != 1, c.case_id))
    for case in ordered:
        for block in (case.chain, case.broader_context):
            for fact in block.facts:
                if fact.subject == request.subject and fact.answer.casefold() == target and fact.question:
                    return fact.question
    return None


def _stable_rank(edit_id: str, fact: tuple[str, str, str]) -> str:
    return hashlib.sha256("\x1f".join((edit_id, *fact)).encode("utf-8")).hexdigest()


def build_plan(
    cases: Sequence[Case],
    aliases: Mapping[str, Sequence[str]],
    limit: int | None = None,
    fallback_neighbours: int = 10,
    edit_ids: Collection[str] | None = None,
    ripple: Sequence[Mapping[str, Any]] | None = None,
) -> EvalPlan:
    """Group ``cases`` by edit request (dataset order) and intern every query the metrics need.

    ``limit`` keeps the first ``limit`` distinct edits, ``edit_ids`` (a private split's plan: the edits of
    the public plan) those with these ids; ``n_gold`` and neighbourhoods still come from the whole version.
    ``ripple``: the version's ``ripple`` rows (None: it has none); the planned edits' rows are planned.
    """
    make_query = QueryMaker(cases, aliases)
    index = _QueryIndex()

    rows_by_edit: dict[EditRequest, list[Case]] = {}
    for case in cases:
        rows_by_edit.setdefault(case.request, []).append(case)
    requests = list(rows_by_edit)
    if edit_ids is not None:
        requests = [r for r in requests if r.edit_id in edit_ids]
    if limit is not None:
        requests = requests[:limit]
    edited_pairs = {(r.subject, r.prompt) for r in requests}

    def fact_query(subject: str, prompt: str, answer: str) -> int:
        return index.add(make_query(prompt, subject, answer))

    def target_plan(prompt: str, subject: str, request: EditRequest, question: str = "") -> TargetPlan:
        true_q, new_q = (
            index.add(make_query(prompt, subject, target, question=question))
            for target in (request.target_true, request.target_new)
        )
        return TargetPlan(true_query=true_q, new_query=new_q, text=prompt.format(subject))

    graph_facts: dict[EditRequest, list[Fact]] = {}
    for request, rows in rows_by_edit.items():
        seen: dict[tuple[str, str, str], Fact] = {}
        for case in rows:
            for block in (case.chain, case.broader_context):
                for fact in block.facts:
                    seen.setdefault(fact.key, fact)
        graph_facts[request] = list(seen.values())

    ripple_index = _QueryIndex()
    ripple_by_edit: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in ripple or ():
        ripple_by_edit[str(row["edit_id"])].append(row)

    def ripple_plan(row: Mapping[str, Any]) -> RippleQueryPlan:
        answers = tuple(dict.fromkeys([row["target"], *row["target_aliases"]]))
        target = Query(row["prompt"], row["subject"], answers, row["question"])
        rival = row["competitor"]
        conditions = (make_query(c["prompt"], c["subject"], c["answer"]) for c in row["conditions"])
        return RippleQueryPlan(
            query_id=str(row["query_id"]),
            criterion=str(row["criterion"]),
            conditions=tuple(ripple_index.add(q) for q in conditions),
            target=ripple_index.add(target),
            competitor=None
            if rival is None
            else ripple_index.add(
                Query(
                    row["prompt"],
                    row["subject"],
                    answer_forms(rival, aliases, make_query.folded),
                    row["question"],
                )
            ),
        )

    edits: list[EditPlan] = []
    for request in requests:
        rows = rows_by_edit[request]
        chains = [
            ChainPlan(
                case_id=case.case_id,
                step_queries=tuple(fact_query(f.subject, f.prompt, f.answer) for f in case.chain.facts),
                restates_edit=restates_edit(case),
            )
            for case in rows
        ]
        broader_keys: dict[tuple[str, str, str], None] = {}
        for case in rows:
            for fact in case.broader_context.facts:
                broader_keys.setdefault(fact.key)
        broader = [FactPlan(fact=key, query=fact_query(*key)) for key in broader_keys]

        rewrite = target_plan(request.prompt, request.subject, request)
        question_text = question_form(request, rows)
        question = (
            target_plan(QUESTION_CLOZE, question_text, request, question=question_text)
            if question_text
            else None
        )

        def eligible(fact: Fact, request: EditRequest = request) -> bool:
            return (
                fact.subject != request.subject
                and (fact.subject, fact.prompt) not in edited_pairs
                and fact.answer.casefold() != request.target_new.casefold()
            )

        same_relation = [f for f in make_query.facts if f.prompt == request.prompt and eligible(f)]
        others = {
            f.key: f
            for other, fs in graph_facts.items()
            if other != request
            for f in fs
            if eligible(f) and f.prompt != request.prompt
        }
        fallback = sorted(others.values(), key=lambda f: _stable_rank(request.edit_id, f.key))

        def neighbour_plans(chosen: Sequence[Fact], request: EditRequest = request) -> list[NeighbourPlan]:
            plans = []
            for fact in chosen:
                true_q = fact_query(fact.subject, fact.prompt, fact.answer)
                new_q = index.add(make_query(fact.prompt, fact.subject, request.target_new, fact.question))
                plans.append(NeighbourPlan(fact=fact.key, true_query=true_q, new_query=new_q))
            return plans

        edits.append(
            EditPlan(
                request=request,
                case_ids=tuple(c.case_id for c in rows),
                chains=chains,
                broader=broader,
                rewrite=rewrite,
                question=question,
                same_relation=neighbour_plans(same_relation),
                fallback=neighbour_plans(fallback[:fallback_neighbours]),
                ripple=tuple(ripple_plan(row) for row in ripple_by_edit.get(request.edit_id, ())),
            )
        )
    return EvalPlan(
        queries=index.queries,
        edits=edits,
        total_rows=len(cases),
        info={
            "distinct_edits_in_version": len(rows_by_edit),
            "distinct_facts_in_version": len(make_query.facts),
        },
        ripple_queries=ripple_index.queries,
        has_ripple=ripple is not None,
    )
