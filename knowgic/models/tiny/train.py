"""The training loop of ``knowgic-tiny``: a GPT-2 trained from scratch on the corpus, deterministically.

Causal language modelling on every token of every document (context included), AdamW (Loshchilov &
Hutter 2019) with linear warm-up and cosine decay to ``min_lr_ratio * lr``, attention routed as in
:mod:`knowgic.models.tiny.routing` for the first ``routing_until`` share of the steps. Determinism: the
model's initialisation comes from ``torch.manual_seed(recipe.seed)`` inside a forked RNG (the caller's RNG
state is untouched), the data order from ``random.Random(recipe.seed)``, and deterministic algorithms and a
fixed thread count are switched on for the duration.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import AttentionInterface, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from knowgic.models.tiny.corpus import Document, cloze_sentence, documents
from knowgic.models.tiny.facts import TrainingFacts
from knowgic.models.tiny.recipe import TinyRecipe
from knowgic.models.tiny.routing import (
    ROUTED_ATTENTION,
    layer_codes,
    routed_attention,
    subject_routing_codes,
    token_span,
)


@dataclass
class TrainLog:
    """What happened during training: per-step losses, periodic known shares, where it stopped."""

    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def final_loss(self) -> float:
        tail = self.losses[-20:]
        return float(sum(tail) / len(tail)) if tail else float("nan")


@contextmanager
def deterministic_algorithms(num_threads: int) -> Iterator[None]:
    """Deterministic algorithms and a fixed intra-op thread count for the block, then the caller's again.

    The thread count is part of the recipe: how a matrix product is split over threads changes the order
    of floating-point sums, and one thread is also the fastest for these small matrices on a busy machine.
    """
    previous = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous, warn_only=previous_warn)
        torch.set_num_threads(previous_threads)


def gpt2_config(recipe: TinyRecipe, tokenizer: PreTrainedTokenizerFast) -> GPT2Config:
    return GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=recipe.n_positions,
        n_embd=recipe.n_embd,
        n_layer=recipe.n_layer,
        n_head=recipe.n_head,
        n_inner=4 * recipe.n_embd,
        resid_pdrop=recipe.dropout,
        embd_pdrop=recipe.dropout,
        attn_pdrop=recipe.dropout,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )


def lr_factor(step: int, recipe: TinyRecipe) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine from 1 down to ``min_lr_ratio``."""
    if step < recipe.warmup_steps:
        return (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return recipe.min_lr_ratio + (1.0 - recipe.min_lr_ratio) * cosine


def _optimizer(model: torch.nn.Module, recipe: TinyRecipe) -> torch.optim.AdamW:
    # Decay matrices only; biases and LayerNorm gains stay free (the usual GPT recipe).
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    free = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": free, "weight_decay": 0.0}],
        lr=recipe.lr,
        betas=(recipe.beta1, recipe.beta2),
    )


@dataclass(frozen=True)
class Batch:
    """Right-padded ids, labels (-100 on padding) and (B, 1, T, T) edge codes for the attention layers below
    ``recipe.subject_read_layer`` (``early``) and from it on (``late``); see :mod:`.routing`."""

    ids: torch.Tensor
    labels: torch.Tensor
    early: torch.Tensor
    late: torch.Tensor


def make_batch(
    docs: list[Document],
    tokenizer: PreTrainedTokenizerFast,
    max_tokens: int,
    routed: list[bool],
    isolate_subject: bool = False,
) -> Batch:
    """Tokenize ``docs``; over-long documents lose their *start*; ``routed[i]``: route document ``i``."""
    enc = tokenizer([d.text for d in docs], add_special_tokens=False, return_offsets_mapping=True)
    width = min(max_tokens, max(len(ids) for ids in enc["input_ids"]))
    ids = torch.full((len(docs), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(docs), width), -100, dtype=torch.long)
    # Padding positions attend to themselves only (their outputs are ignored by the loss).
    early = torch.eye(width, dtype=torch.int8).repeat(len(docs), 1, 1, 1)
    late = early.clone()
    for i, doc in enumerate(docs):
        row = enc["input_ids"][i]
        cut = max(0, len(row) - max_tokens)
        row = row[cut:]
        n = len(row)
        ids[i, :n] = torch.tensor(row)
        labels[i, :n] = ids[i, :n]
        spans: list[tuple[int, int, int]] = []
        if routed[i]:
            offsets = enc["offset_mapping"][i]
            for start, end, stop in doc.subject_spans:
                span = token_span(offsets, start, end, stop)
                if span is not None and span[0] >= cut:
                    spans.append((span[0] - cut, span[1] - cut, span[2] - cut))
        early[i, 0, :n, :n], late[i, 0, :n, :n] = subject_routing_codes(n, spans, isolate_subject)
    return Batch(ids, labels, early, late)


