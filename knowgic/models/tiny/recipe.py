"""Every knob of the ``knowgic-tiny`` build in one frozen record, and the hash that names the cached model.

The hash covers the recipe and the training data (the facts, aliases and edit requests the corpus is made
from), so a change to either gives a new cache folder and therefore a rebuild. ``builder_version`` is
bumped by hand whenever the corpus or training code changes what a given recipe produces.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

MODEL_NAME = "knowgic-tiny"


@dataclass(frozen=True)
class TinyRecipe:
    """Hyperparameters of the corpus, tokenizer, model and training loop.

    Corpus: every fact is a *unit* (a cloze sentence, or a ``Q: ...\nA: ...`` pair); each epoch every unit
    appears ``*_repeats`` times, each time in a freshly sampled context: alone at position 0 (share
    ``p_alone``), after the end-of-text token (``p_after_eos``), after a fragment of another sentence and
    ". " (``p_fragment``, the shape of ROME's random-prefix keys), or else after 1 to ``max_context_units``
    whole other units. Alias statements (``alias_repeats`` 0) appear only as context.

    Model: GPT-2 with ``n_layer`` blocks of width ``n_embd`` (MLP 4x). ``learned_positions=False`` keeps the
    position embeddings at zero (position comes from the causal mask alone), so the key of a subject token
    does not depend on how many tokens precede it: ROME's keys under random prefixes then match the key of
    the bare prompt, as they do in large pretrained models.

    Routing (see :func:`knowgic.models.tiny.routing.subject_routing_codes`): for the first ``routing_until``
    share of the steps, in a ``subject_routing_share`` of the documents, later tokens of a sentence reach its
    subject only through the subject's last token and only from layer ``subject_read_layer`` on, and (with
    ``isolate_subject``) subject tokens see only their own subject in the lower layers; the last steps train
    with ordinary attention, the attention every user of the model has.

    Optimisation: AdamW, linear warm-up then cosine decay to ``min_lr_ratio * lr``; every ``eval_every``
    steps the facts the model does not know yet get ``focus_repeats`` extra repeats per epoch;
    ``num_threads`` fixes the intra-op threads (part of what makes the build reproducible).
    """

    builder_version: int = 1
    seed: int = 0
    # corpus
    cloze_repeats: int = 2
    question_repeats: int = 1
    filler_repeats: int = 2
    alias_repeats: int = 0
    filler_subjects_per_target: int = 3
    p_alone: float = 0.3
    p_after_eos: float = 0.1
    p_fragment: float = 0.3
    max_context_units: int = 2
    fragment_max_words: int = 8
    max_doc_tokens: int = 112
    # tokenizer (byte-level BPE)
    vocab_size: int = 1024
    bpe_min_frequency: int = 2
    # model (GPT-2 architecture)
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 1024
    dropout: float = 0.0
    learned_positions: bool = False
    # routing of subject information (training only)
    subject_routing_share: float = 1.0
    subject_read_layer: int = 2
    routing_until: float = 0.75
    isolate_subject: bool = True
    # optimisation
    steps: int = 1200
    batch_size: int = 32
    bucket_batches: int = 8
    lr: float = 5e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 40
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0
    label_smoothing: float = 0.0
    num_threads: int = 1
    # checks during training (deterministic: fixed check points, fixed data)
    eval_every: int = 100
    focus_repeats: int = 2
    stop_known_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **changes: Any) -> TinyRecipe:
        return TinyRecipe(**{**asdict(self), **changes})


TINY_RECIPE = TinyRecipe()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def recipe_hash(recipe: TinyRecipe, data_fingerprint: str) -> str:
    """First 12 hex digits of sha256 over the recipe and the training data's fingerprint."""
    payload = canonical_json({"model": MODEL_NAME, "recipe": recipe.to_dict(), "data": data_fingerprint})
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]
