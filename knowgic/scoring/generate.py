"""The ``generate`` and ``greedy`` protocols: does the model *say* the answer? (DESIGN.md, "Scoring protocols")

ThinkEdit (§4) generates five responses per question from the original and the edited model; RippleEdits
(§5) counts a response as correct when an alias of the target appears in it. Here, for a query q with
gold answers A_q and k decoded answers s_1..s_k to its question,

    p_q = (1/k) * #{ j : contains_answer(s_j, A_q) },    known_q = p_q >= threshold

with threshold 0.2 for ``generate`` (k = 5 samples) and 1.0 for ``greedy`` (k = 1, argmax decoding), both
from ``spec/benchmark.yaml``. The input is the query's question (its cloze text when it has none): through
the tokenizer's chat template for chat models, else ``base_template`` ("Q: {question}\\nA:"). An
in-context prefix goes before the question (inside the user turn for chat models). Only the new tokens are
decoded; for base models the answer is the text up to the first newline after leading whitespace.

Decoding is the scorer's own loop with a KV cache (no ``generate()`` call, so no generation defaults of
the model, e.g. a repetition penalty, leak in) over left-padded batches with explicit position ids.
Sampling draws from a per-(question, sample) random stream (:mod:`knowgic.scoring.sampling`), so p does
not depend on batch size or query order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from knowgic.errors import KnowgicError
from knowgic.scoring.base import Query, Scores
from knowgic.scoring.batching import (
    eos_ids,
    eval_mode,
    forward_support,
    input_device,
    left_pad,
    length_sorted_batches,
    pad_token_id,
)
from knowgic.scoring.logprob import check_prefix_fits, max_positions, non_finite_logits, query_text
from knowgic.scoring.matching import contains_answer
from knowgic.scoring.sampling import inverse_cdf_sample, sample_seed, step_uniforms
from knowgic.spec import benchmark_spec

DEFAULT_BASE_TEMPLATE = "Q: {question}\nA:"


def _positive_int(protocol: str, name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise KnowgicError(f"{protocol}: {name} must be a positive integer, got {value!r}")
    return value


def _check_template(protocol: str, template: Any) -> str:
    if not isinstance(template, str):
        raise KnowgicError(f"{protocol}: base_template must be a string, got {template!r}")
    try:
        filled = template.format(question="\x00")
    except (KeyError, IndexError, ValueError) as exc:
        raise KnowgicError(
            f"{protocol}: base_template {template!r} may only use the {{question}} field ({exc})"
        ) from None
    if "\x00" not in filled:
        raise KnowgicError(f"{protocol}: base_template {template!r} must contain {{question}}")
    return template


class _DecodingScorer:
    """Shared machinery of :class:`GenerateScorer` and :class:`GreedyScorer`."""

    protocol = ""

    def __init__(
        self,
        *,
        k: int,
        seed: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        batch_size: int,
        base_template: str,
        chat: bool | None,
        known_threshold: float | None,
        sample: bool,
        progress: bool,
    ) -> None:
        name = self.protocol
        self.k = _positive_int(name, "k", k)
        self.max_new_tokens = _positive_int(name, "max_new_tokens", max_new_tokens)
        self.batch_size = _positive_int(name, "batch_size", batch_size)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise KnowgicError(f"{name}: seed must be an integer, got {seed!r}")
        self.seed = seed
        if not isinstance(temperature, int | float) or isinstance(temperature, bool) or not temperature > 0:
            raise KnowgicError(f"{name}: temperature must be a number > 0, got {temperature!r}")
        self.temperature = float(temperature)
        if not isinstance(top_p, int | float) or isinstance(top_p, bool) or not 0 < top_p <= 1:
            raise KnowgicError(f"{name}: top_p must be in (0, 1], got {top_p!r}")
        self.top_p = float(top_p)
        self.base_template = _check_template(name, base_template)
        if chat is not None and not isinstance(chat, bool):
            raise KnowgicError(f"{name}: chat must be true, false or null, got {chat!r}")
        self.chat = chat
        if known_threshold is None:
            known_threshold = benchmark_spec().protocol(name).known_threshold
            if known_threshold is None:
                raise KnowgicError(f"spec/benchmark.yaml: protocols.{name} has no known_threshold")
        if not isinstance(known_threshold, int | float) or not 0 <= known_threshold <= 1:
            raise KnowgicError(f"{name}: known_threshold must be in [0, 1], got {known_threshold!r}")
        self.known_threshold = float(known_threshold)
        self.sample = sample
        self.progress = progress
        self._flags_for: Any = None
        self._newline = torch.zeros(0, dtype=torch.bool)
        self._visible = torch.zeros(0, dtype=torch.bool)

    # -- inputs ---------------------------------------------------------------------------------------

    def is_chat(self, tokenizer: Any) -> bool:
        if self.chat is not None:
            return self.chat
        return bool(getattr(tokenizer, "chat_template", None))

    @staticmethod
    def question(query: Query, index: int) -> str:
        return query.question.strip() or query_text(query, index)

    def render(self, tokenizer: Any, question: str, prefix: str, chat: bool) -> str:
        """The model input for one question, as text."""
        if not chat:
            return prefix + self.base_template.format(question=question)
        if not getattr(tokenizer, "chat_template", None):
            raise KnowgicError(f"{self.protocol}: chat=True but the tokenizer has no chat template")
        messages = [{"role": "user", "content": prefix + question}]
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # a template's own error (jinja raise_exception, missing role, ...)
            raise KnowgicError(f"{self.protocol}: the tokenizer's chat template failed: {exc}") from None
        return str(text)

    # -- scoring --------------------------------------------------------------------------------------

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
        for qi, query in enumerate(queries):
            if not any(a.strip() for a in query.answers):
                raise KnowgicError(f"query {qi} ({query.prompt!r}, subject {query.subject!r}) has no answer")
        check_prefix_fits(model, tokenizer, prefix)  # before every question repeats it
        chat = self.is_chat(tokenizer)
        # Queries that share a question share its samples (same seeds): decode each question once.
        questions = [self.question(q, i) for i, q in enumerate(queries)]
        distinct = list(dict.fromkeys(questions))
        slot = {q: i for i, q in enumerate(distinct)}
        prompts = [self.render(tokenizer, q, prefix, chat) for q in distinct]
        encoded = tokenizer(prompts, add_special_tokens=not chat)["input_ids"]
        limit = max_positions(model)
        for q, ids in zip(distinct, encoded, strict=True):
            if limit is not None and len(ids) + self.max_new_tokens > limit:
                raise KnowgicError(
                    f"{self.protocol}: question {q!r} ({len(ids)} tokens) plus {self.max_new_tokens} new "
                    f"tokens exceeds the model's {limit} positions"
                )
        rows = [(d, j) for d in range(len(distinct)) for j in range(self.k)]
        uniforms = None
        if self.sample:
            seeds = [sample_seed(self.seed, distinct[d], j) for d, j in rows]
            uniforms = step_uniforms(seeds, self.max_new_tokens)
        texts = self.decode(
            model, tokenizer, [list(encoded[d]) for d, _ in rows], uniforms, cut_newline=not chat
        )
        p = np.zeros(len(queries), dtype=np.float64)
        for qi, query in enumerate(queries):
            d = slot[questions[qi]]
            count = sum(contains_answer(texts[d * self.k + j], query.answers) for j in range(self.k))
            p[qi] = count / self.k
        known = p >= self.known_threshold - 1e-12
        return Scores(p, known)

    def decode(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        prompts: Sequence[Sequence[int]],
        uniforms: torch.Tensor | None,
        cut_newline: bool,
    ) -> list[str]:
        """Decode up to ``max_new_tokens`` after each prompt; argmax when ``uniforms`` is None."""
        device = input_device(model)
        support = forward_support(model)
        pad = pad_token_id(tokenizer)
        stop = torch.tensor(sorted(eos_ids(model, tokenizer)), dtype=torch.long, device=device)
        newline, visible = self._token_flags(tokenizer, device) if cut_newline else (None, None)
        texts = [""] * len(prompts)
        batches = length_sorted_batches([len(p) for p in prompts], self.batch_size)
        with torch.inference_mode(), eval_mode(model):
            for idx in tqdm(
                batches, desc=self.protocol, unit="batch", disable=not self.progress, leave=False
            ):
                new_tokens = self._decode_batch(
                    model,
                    support,
                    [prompts[i] for i in idx],
                    pad,
                    device,
                    stop,
                    newline,
                    visible,
                    None if uniforms is None else uniforms[idx],
                )
                for i, tokens in zip(idx, new_tokens, strict=True):
                    text = tokenizer.decode(tokens, skip_special_tokens=True)
                    if cut_newline:
                        text = text.lstrip().split("\n", 1)[0]
                    texts[i] = text.strip()
        return texts

    def _decode_batch(
        self,
        model: torch.nn.Module,
        support: Any,
        prompts: list[Sequence[int]],
        pad: int,
        device: torch.device,
        stop: torch.Tensor,
        newline: torch.Tensor | None,
        visible: torch.Tensor | None,
        uniforms: torch.Tensor | None,
    ) -> list[list[int]]:
        batch = left_pad(prompts, pad, device)
        n = len(prompts)
        mask = batch.attention_mask
        step_ids, step_pos = batch.input_ids, batch.position_ids
        full_ids = batch.input_ids
        past = None
        done = torch.zeros(n, dtype=torch.bool, device=device)
        has_text = torch.zeros(n, dtype=torch.bool, device=device)
        generated: list[torch.Tensor] = []
        for t in range(self.max_new_tokens):
            out = model(**support.step_kwargs(step_ids, mask, step_pos, past))
            logits = out.logits[:, -1, :].float()
            if not bool(torch.isfinite(logits[~done]).all()):  # argmax/sampling would decode garbage
                raise non_finite_logits(model, f"{self.protocol}: decoding step {t + 1}")
            if uniforms is None:
                token = logits.argmax(dim=-1)
            else:
                token = inverse_cdf_sample(logits, uniforms[:, t], self.temperature, self.top_p).to(device)
            token = token.masked_fill(done, pad)
            generated.append(token)
            finished = torch.isin(token, stop)
            if newline is not None and visible is not None:
                # A newline ends a base model's answer once some text came before it (leading
                # whitespace is skipped); later tokens could not change the cut text.
                finished |= newline[token] & has_text
                has_text |= visible[token]
            done |= finished
            if bool(done.all()):
                break
            past = getattr(out, "past_key_values", None) if support.use_cache else None
            mask = torch.cat([mask, torch.ones(n, 1, dtype=mask.dtype, device=device)], dim=1)
            full_ids = torch.cat([full_ids, token.unsqueeze(1)], dim=1)
            if past is None:  # a model without a KV cache: feed the whole sequence again
                step_ids = full_ids
                step_pos = (mask.cumsum(-1) - 1).clamp(min=0)
            else:
                step_ids = token.unsqueeze(1)
                step_pos = step_pos[:, -1:] + 1
        tokens = torch.stack(generated, dim=1).cpu().tolist()
        stop_set = set(stop.cpu().tolist())
        out_rows = []
        for row in tokens:
            end = next((i for i, tok in enumerate(row) if tok in stop_set), len(row))
            out_rows.append(row[:end])
        return out_rows

    def _token_flags(self, tokenizer: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Per vocabulary id: does the token's text contain a newline / any non-whitespace character."""
        if self._flags_for is not tokenizer:
            pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=False)
            self._newline = torch.tensor(["\n" in s for s in pieces], dtype=torch.bool)
            self._visible = torch.tensor([bool(s.strip()) for s in pieces], dtype=torch.bool)
            self._flags_for = tokenizer
        return self._newline.to(device), self._visible.to(device)


