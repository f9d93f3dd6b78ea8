"""RippleEdits' queries of an edit on a hand-made five-fact graph, checked against queries written by hand."""

from __future__ import annotations

import re

import pytest

from knowgic.errors import KnowgicError
from knowgic.ripple.queries import CRITERIA, Edit, Fact, Graph, Query, edit_queries, query_row
from knowgic.ripple.relations import relation_table

SPOUSE, MOTHER_OF, CHILD_IS, CHILD_OF = (
    "{} is the spouse of",
    "{} is the mother of",
    "{}'s child is",
    "{} is the child of",
)

# The five facts the model knows.
F1 = Fact("Hillary Clinton", SPOUSE, "Bill Clinton")  # about e, a relation not in D_child: RS
F2 = Fact("Bill Clinton", SPOUSE, "Hillary Clinton")  # points at e: CII
F3 = Fact("Hillary Clinton", MOTHER_OF, "Chelsea Clinton")  # the edit's old fact
F4 = Fact("Hillary Clinton", MOTHER_OF, "Robin Rodham")  # another child of e: PV
F5 = Fact("Alessandra Mussolini", SPOUSE, "Mauro Floriani")  # about o*: CI
FACTS = [F1, F2, F3, F4, F5]
ALIASES = {"Hillary Clinton": ("Hillary Rodham",), "Bill Clinton": ("William Jefferson Clinton",)}
EDIT = Edit("e1", "Hillary Clinton", CHILD_IS, "Chelsea Clinton", "Alessandra Mussolini")


def _graph() -> Graph:
    return Graph.of(FACTS, relation_table())


def test_each_criterion_of_the_five_fact_graph_by_hand() -> None:
    expected = [
        Query("LG", "inverse", "Alessandra Mussolini", ("parent",), CHILD_OF,
              "Who is a parent of {}?", "Hillary Clinton", ("Hillary Rodham",), (), None),
        Query("CI", "compose_object", "Hillary Clinton", ("child", "spouse"), "The spouse of a child of {} is",
              "Who is the spouse of a child of {}?", "Mauro Floriani", (), (F5,), None),
        Query("CII", "compose_subject", "Bill Clinton", ("spouse", "child"), "A child of the spouse of {} is",
              "Who is a child of the spouse of {}?", "Alessandra Mussolini", (), (F2,), "Chelsea Clinton"),
        Query("SA", "alias", "Hillary Rodham", ("child",), CHILD_IS, "Who is a child of {}?",
              "Alessandra Mussolini", (), (Fact("Hillary Rodham", CHILD_IS, "Chelsea Clinton"),),
              "Chelsea Clinton"),
        Query("PV", "preserve", "Hillary Clinton", ("child",), "A child of {} other than Alessandra Mussolini is",
              "Who is a child of {} other than Alessandra Mussolini?", "Robin Rodham", (), (F4,),
              "Alessandra Mussolini"),
        Query("RS", "unrelated_relation", "Hillary Clinton", ("spouse",), SPOUSE, "Who is the spouse of {}?",
              "Bill Clinton", ("William Jefferson Clinton",), (F1,), "Alessandra Mussolini"),
    ]  # fmt: skip
    got = edit_queries(EDIT, _graph(), relation_table(), ALIASES)
    assert got == expected
    assert [q.criterion for q in got] == list(CRITERIA)


def test_a_symmetric_edit_and_the_old_fact_read_backwards() -> None:
    """Editing e's spouse: LG asks (o*, spouse, e); CII does not ask through (o, spouse, e), the very fact
    the edit retracts; the child facts are RS (child is not in D_spouse)."""
    edit = Edit("e2", "Hillary Clinton", SPOUSE, "Bill Clinton", "Donald Smith")
    got = edit_queries(edit, _graph(), relation_table(), ALIASES)
    lg = [q for q in got if q.criterion == "LG"]
    assert lg == [
        Query("LG", "symmetric", "Donald Smith", ("spouse",), SPOUSE, "Who is the spouse of {}?",
              "Hillary Clinton", ("Hillary Rodham",), (), None),
    ]  # fmt: skip
    assert [q for q in got if q.criterion in ("CI", "CII", "PV")] == []  # spouse is functional: no PV
    assert [(q.target, q.prompt) for q in got if q.criterion == "RS"] == [
        ("Chelsea Clinton", MOTHER_OF),
        ("Robin Rodham", MOTHER_OF),
    ]


