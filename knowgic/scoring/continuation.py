"""RippleEdits' accuracy of a query: does the greedy continuation of its cloze contain the target?

RippleEdits (Cohen et al., 2023, §4) decodes the model's greedy continuation of a test query's prompt and
counts the query as answered when it contains the target or one of its aliases. Here, for a query q with
cloze text t_q = ``prompt.format(subject)`` and gold answers A_q,

    acc_q = [ contains_answer(greedy_n(prefix + t_q), A_q) ],    n = spec/benchmark.yaml ripple.max_new_tokens

with ``contains_answer`` the generate protocols' whole-word, case-insensitive match
(:mod:`knowgic.scoring.matching`) and the greedy loop theirs (:class:`knowgic.scoring.generate.GreedyScorer`'s
decoding: own KV-cache loop, left-padded batches, stops at an end-of-sequence token). Unlike those
protocols the input is the bare cloze, with no question template and no chat template, and the
continuation is not cut at a newline: the paper's form, on base models. ``prefix`` is an in-context
editor's prompt prefix. The score is one of :class:`~knowgic.scoring.base.Scores`: p = known = acc_q.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from knowgic.errors import KnowgicError
from knowgic.scoring.base import Query, Scores
from knowgic.scoring.generate import GreedyScorer
from knowgic.scoring.logprob import check_prefix_fits, max_positions
from knowgic.scoring.matching import contains_answer
from knowgic.spec import benchmark_spec


class ContinuationScorer:
    """Greedy continuation of each query's cloze, ``max_new_tokens`` tokens (default: the spec's
    ``ripple.max_new_tokens``); p = 1 when it contains an answer, else 0."""

    protocol = "continuation"

    def __init__(
        self, max_new_tokens: int | None = None, batch_size: int = 32, progress: bool = False
    ) -> None:
        tokens = benchmark_spec().ripple_max_new_tokens if max_new_tokens is None else max_new_tokens
        self._greedy = GreedyScorer(
            max_new_tokens=tokens, batch_size=batch_size, known_threshold=1.0, progress=progress
        )

    @property
    def max_new_tokens(self) -> int:
        return self._greedy.max_new_tokens

    @property
    def params(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens}

    def continuations(
        self, model: torch.nn.Module, tokenizer: Any, texts: Sequence[str], prefix: str = ""
    ) -> list[str]:
        """The greedy continuation of ``prefix + text`` for each text (new tokens only, decoded)."""
        if not texts:
            return []
        check_prefix_fits(model, tokenizer, prefix)
        encoded = tokenizer([prefix + t for t in texts])["input_ids"]
        limit = max_positions(model)
        for text, ids in zip(texts, encoded, strict=True):
            if limit is not None and len(ids) + self.max_new_tokens > limit:
                raise KnowgicError(
                    f"{self.protocol}: {text!r} ({len(ids)} tokens with its prefix) plus {self.max_new_tokens} "
                    f"new tokens exceeds the model's {limit} positions"
                )
        return self._greedy.decode(model, tokenizer, [list(ids) for ids in encoded], None, cut_newline=False)

    def score(
        self, model: torch.nn.Module, tokenizer: Any, queries: Sequence[Query], prefix: str = ""
    ) -> Scores:
        distinct = list(dict.fromkeys(q.text for q in queries))  # one decode per distinct cloze
        texts = dict(zip(distinct, self.continuations(model, tokenizer, distinct, prefix), strict=True))
        p = np.asarray([float(contains_answer(texts[q.text], q.answers)) for q in queries], dtype=np.float64)
        return Scores(p, p > 0.5)