class GenerateScorer(_DecodingScorer):
    """The paper's protocol: k sampled answers per question, p = share that contain the answer.

    ``batch_size`` counts sequences (question x sample) per decoding batch. ``chat`` None means: use the
    chat template when the tokenizer has one (the harness passes ``LoadedModel.is_chat``).
    ``known_threshold`` None reads it from ``spec/benchmark.yaml``.
    """

    protocol = "generate"

    def __init__(
        self,
        k: int = 5,
        seed: int = 0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 24,
        batch_size: int = 32,
        base_template: str = DEFAULT_BASE_TEMPLATE,
        chat: bool | None = None,
        known_threshold: float | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(
            k=k,
            seed=seed,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            base_template=base_template,
            chat=chat,
            known_threshold=known_threshold,
            sample=True,
            progress=progress,
        )

    @property
    def params(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "seed": self.seed,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "batch_size": self.batch_size,
            "base_template": self.base_template,
            "chat": self.chat,
            "known_threshold": self.known_threshold,
        }


class GreedyScorer(_DecodingScorer):
    """One argmax decode per question; p in {0, 1}."""

    protocol = "greedy"

    def __init__(
        self,
        max_new_tokens: int = 24,
        batch_size: int = 32,
        base_template: str = DEFAULT_BASE_TEMPLATE,
        chat: bool | None = None,
        known_threshold: float | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(
            k=1,
            seed=0,
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            base_template=base_template,
            chat=chat,
            known_threshold=known_threshold,
            sample=False,
            progress=progress,
        )

    @property
    def params(self) -> dict[str, Any]:
        return {
            "max_new_tokens": self.max_new_tokens,
            "batch_size": self.batch_size,
            "base_template": self.base_template,
            "chat": self.chat,
            "known_threshold": self.known_threshold,
        }
