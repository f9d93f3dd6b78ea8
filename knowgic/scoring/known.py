"""When the ``logprob`` protocol counts a query as *known*: its ``known_rule`` (DESIGN.md, "Scoring protocols").

A query has cloze text x, gold answers A (the answer and its aliases) and m = ``n_gold``, the number of
distinct gold answers the dataset lists for its subject and prompt.

``greedy_contains`` (the default; protocol version 2)
    Take the m most likely first tokens after x (m = 1: the greedy continuation itself; a one-to-many
    relation gets one branch per gold answer it lists) and continue each greedily to at most
    T = (the query's longest answer or alias, in tokens, tokenized in context) + ``known_extra_tokens``
    tokens, the first one included. A branch stops at an end-of-sequence token, and its text at the first
    newline after some text. The query is known when one branch contains the answer or an alias as whole
    words, case-insensitive (:func:`knowgic.scoring.matching.contains_answer`, the matcher of the
    ``generate`` and ``greedy`` protocols). A wrong answer never passes: "Professor McGonagall" does not
    contain "Professor Sprout", and "19 May 1929" does not contain "1945".

``first_token`` (protocol version 1)
    The answer's first token ranks among the top m next tokens (ties count in the query's favour). A wrong
    answer that starts with the same token passes; kept only to reproduce results made under it.

The continuations are decoded in left-padded batches with a KV cache and explicit position ids (the scorer's
own loop, as in :mod:`knowgic.scoring.generate`), one row per distinct (context, first token), each row to
the longest budget any query asks of it; each query then reads its own first T tokens, so whether a query
is known does not depend on which other queries share the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from knowgic.errors import KnowgicError
from knowgic.scoring.base import NonFiniteLogits
from knowgic.scoring.batching import (
    eos_ids,
    eval_mode,
    forward_support,
    input_device,
    left_pad,
    length_sorted_batches,
    pad_token_id,
)
from knowgic.scoring.matching import contains_answer

KNOWN_RULES = ("greedy_contains", "first_token")
"""The rules a run may use; the first is the default of ``spec/benchmark.yaml``."""


def check_known_rule(rule: Any, extra_tokens: Any) -> tuple[str, int]:
    if rule not in KNOWN_RULES:
        raise KnowgicError(f"logprob: known_rule must be one of {', '.join(KNOWN_RULES)}, got {rule!r}")
    if not isinstance(extra_tokens, int) or isinstance(extra_tokens, bool) or extra_tokens < 0:
        raise KnowgicError(f"logprob: known_extra_tokens must be an integer >= 0, got {extra_tokens!r}")
    return rule, extra_tokens


def _dtype(model: torch.nn.Module) -> str:
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return str(parameter.dtype).removeprefix("torch.")
    return "unknown"


def greedy_continuations(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    steps: Sequence[int],
    batch_size: int,
) -> list[list[int]]:
    """Up to ``steps[i]`` argmax tokens after each prompt, cut before the first end-of-sequence token."""
    device = input_device(model)
    support = forward_support(model)
    pad = pad_token_id(tokenizer)
    stop = set(eos_ids(model, tokenizer))
    out: list[list[int]] = [[] for _ in prompts]
    todo = [i for i, n in enumerate(steps) if n > 0]
    batches = length_sorted_batches([len(prompts[i]) for i in todo], batch_size)
    with torch.inference_mode(), eval_mode(model):
        for batch_idx in batches:
            idx = [todo[b] for b in batch_idx]
            n_steps = max(steps[i] for i in idx)
            batch = left_pad([prompts[i] for i in idx], pad, device)
            mask, step_ids, step_pos, full_ids = (
                batch.attention_mask,
                batch.input_ids,
                batch.position_ids,
                batch.input_ids,
            )
            past = None
            generated: list[torch.Tensor] = []
            for t in range(n_steps):
                output = model(**support.step_kwargs(step_ids, mask, step_pos, past))
                logits = output.logits[:, -1, :].float()
                if not bool(torch.isfinite(logits).all()):
                    raise NonFiniteLogits(f"logprob: greedy continuation, step {t + 2}", _dtype(model))
                token = logits.argmax(dim=-1)
                generated.append(token)
                past = getattr(output, "past_key_values", None) if support.use_cache else None
                mask = torch.cat([mask, torch.ones(len(idx), 1, dtype=mask.dtype, device=device)], dim=1)
                full_ids = torch.cat([full_ids, token.unsqueeze(1)], dim=1)
                if past is None:  # no KV cache: feed the whole sequence again
                    step_ids = full_ids
                    step_pos = (mask.cumsum(-1) - 1).clamp(min=0)
                else:
                    step_ids = token.unsqueeze(1)
                    step_pos = step_pos[:, -1:] + 1
            tokens = torch.stack(generated, dim=1).cpu().tolist()
            for i, row in zip(idx, tokens, strict=True):
                row = row[: steps[i]]
                end = next((j for j, tok in enumerate(row) if tok in stop), len(row))
                out[i] = row[:end]
    return out


def answer_text(tokenizer: Any, tokens: Sequence[int]) -> str:
    """A continuation's text up to the first newline after some text."""
    text = tokenizer.decode(list(tokens), skip_special_tokens=True)
    return text.lstrip().split("\n", 1)[0].strip()


def greedy_contains_known(
    model: torch.nn.Module,
    tokenizer: Any,
    contexts: Sequence[Sequence[int]],
    first_tokens: Sequence[Sequence[int]],
    budgets: Sequence[int],
    answers: Sequence[Sequence[str]],
    batch_size: int,
) -> np.ndarray:
    """Per query: does one of its branches (context + a top-m first token, continued greedily to the
    query's budget of tokens) contain one of its answers? See the module docstring."""
    stop = eos_ids(model, tokenizer)
    rows: dict[tuple[tuple[int, ...], int], int] = {}  # (context, first token) -> row
    prompts: list[list[int]] = []
    steps: list[int] = []
    for context, firsts, budget in zip(contexts, first_tokens, budgets, strict=True):
        for tok in firsts:
            key = (tuple(context), int(tok))
            if key not in rows:
                rows[key] = len(prompts)
                prompts.append([*context, int(tok)])
                steps.append(0)
            row = rows[key]
            steps[row] = max(steps[row], budget - 1)
    continued = greedy_continuations(model, tokenizer, prompts, steps, batch_size)
    known = np.zeros(len(contexts), dtype=bool)
    for qi, (context, firsts, budget) in enumerate(zip(contexts, first_tokens, budgets, strict=True)):
        for tok in firsts:
            if int(tok) in stop:
                continue
            rest = continued[rows[(tuple(context), int(tok))]][: budget - 1]
            if contains_answer(answer_text(tokenizer, [int(tok), *rest]), answers[qi]):
                known[qi] = True
                break
    return known
