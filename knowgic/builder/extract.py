"""Stage 3c, extraction: atomic (subject, relation, object) triplets of each sentence, as constrained JSON.

    sentence --few-shot prompt (spec)--> generation under the JSON Schema --json.loads--> triplets
             --triplets that copy a few-shot example dropped--> triplets

The extractor is the built model or a separate ``--extractor`` model (or ``--extractor spacy``, the
dependency rules of :mod:`knowgic.builder.spacy_rules`). The few-shot examples are ordered so that the
last one shown is never the empty answer (a small model copies the last answer), and an example whose
sentence is the input is left out. Each sentence's prompt, raw output and parse result are journaled
(resumable, traceable).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from knowgic.builder.generation import Generator, check_answers, parse_constrained
from knowgic.builder.spec import BuilderSpec
from knowgic.builder.store import Journal


def extraction_prompt(spec: BuilderSpec, sentence: str) -> str:
    return spec.extraction["prompt"].format(examples=spec.extraction_examples(sentence), sentence=sentence)


def _fold(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def example_triplets(spec: BuilderSpec) -> set[tuple[str, str, str]]:
    """The few-shot examples' triplets, case and spacing folded."""
    return {
        (_fold(t["subject"]), _fold(t["relation"]), _fold(t["object"]))
        for ex in spec.extraction["examples"]
        for t in ex["triplets"]
    }


def clean_triplets(
    value: Any, sentence: str = "", examples: set[tuple[str, str, str]] = frozenset()
) -> tuple[list[dict[str, str]], int]:
    """(the schema-shaped triplets with surrounding spaces trimmed, empty fields and self-loops dropped;
    how many copied a few-shot example). A triplet equal to an example's is a copy of the prompt, not
    of the sentence, unless its subject and object are both in ``sentence``."""
    out, copied = [], 0
    text = _fold(sentence)
    for t in (value or {}).get("triplets", []):
        s, r, o = (" ".join(str(t.get(k, "")).split()) for k in ("subject", "relation", "object"))
        if not (s and r and o) or s.casefold() == o.casefold():
            continue
        if (_fold(s), _fold(r), _fold(o)) in examples and not (_fold(s) in text and _fold(o) in text):
            copied += 1
            continue
        out.append({"subject": s, "relation": r, "object": o})
    return out, copied


def extract(
    sentences: Sequence[dict[str, Any]],
    generator: Generator,
    spec: BuilderSpec,
    journal: Journal,
    max_new_tokens: int,
    progress: bool = True,
) -> list[dict[str, Any]]:
    todo = [s for s in sentences if s["sentence_id"] not in journal.done]
    prompts = [extraction_prompt(spec, s["text"]) for s in todo]
    bar = tqdm(total=len(todo), desc="triplet extraction", disable=not progress, leave=False)

    shots = example_triplets(spec)

    def record(start: int, outputs: list[str]) -> None:
        for sent, prompt, output in zip(todo[start:], prompts[start:], outputs, strict=False):
            value, error = parse_constrained(output)
            triplets, copied = clean_triplets(value, sent["text"], shots) if error is None else ([], 0)
            journal.add(
                sent["sentence_id"],
                {
                    "sentence_id": sent["sentence_id"],
                    "prompt": prompt,
                    "output": output,
                    "error": error,
                    "triplets": triplets,
                    "copied_examples": copied,
                },
            )
        bar.update(len(outputs))

    generator.generate(prompts, max_new_tokens, schema=spec.extraction_schema(), on_batch=record)
    bar.close()
    rows = [journal.done[s["sentence_id"]] for s in sentences]
    check_answers([r["output"] for r in rows], "triplet extraction", generator.label)
    return rows