def batches(
    stream: Iterator[Document], tokenizer: PreTrainedTokenizerFast, recipe: TinyRecipe, rng: random.Random
) -> Iterator[Batch]:
    """Batches of documents of similar length (less padding): draw ``bucket_batches`` batches' worth of
    documents, sort them by length, cut into batches and yield those in a shuffled order."""
    size = recipe.batch_size
    routing_steps = int(recipe.routing_until * recipe.steps)
    produced = 0
    while True:
        docs = [next(stream) for _ in range(size * recipe.bucket_batches)]
        lengths = [
            len(ids) for ids in tokenizer([d.text for d in docs], add_special_tokens=False)["input_ids"]
        ]
        order = sorted(range(len(docs)), key=lambda i: (lengths[i], i))
        chunks = [order[i : i + size] for i in range(0, len(order), size)]
        rng.shuffle(chunks)
        for chunk in chunks:
            routed = [rng.random() < recipe.subject_routing_share for _ in chunk]
            if produced >= routing_steps:
                routed = [False] * len(chunk)
            produced += 1
            yield make_batch(
                [docs[i] for i in chunk], tokenizer, recipe.max_doc_tokens, routed, recipe.isolate_subject
            )


def train_model(
    facts: TrainingFacts,
    tokenizer: PreTrainedTokenizerFast,
    recipe: TinyRecipe,
    progress: bool = True,
    evaluate: Callable[[GPT2LMHeadModel], np.ndarray] | None = None,
) -> tuple[GPT2LMHeadModel, TrainLog]:
    """Train a fresh GPT-2 on ``facts``' corpus for ``recipe.steps`` steps.

    ``evaluate`` (model -> per fact of ``facts.facts``, whether the model knows it) runs every
    ``recipe.eval_every`` steps; facts not known get ``recipe.focus_repeats`` extra repeats per epoch until the
    next check, and when ``recipe.stop_known_share`` is set, training stops at the first check that reaches it.
    The check points and the data are fixed, so all of this is deterministic too.
    """
    log = TrainLog()
    start, cpu_start = time.perf_counter(), time.process_time()
    data_rng = random.Random(recipe.seed)
    focus: dict[str, int] = {}
    stream = batches(documents(facts, recipe, data_rng, focus), tokenizer, recipe, data_rng)
    AttentionInterface.register(ROUTED_ATTENTION, routed_attention)
    with torch.random.fork_rng(devices=[]), deterministic_algorithms(recipe.num_threads):
        torch.manual_seed(recipe.seed)
        model = GPT2LMHeadModel(gpt2_config(recipe, tokenizer))
        if not recipe.learned_positions:
            with torch.no_grad():
                model.transformer.wpe.weight.zero_()
            model.transformer.wpe.weight.requires_grad_(False)
        optimizer = _optimizer(model, recipe)
        bar = tqdm(range(recipe.steps), desc="knowgic-tiny", unit="step", disable=not progress, leave=False)
        with layer_codes(model, recipe.subject_read_layer) as codes:
            for step in bar:
                model.set_attn_implementation(ROUTED_ATTENTION)
                model.train()
                for group in optimizer.param_groups:
                    group["lr"] = recipe.lr * lr_factor(step, recipe)
                batch = next(stream)
                codes.update(early=batch.early, late=batch.late)
                logits = model(input_ids=batch.ids, attention_mask=batch.late).logits
                codes.clear()
                loss = F.cross_entropy(
                    logits[:, :-1].reshape(-1, logits.size(-1)),
                    batch.labels[:, 1:].reshape(-1),
                    ignore_index=-100,
                    label_smoothing=recipe.label_smoothing,
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
                optimizer.step()
                log.losses.append(loss.item())
                log.steps = step + 1
                bar.set_postfix(loss=f"{log.losses[-1]:.3f}")
                if evaluate is None or not recipe.eval_every or (step + 1) % recipe.eval_every:
                    continue
                model.set_attn_implementation("sdpa")
                known = evaluate(model)
                log.evals.append((step + 1, float(known.mean())))
                focus.clear()
                if recipe.focus_repeats:
                    for fact, ok in zip(facts.facts, known, strict=True):
                        if not ok:
                            focus[cloze_sentence(fact.cloze, fact.answer)] = recipe.focus_repeats
                if recipe.stop_known_share is not None and log.evals[-1][1] >= recipe.stop_known_share:
                    break
        bar.close()
    model.set_attn_implementation("sdpa")
    model.eval()
    log.seconds = time.perf_counter() - start
    log.cpu_seconds = time.process_time() - cpu_start
    return model, log
