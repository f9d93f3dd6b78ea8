"""Stage 3c, extraction: atomic (subject, relation, object) triplets of each sentence, as constrained JSON.

    sentence --few-shot prompt (spec)--> generation under the JSON Schema --json.loads--> triplets

The extractor is the built model or a separate ``--extractor`` model. Each sentence's prompt, raw output
and parse result are journaled (resumable, traceable).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from knowgic.builder.generation import Generator, check_answers, parse_constrained
from knowgic.builder.spec import BuilderSpec
from knowgic.builder.store import Journal


def extraction_prompt(spec: BuilderSpec, sentence: str) -> str:
    return spec.extraction["prompt"].format(examples=spec.extraction_examples(), sentence=sentence)


def clean_triplets(value: Any) -> list[dict[str, str]]:
    """The schema-shaped triplets with surrounding spaces trimmed; empty fields and self-loops dropped."""
    out = []
    for t in (value or {}).get("triplets", []):
        s, r, o = (" ".join(str(t.get(k, "")).split()) for k in ("subject", "relation", "object"))
        if s and r and o and s.casefold() != o.casefold():
            out.append({"subject": s, "relation": r, "object": o})
    return out


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

    def record(start: int, outputs: list[str]) -> None:
        for sent, prompt, output in zip(todo[start:], prompts[start:], outputs, strict=False):
            value, error = parse_constrained(output)
            journal.add(
                sent["sentence_id"],
                {
                    "sentence_id": sent["sentence_id"],
                    "prompt": prompt,
                    "output": output,
                    "error": error,
                    "triplets": clean_triplets(value) if error is None else [],
                },
            )
        bar.update(len(outputs))

    generator.generate(prompts, max_new_tokens, schema=spec.extraction_schema(), on_batch=record)
    bar.close()
    rows = [journal.done[s["sentence_id"]] for s in sentences]
    check_answers([r["output"] for r in rows], "triplet extraction", generator.label)
    return rows
