"""Stage 3d, matching: extracted names to the graph's nodes, relation phrases to relation templates.

    triplet (s, r, o) --alias table, then rapidfuzz ratio vs node names and aliases--> canonical s, o
                       --rapidfuzz ratio vs template phrases (articles dropped)--> template | proposed

Both scores compare whole strings (``fuzz.ratio`` after ``utils.default_process``: lower case, punctuation
removed), so a name never merges into another it is only part of: "Harry Potter and the Goblet of Fire"
stays apart from "Harry Potter", "Microsoft Windows" from "Microsoft", and the relation phrase "is" from
"{} is the grandson of". Spelling variants ("Harry potter", "Harry Poter") merge; other names of a node
merge only through the alias table (the dataset's ``aliases.json``, the build's aliases), matched exactly
up to case. A name merges into a node when one node scores at least the cutoff and no other node ties
with it; otherwise it becomes a new node. Relation phrases drop the articles a, an, the before the
comparison ("is father of" is "{} is the father of"). A relation phrase without a template above its
cutoff gets a proposed template (spec ``new_relation``), reviewed with the triplets that use it. A
triplet that names its template (``template``: the prompt, as ``--extractor templates`` gives) takes it as
is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowgic.builder.generation import require
from knowgic.builder.seeds import Template, fill
from knowgic.builder.spec import BuilderSpec
from knowgic.dataset.derive import fact_id


@dataclass
class EntityMatcher:
    """Surface forms (node names and their aliases) -> canonical node name."""

    forms: dict[str, str]
    cutoff: float
    _folded: dict[str, str | None] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(
        cls, nodes: Sequence[str], aliases: Mapping[str, Sequence[str]], cutoff: float
    ) -> EntityMatcher:
        forms: dict[str, str] = {}
        for node in nodes:
            forms.setdefault(node, node)
            for alias in aliases.get(node, ()):
                forms.setdefault(alias, node)
        return cls(forms, cutoff)

    def _exact(self) -> dict[str, str | None]:
        """Case-folded surface form -> its node (None when two nodes share the form)."""
        if self._folded is None:
            self._folded = {}
            for form, node in self.forms.items():
                key = form.casefold()
                self._folded[key] = node if self._folded.get(key, node) == node else None
        return self._folded

    def match(self, name: str) -> tuple[str, float | None]:
        """(canonical name, score); the name itself and None when it matches no node unambiguously."""
        exact = self._exact()
        if name.casefold() in exact:
            node = exact[name.casefold()]
            return (node, 100.0) if node is not None else (name, None)
        rapidfuzz = require("rapidfuzz")
        hits = rapidfuzz.process.extract(
            name,
            list(self.forms),
            scorer=rapidfuzz.fuzz.ratio,
            processor=rapidfuzz.utils.default_process,
            score_cutoff=self.cutoff,
            limit=None,
        )
        if not hits:
            return name, None
        best = max(score for _, score, _ in hits)
        nodes = {self.forms[form] for form, score, _ in hits if score == best}
        if len(nodes) != 1:
            return name, None
        return nodes.pop(), float(best)

    def add(self, name: str) -> None:
        if name not in self.forms:
            self.forms[name] = name
            self._folded = None


ARTICLES = frozenset({"a", "an", "the"})


def relation_phrase(prompt: str) -> str:
    return " ".join(prompt.replace("{}", " ").split())


def relation_key(phrase: str) -> str:
    """The form a relation phrase is compared in: lower case, no punctuation, no articles."""
    rapidfuzz = require("rapidfuzz")
    return " ".join(w for w in rapidfuzz.utils.default_process(phrase).split() if w not in ARTICLES)


def map_relation(
    phrase: str, templates: Mapping[str, Template], cutoff: float
) -> tuple[Template | None, float | None]:
    rapidfuzz = require("rapidfuzz")
    choices = {name: relation_key(relation_phrase(t.prompt)) for name, t in templates.items()}
    if not choices:
        return None, None
    hit = rapidfuzz.process.extractOne(
        relation_key(phrase), choices, scorer=rapidfuzz.fuzz.ratio, score_cutoff=cutoff
    )
    if hit is None:
        return None, None
    _, score, name = hit
    return templates[name], float(score)


def similar_relations(prompts: Sequence[str], cutoff: float) -> dict[str, list[str]]:
    """Each relation template -> the templates whose phrase matches it as a relation phrase is matched
    to a template (ratio of the phrases without articles >= cutoff), itself included:
    "{} has grandchild" and "{} has a grandchild" are one relation spelled twice."""
    rapidfuzz = require("rapidfuzz")
    phrases = [relation_key(relation_phrase(p)) for p in prompts]
    scores = rapidfuzz.process.cdist(phrases, phrases, scorer=rapidfuzz.fuzz.ratio)
    return {
        p: [prompts[j] for j in range(len(prompts)) if scores[i][j] >= cutoff] for i, p in enumerate(prompts)
    }


def propose_template(spec: BuilderSpec, phrase: str) -> Template:
    relation = " ".join(phrase.split()).lower()
    return Template(
        relation,
        spec.new_relation["prompt"].format(relation=relation),
        spec.new_relation["question"].format(relation=relation),
        "proposed",
    )


def match(
    extractions: Sequence[dict[str, Any]],
    sentences: Mapping[str, dict[str, Any]],
    cots: Mapping[str, dict[str, Any]],
    seed_facts: Sequence[dict[str, Any]],
    templates: Mapping[str, Template],
    aliases: Mapping[str, Sequence[str]],
    spec: BuilderSpec,
) -> dict[str, Any]:
    """Candidate facts (distinct by (subject, prompt, answer), sources merged) and proposed templates."""
    d = spec.defaults
    nodes = sorted({f["subject"] for f in seed_facts} | {f["answer"] for f in seed_facts})
    entities = EntityMatcher.build(nodes, aliases, float(d["entity_match_cutoff"]))
    known = {f["fact_id"] for f in seed_facts}
    by_fact = {f["fact_id"]: f for f in seed_facts}
    all_templates = dict(templates)
    by_prompt = {t.prompt: t for t in templates.values()}
    proposed: dict[str, Template] = {}
    candidates: dict[str, dict[str, Any]] = {}
    counts = {"triplets": 0, "already_in_seeds": 0, "new_templates": 0}
    for ex in extractions:
        sentence = sentences[ex["sentence_id"]]
        seed = by_fact[cots[sentence["cot_id"]]["fact_id"]]
        for t in ex["triplets"]:
            counts["triplets"] += 1
            subject, s_score = entities.match(t["subject"])
            answer, o_score = entities.match(t["object"])
            if subject == answer:
                continue
            # a rule extractor that read the sentence as a template names it (--extractor templates)
            template, r_score = by_prompt.get(t.get("template", "")), 100.0
            if template is None:
                template, r_score = map_relation(
                    t["relation"], all_templates, float(d["relation_match_cutoff"])
                )
            if template is None:
                template = propose_template(spec, t["relation"])
                if template.relation not in proposed:
                    proposed[template.relation] = template
                    all_templates[template.relation] = template
                    counts["new_templates"] += 1
            entities.add(subject)
            entities.add(answer)
            fid = fact_id(subject, template.prompt, answer)
            if fid in known:
                counts["already_in_seeds"] += 1
                continue
            source = {
                "seed_fact_id": seed["fact_id"],
                "cot_id": sentence["cot_id"],
                "sentence_id": sentence["sentence_id"],
                "sentence": sentence["text"],
                "extracted": t,
                "scores": {"subject": s_score, "relation": r_score, "object": o_score},
            }
            cand = candidates.get(fid)
            if cand is None:
                candidates[fid] = {
                    "fact_id": fid,
                    "subject": subject,
                    "relation": template.relation,
                    "prompt": template.prompt,
                    "question": fill(template.question, subject),
                    "answer": answer,
                    "aliases": [],
                    "graphs": list(seed["graphs"]),
                    "origin": "extracted",
                    "template_origin": template.origin,
                    "sources": [source],
                }
            else:
                cand["sources"].append(source)
                cand["graphs"] = sorted(set(cand["graphs"]) | set(seed["graphs"]))
    return {
        "candidates": list(candidates.values()),
        "proposed_templates": [vars(t) for t in proposed.values()],
        "counts": counts,
    }
