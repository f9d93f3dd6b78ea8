"""Building ``knowgic-tiny`` into a folder, and the user-cache entry that holds it.

The package ships the default model (``prebuilt/``, 4 MB, made by :func:`build_tiny_model` with the default
recipe; ``tests/test_tiny_model.py`` rebuilds it and checks that the script gives a model of the same
quality). :func:`ensure_tiny_model` returns that folder when its recipe hash matches the recipe and the
training data asked for, else ``cache_dir()/models/knowgic-tiny-<recipe hash>``, building it first when
it is missing or incomplete. The build goes into a temporary folder beside it and is renamed into place
only when complete, under a file lock, so a killed build never leaves a half model and two processes never
build the same model at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch
import transformers

from knowgic.errors import KnowgicError
from knowgic.models.tiny.corpus import tokenizer_texts
from knowgic.models.tiny.evaluate import evaluate_known_share, evaluate_rewrites
from knowgic.models.tiny.facts import TrainingFacts, load_training_facts
from knowgic.models.tiny.recipe import MODEL_NAME, TINY_RECIPE, TinyRecipe, recipe_hash
from knowgic.models.tiny.tokenizer import encodes_cleanly, train_tokenizer
from knowgic.models.tiny.train import train_model
from knowgic.paths import cache_dir

STATS_FILE = "knowgic_tiny.json"
PREBUILT_DIR = Path(__file__).resolve().parent / "prebuilt"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", STATS_FILE)


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    recipe: TinyRecipe = TINY_RECIPE,
    progress: bool = True,
    facts: TrainingFacts | None = None,
) -> dict[str, Any]:
    """Train tokenizer and model on ``facts`` (default: every shipped dataset version) into ``out_dir``.

    Writes a ``transformers`` folder (GPT2LMHeadModel + fast tokenizer) and ``knowgic_tiny.json`` with the
    recipe, its hash and what the model learnt; returns those stats.
    """
    started = time.perf_counter()
    facts = facts if facts is not None else load_training_facts()
    digest = recipe_hash(recipe, facts.fingerprint())
    tokenizer = train_tokenizer(tokenizer_texts(facts, recipe), recipe.vocab_size, recipe.bpe_min_frequency)
    bad = [s for s in facts.all_strings() if not encodes_cleanly(tokenizer, s)]
    if bad:
        raise KnowgicError(
            f"knowgic-tiny tokenizer cannot represent {len(bad)} benchmark string(s), e.g. {bad[0]!r}"
        )
    eval_facts = [f.as_fact() for f in facts.facts]
    model, log = train_model(
        facts,
        tokenizer,
        recipe,
        progress=progress,
        evaluate=lambda m: evaluate_known_share(m, tokenizer, eval_facts).known,
    )
    known = evaluate_known_share(model, tokenizer, eval_facts)
    by_key = {f.key: f.as_fact() for f in facts.facts}
    by_version = {}
    for version, keys in facts.version_facts.items():
        version_facts = [by_key[k] for k in keys if k in by_key]
        by_version[version] = round(evaluate_known_share(model, tokenizer, version_facts).share, 6)
    rewrites = evaluate_rewrites(model, tokenizer, facts.requests)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    stats: dict[str, Any] = {
        "name": MODEL_NAME,
        "recipe_hash": digest,
        "recipe": recipe.to_dict(),
        "seed": recipe.seed,
        "steps": log.steps,
        "final_loss": round(log.final_loss, 6),
        "known_share": round(known.share, 6),
        "known_share_by_version": by_version,
        "n_facts": len(eval_facts),
        "mean_gold_p": round(known.mean_p, 6),
        "median_gold_p": round(float(np.median(known.p)), 6),
        "rewrite_true_beats_new": round(rewrites.true_beats_new, 6),
        "mean_p_target_true": round(float(rewrites.p_true.mean()), 6),
        "mean_p_target_new": round(float(rewrites.p_new.mean()), 6),
        "known_share_during_training": [[step, round(share, 6)] for step, share in log.evals],
        "train_seconds": round(log.seconds, 2),
        "train_cpu_seconds": round(log.cpu_seconds, 2),
        "data_source": facts.source,
        "dataset_versions": list(facts.versions),
        "data_fingerprint": facts.fingerprint(),
        "dropped_case_variants": [list(k) for k in facts.dropped],
        "vocab_size": len(tokenizer),
        "n_params": sum(p.numel() for p in model.parameters()),
        "software": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }
    stats["build_seconds"] = round(time.perf_counter() - started, 2)
    (out / STATS_FILE).write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return stats


def read_stats(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The folder's ``knowgic_tiny.json``, or None when it is missing or unreadable."""
    try:
        data = json.loads((Path(folder) / STATS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_complete(folder: Path, digest: str) -> bool:
    """Every required file is there and non-empty, the stats name ``digest``, the weights file parses."""
    if not folder.is_dir():
        return False
    if any(not (folder / name).is_file() or (folder / name).stat().st_size == 0 for name in REQUIRED_FILES):
        return False
    stats = read_stats(folder)
    if stats is None or stats.get("recipe_hash") != digest:
        return False
    try:
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
            return len(list(handle.keys())) > 0
    except Exception:  # any parse failure means a damaged file: rebuild
        return False


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` where the platform has ``fcntl``; elsewhere a no-op."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def tiny_model_dir(recipe: TinyRecipe = TINY_RECIPE, facts: TrainingFacts | None = None) -> Path:
    """Where the cache keeps the model of ``recipe`` (whether or not it is built yet)."""
    facts = facts if facts is not None else load_training_facts()
    return cache_dir() / "models" / f"{MODEL_NAME}-{recipe_hash(recipe, facts.fingerprint())}"


def is_built(recipe: TinyRecipe = TINY_RECIPE) -> bool:
    """Whether the package or the cache holds a complete model for ``recipe`` (loading needs no build)."""
    facts = load_training_facts()
    digest = recipe_hash(recipe, facts.fingerprint())
    return is_complete(PREBUILT_DIR, digest) or is_complete(tiny_model_dir(recipe, facts), digest)


def _shipped_without_dataset(recipe: TinyRecipe) -> Path:
    stats = read_stats(PREBUILT_DIR) or {}
    fingerprint = stats.get("data_fingerprint")
    digest = recipe_hash(recipe, fingerprint) if isinstance(fingerprint, str) else None
    if digest is None or not is_complete(PREBUILT_DIR, digest):
        raise KnowgicError(
            f"{MODEL_NAME}: no dataset is installed here to build it from, and the shipped model does not "
            "match this recipe"
        )
    return PREBUILT_DIR


def ensure_tiny_model(rebuild: bool = False, progress: bool = True, recipe: TinyRecipe = TINY_RECIPE) -> Path:
    """The cached ``knowgic-tiny`` folder, built first when missing, incomplete, or ``rebuild`` is set.

    The folder loads with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``.
    An install without the dataset (the runner's edit image) cannot check the recipe against the facts, nor
    build: there the shipped model is used when it matches the recipe and the data fingerprint it records.
    """
    from knowgic.dataset.versions import dataset_installed

    if not dataset_installed() and not rebuild:
        return _shipped_without_dataset(recipe)
    facts = load_training_facts()
    digest = recipe_hash(recipe, facts.fingerprint())
    if not rebuild and is_complete(PREBUILT_DIR, digest):
        return PREBUILT_DIR
    final = tiny_model_dir(recipe, facts)
    if not rebuild and is_complete(final, digest):
        return final
    root = final.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KnowgicError(f"cannot create the model cache folder {root}: {exc}") from None
    with build_lock(root / f".{final.name}.lock"):
        if not rebuild and is_complete(final, digest):  # another process built it meanwhile
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.build-", dir=root))
        try:
            build_tiny_model(tmp, recipe, progress=progress, facts=facts)
            if final.exists():
                trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=root))
                os.replace(final, trash / "model")
                shutil.rmtree(trash, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final
