"""The ``logprob`` protocol: teacher-forced probability of the full answer (DESIGN.md, "Scoring protocols").

For a query with cloze text x = template.format(subject) and gold answers a^(0) (the answer) and
a^(1..) (its aliases), each tokenized in context as y_1..y_T,

    p = max_a  prod_{t=1..T} P(y_t | prefix, x, y_<t)

computed in float32 log space and returned as float64. Whether the query is *known* is decided by the
protocol's ``known_rule`` (:mod:`knowgic.scoring.known`): by default (``greedy_contains``) when the greedy
continuation of the prompt, or for a one-to-many relation with m = ``query.n_gold`` gold answers one of the
continuations after its top-m first tokens, contains the answer or an alias as whole words; under the old
``first_token`` rule when the first token of a^(0) ranks among the top-m next tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from knowgic.errors import KnowgicError
from knowgic.scoring.base import NonFiniteLogits, Query, Scores
from knowgic.scoring.batching import (
    eval_mode,
    forward_support,
    input_device,
    left_pad,
    length_sorted_batches,
    pad_token_id,
)
from knowgic.scoring.known import check_known_rule, greedy_contains_known
from knowgic.scoring.tokenize import LEADING_SPACE_MODES, SplitCache


@dataclass(frozen=True)
class AnswerRows:
    """One row per distinct (query, answer) pair: the unit a teacher-forced forward pass scores."""

    pairs: list[tuple[str, str]]  # (prefix + query text, answer)
    query_index: np.ndarray  # int64, row -> query
    is_gold: np.ndarray  # bool, row is the query's answers[0]


def query_text(query: Query, index: int) -> str:
    """``query.text`` with a clear error for a broken template."""
    try:
        return query.text
    except (KeyError, IndexError, ValueError) as exc:
        raise KnowgicError(
            f"query {index}: cannot fill prompt {query.prompt!r} with subject {query.subject!r} ({exc})"
        ) from None


def answer_rows(queries: Sequence[Query], prefix: str = "") -> AnswerRows:
    """Expand queries into (context, answer) rows; duplicate aliases of a query are scored once."""
    pairs: list[tuple[str, str]] = []
    owner: list[int] = []
    gold: list[bool] = []
    for qi, query in enumerate(queries):
        answers = [a.strip() for a in query.answers]
        if not answers or not answers[0]:
            raise KnowgicError(f"query {qi} ({query.prompt!r}, subject {query.subject!r}) has no gold answer")
        if query.n_gold < 1:
            raise KnowgicError(f"query {qi} ({query.prompt!r}): n_gold must be >= 1, got {query.n_gold}")
        context = prefix + query_text(query, qi)
        for ai, answer in enumerate(dict.fromkeys(a for a in answers if a)):
            pairs.append((context, answer))
            owner.append(qi)
            gold.append(ai == 0)
    return AnswerRows(pairs, np.asarray(owner, dtype=np.int64), np.asarray(gold, dtype=bool))


def max_positions(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_prefix_fits(
    model: torch.nn.Module, tokenizer: Any, prefix: str, what: str = "in-context prefix"
) -> None:
    """Refuse a prefix longer, in tokens, than the model's context, before any query is tokenized with it.

    Every (query, answer) row repeats the prefix, so a prefix of 100,000 characters over a thousand rows
    would take gigabytes to tokenize before the rows' own length check could refuse it; the prefix alone is
    tokenized once here. A prefix that fits leaves the exact check to the rows.
    """
    limit = max_positions(model)
    if not prefix or limit is None:
        return
    tokens = len(tokenizer(prefix, add_special_tokens=True, verbose=False)["input_ids"])
    if tokens > limit:
        raise KnowgicError(
            f"{what} ({len(prefix)} characters): {tokens} tokens exceed the model's {limit} positions"
        )


def model_dtype(model: torch.nn.Module) -> str:
    """The floating-point dtype the model computes in ("float32", "bfloat16", ...)."""
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return str(parameter.dtype).removeprefix("torch.")
    return "unknown"


def non_finite_logits(model: torch.nn.Module, where: str) -> NonFiniteLogits:
    """The error for NaN/inf logits at ``where``, naming the dtype the model actually ran in."""
    return NonFiniteLogits(where, model_dtype(model))


class LogprobScorer:
    """Batched teacher-forced scoring of (prompt, answer) pairs; see the module docstring.

    ``batch_size`` counts (query, answer) rows per forward pass (and continuations per decoding batch).
    ``answer_leading_space`` is ``auto`` (a space before the answer unless the prompt ends in whitespace),
    ``always`` or ``never``. ``known_rule`` (``greedy_contains`` or ``first_token``) and
    ``known_extra_tokens`` decide when a query is known (:mod:`knowgic.scoring.known`). Tokenization is
    cached per (prefix + text, answer) across calls. ``progress`` shows a progress bar (results do not
    depend on it).
    """

    protocol = "logprob"

    def __init__(
        self,
        batch_size: int = 64,
        answer_leading_space: str = "auto",
        known_rule: str = "greedy_contains",
        known_extra_tokens: int = 4,
        progress: bool = False,
    ):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise KnowgicError(f"logprob: batch_size must be a positive integer, got {batch_size!r}")
        if answer_leading_space not in LEADING_SPACE_MODES:
            raise KnowgicError(
                f"logprob: answer_leading_space must be one of {', '.join(LEADING_SPACE_MODES)}, "
                f"got {answer_leading_space!r}"
            )
        self.batch_size = batch_size
        self.answer_leading_space = answer_leading_space
        self.known_rule, self.known_extra_tokens = check_known_rule(known_rule, known_extra_tokens)
        self.progress = progress
        self._splits = SplitCache(answer_leading_space)

    @property
    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "batch_size": self.batch_size,
            "answer_leading_space": self.answer_leading_space,
            "known_rule": self.known_rule,
        }
        if self.known_rule == "greedy_contains":
            params["known_extra_tokens"] = self.known_extra_tokens
        return params

    def score(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        queries: Sequence[Query],
        prefix: str = "",
    ) -> Scores:
        queries = list(queries)
        if not queries:
            return Scores(np.zeros(0, dtype=np.float64), np.zeros(0, dtype=bool))
        check_prefix_fits(model, tokenizer, prefix)  # before the rows repeat it
        rows = answer_rows(queries, prefix)
        splits = self._splits.get(tokenizer, rows.pairs)
        seqs = [s.context + s.answer for s in splits]
        limit = max_positions(model)
        if limit is not None:
            for row, seq in enumerate(seqs):
                if len(seq) > limit:
                    qi = int(rows.query_index[row])
                    raise KnowgicError(
                        f"query {qi} ({queries[qi].prompt!r}): {len(seq)} tokens exceed the model's "
                        f"{limit} positions"
                    )
        n_gold = np.asarray([queries[qi].n_gold for qi in rows.query_index], dtype=np.int64)
        logp, first_known, first_top = self._score_rows(model, tokenizer, splits, n_gold)
        bad = np.flatnonzero(np.isnan(logp) | (logp > 0))
        if len(bad):
            qi = int(rows.query_index[bad[0]])
            raise non_finite_logits(
                model, f"query {qi} ({queries[qi].prompt!r}, subject {queries[qi].subject!r})"
            )
        p = np.zeros(len(queries), dtype=np.float64)
        np.maximum.at(p, rows.query_index, np.exp(logp))
        known = np.zeros(len(queries), dtype=bool)
        gold_rows = np.flatnonzero(rows.is_gold)
        if self.known_rule == "first_token":
            known[rows.query_index[gold_rows]] = first_known[gold_rows]
        else:
            longest = np.zeros(len(queries), dtype=np.int64)
            np.maximum.at(longest, rows.query_index, [len(s.answer) for s in splits])
            known[rows.query_index[gold_rows]] = greedy_contains_known(
                model,
                tokenizer,
                [splits[r].context for r in gold_rows],
                [first_top[r, : n_gold[r]].tolist() for r in gold_rows],
                [int(longest[rows.query_index[r]]) + self.known_extra_tokens for r in gold_rows],
                [queries[rows.query_index[r]].answers for r in gold_rows],
                self.batch_size,
            )
        return Scores(np.clip(p, 0.0, 1.0), known)

    def _score_rows(
        self, model: torch.nn.Module, tokenizer: Any, splits: Sequence[Any], n_gold: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: log P(answer | context) (float64), whether the answer's first token is top-m, and the
        top-m first tokens (m = the row's ``n_gold``; -1 beyond it)."""
        device = input_device(model)
        support = forward_support(model)
        pad = pad_token_id(tokenizer)
        lengths = [len(s.context) + len(s.answer) for s in splits]
        logp = np.empty(len(splits), dtype=np.float64)
        known = np.zeros(len(splits), dtype=bool)
        top = np.full((len(splits), int(n_gold.max(initial=1))), -1, dtype=np.int64)
        batches = length_sorted_batches(lengths, self.batch_size)
        with torch.inference_mode(), eval_mode(model):
            for idx in tqdm(batches, desc="logprob", unit="batch", disable=not self.progress, leave=False):
                rows = [splits[i] for i in idx]
                ans_len = [len(s.answer) for s in rows]
                width = max(ans_len)
                batch = left_pad([s.context + s.answer for s in rows], pad, device)
                kwargs: dict[str, Any] = batch.model_kwargs(support)
                if support.logits_to_keep:
                    kwargs["logits_to_keep"] = width + 1
                if support.use_cache:
                    kwargs["use_cache"] = False
                # Position L-1-a+t predicts answer token t; keep the last width+1 positions (the very last
                # one predicts past the sequence and is unused).
                logits = model(**kwargs).logits[:, -(width + 1) : -1, :].float()
                targets = torch.zeros(len(rows), width, dtype=torch.long)
                mask = torch.zeros(len(rows), width, dtype=torch.bool)
                for r, split in enumerate(rows):
                    targets[r, width - len(split.answer) :] = torch.tensor(split.answer)
                    mask[r, width - len(split.answer) :] = True
                token_logit = logits.gather(-1, targets.to(logits.device).unsqueeze(-1)).squeeze(-1)
                # Summed in float64 on the CPU (some accelerators have no float64).
                token_logp = (token_logit - torch.logsumexp(logits, dim=-1)).cpu().double()
                logp[idx] = token_logp.masked_fill(~mask, 0.0).sum(-1).numpy()
                first = torch.tensor([width - a for a in ans_len], device=logits.device)
                rng = torch.arange(len(rows), device=logits.device)
                first_logits = logits[rng, first]  # (B, V)
                gold_logit = token_logit[rng, first]
                rank = (first_logits > gold_logit.unsqueeze(-1)).sum(-1).cpu().numpy()
                known[idx] = rank < n_gold[idx]
                m = int(n_gold[idx].max())
                top[idx, :m] = first_logits.topk(m, dim=-1).indices.cpu().numpy()
        return logp, known, top
