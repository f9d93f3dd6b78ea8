"""Stage 1, seeds: the facts the graph grows from, their relation templates, and the edit requests.

    --from VERSION|FOLDER  -> the version's facts (subject, prompt, answer, questions, aliases, graphs =
                              the edits whose graph holds the fact) and its edit requests
    --seeds FILE           -> (subject, relation, object) rows; --templates FILE names each relation's
                              cloze prompt ("{} studied at") and question ("Where did {} study?")

A relation is its template: facts from a version use their prompt as the relation name. Counterfactual
targets for new edit requests are drawn from the same relation's other objects with a seeded generator
(:func:`counterfactual`); for a relation with a single object, from the objects of the relations whose
phrase matches it (``{} has grandchild`` / ``{} has a grandchild``).
"""

from __future__ import annotations

import csv
import io
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowgic.dataset.derive import fact_id
from knowgic.dataset.io import UnreadableInput, read_rows, read_text, sha256_text
from knowgic.errors import KnowgicError
from knowgic.yamlfile import read_yaml

SEED_COLUMNS = ("subject", "relation", "object")


@dataclass(frozen=True)
class Template:
    """A relation's cloze prompt and question; ``{}`` is where the subject goes."""

    relation: str
    prompt: str
    question: str
    origin: str  # "version", "templates-file" or "proposed"


@dataclass
class SeedFact:
    subject: str
    relation: str
    prompt: str
    answer: str
    question: str
    aliases: list[str]
    graphs: list[str]  # the graphs (edits or seed facts) this fact belongs to
    origin: str = "seed"
    fact_id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.fact_id:
            self.fact_id = fact_id(self.subject, self.prompt, self.answer)


@dataclass(frozen=True)
class SeedEdit:
    """An edit request of the source version (its ``edit_id`` names its graph)."""

    edit_id: str
    subject: str
    prompt: str
    target_true: str
    target_new: str


def question_template(subject: str, question: str) -> str | None:
    """The question with the subject replaced by ``{}``, when the subject occurs in it exactly once."""
    if question.count(subject) != 1 or "{" in question or "}" in question:
        return None
    return question.replace(subject, "{}")


def fill(template: str, subject: str) -> str:
    return template.replace("{}", subject, 1)


def _check_template(relation: str, prompt: Any, question: Any, where: str) -> Template:
    if not isinstance(prompt, str) or prompt.count("{}") != 1:
        raise KnowgicError(
            f"{where}: relation {relation!r}: prompt must be a string with one {{}}, got {prompt!r}"
        )
    if not isinstance(question, str) or question.count("{}") != 1:
        raise KnowgicError(
            f"{where}: relation {relation!r}: question must be a string with one {{}}, got {question!r}"
        )
    return Template(relation, prompt, question, "templates-file")


def read_templates(path: Path) -> dict[str, Template]:
    """A YAML mapping relation -> {prompt, question}."""
    data = read_yaml(path, "the templates file")
    if not isinstance(data, dict) or not data:
        raise KnowgicError(f"{path}: expected a mapping of relation -> {{prompt, question}}")
    out: dict[str, Template] = {}
    for relation, entry in data.items():
        if not isinstance(entry, dict):
            raise KnowgicError(f"{path}: relation {relation!r}: expected {{prompt, question}}")
        out[str(relation)] = _check_template(
            str(relation), entry.get("prompt"), entry.get("question"), str(path)
        )
    return out


def _read_table(path: Path) -> list[dict[str, Any]]:
    if path.suffix.lower() == ".csv":
        text = read_text(path)
        reader = csv.DictReader(io.StringIO(text))
        if reader.fieldnames is None:
            raise UnreadableInput(f"{path}: the file is empty")
        return [dict(r) for r in reader]
    rows = read_rows(path)
    if not all(isinstance(r, dict) for r in rows):
        raise KnowgicError(f"{path}: every row must be an object with {', '.join(SEED_COLUMNS)}")
    return rows


