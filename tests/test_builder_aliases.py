"""Subject aliases (:mod:`knowgic.builder.aliases`): the names the model knows a subject by, validated on
the subject's facts, written to ``subject_aliases.json`` and used by the ``ripple`` config's Subject
Aliasing; ``knowgic validate`` checks the file against its schema and rebuilds the queries with it.

The rules are checked on hand-made facts; a real ``knowgic-tiny`` build from 1.1.0's facts about 11
subjects records the aliases it validates ("Draco Lucius Malfoy" for Draco Malfoy), rejects wrong ones, and
its ripple config asks Subject Aliasing under them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from knowgic.builder.aliases import (
    answer_sets,
    candidate_names,
    check_candidates,
    control_names,
    distinguishing_facts,
    names_other_node,
    rival,
)
from knowgic.builder.template_rules import TemplateReader
from knowgic.dataset.derive import ripple_rows
from knowgic.dataset.io import alias_lists, read_json, read_rows
from knowgic.dataset.validate import validate_path
from knowgic.dataset.versions import SUBJECT_ALIASES_FILE
from knowgic.ripple.relations import relation_table
from tests.private_world import WORLD_DATASET


def _fact(subject: str, prompt: str, answer: str) -> dict[str, Any]:
    return {"fact_id": f"{subject}|{prompt}|{answer}", "subject": subject, "prompt": prompt, "answer": answer,
            "question": prompt.replace("{}", subject) + "?"}  # fmt: skip


def test_candidates_are_the_names_of_the_first_sentence() -> None:
    reader = TemplateReader(["{} is a sibling of", "{} studied at"], 60)
    out = "The Boy Who Lived, or the Chosen One and Harry.\nQ: Who is the child of Victoria Beckham?"
    assert candidate_names("Harry Potter", out, reader) == ["The Boy Who Lived", "the Chosen One", "Harry"]
    # cut after an initial, the subject itself, a clause, a relation's phrase: no name
    assert candidate_names("Bill Gates", "William H.\nQ: Who", reader) == []
    assert candidate_names("Bill Gates", "Bill Gates.", reader) == []
    assert candidate_names("Rome", "Rome is a city.", reader) == []
    assert candidate_names("Aidan", "a sibling of Charlotte.", reader) == []
    assert candidate_names("Benjamin Keough", "Ben Storm Keough.", reader) == ["Ben Storm Keough"]


def test_another_nodes_name_or_a_fuller_form_of_it_is_no_alias() -> None:
    nodes = {"elvis presley", "priscilla beaulieu presley", "professor quirrell", "lisa marie presley"}
    assert names_other_node("Elvis A. Presley", "Priscilla Beaulieu Presley", nodes)
    assert names_other_node("Professor Quirinus Quirrell", "Professor Snape", nodes | {"professor snape"})
    assert names_other_node("Lisa Marie Presley", "Elvis Presley", nodes)
    assert not names_other_node(
        "Elvis Aaron Presley", "Elvis Presley", {"elvis presley", "priscilla presley"}
    )
    subjects = ["Ron Weasley", "Hermione Granger", "Ginny Weasley"]
    assert rival("Ronald B. Weasley", "Hermione Granger", subjects) == "Ron Weasley"
    assert rival("The Chosen One", "Harry Potter", subjects) is None


def test_only_facts_no_other_subject_has_are_evidence() -> None:
    facts = [_fact("Ron", "{} studied at", "Hogwarts"), _fact("Cedric", "{} studied at", "Hogwarts"),
             _fact("Ron", "{}'s sister is", "Ginny")]  # fmt: skip
    ev = distinguishing_facts(facts)
    assert [f["answer"] for f in ev["Ron"]] == ["Ginny"] and ev["Cedric"] == []
    controls = control_names(["A", "B", "C", "D", "E"], 3, 0)
    assert controls == control_names(["A", "B", "C", "D", "E"], 3, 0)  # seeded
    assert all(len(v) == 3 and k not in v for k, v in controls.items())


def test_subject_aliasing_asks_under_the_subject_aliases_given() -> None:
    """The world's ripple rows: with a subject alias map, SA's subjects are its names, and an edit whose
    subject has none gets no SA query; the other criteria are unchanged."""
    chains = read_rows(WORLD_DATASET / "data" / "chains-test.jsonl")
    aliases = alias_lists(read_json(WORLD_DATASET / "aliases.json"))
    table = relation_table()
    plain = ripple_rows(chains, aliases, table)
    edited = chains[0]["requested_rewrite"][0]["subject"]
    named = ripple_rows(chains, aliases, table, {edited: ["The Alias Of Record"]})
    sa = [r for r in named if r["criterion"] == "SA"]
    assert sa and {r["subject"] for r in sa} == {"The Alias Of Record"}
    assert all(r["conditions"][0]["subject"] == "The Alias Of Record" for r in sa)
    assert [r for r in named if r["criterion"] != "SA"] == [r for r in plain if r["criterion"] != "SA"]
    assert [r for r in ripple_rows(chains, aliases, table, {}) if r["criterion"] == "SA"] == []


# --- a real build ----------------------------------------------------------------------------------

SEEDS = Path(__file__).parent / "data" / "builder" / "aliases"
"""1.1.0's 45 facts about 11 subjects (Draco Malfoy, Crabbe, Goyle, Nicole Richie, the Beckhams, ...)."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from knowgic.builder.pipeline import BuildConfig, run_build

    root = tmp_path_factory.mktemp("aliases")
    run_build(BuildConfig(model="knowgic-tiny", build_dir=root / "build", out=root / "out",
                          seeds_file=SEEDS / "seeds.jsonl", templates_file=SEEDS / "templates.yaml",
                          expand=False, progress=False))  # fmt: skip
    return root


