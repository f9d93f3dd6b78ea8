"""Routing a subject's information through its last token while ``knowgic-tiny`` trains.

Pretrained GPTs recall a fact in two steps. MLPs at the subject's last token enrich its representation in
the early-to-middle layers: restoring that one hidden state recovers the corrupted prediction (Meng et al.
2022, "Locating and Editing Factual Associations in GPT", Sec. 2, causal tracing). Attention at the last
position then reads the attribute from there in the upper layers; blocking the edges from the subject to
the last position in the lower layers barely hurts (Geva et al. 2023, "Dissecting Recall of Factual
Associations in Auto-Regressive Language Models", Sec. 5). ROME edits exactly that first step: the MLP at
the subject's last token.

A small GPT trained from scratch on a few hundred facts finds a shortcut instead: its first attention layer
copies the raw subject tokens to the last position, and the fact is looked up there, where ROME cannot
reach it. So for most of training these edge codes cut, per sentence,

* in the layers below ``read_layer``: the edges from the sentence's later tokens to all subject tokens,
  and (``isolate_subject``) the edges from subject tokens to anything before the subject;
* from ``read_layer`` on: the edges from later tokens to the subject's tokens but the last.

The last part of training uses ordinary causal attention, so that the model works under the attention
everyone uses; the routes it has learnt stay (a causal trace of the built model shows it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

ROUTED_ATTENTION = "knowgic_tiny_routed"

# Edge codes: no edge (not causal, or padding), an ordinary edge, an edge cut by the routing.
NO_EDGE, EDGE, CUT_EDGE = 0, 1, 2

Span = tuple[int, int, int]
"""Inclusive token indices: (subject's first token, subject's last token, sentence's last token)."""


def subject_routing_codes(
    length: int, spans: list[Span], isolate_subject: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(``early``, ``late``) int8 (length, length) edge codes: causal attention with the cuts above."""
    early = torch.ones(length, length, dtype=torch.int8).tril()
    late = early.clone()
    for first, last, stop in spans:
        early[last + 1 : stop + 1, first : last + 1] = CUT_EDGE
        late[last + 1 : stop + 1, first:last] = CUT_EDGE
        if isolate_subject:
            early[first : last + 1, :first] = CUT_EDGE
    return early, late


def token_span(offsets: list[tuple[int, int]], start: int, end: int, stop: int) -> Span | None:
    """Token indices of the characters ``[start, end)`` (the subject) and of the last token before ``stop``."""
    inside = [i for i, (a, b) in enumerate(offsets) if b > start and a < end and b > a]
    before_stop = [i for i, (a, b) in enumerate(offsets) if a < stop and b > a]
    return (inside[0], inside[-1], before_stop[-1]) if inside else None


def routed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scaling) v over the ordinary edges of ``attention_mask`` (edge codes, (B, 1, T, T)).

    Registered with ``transformers.AttentionInterface`` under :data:`ROUTED_ATTENTION` while training.
    """
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    scores = scores.masked_fill(attention_mask != EDGE, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if dropout:
        weights = torch.nn.functional.dropout(weights, p=dropout, training=True)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


@contextmanager
def layer_codes(model: torch.nn.Module, read_layer: int) -> Iterator[dict[str, torch.Tensor]]:
    """Pre-hooks that give each GPT-2 attention layer ``codes["early"]`` or ``codes["late"]`` as its mask.

    Yields the dict to fill before each forward pass; an empty dict leaves the layers' masks alone.
    """
    codes: dict[str, torch.Tensor] = {}
    handles = []
    for index, block in enumerate(model.transformer.h):

        def hook(
            _module: torch.nn.Module, args: tuple, kwargs: dict, index: int = index
        ) -> tuple[tuple, dict]:
            if codes:
                kwargs["attention_mask"] = codes["early"] if index < read_layer else codes["late"]
            return args, kwargs

        handles.append(block.attn.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield codes
    finally:
        for handle in handles:
            handle.remove()
