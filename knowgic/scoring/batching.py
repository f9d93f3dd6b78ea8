"""Padding and model-call helpers shared by the scorers and the bare forward-pass timer.

Sequences are left-padded with explicit position ids (``cumsum(mask) - 1``): every real token keeps the
position it has unpadded, so a batched score equals the one-at-a-time score, and the answer positions line
up at the right edge, which lets the model compute logits only for the last few positions.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ForwardSupport:
    """Which optional keyword arguments the model's ``forward`` takes."""

    position_ids: bool
    logits_to_keep: bool
    use_cache: bool

    def step_kwargs(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, past: Any
    ) -> dict[str, Any]:
        """The keyword arguments of one decoding step: the new tokens, the mask so far, their positions
        where the model takes them, only the last position's logits, and the cache where it keeps one."""
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if self.position_ids:
            kwargs["position_ids"] = positions
        if self.logits_to_keep:
            kwargs["logits_to_keep"] = 1
        if self.use_cache:
            kwargs["use_cache"] = True
            if past is not None:
                kwargs["past_key_values"] = past
        return kwargs


def forward_support(model: torch.nn.Module) -> ForwardSupport:
    params = inspect.signature(model.forward).parameters
    return ForwardSupport(
        position_ids="position_ids" in params,
        logits_to_keep="logits_to_keep" in params,
        use_cache="use_cache" in params,
    )


def input_device(model: torch.nn.Module) -> torch.device:
    """Where input ids must go: the device of the input embeddings (also right for sharded models)."""
    try:
        return model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return next(model.parameters()).device


def pad_token_id(tokenizer: Any) -> int:
    """Any valid id works (padded positions are masked out); prefer the tokenizer's own pad token."""
    for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
        tid = getattr(tokenizer, name, None)
        if isinstance(tid, int):
            return tid
    return 0


def eos_ids(model: torch.nn.Module, tokenizer: Any) -> set[int]:
    """Tokens that end an answer: the tokenizer's EOS and the model's generation EOS list (chat turn ends)."""
    ids: set[int] = set()
    candidates: list[Any] = [getattr(tokenizer, "eos_token_id", None)]
    gen_config = getattr(model, "generation_config", None)
    candidates.append(getattr(gen_config, "eos_token_id", None))
    for c in candidates:
        if isinstance(c, int):
            ids.add(c)
        elif isinstance(c, list | tuple):
            ids.update(int(x) for x in c if isinstance(x, int))
    return ids


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # (B, L), left-padded
    attention_mask: torch.Tensor  # (B, L), 1 on real tokens
    position_ids: torch.Tensor  # (B, L), 0 at each row's first real token

    def model_kwargs(self, support: ForwardSupport) -> dict[str, torch.Tensor]:
        kwargs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if support.position_ids:
            kwargs["position_ids"] = self.position_ids
        return kwargs


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> Batch:
    """Left-pad token sequences into one batch on ``device``."""
    width = max(len(s) for s in seqs)
    ids = [[pad_id] * (width - len(s)) + list(s) for s in seqs]
    mask = [[0] * (width - len(s)) + [1] * len(s) for s in seqs]
    input_ids = torch.tensor(ids, dtype=torch.long)
    attention_mask = torch.tensor(mask, dtype=torch.long)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return Batch(input_ids.to(device), attention_mask.to(device), position_ids.to(device))


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), to cut padding."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Score with dropout off, and give the model back in the mode it came in."""
    was_training = model.training
    if was_training:
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()
