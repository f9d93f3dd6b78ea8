"""``knowgic probe``: one real edit on ``knowgic-tiny``, facts scored before and after, and its bad input."""

from __future__ import annotations

import json

import pytest

from knowgic.cli import main

GRYFFINDOR = "{} belongs to|Gryffindor|Hogwarts School of Witchcraft and Wizardry"


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_rome_probe_shows_the_flip_and_the_other_facts(knowgic_tiny, tmp_path, capsys) -> None:
    facts_file = tmp_path / "facts.yaml"
    facts_file.write_text("- {prompt: '{} is a teacher at', subject: Professor Snape, answer: Hogwarts}\n")
    edit = ["--editor", "rome", "--subject", "harry potter"]
    code = _run(["probe", *edit, "--fact", GRYFFINDOR, "--facts-file", str(facts_file), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert out["edit"]["subject"] == "Harry Potter"
    rows = out["rows"]
    true_row, new_row = rows[0], rows[1]
    assert (true_row["role"], true_row["answer"]) == ("rewrite", "Hogwarts School of Witchcraft and Wizardry")
    assert new_row["answer"] == "Ilvermorny School of Witchcraft and Wizardry"
    # The model knew the old school and ROME moved the rewrite prompt to the new one.
    assert true_row["known_pre"] and new_row["p_post"] > true_row["p_post"]
    assert new_row["p_post"] > new_row["p_pre"]
    assert any(r["role"] == "question" for r in rows)
    subject_facts = [r for r in rows if r["role"] == "subject fact"]
    assert subject_facts and all(r["text"].startswith("Harry Potter") for r in subject_facts)
    assert len({(r["text"], r["answer"]) for r in rows}) == len(rows)  # each fact once
    users = [r for r in rows if r["role"] == "user"]
    assert [u["text"] for u in users] == ["Gryffindor belongs to", "Professor Snape is a teacher at"]
    assert users[0]["known_pre"]  # the tiny model knows the house's school
    assert out["info"]["method"] == "rome"


def test_probe_table(knowgic_tiny, capsys) -> None:
    assert _run(["probe", "--editor", "none", "--subject", "Overwatch"]) == 0
    out = capsys.readouterr().out
    assert "Overwatch" in out and "Valve Corporation" in out and "p before" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--subject", "Elvis Presley"], "names 2 edits, choose one with --edit-id"),
        (["--subject", "Nobody"], "no edit has subject 'Nobody'"),
        (["--edit-id", "000000000000"], "no edit has edit id"),
        (["--subject", "Overwatch", "--fact", "{} is|x"], "--fact 1: expected PROMPT|SUBJECT|ANSWER"),
        (["--subject", "Overwatch", "--fact", "is made by|Overwatch|Valve"], "exactly one {}"),
        (["--subject", "Overwatch", "--facts-file", "/nonexistent.yaml"], "does not exist"),
    ],
)
def test_probe_bad_input_is_one_line(argv: list[str], message: str, capsys) -> None:
    assert _run(["probe", "--editor", "rome", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_probe_facts_file_must_be_a_list_of_facts(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {prompt: '{} is', subject: X}\n")
    assert _run(["probe", "--editor", "rome", "--subject", "Overwatch", "--facts-file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "item 0 must map exactly prompt, subject and answer" in err and str(bad) in err
