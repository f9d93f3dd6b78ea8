"""Token positions of a subject in a prompt, and hidden representations read at those positions.

Locate-then-edit methods read keys and write values at one token per prompt: the last token of the subject
(``fact_token: subject_last``, ROME/MEMIT's choice), its first token, or the prompt's last token. Prompts are
templates with one ``{}`` that the subject fills. Positions are found from the fast tokenizer's character
offsets (the token that covers the subject's last character), so they stay right when a BPE merge crosses
the subject's boundary; slow tokenizers fall back to counting the tokens of the text up to the subject's end.

Batches are right-padded by hand (positions start at 0 for every row, so no ``position_ids`` are needed and
the tokenizer's ``padding_side`` is never touched).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from knowgic.editors.nethook import Trace, model_device
from knowgic.errors import KnowgicError

FactToken = Literal["subject_last", "subject_first", "last"]
FACT_TOKENS: tuple[str, ...] = ("subject_last", "subject_first", "last")


@dataclass(frozen=True)
class Batch:
    """Right-padded token ids; ``lengths[i]`` real tokens in row ``i``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    lengths: tuple[int, ...]

    def to(self, device: torch.device) -> Batch:
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.lengths)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` with the tokenizer's own special tokens (e.g. Llama's BOS)."""
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def pad_id(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "eos_token_id", "bos_token_id"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            return int(value)
    return 0


def make_batch(tokenizer: Any, sequences: Sequence[Sequence[int]]) -> Batch:
    """Right-pad token-id sequences into one batch."""
    if not sequences:
        raise ValueError("empty batch")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id(tokenizer), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        ids[i, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[i, : len(seq)] = 1
    return Batch(ids, mask, tuple(len(s) for s in sequences))


def _check_template(template: str) -> None:
    if template.count("{}") != 1:
        raise KnowgicError(f"prompt template {template!r} must contain exactly one '{{}}' for the subject")


def subject_span(template: str, subject: str) -> tuple[int, int]:
    """Character span ``[start, end)`` of ``subject`` in ``template.format(subject)``."""
    _check_template(template)
    start = template.index("{}")
    return start, start + len(subject)


def token_index(tokenizer: Any, template: str, subject: str, fact_token: str) -> int:
    """Index of the lookup token in ``encode(tokenizer, template.format(subject))``.

    ``subject_last``/``subject_first``: the last/first token overlapping the subject's characters;
    ``last``: the prompt's last token.
    """
    if fact_token not in FACT_TOKENS:
        raise KnowgicError(f"fact_token {fact_token!r} is not one of {', '.join(FACT_TOKENS)}")
    text = template.replace("{}", subject, 1) if "{}" in template else template
    if fact_token == "last":
        return len(encode(tokenizer, text)) - 1
    if not subject:
        raise KnowgicError(f"empty subject for prompt template {template!r}")
    start, end = subject_span(template, subject)
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
        hits = [
            i
            for i, (a, b) in enumerate(enc["offset_mapping"])
            if b > a and a < end and b > start  # special tokens have empty spans
        ]
        if hits:
            return hits[-1] if fact_token == "subject_last" else hits[0]
    # Slow tokenizer (or offsets unavailable): count tokens of the text up to the subject's boundary.
    if fact_token == "subject_last":
        return len(encode(tokenizer, text[:end])) - 1
    # The first subject token follows the tokens of the (space-stripped) prefix.
    return len(encode(tokenizer, text[:start].rstrip()))


def reps_at_tokens(
    model: torch.nn.Module,
    tokenizer: Any,
    templates: Sequence[str],
    subjects: Sequence[str],
    module_name: str,
    *,
    fact_token: str = "subject_last",
    track: Literal["in", "out"] = "in",
    batch_size: int = 32,
) -> torch.Tensor:
    """Input (``track="in"``) or output of ``module_name`` at each prompt's lookup token: (n, d), detached.

    Row ``i`` comes from ``templates[i].format(subjects[i])`` at :func:`token_index`.
    """
    if len(templates) != len(subjects):
        raise ValueError("templates and subjects must have the same length")
    device = model_device(model)
    rows: list[torch.Tensor] = []
    for lo in range(0, len(templates), batch_size):
        tpl, subj = templates[lo : lo + batch_size], subjects[lo : lo + batch_size]
        seqs = [encode(tokenizer, t.replace("{}", s, 1)) for t, s in zip(tpl, subj, strict=True)]
        idxs = [token_index(tokenizer, t, s, fact_token) for t, s in zip(tpl, subj, strict=True)]
        batch = make_batch(tokenizer, seqs).to(device)
        with (
            torch.no_grad(),
            Trace(
                model, [module_name], retain_input=track == "in", retain_output=track == "out", stop=True
            ) as tr,
        ):
            model(**batch.model_inputs())
        rec = tr[module_name]
        hidden = rec.input if track == "in" else rec.output
        assert hidden is not None
        rows.append(hidden[torch.arange(len(idxs), device=device), torch.tensor(idxs, device=device)])
    return torch.cat(rows, dim=0).detach()