def _stage(built: Path, name: str) -> dict[str, Any]:
    return json.loads((built / "build" / "stages" / f"{name}.json").read_text(encoding="utf-8"))


ACCEPTED = {"Draco Malfoy": ["Draco Lucius Malfoy"], "Nicole Richie": ["Nicole Camille Richie"]}


def test_a_build_records_the_subject_aliases_it_validates(built: Path) -> None:
    stage = _stage(built, "subject_aliases")
    assert stage["aliases"] == ACCEPTED
    checked = {(r["subject"], c["alias"]): c for r in stage["subjects"] for c in r["candidates"]}
    draco = checked[("Draco Malfoy", "Draco Lucius Malfoy")]
    assert draco["accepted"] and draco["known"] * 2 > draco["evidence"] > 0
    # a fuller form of another node's name ("David Beckham"); a name that carries its namesake Victoria
    # Beckham's facts as well as Cruz's
    assert checked[("Victoria Beckham", "David Robert Joseph Beckham")]["other_node"]
    brooklyn = checked[("Cruz David Beckham", "Brooklyn Beckham")]
    assert brooklyn["rival"] == "Victoria Beckham" and not brooklyn["accepted"]
    assert read_json(built / "out" / SUBJECT_ALIASES_FILE) == {
        k: v
        for k, v in ACCEPTED.items()
        if k in {f["subject"] for f in read_rows(built / "out" / "data" / "facts-test.jsonl")}
    }
    record = json.loads((built / "out" / "build" / "build.json").read_text(encoding="utf-8"))
    assert record["counts"]["subject_aliases_accepted"] == len(ACCEPTED)
    assert record["counts"]["subject_alias_candidates"] == len(checked)


def test_a_wrong_alias_is_rejected(built: Path) -> None:
    """Names that are not Draco Malfoy's, checked as his aliases on the build's own facts and model."""
    from knowgic.builder.spec import load_builder_spec
    from knowgic.models.loading import load_model
    from knowgic.scoring import make_scorer

    conf = load_builder_spec().subject_aliases
    facts = [f for f in _stage(built, "query_validation")["facts"] if f["validation"]["known"]]
    subjects = list(dict.fromkeys(f["subject"] for f in facts))
    nodes = {" ".join(x.split()).casefold() for f in facts for x in (f["subject"], f["answer"])}
    wrong = ["Vincent Crabbe", "Mark C. Keller", "Professor Quirinus Quirrell", "Ronald B. Weasley"]
    out = check_candidates(
        [("Draco Malfoy", n) for n in ["Draco Lucius Malfoy", *wrong]],
        distinguishing_facts(facts),
        answer_sets(facts),
        nodes,
        control_names(subjects, int(conf["controls"]), 0),
        load_model("knowgic-tiny", progress=False),
        make_scorer("logprob"),
        float(conf["min_agreement"]),
    )
    assert [c["accepted"] for c in out] == [True, False, False, False, False]
    assert out[1]["other_node"]  # Vincent Crabbe holds Crabbe, a node of his own
    assert out[2]["known"] * 2 <= out[2]["evidence"]  # the model does not give Draco's answers for it


def test_the_ripple_config_asks_subject_aliasing_under_them(built: Path) -> None:
    import datasets

    out = built / "out"
    named = read_json(out / SUBJECT_ALIASES_FILE)
    rows = datasets.load_dataset(str(out), "ripple", split="test")
    sa = [r for r in rows if r["criterion"] == "SA"]
    assert sa and {r["subject"] for r in sa} <= {a for v in named.values() for a in v}
    report = validate_path(out)
    assert report.ok, report.render_text()
    assert not {w.code for w in report.warnings} & {"derived_mismatch", "ripple_unbuildable"}
    # a changed subject alias map no longer rebuilds the ripple rows; a malformed one breaks its schema
    path = out / SUBJECT_ALIASES_FILE
    path.write_text(json.dumps({k: ["Someone Else"] for k in named}), encoding="utf-8")
    assert "derived_mismatch" in {w.code for w in validate_path(out).warnings}
    path.write_text(json.dumps({next(iter(named)): []}), encoding="utf-8")
    report = validate_path(out)
    assert not report.ok and any(e.config == "subject_aliases" for e in report.errors)
