"""Stage 3a, chain-of-thought expansion: the model reasons step by step about each validated fact.

    validated fact --spec cot prompt--> batched greedy generation --journal--> {fact_id, prompt, output}

Each output is journaled as soon as its batch finishes, so an interrupted expansion resumes where it
stopped; the prompt text is kept with the output (traceability).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from knowgic.builder.generation import Generator, check_answers
from knowgic.builder.spec import BuilderSpec
from knowgic.builder.store import Journal


def cot_prompt(spec: BuilderSpec, fact: dict[str, Any], chat: bool) -> str:
    template = spec.cot["chat" if chat else "base"]
    return template.format(question=fact["question"], answer=fact["answer"], subject=fact["subject"])


def _cot_id(item: dict[str, Any]) -> str:
    return str(item.get("cot_id", item["fact_id"]))


def object_items(
    facts: Sequence[dict[str, Any]], known: Sequence[dict[str, Any]], spec: BuilderSpec
) -> list[dict[str, Any]]:
    """The objects of ``facts`` that no ``known`` fact has as its subject, as chain-of-thought items: a new
    fact leads on through its object (Harry Potter -> Gryffindor -> Hogwarts), which the chain of thought
    about its subject never started from. Each is asked the spec's ``cot.entity_question`` about itself."""
    subjects = {f["subject"] for f in known}
    items: dict[str, dict[str, Any]] = {}
    for f in facts:
        if f["answer"] not in subjects and f["answer"] not in items:
            items[f["answer"]] = {
                "cot_id": f"{f['fact_id']}:object",
                "fact_id": f["fact_id"],
                "subject": f["answer"],
                "question": spec.cot["entity_question"].format(subject=f["answer"]),
                "answer": f["answer"],
            }
    return list(items.values())


def expand(
    facts: Sequence[dict[str, Any]],
    generator: Generator,
    spec: BuilderSpec,
    journal: Journal,
    max_new_tokens: int,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """One chain of thought per item, in input order. An item is a fact (``cot_id`` = its id), or, from the
    second round on, a fact's object as the entity to think about (``cot_id``: ``<fact id>:object``,
    ``subject``: the object, the fact's question kept)."""
    todo = [f for f in facts if _cot_id(f) not in journal.done]
    prompts = [cot_prompt(spec, f, generator.loaded.is_chat) for f in todo]
    bar = tqdm(total=len(todo), desc="chain of thought", disable=not progress, leave=False)

    def record(start: int, outputs: list[str]) -> None:
        for fact, prompt, output in zip(todo[start:], prompts[start:], outputs, strict=False):
            journal.add(
                _cot_id(fact),
                {
                    "cot_id": _cot_id(fact),
                    "fact_id": fact["fact_id"],
                    "subject": fact["subject"],
                    "prompt": prompt,
                    "output": output,
                },
            )
        bar.update(len(outputs))

    generator.generate(prompts, max_new_tokens, on_batch=record)
    bar.close()
    rows = [journal.done[_cot_id(f)] for f in facts]
    check_answers([r["output"] for r in rows], "chain-of-thought expansion", generator.label)
    return rows
