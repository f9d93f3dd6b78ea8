"""Checks of what ``knowgic-tiny`` learnt, under the ``logprob`` protocol's first-token rule.

For a fact with cloze text x and answer a (tokenized in context after one space as y_1..y_T), its score is
the teacher-forced p = prod_t P(y_t | x, y_<t), and the model *knows* it when y_1 ranks among the top-m next
tokens after x, m = the number of distinct gold answers for that (subject, prompt). This is the protocol's
``known_rule: first_token`` (version 1), the rule the model was built and checked against; evaluation now
defaults to ``greedy_contains`` (:mod:`knowgic.scoring.known`), which the same model meets on 332 of the 345
facts of 1.1.0 against 337 here. This self-contained version is what the build uses to record the share of
facts known, so the builder depends on no other stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from knowgic.models.tiny.facts import gold_counts
from knowgic.records import EditRequest, Fact


@dataclass(frozen=True)
class KnownReport:
    """Per fact (aligned with the input): teacher-forced ``p`` and ``known``; and their summaries."""

    p: np.ndarray
    known: np.ndarray

    @property
    def share(self) -> float:
        return float(self.known.mean()) if len(self.known) else 0.0

    @property
    def mean_p(self) -> float:
        return float(self.p.mean()) if len(self.p) else 0.0


def _split_ids(tokenizer: object, context: str, answer: str) -> tuple[list[int], list[int]]:
    """Token ids of ``context`` and of ``" " + answer`` as they come out of tokenizing the whole text."""
    full = tokenizer(context + " " + answer, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    if full[: len(ctx)] != ctx or len(full) == len(ctx):
        # A merge across the boundary: split at the first differing token instead.
        n = 0
        while n < min(len(ctx), len(full) - 1) and full[n] == ctx[n]:
            n += 1
        ctx = full[:n]
    return ctx, full[len(ctx) :]


@torch.no_grad()
def score_answers(
    model: torch.nn.Module,
    tokenizer: object,
    pairs: Sequence[tuple[str, str]],
    n_gold: Sequence[int],
    batch_size: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """For each (context, answer): log p(answer | context) and whether its first token is top-``n_gold``."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    split = [_split_ids(tokenizer, c, a) for c, a in pairs]
    logp = np.zeros(len(pairs), dtype=np.float64)
    known = np.zeros(len(pairs), dtype=bool)
    pad = int(getattr(tokenizer, "pad_token_id", None) or 0)
    try:
        for start in range(0, len(pairs), batch_size):
            rows = split[start : start + batch_size]
            width = max(len(c) + len(a) for c, a in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, (c, a) in enumerate(rows):
                ids[r, : len(c) + len(a)] = torch.tensor(c + a)
                mask[r, : len(c) + len(a)] = 1
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
            logprobs = torch.log_softmax(logits, dim=-1)
            for r, (c, a) in enumerate(rows):
                positions = torch.arange(len(c) - 1, len(c) + len(a) - 1, device=logits.device)
                targets = torch.tensor(a, device=logits.device)
                logp[start + r] = float(logprobs[r, positions, targets].double().sum())
                first = logits[r, len(c) - 1]
                rank = int((first > first[a[0]]).sum())
                known[start + r] = rank < n_gold[start + r]
    finally:
        model.train(was_training)
    return logp, known


def evaluate_known_share(
    model: torch.nn.Module, tokenizer: object, facts: Sequence[Fact], batch_size: int = 64
) -> KnownReport:
    """DESIGN.md's logprob rule over ``facts``; m per (subject, prompt) is counted within ``facts``."""
    counts = gold_counts(facts)
    pairs = [(f.cloze, f.answer) for f in facts]
    logp, known = score_answers(
        model, tokenizer, pairs, [counts[(f.subject, f.prompt)] for f in facts], batch_size
    )
    return KnownReport(p=np.exp(logp), known=known)


@dataclass(frozen=True)
class RewriteReport:
    """Before editing: per request p(target_true) and p(target_new) on the rewrite prompt."""

    p_true: np.ndarray
    p_new: np.ndarray

    @property
    def true_beats_new(self) -> float:
        return float((self.p_true > self.p_new).mean()) if len(self.p_true) else 0.0


def evaluate_rewrites(
    model: torch.nn.Module, tokenizer: object, requests: Sequence[EditRequest], batch_size: int = 64
) -> RewriteReport:
    pairs = [(r.rewrite_text, r.target_true) for r in requests] + [
        (r.rewrite_text, r.target_new) for r in requests
    ]
    logp, _ = score_answers(model, tokenizer, pairs, [1] * len(pairs), batch_size)
    n = len(requests)
    return RewriteReport(p_true=np.exp(logp[:n]), p_new=np.exp(logp[n:]))
