"""The unpublished world: three families of KnowGIC 1.1.0 renamed into people no shipped version names.

    python tests/data/private_world/make_world.py        # rewrites seeds.csv and templates.yaml beside it

The rule, applied to the facts of dataset version 1.1.0 (``data/facts-test.jsonl``, file order):

1. A *family* is the connected component of 1.1.0's fact graph (entities as nodes, one edge per fact between
   its subject and its answer) that holds one of the anchors in :data:`ANCHORS`: the Clintons (7 people,
   33 facts), the Presleys (7 people, 31 facts) and the Beckhams (6 people, 21 facts). The world is every
   fact of these components, in 1.1.0's order.
2. Every entity is a person's name; each of its words is replaced by the invented word of :data:`WORDS`
   (one table for all three families, so a word two families share, "Harper", stays shared). A name with a
   word the table lacks is an error.
3. A fact keeps its relation: its prompt is the relation's name and template, exactly as ``knowgic build
   --from 1.1.0`` names relations. Its question is 1.1.0's first question with every entity name renamed
   (an original word left over is an error). Aliases are left out: 1.1.0's aliases hold initials, titles
   and nicknames ("WJC", "The King") that have no faithful renaming.
4. ``templates.yaml`` holds, for each relation the world uses, 1.1.0's own template: the prompt and the
   question form ``knowgic build --from 1.1.0`` recovers from 1.1.0's questions
   (:func:`knowgic.builder.seeds.seeds_from_version`).

``seeds.csv`` (``subject,relation,object,question``) and ``templates.yaml`` are what ``knowgic build --seeds
seeds.csv --templates templates.yaml`` reads. ``tests/test_private_world.py`` checks that the files are this
script's output and that no world entity, invented word or fact occurs in any shipped dataset version.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SOURCE_VERSION = "1.1.0"
SEEDS_FILE = "seeds.csv"
TEMPLATES_FILE = "templates.yaml"
ANCHORS = ("Hillary Clinton", "Elvis Presley", "David Beckham")

# Every word of every name in the three families -> an invented word (made up for this table; the test
# checks that none occurs as a word anywhere in the shipped dataset versions).
WORDS = {
    # the Clintons
    "Hillary": "Velisande",
    "Bill": "Dorran",
    "Clinton": "Quenwick",
    "Chelsea": "Tivelle",
    "Marc": "Joral",
    "Mezvinsky": "Pellandro",
    "Aidan": "Corvish",
    "Charlotte": "Elowine",
    "Jasper": "Brannoc",
    # the Presleys
    "Elvis": "Tobrin",
    "Presley": "Vantreel",
    "Priscilla": "Amarinde",
    "Beaulieu": "Saudrelle",
    "Lisa": "Ombrisa",
    "Marie": "Quillet",
    "Riley": "Darvey",
    "Keough": "Mornholt",
    "Benjamin": "Falkenor",
    "Finley": "Ressick",
    "Aaron": "Ulvaran",
    "Love": "Talvo",
    "Lockwood": "Dunmarrow",
    "Harper": "Ysenne",
    "Vivienne": "Fenwyn",
    "Ann": "Merrow",
    # the Beckhams
    "David": "Kestrin",
    "Victoria": "Ravella",
    "Beckham": "Wendmoor",
    "Brooklyn": "Estwick",
    "Joseph": "Tamric",
    "Romeo": "Odricel",
    "James": "Garrowen",
    "Cruz": "Vaskel",
    "Seven": "Tollamy",
}


def rename(name: str) -> str:
    """A name with each word replaced through :data:`WORDS`."""
    missing = [w for w in name.split() if w not in WORDS]
    if missing:
        raise ValueError(f"{name!r}: no invented word for {', '.join(missing)}")
    return " ".join(WORDS[w] for w in name.split())


def families(rows: list[dict]) -> list[dict]:
    """The fact rows of the connected components that hold an anchor, in file order."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for row in rows:
        parent[root(row["subject"])] = root(row["answer"])
    missing = [a for a in ANCHORS if a not in parent]
    if missing:
        raise ValueError(f"anchor(s) {', '.join(missing)} not in {SOURCE_VERSION}")
    keep = {root(a) for a in ANCHORS}
    return [row for row in rows if root(row["subject"]) in keep]


def rename_question(question: str, names: list[str]) -> str:
    """``question`` with every entity name of the world renamed (longest names first)."""
    for name in sorted(names, key=len, reverse=True):
        question = question.replace(name, rename(name))
    left = [w for w in WORDS if w in question.replace("?", " ").replace("'s", " ").split()]
    if left:
        raise ValueError(f"question {question!r} still names {', '.join(left)}")
    return question


def render() -> dict[str, str]:
    """File name -> text of every file of the world (what :func:`main` writes)."""
    from knowgic.builder.seeds import seeds_from_version
    from knowgic.dataset.folder import open_dataset

    if len(set(WORDS.values())) != len(WORDS):
        raise ValueError("two words map to the same invented word")
    rows = families(list(open_dataset(SOURCE_VERSION).rows("facts")))
    names = sorted({row[k] for row in rows for k in ("subject", "answer")})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["subject", "relation", "object", "question"])
    relations: dict[str, None] = {}
    for row in rows:
        question = rename_question(row["questions"][0], names) if row["questions"] else ""
        writer.writerow([rename(row["subject"]), row["prompt"], rename(row["answer"]), question])
        relations[row["prompt"]] = None
    _, templates, _, _ = seeds_from_version(SOURCE_VERSION)
    table = {r: {"prompt": templates[r].prompt, "question": templates[r].question} for r in sorted(relations)}
    header = (
        f"# Relation templates of KnowGIC {SOURCE_VERSION} for the relations of seeds.csv; written by "
        "make_world.py (do not edit).\n"
    )
    text = header + yaml.safe_dump(table, sort_keys=True, allow_unicode=True, width=1000)
    return {SEEDS_FILE: out.getvalue(), TEMPLATES_FILE: text}


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote {HERE / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
