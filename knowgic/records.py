"""Data classes for the benchmark's records.

These are the typed hand-offs between stages (dataset -> evaluation -> editors -> scoring); every stage
takes and returns these, never raw upstream dicts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EditRequest:
    """One requested rewrite: ``prompt.format(subject)`` should complete to ``target_new``, not ``target_true``."""

    prompt: str
    subject: str
    target_true: str
    target_new: str

    @property
    def edit_id(self) -> str:
        """Stable id of the request: the first 12 hex digits of the sha256 of its canonical JSON."""
        payload = json.dumps(
            [self.prompt, self.subject, self.target_true, self.target_new], ensure_ascii=False
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]

    @property
    def rewrite_text(self) -> str:
        return self.prompt.format(self.subject)

    @classmethod
    def from_upstream(cls, row: dict[str, Any]) -> EditRequest:
        """From one upstream ``requested_rewrite`` entry (``target_*`` are ``{"str": ...}``)."""
        return cls(
            prompt=row["prompt"],
            subject=row["subject"],
            target_true=row["target_true"]["str"],
            target_new=row["target_new"]["str"],
        )

    def to_upstream(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "target_new": {"str": self.target_new},
            "target_true": {"str": self.target_true},
            "subject": self.subject,
        }


@dataclass(frozen=True)
class Fact:
    """An atomic fact ``(subject, prompt, answer)`` with the question that asks it."""

    subject: str
    prompt: str
    answer: str
    question: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.subject, self.prompt, self.answer)

    @property
    def cloze(self) -> str:
        return self.prompt.format(self.subject)


@dataclass(frozen=True)
class Chain:
    """Parallel lists: step ``i`` asks ``questions[i]`` / ``prompts[i].format(subjects[i])`` -> ``answers[i]``.

    Used both for an implication chain and for a broader-context block.
    """

    questions: tuple[str, ...]
    answers: tuple[str, ...]
    prompts: tuple[str, ...]
    subjects: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def facts(self) -> tuple[Fact, ...]:
        return tuple(
            Fact(subject=s, prompt=p, answer=a, question=q)
            for q, a, p, s in zip(self.questions, self.answers, self.prompts, self.subjects, strict=True)
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Chain:
        return cls(
            questions=tuple(d["questions"]),
            answers=tuple(d["answers"]),
            prompts=tuple(d["prompts"]),
            subjects=tuple(d["subjects"]),
        )

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "questions": list(self.questions),
            "answers": list(self.answers),
            "prompts": list(self.prompts),
            "subjects": list(self.subjects),
        }


@dataclass(frozen=True)
class Case:
    """One benchmark row: an implication chain with its edit request and broader context."""

    case_id: int
    request: EditRequest
    chain: Chain
    broader_context: Chain
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Case:
        """From a row in the upstream (``chains`` config) shape; unknown keys go to ``extra``."""
        known = {"case_id", "requested_rewrite", "chain", "broader_context"}
        return cls(
            case_id=int(row["case_id"]),
            request=EditRequest.from_upstream(row["requested_rewrite"][0]),
            chain=Chain.from_dict(row["chain"]),
            broader_context=Chain.from_dict(row["broader_context"]),
            extra={k: v for k, v in row.items() if k not in known},
        )


AliasMap = dict[str, tuple[str, ...]]
"""Entity name -> its aliases (the name itself not included)."""
