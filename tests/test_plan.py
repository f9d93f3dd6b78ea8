"""The evaluation plan on the upstream rows: grouping by edit, query interning, question forms, neighbours."""

from __future__ import annotations

import json
from collections import Counter

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
    for edit in plan.edits:
        needed = set(edit.post_queries)
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
    kinds = Counter(e.neighbourhood_kind for e in plan.edits)
    assert kinds["none"] == 0
    harry = next(e for e in plan.edits if e.request.subject == "Harry Potter")
    assert harry.neighbourhood_kind == "same-relation"
    subjects = {n.fact[0] for n in harry.neighbours}
    # Other students keep their school; students that are themselves edited are never neighbours.
    assert "Harry Potter" not in subjects
    assert "Ron Weasley" not in subjects and "Hermione Granger" not in subjects
    edited = {(e.request.subject, e.request.prompt) for e in plan.edits}
    for edit in plan.edits:
        for n in edit.neighbours:
            assert (n.fact[0], n.fact[1]) not in edited
            assert n.fact[2].casefold() != edit.request.target_new.casefold()
            assert plan.queries[n.new_query].answers[0] == edit.request.target_new
        if edit.neighbourhood_kind == "other-graphs":
            assert 0 < len(edit.neighbours) <= 10


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
    assert [e.post_queries for e in a.edits] == [e.post_queries for e in b.edits]
