"""The corrections that make 1.1.0 out of 1.0.0 (the upstream rows), each counted for the CHANGELOG.

Each step is a function ``(rows, aliases) -> (rows, aliases, changes)`` working on copies; every change
it makes is counted, and a step whose curated fix no longer applies fails the build instead of silently
doing nothing. Rows are never dropped or reordered, and ``case_id`` is kept, so results on 1.0.0 and
1.1.0 can be compared row by row.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knowgic.dataset.checks import duplicate_broader_entries, restates_edit, row_flags
from knowgic.dataset.derive import edit_id
from knowgic.dataset.text import alias_risk
from knowgic.errors import KnowgicError

Rows = list[dict[str, Any]]
Aliases = dict[str, list[str]]

# Answers (and subjects) spelled with other capitals than the same entity elsewhere: the rows' target_true
# is "baseball", so the chains that end on "Baseball" did not end at target_true.
ENTITY_RESPELLINGS: dict[str, str] = {"Baseball": "baseball"}

# Questions that do not name their subject as spelled in `subjects`: the question takes the subject's
# spelling (the subject is what the cloze prompt and the previous step's answer use).
QUESTION_SUBJECT_FIXES: dict[str, str] = {
    "Who did Steve Balmer succeed?": "Who did Steve Ballmer succeed?",
    "Who created Dresden Files?": "Who created The Dresden Files?",
    "What is the title of the first novel in Dresden Files?": (
        "What is the title of the first novel in The Dresden Files?"
    ),
    "Where does Professor Bathsheda Babbling teach?": "Where does Professor Babbling teach?",
    "Where does Professor Charity Burbage teach?": "Where does Professor Burbage teach?",
}

# Two questions glued together; the second one is the one the step's prompt ("{} is head of house for")
# and answer (Slytherin) ask.
QUESTION_FORM_FIXES: dict[str, str] = {
    "Where does Professor Snape teach?Which house was Professor Snape the head of?": (
        "Which house was Professor Snape the head of?"
    ),
}

# Alias-map keys renamed to the rows' spelling of the entity.
ALIAS_KEY_RENAMES: dict[str, str] = {"Baseball": "baseball", "Basketball": "basketball"}

# Aliases filed under the wrong entity: (from, to, aliases).
ALIAS_MOVES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Storm Front", "Steve Ballmer", ("Steven Anthony Ballmer", "Steven A. Ballmer")),
)

# Misspelled aliases: (entity, wrong, right).
ALIAS_TYPOS: tuple[tuple[str, str, str], ...] = (
    ("Victoria Beckham", "Victoria C. Bekham", "Victoria C. Beckham"),
)

# Entries for answers and edit targets the upstream map lacks; aliases only where they are unambiguous.
ALIAS_ADDITIONS: dict[str, list[str]] = {
    "Alessandra Mussolini": [],
    "Angelina Jolie": ["Angelina Jolie Voight", "Angelina Jolie Pitt"],
    "Anthony Horowitz": [],
    "Apple Inc.": ["Apple Inc", "Apple Computer", "Apple Computer, Inc."],
    "Bryan Fuller": [],
    "Cameron Diaz": ["Cameron Michelle Diaz"],
    "Charlie Chaplin": ["Charles Chaplin", "Charles Spencer Chaplin", "Sir Charles Chaplin"],
    "Daimler Motors Corporation": [],
    "Diana Taurasi": [],
    "England": [],
    "Gina Rinehart": ["Georgina Rinehart", "Georgina Hope Rinehart"],
    "Ilvermorny School of Witchcraft and Wizardry": ["Ilvermorny"],
    "Lotus Cars": [],
    "Madrid": [],
    "NBCUniversal": ["NBC Universal", "NBCUniversal Media"],
    "Neil Gaiman": ["Neil Richard Gaiman"],
    "Portugal": ["Portuguese Republic"],
    "Sikorsky Aircraft Corporation": ["Sikorsky Aircraft", "Sikorsky"],
    "Spain": ["Kingdom of Spain"],
    "Suffect Consul": ["consul suffectus"],
    "United Kingdom": [
        "U.K.",
        "Great Britain",
        "Britain",
        "United Kingdom of Great Britain and Northern Ireland",
    ],
    "Valve Corporation": ["Valve Software", "Valve Corp."],
}


@dataclass(frozen=True)
class Change:
    """One CHANGELOG line: what changed, and how many times."""

    text: str
    count: int


class CorrectionDrift(KnowgicError):
    """A curated correction no longer matches the data it was written for."""


def _blocks(row: dict[str, Any]) -> tuple[tuple[str, dict[str, list[str]]], ...]:
    return (("chain", row["chain"]), ("broader_context", row["broader_context"]))


def respell_entities(rows: Rows, aliases: Aliases) -> tuple[Rows, Aliases, list[Change]]:
    changes: list[Change] = []
    for old, new in ENTITY_RESPELLINGS.items():
        final = other_chain = broader = subjects = 0
        restating_before = [row["case_id"] for row in rows if restates_edit(row)]
        for row in rows:
            for name, block in _blocks(row):
                for i, answer in enumerate(block["answers"]):
                    if answer == old:
                        block["answers"][i] = new
                        if name == "broader_context":
                            broader += 1
                        elif i == len(block["answers"]) - 1:
                            final += 1
                        else:
                            other_chain += 1
                for i, subject in enumerate(block["subjects"]):
                    if subject == old:
                        block["subjects"][i] = new
                        subjects += 1
        total = final + other_chain + broader + subjects
        if total == 0:
            raise CorrectionDrift(f"respelling {old!r} -> {new!r} matched nothing")
        # a one-step chain whose only answer was misspelled becomes a restatement of the edit itself
        restating = [row["case_id"] for row in rows if restates_edit(row)]
        newly = sorted(set(restating) - set(restating_before))
        note = (
            f" With the respelling, the one-step chain{'s' if len(newly) > 1 else ''} of case_id "
            f"{', '.join(map(str, newly))} now ask{'' if len(newly) > 1 else 's'} the edited fact itself "
            f"(edited subject -> target_true): {len(restating)} rows restate the edit instead of "
            f"{len(restating_before)} in 1.0.0 (flag `chain_restates_edit` below)."
            if newly
            else ""
        )
        changes.append(
            Change(
                f"Answers {old!r} -> {new!r}, the spelling of the rows' target_true: {final} chain final "
                f"steps (the chains of {final} rows now end at target_true), {other_chain} other chain "
                f"steps, {broader} broader-context entries, {subjects} subjects.{note}",
                total,
            )
        )
    return rows, aliases, changes


def _replace_questions(rows: Rows, table: Mapping[str, str], what: str) -> list[Change]:
    changes: list[Change] = []
    for old, new in table.items():
        chain = broader = 0
        for row in rows:
            for name, block in _blocks(row):
                for i, q in enumerate(block["questions"]):
                    if q == old:
                        block["questions"][i] = new
                        if name == "chain":
                            chain += 1
                        else:
                            broader += 1
        if chain + broader == 0:
            raise CorrectionDrift(f"question fix {old!r} matched nothing")
        changes.append(
            Change(
                f"{what}: {old!r} -> {new!r} ({chain} chain steps, {broader} broader-context entries).",
                chain + broader,
            )
        )
    return changes


def fix_questions(rows: Rows, aliases: Aliases) -> tuple[Rows, Aliases, list[Change]]:
    changes = _replace_questions(
        rows, QUESTION_SUBJECT_FIXES, "Question names its subject as spelled in `subjects`"
    )
    changes += _replace_questions(
        rows, QUESTION_FORM_FIXES, "Two questions glued together, kept the one asked"
    )
    return rows, aliases, changes


def dedupe_broader(rows: Rows, aliases: Aliases) -> tuple[Rows, Aliases, list[Change]]:
    removed = touched = 0
    for row in rows:
        block = row["broader_context"]
        dups = set(duplicate_broader_entries(block))
        if not dups:
            continue
        touched += 1
        removed += len(dups)
        for key in ("questions", "answers", "prompts", "subjects"):
            block[key] = [v for i, v in enumerate(block[key]) if i not in dups]
    if removed == 0:
        raise CorrectionDrift("no duplicated broader-context entries to remove")
    return (
        rows,
        aliases,
        [
            Change(
                f"Removed {removed} broader-context entries in {touched} rows that repeated an earlier entry's "
                "subject, question and answer with a reworded prompt (e.g. '{} has grandchild' / "
                "'{} has a grandchild'); the first one is kept.",
                removed,
            )
        ],
    )


def add_row_fields(rows: Rows, aliases: Aliases) -> tuple[Rows, Aliases, list[Change]]:
    counts = {"chain_answer_in_question": 0, "broader_answer_in_question": 0, "empty": 0, "restates": 0}
    steps = {"chain": 0, "final": 0, "broader": 0}
    out: Rows = []
    for row in rows:
        flags = row_flags(row)
        counts["chain_answer_in_question"] += bool(flags["chain_answer_in_question"])
        counts["broader_answer_in_question"] += bool(flags["broader_answer_in_question"])
        counts["empty"] += flags["empty_broader_context"]
        counts["restates"] += flags["chain_restates_edit"]
        steps["chain"] += len(flags["chain_answer_in_question"])
        steps["final"] += (len(row["chain"]["answers"]) - 1) in flags["chain_answer_in_question"]
        steps["broader"] += len(flags["broader_answer_in_question"])
        out.append({**row, "edit_id": edit_id(row), "flags": flags})
    n = len(rows)
    return (
        out,
        aliases,
        [
            Change(
                f"Added `edit_id` to every row ({n} rows), the key of the row's edit in the edits config.", n
            ),
            Change(
                "Added `flags` to every row, flagging rather than rewording: "
                f"`chain_answer_in_question` ({steps['chain']} steps, {steps['final']} of them final, in "
                f"{counts['chain_answer_in_question']} rows), `broader_answer_in_question` ({steps['broader']} "
                f"entries in {counts['broader_answer_in_question']} rows), `empty_broader_context` "
                f"({counts['empty']} rows, kept), `chain_restates_edit` ({counts['restates']} rows).",
                n,
            ),
        ],
    )


def fix_aliases(rows: Rows, aliases: Aliases) -> tuple[Rows, Aliases, list[Change]]:
    changes: list[Change] = []
    amap: Aliases = {}
    for entity, names in aliases.items():
        amap[ALIAS_KEY_RENAMES.get(entity, entity)] = list(names)
    renamed = [k for k in ALIAS_KEY_RENAMES if k in aliases]
    if len(renamed) != len(ALIAS_KEY_RENAMES):
        raise CorrectionDrift(
            f"alias keys to rename missing: {sorted(set(ALIAS_KEY_RENAMES) - set(renamed))}"
        )
    changes.append(
        Change(
            "Alias-map keys renamed to the rows' spelling: "
            + ", ".join(f"{k!r} -> {v!r}" for k, v in ALIAS_KEY_RENAMES.items())
            + f" ({len(renamed)} entries).",
            len(renamed),
        )
    )
    moved = 0
    for src, dst, names in ALIAS_MOVES:
        for name in names:
            if name not in amap.get(src, []):
                raise CorrectionDrift(f"alias {name!r} not under {src!r}")
            amap[src].remove(name)
            amap.setdefault(dst, []).append(name)
            moved += 1
        changes.append(
            Change(
                f"Aliases {', '.join(repr(n) for n in names)} moved from {src!r} to {dst!r} ({len(names)}).",
                len(names),
            )
        )
    for entity, wrong, right in ALIAS_TYPOS:
        names = amap.get(entity, [])
        if wrong not in names:
            raise CorrectionDrift(f"alias {wrong!r} not under {entity!r}")
        names[names.index(wrong)] = right
        changes.append(Change(f"Alias of {entity!r} {wrong!r} -> {right!r} (1).", 1))

    self_listed = repeated = 0
    for entity, names in amap.items():
        kept: list[str] = []
        for name in names:
            if name == entity:
                self_listed += 1
            elif name in kept:
                repeated += 1
            else:
                kept.append(name)
        amap[entity] = kept
    changes.append(
        Change(
            f"Removed {self_listed} aliases equal to their own entity and {repeated} aliases listed twice.",
            self_listed + repeated,
        )
    )
    dropped = [(e, n) for e, names in amap.items() for n in names if alias_risk(n)]
    for entity, name in dropped:
        amap[entity].remove(name)
    changes.append(
        Change(
            f"Dropped {len(dropped)} aliases short or common enough to match unrelated text in a "
            "case-insensitive whole-word search: " + ", ".join(f"{n!r} ({e})" for e, n in dropped) + ".",
            len(dropped),
        )
    )

    needed: set[str] = set()
    for row in rows:
        req = row["requested_rewrite"][0]
        needed |= {req["target_true"]["str"], req["target_new"]["str"]}
        for _name, block in _blocks(row):
            needed |= set(block["answers"])
    missing = sorted(needed - set(amap))
    unknown = sorted(set(missing) - set(ALIAS_ADDITIONS))
    if unknown:
        raise CorrectionDrift(f"answers or targets without an alias entry and no curated one: {unknown}")
    for entity in missing:
        names = [n for n in ALIAS_ADDITIONS[entity] if not alias_risk(n)]
        amap[entity] = names
    with_names = sum(1 for e in missing if amap[e])
    changes.append(
        Change(
            f"Added {len(missing)} alias-map entries so every answer, target_true and target_new has one "
            f"({with_names} with aliases, the others empty): " + ", ".join(repr(e) for e in missing) + ".",
            len(missing),
        )
    )
    amap = dict(sorted(amap.items(), key=lambda kv: (kv[0].casefold(), kv[0])))
    return rows, amap, changes


Step = Callable[[Rows, Aliases], tuple[Rows, Aliases, list[Change]]]

STEPS_1_1_0: tuple[Step, ...] = (respell_entities, fix_questions, dedupe_broader, add_row_fields, fix_aliases)


def apply_steps(
    rows: Sequence[Mapping[str, Any]], aliases: Mapping[str, Sequence[str]], steps: Sequence[Step]
) -> tuple[Rows, Aliases, list[Change]]:
    """Run ``steps`` on deep copies of ``rows`` and ``aliases``; returns the new ones and every change."""
    out_rows: Rows = copy.deepcopy([dict(r) for r in rows])
    out_aliases: Aliases = {k: list(v) for k, v in aliases.items()}
    changes: list[Change] = []
    for step in steps:
        out_rows, out_aliases, step_changes = step(out_rows, out_aliases)
        changes.extend(step_changes)
    return out_rows, out_aliases, changes
