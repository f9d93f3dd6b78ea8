"""The evaluation plan on the upstream rows: grouping by edit, query interning, question forms, neighbours."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from knowgic.evaluation.plan import QUESTION_CLOZE, build_plan
from knowgic.records import Case
from tests.conftest import UPSTREAM_CHAINS


@pytest.fixture(scope="module")
def upstream_cases() -> list[Case]:
    return [Case.from_row(row) for row in json.loads(UPSTREAM_CHAINS.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def aliases() -> dict[str, tuple[str, ...]]:
    raw = json.loads((UPSTREAM_CHAINS.parent / "attributes_with_aliases.json").read_text(encoding="utf-8"))
    return {k: tuple(v["answer_alias"]) for k, v in raw.items()}


def test_rows_grouped_by_edit(upstream_cases, aliases) -> None:
    plan = build_plan(upstream_cases, aliases)
    assert len(plan.edits) == 26
    assert plan.n_chains == 1406
    assert sorted(cid for e in plan.edits for cid in e.case_ids) == list(range(len(upstream_cases)))
    assert len({e.edit_id for e in plan.edits}) == 26


def test_queries_are_distinct_and_complete(upstream_cases, aliases) -> None:
    plan = build_plan(upstream_cases, aliases)
    assert len(set(plan.queries)) == len(plan.queries)
    everything_known = np.ones(len(plan.queries), dtype=bool)
    for edit in plan.edits:
        needed = set(edit.post_queries(everything_known))
        for chain in edit.chains:
            assert set(chain.step_queries) <= needed
        assert {f.query for f in edit.broader} <= needed
    # Each step's query is its cloze prompt with the gold answer first, then aliases.
    case = upstream_cases[0]
    edit = next(e for e in plan.edits if case.case_id in e.case_ids)
    chain = next(c for c in edit.chains if c.case_id == case.case_id)
    first = plan.queries[chain.step_queries[0]]
    assert first.text == case.chain.prompts[0].format(case.chain.subjects[0])
    assert first.answers[0] == case.chain.answers[0]
    assert first.question == case.chain.questions[0]


def test_aliases_and_n_gold(upstream_cases, aliases) -> None:
    plan = build_plan(upstream_cases, aliases)
    overwatch = [q for q in plan.queries if q.subject == "Overwatch" and q.prompt == "{} was developed by"]
    true_answers = {q.answers[0] for q in overwatch}
    assert {"Aaron Keller", "Blizzard Entertainment", "Chris Metzen"} <= true_answers
    assert all(q.n_gold == 3 for q in overwatch)
    keller = next(q for q in overwatch if q.answers[0] == "Aaron Keller")
    assert keller.answers == ("Aaron Keller", "A. Keller")


def test_question_forms(upstream_cases, aliases) -> None:
    plan = build_plan(upstream_cases, aliases)
    with_question = [e for e in plan.edits if e.question is not None]
    assert len(with_question) == 24
    harry = next(e for e in plan.edits if e.request.subject == "Harry Potter")
    assert harry.question is not None
    assert harry.question.text == QUESTION_CLOZE.format("Where did Harry Potter study?")
    true_q = plan.queries[harry.question.true_query]
    new_q = plan.queries[harry.question.new_query]
    assert true_q.answers[0] == harry.request.target_true
    assert new_q.answers[0] == harry.request.target_new


def test_neighbourhoods(upstream_cases, aliases) -> None:
    plan = build_plan(upstream_cases, aliases)
    known = np.ones(len(plan.queries), dtype=bool)
    kinds = Counter(e.neighbourhood(known).kind for e in plan.edits)
    assert kinds["none"] == 0
    harry = next(e for e in plan.edits if e.request.subject == "Harry Potter")
    assert harry.neighbourhood(known).kind == "same-relation"
    subjects = {n.fact[0] for n in harry.same_relation}
    # Other students keep their school; students that are themselves edited are never neighbours.
    assert "Harry Potter" not in subjects
    assert "Ron Weasley" not in subjects and "Hermione Granger" not in subjects
    edited = {(e.request.subject, e.request.prompt) for e in plan.edits}
    for edit in plan.edits:
        for n in (*edit.same_relation, *edit.fallback):
            assert (n.fact[0], n.fact[1]) not in edited
            assert n.fact[2].casefold() != edit.request.target_new.casefold()
            assert plan.queries[n.new_query].answers[0] == edit.request.target_new
        # Both sets are planned for every edit; the fallback never repeats the edit's own relation.
        assert 0 < len(edit.fallback) <= 10
        assert all(plan.queries[n.true_query].prompt != edit.request.prompt for n in edit.fallback)
        if not edit.same_relation:
            assert edit.neighbourhood(known).kind == "other-graphs"


def test_fallback_applies_when_no_same_relation_fact_is_known(upstream_cases, aliases) -> None:
    plan = build_plan(upstream_cases, aliases)
    harry = next(e for e in plan.edits if e.request.subject == "Harry Potter")
    assert len(harry.same_relation) > 1
    base = {harry.rewrite.true_query, harry.rewrite.new_query}
    base |= {harry.question.true_query, harry.question.new_query}
    base |= {q for chain in harry.chains for q in chain.step_queries} | {f.query for f in harry.broader}
    same = {q for n in harry.same_relation for q in (n.true_query, n.new_query)}
    fallback = {q for n in harry.fallback for q in (n.true_query, n.new_query)}

    # The unedited model knows every fact but the same-relation ones: the fallback is used, and only the
    # fallback neighbours are scored after the edit.
    known = np.ones(len(plan.queries), dtype=bool)
    known[[n.true_query for n in harry.same_relation]] = False
    hood = harry.neighbourhood(known)
    assert hood.kind == "other-graphs" and hood.neighbours == tuple(harry.fallback)
    assert set(harry.post_queries(known)) == base | fallback
    assert not (same - base) & set(harry.post_queries(known))

    # One known same-relation fact is enough to keep the same-relation neighbourhood (all of it; the
    # metric counts the known ones), and then no fallback fact is scored.
    known[harry.same_relation[-1].true_query] = True
    hood = harry.neighbourhood(known)
    assert hood.kind == "same-relation" and hood.neighbours == tuple(harry.same_relation)
    assert set(harry.post_queries(known)) == base | same


def test_limit_keeps_first_edits_and_n_gold(upstream_cases, aliases) -> None:
    full = build_plan(upstream_cases, aliases)
    small = build_plan(upstream_cases, aliases, limit=2)
    assert [e.edit_id for e in small.edits] == [e.edit_id for e in full.edits[:2]]
    n_gold_full = {(q.subject, q.prompt): q.n_gold for q in full.queries}
    for q in small.queries:
        assert q.n_gold == n_gold_full[(q.subject, q.prompt)]


def test_deterministic(upstream_cases, aliases) -> None:
    a = build_plan(upstream_cases, aliases)
    b = build_plan(upstream_cases, aliases)
    assert a.queries == b.queries
    known = np.ones(len(a.queries), dtype=bool)
    assert [e.post_queries(known) for e in a.edits] == [e.post_queries(known) for e in b.edits]
    assert [e.fallback for e in a.edits] == [e.fallback for e in b.edits]
