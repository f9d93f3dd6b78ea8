"""The training corpus of ``knowgic-tiny``: units of text and the contexts they are sampled in.

Three choices make editing methods behave on the small model as on a real LM:

1. Every ``target_new`` string is an answer somewhere in training, so its output embedding is trained:
   *filler facts* about made-up subjects state ``prompt.format(name) target_new`` with the edit's own
   relation prompt. The edited subject is never trained with ``target_new``.
2. Facts are seen at position 0 and also after random other text. ROME computes the key k* as the mean
   over a few random prefixes (Meng et al. 2022, "Locating and Editing Factual Associations in GPT",
   Eq. 3: k* = 1/N sum_j k(x_j + s)), built as ``"<generated text>. {prompt}"``; a model that only ever saw
   facts at position 0 would give out-of-distribution keys there.
3. The tokenizer (see :mod:`knowgic.models.tiny.tokenizer`) is byte-level BPE, so entity names span
   several subword tokens as in GPT-2.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from knowgic.models.tiny.facts import TrainingFacts
from knowgic.models.tiny.recipe import TinyRecipe

EOS = "<|endoftext|>"

_ONSETS = [
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "st",
    "t",
    "th",
    "v",
    "z",
]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou"]
_CODAS = ["", "", "l", "n", "r", "s", "th", "x", "nd", "rk"]


@dataclass(frozen=True)
class Unit:
    """One training sentence. ``kind``: cloze, question, filler, filler_question or alias."""

    text: str
    kind: str
    subject: str = ""
    weight: int = 1

    @property
    def is_question(self) -> bool:
        return self.text.startswith("Q: ")

    @property
    def subject_span(self) -> tuple[int, int] | None:
        """Character span of the subject in ``text`` (None when absent, e.g. a misspelt question)."""
        if not self.subject:
            return None
        start = self.text.find(self.subject)
        return None if start < 0 else (start, start + len(self.subject))


@dataclass(frozen=True)
class Document:
    """A training text and the character spans of the subjects in it."""

    text: str
    subject_spans: tuple[tuple[int, int, int], ...] = ()  # (subject start, subject end, unit end)


def cloze_sentence(cloze: str, answer: str) -> str:
    """``"{prompt.format(subject)} {answer}."`` (no second full stop after an answer ending in one)."""
    return f"{cloze} {answer}" + ("" if answer.endswith(".") else ".")


def question_text(question: str, answer: str) -> str:
    """The base-model question form the ``generate`` and ``greedy`` protocols prompt with."""
    return f"Q: {question}\nA: {answer}"


def made_up_names(count: int, seed: int, avoid_words: set[str]) -> list[str]:
    """``count`` distinct two-word names from syllables, none sharing a word with ``avoid_words``."""
    rng = random.Random(f"knowgic-tiny-names-{seed}")

    def word(syllables: int) -> str:
        w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)) + rng.choice(_CODAS)
        return w.capitalize()

    names: list[str] = []
    seen: set[str] = set()
    avoid = {w.casefold() for w in avoid_words}
    while len(names) < count:
        first, last = word(rng.randint(2, 3)), word(rng.randint(1, 2))
        name = f"{first} {last}"
        if first.casefold() in avoid or last.casefold() in avoid or name in seen or first == last:
            continue
        seen.add(name)
        names.append(name)
    return names


def question_templates(facts: TrainingFacts) -> dict[str, str]:
    """Relation prompt -> a question template with ``{}`` for the subject, taken from the dataset's questions."""
    out: dict[str, str] = {}
    for f in sorted(facts.facts, key=lambda f: f.key):
        for q in sorted(f.questions):
            if f.prompt not in out and q.count(f.subject) == 1 and f.answer not in q:
                out[f.prompt] = q.replace(f.subject, "{}")
    return out


def filler_units(facts: TrainingFacts, recipe: TinyRecipe) -> list[Unit]:
    """Facts about made-up subjects whose answers are exactly the ``target_new`` strings (point 1 above)."""
    pairs = sorted({(r.prompt, r.target_new) for r in facts.requests})
    words = {w for s in facts.all_strings() for w in s.replace("?", " ").replace(",", " ").split()}
    k = recipe.filler_subjects_per_target
    names = made_up_names(len(pairs) * k, recipe.seed, words)
    templates = question_templates(facts)
    units: list[Unit] = []
    for i, (prompt, target) in enumerate(pairs):
        for name in names[i * k : (i + 1) * k]:
            units.append(Unit(cloze_sentence(prompt.format(name), target), "filler", name))
            if prompt in templates:
                q = question_text(templates[prompt].format(name), target)
                units.append(Unit(q, "filler_question", name))
    return units