def test_transitive_relation_both_ways() -> None:
    """located_in: (e, r, o*) and (o*, r, z) give (e, r, z); (x, r, e) and (e, r, o*) give (x, r, o*)."""
    facts = [
        Fact("Springfield", "{} is located in", "Illinois"),
        Fact("Ohio", "{} is in the country", "USA"),
        Fact("Oak Street", "{} is situated in", "Springfield"),
    ]
    edit = Edit("e3", "Springfield", "{} is located in", "Illinois", "Ohio")
    got = edit_queries(edit, Graph.of(facts, relation_table()), relation_table(), {})
    assert [
        (q.rule, q.subject, q.prompt, q.target, q.conditions, q.competitor)
        for q in got
        if q.criterion == "LG"
    ] == [
        ("transitive", "Springfield", "{} is located in", "USA", (facts[1],), None),  # Illinois is in nothing
        ("transitive", "Oak Street", "{} is situated in", "Ohio", (facts[2],), "Illinois"),
    ]


def test_the_competitor_is_the_answer_before_the_edit_where_the_graph_has_one() -> None:
    """A sixth and seventh fact give CI and LG their old answers: CI's is the spouse of the old child o
    (Chelsea's), the symmetric LG's the new spouse's own spouse (spouse is functional)."""
    f6 = Fact("Chelsea Clinton", SPOUSE, "Marc Mezvinsky")
    f7 = Fact("Donald Smith", SPOUSE, "Marla Maples")
    graph = Graph.of([*FACTS, f6, f7], relation_table())
    ci = [q for q in edit_queries(EDIT, graph, relation_table(), ALIASES) if q.criterion == "CI"]
    assert [(q.target, q.competitor) for q in ci] == [("Mauro Floriani", "Marc Mezvinsky")]
    edit = Edit("e2", "Hillary Clinton", SPOUSE, "Bill Clinton", "Donald Smith")
    lg = [q for q in edit_queries(edit, graph, relation_table(), ALIASES) if q.criterion == "LG"]
    assert [(q.target, q.competitor) for q in lg] == [("Hillary Clinton", "Marla Maples")]


def test_a_query_row_carries_its_conditions() -> None:
    cii = next(q for q in edit_queries(EDIT, _graph(), relation_table(), ALIASES) if q.criterion == "CII")
    row = query_row("e1", cii)
    assert row["conditions"] == [{"subject": "Bill Clinton", "prompt": SPOUSE, "answer": "Hillary Clinton"}]
    assert row["competitor"] == "Chelsea Clinton"
    assert len(row["query_id"]) == 12 and row["prompt"].format(row["subject"]).startswith(
        "A child of the spouse"
    )


def test_an_undeclared_template_is_named() -> None:
    with pytest.raises(KnowgicError, match=re.escape("'{} is the nephew of'")):
        Graph.of([*FACTS, Fact("a", "{} is the nephew of", "b")], relation_table())
    with pytest.raises(KnowgicError, match="edit e4: no relation"):
        edit_queries(Edit("e4", "a", "{} is the nephew of", "b", "c"), _graph(), relation_table(), {})


@pytest.mark.parametrize("version", ["1.1.0", "growth-1.0.0"])
def test_a_shipped_ripple_config_loads_and_is_what_the_table_builds(version: str) -> None:
    """``load_dataset(folder, "ripple")`` loads it; its rows are those the relation table builds from the
    version's own rows; the content hash stays the published chains' (the config is outside it)."""
    import datasets

    from knowgic.dataset.derive import ripple_record, ripple_rows
    from knowgic.dataset.io import alias_lists, read_json
    from knowgic.dataset.loading import load_rows
    from knowgic.dataset.versions import content_sha256, version_dir, version_info

    folder = version_dir(version)
    ds = datasets.load_dataset(str(folder), "ripple", split="test")
    rows = load_rows("ripple", version)
    built = ripple_rows(
        load_rows("chains", version), alias_lists(read_json(folder / "aliases.json")), relation_table()
    )
    assert len(ds) == len(rows) == version_info(version)["configs"]["ripple"]["rows"] and rows == built
    assert version_info(version)["ripple"] == ripple_record(rows, relation_table())
    assert content_sha256(folder) == version_info(version)["sha256"]
    assert {r["criterion"] for r in rows} == set(CRITERIA)
    edits = {r["edit_id"] for r in load_rows("edits", version)}
    assert {r["edit_id"] for r in rows} <= edits


def test_the_growth_track_has_50_queries_per_criterion() -> None:
    """The growth track (161 edits) has at least 50 queries of each criterion before the conditions are
    checked on a model (docs/metrics.md gives the counts)."""
    from collections import Counter

    from knowgic.dataset.loading import load_rows

    counts = Counter(r["criterion"] for r in load_rows("ripple", "growth-1.0.0"))
    assert min(counts[c] for c in CRITERIA) >= 50, counts


def test_a_track_version_made_again_from_its_own_rows_is_the_shipped_one() -> None:
    """``python -m knowgic.dataset.tracks`` rewrites nothing when the shipped track folders are current."""
    from knowgic.dataset.tracks import rebuilt_public_files, track_folders

    for folder in track_folders():
        for path, text in rebuilt_public_files(folder).items():
            assert (folder / path).read_text(encoding="utf-8") == text, f"{folder.name}/{path}"
