"""Tokenizing an answer *in context*, the way the tokenizer sees the full text.

A teacher-forced score must use exactly the tokens the tokenizer produces for ``context + sep + answer``,
not ``tokenize(context) + tokenize(answer)``: byte-level BPE (GPT-2, Qwen, Llama 3) merges the separating
space into the answer's first token ("ĠParis"), SentencePiece (Llama 2, Gemma) turns it into "▁Paris", and
a tokenizer may merge across the boundary. So the full text is tokenized once and split where the answer
begins; the BOS token is kept when the tokenizer adds it by default, trailing special tokens (an EOS some
tokenizers append) are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knowgic.errors import KnowgicError

LEADING_SPACE_MODES = ("auto", "always", "never")


def answer_separator(context: str, mode: str) -> str:
    """The text put between the context and the answer.

    ``auto``: one space unless the context is empty or ends in whitespace; ``always``: one space;
    ``never``: nothing (for prompts that already end where the answer starts).
    """
    if mode == "auto":
        return "" if not context or context[-1].isspace() else " "
    if mode == "always":
        return " "
    if mode == "never":
        return ""
    raise KnowgicError(f"answer_leading_space must be one of {', '.join(LEADING_SPACE_MODES)}; got {mode!r}")


@dataclass(frozen=True)
class Split:
    """Token ids of one (context, answer) pair: ``context + answer`` is the full text's tokenization."""

    context: tuple[int, ...]
    answer: tuple[int, ...]


def _strip_trailing_specials(ids: list[int], special_mask: Sequence[int]) -> int:
    """Number of tokens left after removing special tokens the tokenizer appended (e.g. EOS)."""
    end = len(ids)
    while end > 0 and special_mask[end - 1]:
        end -= 1
    return end


def _fallback_context_start(tokenizer: Any) -> list[int]:
    """A context for an empty prompt: the model needs one token to predict the answer's first token from."""
    for name in ("bos_token_id", "eos_token_id"):
        tid = getattr(tokenizer, name, None)
        if isinstance(tid, int):
            return [tid]
    raise KnowgicError("cannot score an answer after an empty prompt: the tokenizer has no BOS or EOS token")


def split_many(
    tokenizer: Any,
    contexts: Sequence[str],
    answers: Sequence[str],
    mode: str = "auto",
    use_offsets: bool | None = None,
) -> list[Split]:
    """Tokenize each ``context + separator + answer`` and split it where the answer starts.

    With a fast tokenizer (``use_offsets`` None or True) the split is the first token whose character span
    reaches past the context; otherwise (``use_offsets=False`` or a slow tokenizer) it is the first token
    that differs from the context's own tokenization. Both give a non-empty answer for a non-empty answer
    string. Raises :class:`KnowgicError` for an empty answer.
    """
    if len(contexts) != len(answers):
        raise ValueError("contexts and answers must have the same length")
    if not contexts:
        return []
    answers = [a.strip() for a in answers]
    for context, answer in zip(contexts, answers, strict=True):
        if not answer:
            raise KnowgicError(f"empty answer for prompt {context!r}: every answer must contribute a token")
    fulls = [c + answer_separator(c, mode) + a for c, a in zip(contexts, answers, strict=True)]
    if use_offsets is None:
        use_offsets = bool(getattr(tokenizer, "is_fast", False))
    if use_offsets:
        enc = tokenizer(
            fulls, add_special_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True
        )
        splits = []
        for i, context in enumerate(contexts):
            ids = list(enc["input_ids"][i])
            end = _strip_trailing_specials(ids, enc["special_tokens_mask"][i])
            offsets = enc["offset_mapping"][i]
            cut = next(
                (
                    j
                    for j in range(end)
                    if not enc["special_tokens_mask"][i][j] and offsets[j][1] > len(context)
                ),
                end,
            )
            splits.append(_make_split(tokenizer, ids[:cut], ids[cut:end], fulls[i]))
        return splits
    enc_full = tokenizer(fulls, add_special_tokens=True, return_special_tokens_mask=True)
    enc_ctx = tokenizer(list(contexts), add_special_tokens=True, return_special_tokens_mask=True)
    splits = []
    for i in range(len(contexts)):
        ids = list(enc_full["input_ids"][i])
        end = _strip_trailing_specials(ids, enc_full["special_tokens_mask"][i])
        ctx = list(enc_ctx["input_ids"][i])
        ctx = ctx[: _strip_trailing_specials(ctx, enc_ctx["special_tokens_mask"][i])]
        cut = 0
        while cut < min(len(ctx), end) and ctx[cut] == ids[cut]:
            cut += 1
        splits.append(_make_split(tokenizer, ids[:cut], ids[cut:end], fulls[i]))
    return splits


def _make_split(tokenizer: Any, context: list[int], answer: list[int], full: str) -> Split:
    if not answer:
        raise KnowgicError(f"the answer in {full!r} produced no tokens of its own")
    if not context:
        context = _fallback_context_start(tokenizer)
    return Split(tuple(context), tuple(answer))


class SplitCache:
    """Remembers splits per (prefix + text, answer) for one tokenizer and one leading-space mode.

    Scorers are called many times on the same queries (pre-edit, then once per edit); tokenizing again
    would cost more than the forward pass of a small model. A different tokenizer empties the cache.
    """

    def __init__(self, mode: str = "auto") -> None:
        answer_separator("x", mode)  # validates the mode early
        self.mode = mode
        self._tokenizer: Any = None
        self._splits: dict[tuple[str, str], Split] = {}

    def get(self, tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> list[Split]:
        """Splits for (context, answer) pairs, tokenizing only those not seen before (in one batch)."""
        if tokenizer is not self._tokenizer:
            self._tokenizer = tokenizer
            self._splits = {}
        missing = list(dict.fromkeys(p for p in pairs if p not in self._splits))
        if missing:
            new = split_many(tokenizer, [c for c, _ in missing], [a for _, a in missing], self.mode)
            self._splits.update(zip(missing, new, strict=True))
        return [self._splits[p] for p in pairs]

    def __len__(self) -> int:
        return len(self._splits)
