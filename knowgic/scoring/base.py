"""Queries, scores and the scorer interface shared by every protocol.

A query is (template, subject, gold answers). Its score ``p`` is in [0, 1] (DESIGN.md, "Scoring
protocols"); whether the model *knows* the query is decided by the protocol's own rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

from knowgic.errors import KnowgicError


@dataclass(frozen=True)
class Query:
    """``prompt.format(subject)`` should be answered by ``answers[0]`` or one of its aliases ``answers[1:]``.

    ``question`` is the natural-language form used by the ``generate`` and ``greedy`` protocols.
    ``n_gold`` is the number of distinct gold answers the dataset lists for this (subject, prompt): the
    ``logprob`` protocol's known rule looks at the top ``n_gold`` first tokens after the prompt (one-to-many
    relations split probability among their answers; :mod:`knowgic.scoring.known`).
    """

    prompt: str
    subject: str
    answers: tuple[str, ...]
    question: str = ""
    n_gold: int = 1

    @property
    def text(self) -> str:
        return self.prompt.format(self.subject)


class NonFiniteLogits(KnowgicError):
    """The model's logits were NaN or infinite while scoring ``where`` (a query, a decoding step), in the
    ``dtype`` the model ran in; ``model`` says which model ("the model", "the edited model")."""

    def __init__(self, where: str, dtype: str, model: str = "the model") -> None:
        # The float16 hint only for float16, the one dtype whose range a pristine model's activations overflow.
        hint = "; float16 can overflow, try --dtype float32 or bfloat16" if dtype == "float16" else ""
        super().__init__(f"{where}: {model} returned non-finite logits (NaN/inf) in {dtype}{hint}")
        self.where, self.dtype = where, dtype


@dataclass(frozen=True)
class Scores:
    """Per-query results, aligned with the input queries."""

    p: np.ndarray  # float64, in [0, 1]
    known: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.p)


class Scorer(Protocol):
    """A scoring protocol. ``params`` are recorded in every results file."""

    protocol: str

    @property
    def params(self) -> dict[str, Any]: ...

    def score(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        queries: Sequence[Query],
        prefix: str = "",
    ) -> Scores: ...
