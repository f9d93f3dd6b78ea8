"""Subject aliases: the other names under which the model knows a graph's subject, validated like facts.

    subject --spec subject_aliases prompt ("{subject} is also known as")--> greedy continuation
      --first sentence, split at "," ";" " or " " and "--> candidate names (names by the template rules)
      --each candidate: the subject's known facts asked with the candidate in the subject's place,
        scored by the known rule (n_gold as in the graph)--> accepted when
        (1) the model knows more than ``min_agreement`` of those facts under the candidate, and
        (2) the candidate is no other node of the graph (another subject or answer).

RippleEdits' Subject Aliasing asks an edit under its subject's aliases, so the aliases must be names the
model takes for the subject: an alias of an answer (``aliases.json``) says nothing about that. A name the
model merely continues after "is also known as" can be anything ("Rome is also known as Apple Inc."), so a
candidate must carry the subject's facts, the test a fact passes (:mod:`knowgic.builder.validate`) applied
to each fact with the alias as its subject. Rule (2) stops a sibling, which shares most of a subject's
facts ("is the child of Chelsea Clinton"), from passing for the subject: a name the graph holds as a node
of its own is another entity.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from knowgic.builder.generation import Generator
from knowgic.builder.spec import BuilderSpec
from knowgic.builder.store import Journal
from knowgic.builder.template_rules import TRAILING, TemplateReader
from knowgic.builder.validate import fact_query, gold_counts

SEPARATORS = re.compile(r"\s*(?:,|;|\bor\b|\band\b)\s*", re.IGNORECASE)
"""Between two names of one answer ("the Boy Who Lived, or the Chosen One")."""
SENTENCE_END = re.compile(r"(?<=[^\s.][^\s.])\.(?:\s|$)|\n")
"""The end of the first sentence: a full stop after two word characters (not "Dr." nor "St.": the names
keep them) or a line break."""


def alias_prompt(spec: BuilderSpec, subject: str, chat: bool) -> str:
    return spec.subject_aliases["chat" if chat else "base"].format(subject=subject)


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def candidate_names(subject: str, output: str, reader: TemplateReader) -> list[str]:
    """The distinct names the model's continuation gives: its first sentence split at the separators, each
    stripped of quotes and trailing punctuation; the subject itself and what is no name (a clause, a
    relation's phrase, over the length limit: :meth:`TemplateReader.is_name`) left out."""
    first = SENTENCE_END.split(output.strip(), maxsplit=1)[0]
    out: list[str] = []
    for part in SEPARATORS.split(first):
        name = " ".join(part.split()).strip(TRAILING).lstrip("\"'“‘(").strip()
        if not name or _fold(name) == _fold(subject) or not reader.is_name(name):
            continue
        if _fold(name) not in {_fold(n) for n in out}:
            out.append(name)
    return out


def distinguishing_facts(facts: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Subject -> its facts whose (template, answer) no other subject of ``facts`` has: the facts that tell
    the subject apart. "Cedric Diggory studied at Hogwarts" does not (Ron and Hermione studied there too),
    so a name under which the model says "studied at Hogwarts" is not shown to be Cedric's."""
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in facts:
        holders[(f["prompt"], f["answer"])].add(f["subject"])
    out: dict[str, list[Mapping[str, Any]]] = {f["subject"]: [] for f in facts}
    for f in facts:
        if holders[(f["prompt"], f["answer"])] == {f["subject"]}:
            out[f["subject"]].append(f)
    return out


def as_alias(fact: Mapping[str, Any], alias: str) -> dict[str, Any]:
    """``fact`` asked about ``alias``: the same template, question and answers, the alias as its subject."""
    return {**fact, "subject": alias}


def check_candidates(
    candidates: Sequence[tuple[str, str]],
    by_subject: Mapping[str, Sequence[Mapping[str, Any]]],
    gold: Mapping[tuple[str, str], int],
    nodes: set[str],
    loaded: Any,
    scorer: Any,
    min_agreement: float,
) -> list[dict[str, Any]]:
    """Each (subject, candidate) with its evidence: the subject's distinguishing facts (``by_subject``)
    scored with the candidate as their subject, n_gold as the graph counts it (``gold``: (subject,
    template) -> answers), in one scorer call; how many the model knows, whether the candidate names
    another node of the graph (``nodes``: every subject and answer, case folded), and the verdict."""
    queries = [
        fact_query(as_alias(f, name), gold.get((subject, f["prompt"]), 1))
        for subject, name in candidates
        for f in by_subject[subject]
    ]
    scores = scorer.score(loaded.model, loaded.tokenizer, queries) if queries else None
    out, at = [], 0
    for subject, name in candidates:
        facts = by_subject[subject]
        known = [bool(k) for k in scores.known[at : at + len(facts)]] if scores else []
        p = [float(x) for x in scores.p[at : at + len(facts)]] if scores else []
        at += len(facts)
        other = _fold(name) in nodes
        out.append(
            {
                "subject": subject,
                "alias": name,
                "facts": len(facts),
                "known": sum(known),
                "other_node": other,
                "accepted": bool(facts) and not other and sum(known) > min_agreement * len(facts),
                "scores": [
                    {"fact_id": f["fact_id"], "p": pi, "known": ki}
                    for f, pi, ki in zip(facts, p, known, strict=True)
                ],
            }
        )
    return out


def subject_aliases(
    facts: Sequence[Mapping[str, Any]],
    generator: Generator,
    scorer: Any,
    spec: BuilderSpec,
    journal: Journal,
    prompts: Sequence[str],
    progress: bool = True,
) -> dict[str, Any]:
    """Every subject of the graph's ``facts`` (all known), in order of first appearance: the prompt, the
    model's continuation, its candidates with their evidence, and the accepted aliases
    (``aliases``: subject -> names, only subjects with one). ``prompts``: the build's relation templates,
    whose phrases are no name (:class:`TemplateReader`)."""
    d = spec.defaults
    conf = spec.subject_aliases
    subjects = list(dict.fromkeys(f["subject"] for f in facts))
    by_subject = distinguishing_facts(facts)
    todo = [s for s in subjects if s not in journal.done]
    chat = bool(generator.loaded.is_chat)
    texts = [alias_prompt(spec, s, chat) for s in todo]
    bar = tqdm(total=len(todo), desc="subject aliases", disable=not progress, leave=False)

    def record(start: int, outputs: list[str]) -> None:
        for subject, prompt, output in zip(todo[start:], texts[start:], outputs, strict=False):
            journal.add(subject, {"subject": subject, "prompt": prompt, "output": output})
        bar.update(len(outputs))

    generator.generate(texts, int(conf["max_new_tokens"]), on_batch=record)
    bar.close()
    reader = TemplateReader(prompts, int(d["max_entity_chars"]))
    nodes = {_fold(x) for f in facts for x in (f["subject"], f["answer"])}
    rows = {s: {**journal.done[s], "candidates": []} for s in subjects}
    pairs = [(s, name) for s in subjects for name in candidate_names(s, rows[s]["output"], reader)]
    checked = check_candidates(
        pairs, by_subject, gold_counts(facts), nodes, generator.loaded, scorer, float(conf["min_agreement"])
    )
    accepted: dict[str, list[str]] = {}
    for c in checked:
        rows[c["subject"]]["candidates"].append({k: v for k, v in c.items() if k != "subject"})
        if c["accepted"]:
            accepted.setdefault(c["subject"], []).append(c["alias"])
    return {"subjects": list(rows.values()), "aliases": accepted}
