"""Subject aliases: the other names under which the model knows a graph's subject, validated like facts.

    subject --spec subject_aliases prompt ("{subject} is also known as")--> greedy continuation
      --first sentence, split at "," ";" " or " " and "--> candidate names (names by the template rules)
      --evidence: the subject's facts no other subject has, that the model does not complete the same
        way for any of ``controls`` other subjects ("X is situated in" California, whatever X)
      --each candidate: the evidence facts asked with the candidate in the subject's place, scored by
        the known rule with n_gold = 1 (the greedy continuation holds one of the subject's answers)-->
        accepted when
        (1) the model knows more than ``min_agreement`` of the evidence facts under the candidate, and
        (2) the candidate is no other node of the graph, nor holds every word of one, and
        (3) it carries the subject's facts better than those of its namesake (the other subject sharing
            most words with it).

RippleEdits' Subject Aliasing asks an edit under its subject's aliases, so the aliases must be names the
model takes for the subject: an alias of an answer (``aliases.json``) says nothing about that. A name the
model merely continues after "is also known as" can be anything ("Rome is also known as Apple Inc."), so a
candidate must carry the subject's facts, the test a fact passes (:mod:`knowgic.builder.validate`) applied
to each fact with the alias as its subject. Rule (2) stops a sibling, which shares most of a subject's
facts ("is the child of Chelsea Clinton"), from passing for the subject: a name the graph holds as a node
of its own is another entity.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from knowgic.builder.generation import Generator
from knowgic.builder.spec import BuilderSpec
from knowgic.builder.store import Journal
from knowgic.builder.template_rules import TRAILING, TemplateReader
from knowgic.builder.validate import fact_query

RULES_VERSION = 4  # part of the stage key: a change of the rules below reruns the stage
SEPARATORS = re.compile(r"\s*(?:,|;|\bor\b|\band\b)\s*", re.IGNORECASE)
"""Between two names of one answer ("the Boy Who Lived, or the Chosen One")."""
SENTENCE_END = re.compile(r"(?<=[^\s.][^\s.])\.(?:\s|$)|\n")
"""The end of the first sentence: a full stop after two word characters (not "Dr." nor "St.": the names
keep them) or a line break."""


def alias_prompt(spec: BuilderSpec, subject: str, chat: bool) -> str:
    return spec.subject_aliases["chat" if chat else "base"].format(subject=subject)


def fold(text: str) -> str:
    """A name as compared: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


def _cut(name: str) -> bool:
    """A name cut short after an initial ("William H", "Ward W": the model stopped at "William H.")."""
    last = name.split()[-1].rstrip(".")
    return len(name.split()) > 1 and len(last) < 2


def candidate_names(subject: str, output: str, reader: TemplateReader) -> list[str]:
    """The distinct names the model's continuation gives: its first sentence split at the separators, each
    stripped of quotes and trailing punctuation; the subject itself, what is no name (a clause, a
    relation's phrase, over the length limit: :meth:`TemplateReader.is_name`) and a name cut short after
    an initial left out."""
    first = SENTENCE_END.split(output.strip(), maxsplit=1)[0]
    out: list[str] = []
    for part in SEPARATORS.split(first):
        name = " ".join(part.split()).strip(TRAILING).lstrip("\"'“‘(").strip()
        if not name or fold(name) == fold(subject) or not reader.is_name(name) or _cut(name):
            continue
        if fold(name) not in {fold(n) for n in out}:
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


FUNCTION_WORDS = frozenset({"the", "and", "of", "for", "von", "van", "de"})


def _words(name: str) -> set[str]:
    """The words of a name that can tell it apart (no initials, no function words)."""
    return {w for w in re.findall(r"\w+", name.casefold()) if len(w) > 2 and w not in FUNCTION_WORDS}


def names_other_node(name: str, subject: str, nodes: set[str]) -> bool:
    """Whether ``name`` is another node of the graph (``nodes``: subjects and answers, case folded) or
    holds every word of one ("Professor Quirinus Quirrell" holds Professor Quirrell, "Elvis A. Presley"
    Elvis Presley): a fuller form of another entity's name is that entity's."""
    folded, own = fold(name), fold(subject)
    words = _words(name)
    return any(
        node != own and (node == folded or (_words(node) and _words(node) <= words and node not in own))
        for node in nodes
    )


def rival(name: str, subject: str, subjects: Sequence[str]) -> str | None:
    """The other subject whose name shares the most words with ``name`` (first in order on a tie), or None
    when none shares a word: the entity a namesake candidate may really be ("Ronald B. Weasley" for
    Hermione Granger is Ron Weasley's)."""
    mine = _words(name)
    best, most = None, 0
    for other in subjects:
        shared = len(mine & _words(other))
        if other != subject and shared > most:
            best, most = other, shared
    return best


class _Asker:
    """Collects (fact, name) questions and scores them in one scorer call. A fact is asked as its subject's
    whole answer set for the template (``answers``: (subject, template) -> answers) under ``n_gold`` = 1:
    the model's greedy continuation must hold one of them. The graph's own rule, top ``n_gold`` first
    tokens for a one-to-many fact, lets most names pass ("Mark C. Keller's schoolmate is" has Hermione
    Granger among its four likeliest continuations)."""

    def __init__(self, answers: Mapping[tuple[str, str], Sequence[str]]) -> None:
        self.answers = answers
        self.queries: list[Any] = []

    def ask(self, facts: Sequence[Mapping[str, Any]], name: str) -> slice:
        at = len(self.queries)
        for f in facts:
            others = [a for a in self.answers.get((f["subject"], f["prompt"]), ()) if a != f["answer"]]
            asked = {**as_alias(f, name), "aliases": [*f.get("aliases", ()), *others]}
            self.queries.append(fact_query(asked, 1))
        return slice(at, len(self.queries))

    def score(self, loaded: Any, scorer: Any) -> tuple[list[bool], list[float]]:
        if not self.queries:
            return [], []
        scores = scorer.score(loaded.model, loaded.tokenizer, self.queries)
        return [bool(k) for k in scores.known], [float(x) for x in scores.p]


