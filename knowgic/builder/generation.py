"""Batched greedy generation, free or constrained to a JSON Schema (``lm-format-enforcer``).

    prompts --(chat template for chat models)--> left-padded batches --model.generate(greedy)--> texts
                                    JSON Schema --TokenEnforcer--> allowed next tokens per sequence

Constrained output is valid JSON of the schema by construction (unless ``max_new_tokens`` cuts it short,
which :func:`parse_constrained` reports), so nothing is parsed by regular expressions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from knowgic.errors import KnowgicError

EXTRA = "build"


def require(module: str) -> Any:
    """Import a module of the ``build`` extra, or fail with one line naming the extra."""
    import importlib

    from knowgic.extras import install_hint

    try:
        return importlib.import_module(module)
    except ImportError:
        raise KnowgicError(f"this build stage needs {module.split('.')[0]}: {install_hint(EXTRA)}") from None


def _regular_tokens(tokenizer: Any, vocab_size: int) -> list[tuple[int, str, bool]]:
    """(id, text, starts a word) of every non-special token, as the enforcer's prefix tree wants them."""
    zero = tokenizer.encode("0", add_special_tokens=False)[-1]
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(vocab_size) if i not in special]
    # batch_decode runs in the fast tokenizer's native code: seconds for a 262k vocabulary
    after_zero = [t[1:] for t in tokenizer.batch_decode([[zero, i] for i in ids])]
    alone = tokenizer.batch_decode([[i] for i in ids])
    return [(i, a, len(a) > len(b)) for i, a, b in zip(ids, after_zero, alone, strict=True)]


@dataclass
class Generator:
    """Greedy generation with one loaded model (a :class:`~knowgic.models.base.LoadedModel`)."""

    loaded: Any
    batch_size: int = 8
    _tokenizer_data: Any = None

    @property
    def label(self) -> str:
        return f"{self.loaded.model_id}@{self.loaded.revision[:12]}"

    def render(self, prompt: str) -> str:
        """The text the model sees: the chat template's user turn for chat models, else the prompt."""
        tok = self.loaded.tokenizer
        if self.loaded.is_chat and getattr(tok, "chat_template", None):
            return tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        return prompt

    def _enforcer_data(self) -> Any:
        if self._tokenizer_data is None:
            tokenenforcer = require("lmformatenforcer.tokenenforcer")
            tok = self.loaded.tokenizer
            vocab = len(tok)
            self._tokenizer_data = tokenenforcer.TokenEnforcerTokenizerData(
                _regular_tokens(tok, vocab),
                lambda ids: tok.decode(ids).rstrip("\ufffd"),
                tok.eos_token_id,
                False,
                vocab,
            )
        return self._tokenizer_data

    def _allowed_fn(self, schema: dict[str, Any]) -> Callable[[int, torch.Tensor], list[int]]:
        lmfe = require("lmformatenforcer")
        tokenenforcer = require("lmformatenforcer.tokenenforcer")
        parser_config = require("lmformatenforcer.characterlevelparser").CharacterLevelParserConfig(
            max_consecutive_whitespaces=1  # no runs of blank lines between JSON tokens
        )
        parser = lmfe.JsonSchemaParser(schema, config=parser_config)
        enforcer = tokenenforcer.TokenEnforcer(self._enforcer_data(), parser)

        def allowed(_batch_id: int, sent: torch.Tensor) -> list[int]:
            return enforcer.get_allowed_tokens(sent.tolist()).allowed_tokens

        return allowed

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        schema: dict[str, Any] | None = None,
        on_batch: Callable[[int, list[str]], None] | None = None,
    ) -> list[str]:
        """Greedy continuations of ``prompts`` (rendered), in order; ``on_batch(start, texts)`` after each
        batch so a caller can journal them."""
        from knowgic.scoring.logprob import max_positions

        model, tok = self.loaded.model, self.loaded.tokenizer
        device = next(model.parameters()).device
        limit = max_positions(model)
        out: list[str] = []
        side = tok.padding_side
        tok.padding_side = "left"
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        try:
            for start in range(0, len(prompts), self.batch_size):
                texts = [self.render(p) for p in prompts[start : start + self.batch_size]]
                enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=True).to(device)
                width = enc["input_ids"].shape[1]
                room = max_new_tokens if limit is None else min(max_new_tokens, limit - width)
                if room < 1:
                    raise KnowgicError(
                        f"a prompt of {width} tokens leaves no room in the model's {limit} positions"
                    )
                kwargs: dict[str, Any] = {
                    "max_new_tokens": room,
                    "do_sample": False,
                    "pad_token_id": pad,
                    "eos_token_id": tok.eos_token_id,
                }
                if schema is not None:
                    kwargs["prefix_allowed_tokens_fn"] = self._allowed_fn(schema)
                with torch.inference_mode():
                    ids = model.generate(**enc, **kwargs)
                batch = [tok.decode(row[width:], skip_special_tokens=True) for row in ids]
                out.extend(batch)
                if on_batch is not None:
                    on_batch(start, batch)
        finally:
            tok.padding_side = side
        return out


def parse_constrained(text: str) -> tuple[Any, str | None]:
    """The JSON value of a constrained output, or (None, why) when generation stopped before it closed."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"output cut short at {len(text)} characters ({exc.msg})"


def check_answers(outputs: Sequence[str], what: str, model: str) -> None:
    """A model that answers nothing (every output empty) is a bad input, said in one line."""
    if outputs and not any(o.strip() for o in outputs):
        raise KnowgicError(f"{what}: model {model} answered nothing to any of {len(outputs)} prompts")
