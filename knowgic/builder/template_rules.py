"""Stage 3c without a language model: a sentence read as one of the build's relation templates
(``--extractor templates``).

    sentence "S <fixed text of a template> O." --split at the template's fixed text--> (S, template, O)

A relation template is a cloze prompt with ``{}`` for the subject ("{} is a sibling of", "{}'s schoolmate
is"); a sentence in the template's own phrasing is the prompt filled with a subject and followed by an
object: "Aidan Clinton Mezvinsky is a sibling of Charlotte Clinton Mezvinsky." gives (Aidan Clinton
Mezvinsky, "{} is a sibling of", Charlotte Clinton Mezvinsky). The rules:

- the text before ``{}`` must open the sentence, and the text after it must follow the subject (case
  folded, at word boundaries); the subject is what lies between, the object what follows, trailing
  punctuation stripped;
- of the templates a sentence fits, the one with the longest fixed text wins ("{} is the father-in-law of"
  over "{} is the father of"... only one of them fits; "{} is associated with the sport of" over "{} is
  associated with"), then the earliest split;
- a subject or object that is empty, longer than ``max_entity_chars``, that holds a clause (an auxiliary
  such as "is" or "was", or a colon: "Kern County is sebreix", "Q: Who") or a relation's phrase ("the CEO
  of Madameron Dward", "the child of the child of Chelsea Clinton": a description through another
  relation, not a name) or that opens with a lower-case preposition ("for Ravenclaw" after "{} is head of
  house": the sentence's relation is longer than the template) is no name, and the sentence gives no
  triplet; nor does a question.

A template's phrase inside a name is its fixed text without a leading auxiliary ("is", "was", "has", ...)
when at least two words remain: "the CEO of" for "{} was the CEO of", "a sibling of" for "{} is a sibling
of". Deterministic: the same sentences and templates give the same triplets. Each triplet names its
template (``template``), so matching takes it as is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from knowgic.builder.spec import BuilderSpec

TEMPLATES = "templates"  # the --extractor value
RULES_VERSION = 2  # part of the stage key: a change of the rules reruns the stage
AUXILIARIES = frozenset({"is", "was", "are", "were", "has", "have", "had", "be", "been"})
PREPOSITIONS = frozenset({"for", "of", "in", "at", "to", "by", "with", "from", "on", "as", "about"})
"""A name never opens with one of these in lower case: "for Ravenclaw" after "{} is head of house" means the
sentence's relation ("is head of house for") is longer than the template, and the object is not a name."""
TRAILING = " \t\n.,;:!?\"'”’)"


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def nested_phrase(prompt: str) -> str | None:
    """The part of a template's fixed text that marks a relation inside a name, or None when too short."""
    words = _fold(prompt.replace("{}", " ")).split()
    if words and words[0] in AUXILIARIES:
        words = words[1:]
    words = [w for w in words if w not in ("'s",)]
    return " ".join(words) if len(words) >= 2 else None


class TemplateReader:
    """Reads sentences as (subject, template, object) against a fixed set of templates."""

    def __init__(self, prompts: Iterable[str], max_entity_chars: int) -> None:
        self.prompts = sorted({p for p in prompts if p.count("{}") == 1 and p.split("{}")[1].strip()})
        self.max_chars = max_entity_chars
        # longest fixed text first, then the prompt itself: the order of the rules above
        self.order = sorted(self.prompts, key=lambda p: (-len(_fold(p.replace("{}", ""))), p))
        self.patterns = {p: self._pattern(p) for p in self.prompts}
        nested = {n for p in self.prompts if (n := nested_phrase(p))}
        self.nested = (
            re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in sorted(nested)) + r")(?!\w)")
            if nested
            else None
        )

    def holds_relation(self, name: str) -> bool:
        return bool(self.nested and self.nested.search(_fold(name)))

    def is_name(self, text: str) -> bool:
        """Whether ``text`` can be a node's name: within the length limit, no clause in it (an auxiliary
        word, a colon: "Kern County is sebreix", "Q: Who"), no relation's phrase, no opening lower-case
        preposition ("for Ravenclaw")."""
        words = set(_fold(text).split())
        first = text.split()[0] if text.split() else ""
        return (
            len(text) <= self.max_chars
            and first not in PREPOSITIONS
            and ":" not in text
            and not words & AUXILIARIES
            and not self.holds_relation(text)
        )

    @staticmethod
    def _pattern(prompt: str) -> re.Pattern[str]:
        head, tail = (part.split() for part in prompt.split("{}"))
        words = r"\s+".join
        text = "^"
        if head:
            text += words(map(re.escape, head)) + ("" if head[-1].endswith("'s") else r"\s+")
        text += r"(?P<subject>.+?)"
        if tail:
            text += ("" if tail[0].startswith("'") else r"\s+") + words(map(re.escape, tail))
        return re.compile(text + r"(?:\s+(?P<object>.*)|[^\w\s]*)$", re.IGNORECASE | re.DOTALL)

    def _split(self, text: str, prompt: str) -> tuple[str, str] | None:
        hit = self.patterns[prompt].match(text.strip())
        if hit is None:
            return None
        obj = " ".join((hit["object"] or "").split()).rstrip(TRAILING).strip()
        return " ".join(hit["subject"].split()), obj

    def read(self, text: str) -> tuple[str, str, str] | None:
        """(subject, prompt, object) of the first template the sentence fits, or None."""
        if text.rstrip().endswith("?"):  # a question states nothing
            return None
        for prompt in self.order:
            parts = self._split(text, prompt)
            if parts is None:
                continue
            subject, obj = parts
            if not subject or not obj or subject.casefold() == obj.casefold():
                return None
            if not (self.is_name(subject) and self.is_name(obj)):
                return None
            return subject, prompt, obj
        return None


def templates_config(prompts: Iterable[str], spec: BuilderSpec) -> dict[str, Any]:
    """What the extraction stage's output depends on with this extractor (its stage key)."""
    return {
        "extractor": TEMPLATES,
        "rules": RULES_VERSION,
        "templates": sorted(set(prompts)),
        "max_entity_chars": int(spec.defaults["max_entity_chars"]),
    }


def rule_row(sentence_id: str, triplets: list[dict[str, Any]]) -> dict[str, Any]:
    """A rule extractor's row for one sentence, in the model extractor's shape (no prompt, no output)."""
    return {
        "sentence_id": sentence_id,
        "prompt": None,
        "output": None,
        "error": None,
        "triplets": triplets,
        "copied_examples": 0,
    }


def extract_templates(
    sentences: Sequence[dict[str, Any]], prompts: Iterable[str], spec: BuilderSpec
) -> list[dict[str, Any]]:
    """The extraction rows of the model extractor's shape ({sentence_id, triplets, ...}), by rule."""
    from knowgic.builder.match import relation_phrase

    reader = TemplateReader(prompts, int(spec.defaults["max_entity_chars"]))
    rows = []
    for sent in sentences:
        found = reader.read(sent["text"])
        triplets = []
        if found is not None:
            s, prompt, o = found
            triplets.append(
                {"subject": s, "relation": relation_phrase(prompt), "object": o, "template": prompt}
            )
        rows.append(rule_row(sent["sentence_id"], triplets))
    return rows