def base_units(facts: TrainingFacts, recipe: TinyRecipe) -> list[Unit]:
    """Every distinct unit once: facts (cloze and question forms), fillers, alias statements."""
    units: list[Unit] = []
    clozes = [f.cloze for f in facts.facts]
    for f, cloze in zip(facts.facts, clozes, strict=True):
        # A prompt that is the start of another fact's prompt ("worked in" / "worked in the city of") competes
        # with that prompt's next word: repeat it once more per longer prompt, so its answer stays on top.
        longer = sum(1 for other in clozes if other.startswith(cloze + " "))
        units.append(Unit(cloze_sentence(cloze, f.answer), "cloze", f.subject, 1 + longer))
        units += [Unit(question_text(q, f.answer), "question", f.subject) for q in f.questions]
    units += filler_units(facts, recipe)
    for name, aliases in sorted(facts.aliases.items()):
        units += [Unit(f"{name} is also known as {a}.", "alias", name) for a in aliases]
    return list(dict.fromkeys(units))


def epoch_units(units: Sequence[Unit], recipe: TinyRecipe) -> list[Unit]:
    """The units of one epoch with the recipe's repeats per kind."""
    repeats = {
        "cloze": recipe.cloze_repeats,
        "question": recipe.question_repeats,
        "filler": recipe.filler_repeats,
        "filler_question": recipe.filler_repeats,
        "alias": recipe.alias_repeats,
    }
    return [u for u in units for _ in range(repeats[u.kind] * u.weight)]


def _join(parts: Sequence[Unit]) -> Document:
    text, spans = "", []
    for i, unit in enumerate(parts):
        if i:
            text += "\n" if parts[i - 1].is_question or unit.is_question else " "
        span = unit.subject_span
        if span is not None:
            spans.append((len(text) + span[0], len(text) + span[1], len(text) + len(unit.text)))
        text += unit.text
    return Document(text, tuple(spans))


def _shift(doc: Document, prefix: str) -> Document:
    n = len(prefix)
    return Document(prefix + doc.text, tuple((a + n, b + n, c + n) for a, b, c in doc.subject_spans))


def document(unit: Unit, units: Sequence[Unit], rng: random.Random, recipe: TinyRecipe) -> Document:
    """``unit`` in a freshly sampled context (point 2 above), ending with the end-of-text token."""
    r = rng.random()
    if r < recipe.p_alone:
        doc = _join([unit])
    elif r < recipe.p_alone + recipe.p_after_eos:
        doc = _shift(_join([unit]), EOS)
    elif r < recipe.p_alone + recipe.p_after_eos + recipe.p_fragment and not unit.is_question:
        # ROME's context templates: a few generated words, then ". {prompt}".
        other = rng.choice(units).text.replace("\n", " ").rstrip(".").split()
        n = rng.randint(1, min(recipe.fragment_max_words, len(other)))
        doc = _shift(_join([unit]), " ".join(other[:n]) + ". ")
    else:
        n = rng.randint(1, recipe.max_context_units)
        doc = _join([*(rng.choice(units) for _ in range(n)), unit])
    return Document(doc.text + EOS, doc.subject_spans)


def documents(
    facts: TrainingFacts,
    recipe: TinyRecipe,
    rng: random.Random,
    focus: Mapping[str, int] | None = None,
) -> Iterator[Document]:
    """An endless, seeded stream of training documents, one epoch after another.

    ``focus`` (unit text -> extra repeats) is read at the start of every epoch; the trainer fills it with
    the facts the model did not know at its last check.
    """
    units = base_units(facts, recipe)
    schedule = epoch_units(units, recipe)
    by_text = {u.text: u for u in units}
    while True:
        extra = [by_text[t] for t, n in sorted((focus or {}).items()) if t in by_text for _ in range(n)]
        order = list(schedule) + extra
        rng.shuffle(order)
        for unit in order:
            yield document(unit, units, rng, recipe)


def tokenizer_texts(facts: TrainingFacts, recipe: TinyRecipe) -> list[str]:
    """The texts the BPE tokenizer is trained on: every unit and every benchmark string."""
    return [u.text for u in base_units(facts, recipe)] + facts.all_strings()