def answer_sets(facts: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(subject, template) -> the graph's answers for it, in order."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for f in facts:
        if f["answer"] not in out[(f["subject"], f["prompt"])]:
            out[(f["subject"], f["prompt"])].append(f["answer"])
    return dict(out)


def check_candidates(
    candidates: Sequence[tuple[str, str]],
    by_subject: Mapping[str, Sequence[Mapping[str, Any]]],
    answers: Mapping[tuple[str, str], Sequence[str]],
    nodes: set[str],
    controls: Mapping[str, Sequence[str]],
    loaded: Any,
    scorer: Any,
    min_agreement: float,
) -> list[dict[str, Any]]:
    """Each (subject, candidate) with its evidence and verdict (the module's rules):

    - ``evidence``: the subject's distinguishing facts (``by_subject``) the model does not know for any of
      the subject's ``controls`` (other subjects): a fact the model completes the same way whatever the
      subject ("X is situated in" California) tells no name apart;
    - ``known``: how many of them the model knows with the candidate as their subject: its greedy
      continuation holds one of the subject's answers for the template (``answers``, :class:`_Asker`);
    - ``other_node``: the candidate is, or holds every word of, another node of the graph (``nodes``:
      subjects and answers, folded; :func:`names_other_node`);
    - ``rival``: the other subject sharing most words with the candidate, and ``rival_known`` of its
      distinguishing facts known under the candidate: a candidate that carries its namesake's facts as
      well as the subject's is the namesake's.
    """
    subjects = list(by_subject)
    asker = _Asker(answers)
    with_candidates = list(dict.fromkeys(s for s, _ in candidates))
    control_at = {(s, c): asker.ask(by_subject[s], c) for s in with_candidates for c in controls.get(s, ())}
    plans = []
    for subject, name in candidates:
        other = rival(name, subject, subjects)
        plans.append(
            (
                subject,
                name,
                asker.ask(by_subject[subject], name),
                other,
                asker.ask(by_subject[other], name) if other else slice(0, 0),
            )
        )
    known, p = asker.score(loaded, scorer)
    out = []
    for subject, name, mine, other, theirs in plans:
        facts = by_subject[subject]
        prior = [
            any(known[control_at[(subject, c)]][i] for c in controls.get(subject, ()))
            for i in range(len(facts))
        ]
        evidence = [i for i in range(len(facts)) if not prior[i]]
        hits = sum(known[mine][i] for i in evidence)
        rival_facts = by_subject[other] if other else []
        rival_hits = sum(known[theirs])
        share = hits / len(evidence) if evidence else 0.0
        rival_share = rival_hits / len(rival_facts) if rival_facts else 0.0
        is_node = names_other_node(name, subject, nodes)
        out.append(
            {
                "subject": subject,
                "alias": name,
                "facts": len(facts),
                "evidence": len(evidence),
                "known": hits,
                "other_node": is_node,
                "rival": other,
                "rival_facts": len(rival_facts),
                "rival_known": rival_hits,
                "accepted": bool(evidence)
                and not is_node
                and share > min_agreement
                and not (rival_facts and rival_share >= share),
                "scores": [
                    {"fact_id": f["fact_id"], "p": p[mine][i], "known": known[mine][i], "prior": prior[i]}
                    for i, f in enumerate(facts)
                ],
            }
        )
    return out


def control_names(subjects: Sequence[str], k: int, seed: int) -> dict[str, list[str]]:
    """Subject -> ``k`` other subjects, drawn with a generator seeded by (seed, subject)."""
    out = {}
    for s in subjects:
        others = [o for o in subjects if o != s]
        out[s] = random.Random(f"{seed}:{s}").sample(others, min(k, len(others)))
    return out


def subject_aliases(
    facts: Sequence[Mapping[str, Any]],
    generator: Generator,
    scorer: Any,
    spec: BuilderSpec,
    journal: Journal,
    prompts: Sequence[str],
    seed: int,
    progress: bool = True,
) -> dict[str, Any]:
    """Every subject of the graph's ``facts`` (all known), in order of first appearance: the prompt, the
    model's continuation, its candidates with their evidence, and the accepted aliases
    (``aliases``: subject -> names, only subjects with one). ``prompts``: the build's relation templates,
    whose phrases are no name (:class:`TemplateReader`); ``seed``: the build's, for the control subjects."""
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
    nodes = {fold(x) for f in facts for x in (f["subject"], f["answer"])}
    rows = {s: {**journal.done[s], "candidates": []} for s in subjects}
    pairs = [(s, name) for s in subjects for name in candidate_names(s, rows[s]["output"], reader)]
    controls = control_names(subjects, int(conf["controls"]), seed)
    checked = check_candidates(
        pairs,
        by_subject,
        answer_sets(facts),
        nodes,
        controls,
        generator.loaded,
        scorer,
        float(conf["min_agreement"]),
    )
    accepted: dict[str, list[str]] = {}
    for c in checked:
        rows[c["subject"]]["candidates"].append({k: v for k, v in c.items() if k != "subject"})
        if c["accepted"]:
            accepted.setdefault(c["subject"], []).append(c["alias"])
    return {"subjects": list(rows.values()), "aliases": accepted}
