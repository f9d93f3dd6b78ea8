"""The reference for the scorer's speed: the same tokens through a bare batched forward pass.

``scoring_vs_forward_ratio`` = (time of ``LogprobScorer.score``) / (time of :func:`bare_forward_seconds`)
on the same queries, model and batch size. The bare pass gets the exact (context + answer) token rows the
scorer builds, already tokenized (tokenization is not timed), in the same length-sorted, left-padded
batches, with the same model arguments (attention mask, position ids, no key/value cache), and runs the
model and nothing else. One difference is deliberate: the scorer asks the model for logits only at the
answer positions (``logits_to_keep``), while the bare pass computes the full logits of every position,
as a plain ``model(input_ids)`` call does. Where the output projection is a large part of the model's
compute (a small model with a large vocabulary), the ratio thus credits the scorer with that saving.
:func:`measure_scoring_ratio` reports the scorer with fresh tokenization (``ratio_cold``) and with its
tokenization cache warm (``ratio_warm``: the case of every post-edit call, the same token work as the bare
pass), so the ratio measures what scoring adds on top of the model (gathering log-probabilities, ranks,
bookkeeping), not a difference in padding or arguments.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from knowgic.scoring.base import Query
from knowgic.scoring.batching import (
    eval_mode,
    forward_support,
    input_device,
    left_pad,
    length_sorted_batches,
    pad_token_id,
)
from knowgic.scoring.logprob import LogprobScorer, answer_rows
from knowgic.scoring.tokenize import split_many


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def token_rows(
    tokenizer: Any, queries: Sequence[Query], prefix: str = "", answer_leading_space: str = "auto"
) -> list[list[int]]:
    """The token rows the logprob scorer runs: one per distinct (query, answer) pair."""
    rows = answer_rows(queries, prefix)
    contexts = [c for c, _ in rows.pairs]
    answers = [a for _, a in rows.pairs]
    return [
        list(s.context + s.answer) for s in split_many(tokenizer, contexts, answers, answer_leading_space)
    ]


def bare_forward_seconds(
    model: torch.nn.Module,
    tokenizer: Any,
    queries: Sequence[Query],
    batch_size: int,
    prefix: str = "",
    answer_leading_space: str = "auto",
) -> float:
    """Wall-clock seconds of one plain batched forward pass over the scorer's token rows."""
    seqs = token_rows(tokenizer, queries, prefix, answer_leading_space)
    device = input_device(model)
    pad = pad_token_id(tokenizer)
    support = forward_support(model)
    batches = []
    for idx in length_sorted_batches([len(s) for s in seqs], batch_size):
        kwargs: dict[str, Any] = left_pad([seqs[i] for i in idx], pad, device).model_kwargs(support)
        if support.use_cache:
            kwargs["use_cache"] = False  # as the scorer: no key/value cache to build
        batches.append(kwargs)
    with torch.inference_mode(), eval_mode(model):
        _sync(device)
        start = time.perf_counter()
        for kwargs in batches:
            model(**kwargs)
        _sync(device)
        return time.perf_counter() - start


@dataclass(frozen=True)
class SpeedReport:
    """Timings of one comparison; ``ratio_cold`` includes tokenization, ``ratio_warm`` reuses it."""

    n_queries: int
    n_rows: int
    forward_s: float
    scoring_cold_s: float
    scoring_warm_s: float

    @property
    def ratio_cold(self) -> float:
        return self.scoring_cold_s / self.forward_s

    @property
    def ratio_warm(self) -> float:
        return self.scoring_warm_s / self.forward_s


def measure_scoring_ratio(
    model: torch.nn.Module,
    tokenizer: Any,
    queries: Sequence[Query],
    batch_size: int = 64,
    repeats: int = 3,
) -> SpeedReport:
    """Best-of-``repeats`` timings of the bare pass and of ``LogprobScorer`` (fresh and with warm caches).

    The three measurements are interleaved in each repeat, so a machine that gets busier or quieter
    during the run affects them alike.
    """
    device = input_device(model)
    n_rows = len(token_rows(tokenizer, queries))
    forward, cold, warm = [], [], []
    for _ in range(repeats):
        forward.append(bare_forward_seconds(model, tokenizer, queries, batch_size))
        scorer = LogprobScorer(batch_size=batch_size)
        for times in (cold, warm):
            _sync(device)
            start = time.perf_counter()
            scorer.score(model, tokenizer, queries)
            _sync(device)
            times.append(time.perf_counter() - start)
    return SpeedReport(len(queries), n_rows, min(forward), min(cold), min(warm))
