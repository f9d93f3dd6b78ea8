"""The builder's declarations in ``spec/builder.yaml``: prompts, templates and defaults, read once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.paths import spec_dir
from knowgic.yamlfile import read_yaml

COT_PROMPTS = ("base", "chat", "entity_question")
"""The chain-of-thought prompts: for base models, for chat models, and the question about a new object."""
ALIAS_PROMPTS = ("base", "chat")
"""The subject alias prompts: for base models and for chat models."""
_SECTIONS = (
    "defaults",
    "cot",
    "extraction",
    "new_relation",
    "judge",
    "refine",
    "chain_question",
    "subject_aliases",
)


@dataclass(frozen=True)
class BuilderSpec:
    """The parsed ``spec/builder.yaml`` (see the file for what each entry means)."""

    defaults: dict[str, Any]
    cot: dict[str, str]
    extraction: dict[str, Any]
    new_relation: dict[str, str]
    judge: dict[str, str]
    refine: dict[str, Any]
    chain_question: dict[str, str]
    subject_aliases: dict[str, Any]
    path: str

    def prompts(self) -> dict[str, Any]:
        """Every prompt and template, as recorded in a build's card."""
        return {
            "cot": self.cot,
            "extraction": self.extraction,
            "new_relation": self.new_relation,
            "judge": self.judge,
            "refine": self.refine,
            "chain_question": self.chain_question,
            "subject_aliases": self.subject_aliases,
        }

    def extraction_examples(self, sentence: str = "") -> str:
        """The few-shot block of the extraction prompt for ``sentence``, in an order whose last answer
        is not one to copy: the examples without triplets first, then the others; an example whose
        sentence is ``sentence`` itself is left out (its answer would be the answer)."""
        same = " ".join(sentence.split()).casefold()
        examples = [
            ex for ex in self.extraction["examples"] if " ".join(ex["sentence"].split()).casefold() != same
        ]
        examples.sort(key=lambda ex: bool(ex["triplets"]))  # stable: the spec's order otherwise
        shots = []
        for ex in examples:
            payload = json.dumps({"triplets": ex["triplets"]}, ensure_ascii=False)
            shots.append(self.extraction["example"].format(sentence=ex["sentence"], json=payload))
        return "\n\n".join(shots) + "\n"

    def extraction_schema(self) -> dict[str, Any]:
        """The JSON Schema the extractor's output is constrained to."""
        d = self.defaults
        text = {"type": "string", "minLength": 1}
        return {
            "type": "object",
            "properties": {
                "triplets": {
                    "type": "array",
                    "maxItems": int(d["max_triplets_per_sentence"]),
                    "items": {
                        "type": "object",
                        "properties": {
                            "subject": {**text, "maxLength": int(d["max_entity_chars"])},
                            "relation": {**text, "maxLength": int(d["max_relation_chars"])},
                            "object": {**text, "maxLength": int(d["max_entity_chars"])},
                        },
                        "required": ["subject", "relation", "object"],
                    },
                }
            },
            "required": ["triplets"],
        }


JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["accept", "reject"]}},
    "required": ["verdict"],
}


def load_builder_spec(path: Path | None = None) -> BuilderSpec:
    where = path or spec_dir() / "builder.yaml"
    data = read_yaml(where, "the builder spec")
    if not isinstance(data, dict):
        raise KnowgicError(f"{where}: expected a mapping with {', '.join(_SECTIONS)}")
    missing = [s for s in _SECTIONS if not isinstance(data.get(s), dict)]
    if missing:
        raise KnowgicError(f"{where}: missing section(s) {', '.join(missing)}")
    for section, keys in (("cot", COT_PROMPTS), ("subject_aliases", ALIAS_PROMPTS)):
        absent = [k for k in keys if not isinstance(data[section].get(k), str)]
        if absent:
            raise KnowgicError(f"{where}: {section}: missing prompt(s) {', '.join(absent)}")
    return BuilderSpec(**{s: dict(data[s]) for s in _SECTIONS}, path=str(where))