def seeds_from_file(path: Path, templates: Mapping[str, Template]) -> list[SeedFact]:
    """Seed facts from a CSV/JSON/JSONL table with columns subject, relation, object (question and
    aliases optional; aliases as a list or separated by ``;``)."""
    rows = _read_table(path)
    if not rows:
        raise KnowgicError(f"{path}: no seed rows")
    missing = [c for c in SEED_COLUMNS if c not in rows[0]]
    if missing:
        raise KnowgicError(
            f"{path}: missing column(s) {', '.join(missing)} (a seed file needs {', '.join(SEED_COLUMNS)})"
        )
    facts: list[SeedFact] = []
    for i, row in enumerate(rows, start=1):
        values = {c: row.get(c) for c in SEED_COLUMNS}
        bad = [c for c, v in values.items() if not isinstance(v, str) or not v.strip()]
        if bad:
            raise KnowgicError(f"{path}: row {i}: empty or missing {', '.join(bad)}")
        relation = values["relation"].strip()
        template = templates.get(relation)
        if template is None:
            known = ", ".join(sorted(templates)) or "none"
            raise KnowgicError(
                f"{path}: row {i}: unknown relation {relation!r} (no template; known: {known})"
            )
        subject, answer = values["subject"].strip(), values["object"].strip()
        raw_aliases = row.get("aliases") or []
        aliases = [a.strip() for a in raw_aliases.split(";")] if isinstance(raw_aliases, str) else raw_aliases
        question = row.get("question") or fill(template.question, subject)
        fid = fact_id(subject, template.prompt, answer)
        facts.append(
            SeedFact(subject, relation, template.prompt, answer, question, [a for a in aliases if a], [fid])
        )
    return facts


def seeds_from_version(source: str) -> tuple[list[SeedFact], dict[str, Template], list[SeedEdit], dict]:
    """The facts, templates, edit requests and alias map of a dataset version (name) or folder (path)."""
    from knowgic.dataset.folder import open_dataset

    ds = open_dataset(source)
    templates: dict[str, Template] = {}
    questions: dict[str, set[str]] = defaultdict(set)
    facts: list[SeedFact] = []
    for row in ds.rows("facts"):
        question = row["questions"][0] if row["questions"] else ""
        facts.append(
            SeedFact(
                row["subject"],
                row["prompt"],
                row["prompt"],
                row["answer"],
                question,
                list(row["aliases"]),
                list(row["edit_ids"]),
            )
        )
        qt = question_template(row["subject"], question)
        if qt:
            questions[row["prompt"]].add(qt)
    for fact in facts:
        if fact.prompt not in templates:
            # the most common question form wins; ties by text, so the choice is deterministic
            forms = sorted(questions.get(fact.prompt, ()))
            question = forms[0] if forms else "Q: " + fact.prompt.replace("{}", "{}") + "?"
            templates[fact.prompt] = Template(fact.prompt, fact.prompt, question, "version")
    edits = []
    for row in ds.rows("edits"):
        rw = row["requested_rewrite"][0]
        edits.append(
            SeedEdit(
                row["edit_id"], rw["subject"], rw["prompt"], rw["target_true"]["str"], rw["target_new"]["str"]
            )
        )
    return facts, templates, edits, ds.aliases()


def counterfactual(fact: Mapping[str, Any], objects: Sequence[str], gold: set[str], seed: int) -> str | None:
    """A target_new for ``fact``: one of its relation's objects that is no gold answer of its (subject,
    relation) nor its subject, drawn by a generator seeded with (seed, fact_id); None when there is none."""
    options = sorted({o for o in objects if o not in gold and o != fact["subject"]})
    if not options:
        return None
    rng = random.Random(sha256_text(f"{seed}\x1f{fact['fact_id']}"))
    return rng.choice(options)


def to_rows(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [asdict(x) for x in items]
