"""ROME: Eq. 2's closed form, W'k* = v*, rank one, exact restore, and efficacy on knowgic-tiny."""

from __future__ import annotations

import json
import time

import pytest
import torch

from knowgic.editors.hparams import load_hparams, validate_hparams
from knowgic.editors.layer_stats import parse_datasets_corpus
from knowgic.editors.repr_tools import token_index
from knowgic.editors.rome import ROMEEditor, compute_rome_update, rank_one_update
from knowgic.editors.rome.context_templates import generate_context_templates
from knowgic.editors.rome.rome_main import objective_from
from knowgic.editors.rome.weights import add_to_weight, read_weight
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest

HARRY = EditRequest(
    "{} studied at",
    "Harry Potter",
    "Hogwarts School of Witchcraft and Wizardry",
    "Ilvermorny School of Witchcraft and Wizardry",
)
# Layer 0: in the 2-layer fixture only an edit below the last layer can reach the prediction position.
FAST = {
    "layers": [0],
    "v_num_grad_steps": 8,
    "mom2_n_samples": 200,
    "context_template_length_params": [[5, 4]],
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One statistics cache for the module's tests (collected once, then read from disk)."""
    path = tmp_path_factory.mktemp("knowgic-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KNOWGIC_CACHE", str(path))
        yield path


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_rank_one_update_solves_eq2():
    g = torch.Generator().manual_seed(0)
    d_out, d_in = 12, 20
    w = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    a = torch.randn(d_in, 3 * d_in, generator=g, dtype=torch.float64)
    cov = a @ a.T / a.shape[1]
    k = torch.randn(d_in, generator=g, dtype=torch.float64)
    v = torch.randn(d_out, generator=g, dtype=torch.float64)
    delta = rank_one_update(w, k, v, cov)
    torch.testing.assert_close((w + delta) @ k, v, rtol=1e-10, atol=1e-10)
    s = torch.linalg.svdvals(delta)
    assert float(s[1] / s[0]) < 1e-12
    # The row space is C⁻¹k*: keys C-orthogonal to k* (kᵀC⁻¹k* = 0) keep their values.
    u = torch.linalg.solve(cov, k)
    other = torch.randn(d_in, generator=g, dtype=torch.float64)
    other = other - (other @ u) / (k @ u) * k
    torch.testing.assert_close(delta @ other, torch.zeros(d_out, dtype=torch.float64), atol=1e-10, rtol=0)
    # C = I: the update direction is k* itself.
    delta_i = rank_one_update(w, k, v, None)
    torch.testing.assert_close((w + delta_i) @ k, v, rtol=1e-10, atol=1e-10)


def test_context_templates_deterministic(random_gpt2):
    model, tok = random_gpt2
    a = generate_context_templates(model, tok, [(5, 3), (8, 2)], ("", "The"), seed=3)
    b = generate_context_templates(model, tok, [(5, 3), (8, 2)], ("", "The"), seed=3)
    c = generate_context_templates(model, tok, [(5, 3), (8, 2)], ("", "The"), seed=4)
    assert a == b and a != c
    assert a[0] == "{}" and len(a) == 1 + 2 + 2  # one prefix per seed for each (length, count)
    assert all(t.count("{}") == 1 and t.endswith("{}") for t in a)
    assert any(t.startswith("The") for t in a)


def test_subject_token_index(random_gpt2):
    _, tok = random_gpt2
    for template in ("{} studied at", "Some words first. {} studied at", "Is {}'s school"):
        text = template.replace("{}", "Harry Potter")
        ids = tok(text)["input_ids"]
        last = token_index(tok, template, "Harry Potter", "subject_last")
        first = token_index(tok, template, "Harry Potter", "subject_first")
        assert tok.decode(ids[last]).strip().endswith("ter")
        assert tok.decode(ids[first]).strip() and "Harry".startswith(tok.decode(ids[first]).strip()[:1])
        assert first <= last
        assert tok.decode(ids[first : last + 1]).strip() == "Harry Potter"
    assert (
        token_index(tok, "{} studied at", "Harry Potter", "last")
        == len(tok("Harry Potter studied at")["input_ids"]) - 1
    )


@pytest.mark.parametrize("anchor", ["prompt", "mean"])
def test_update_satisfies_w_k_star_eq_v_star(random_gpt2, cache, anchor):
    from knowgic.editors.rome.compute_u import compute_key

    model, tok = random_gpt2
    editor = ROMEEditor(FAST, progress=False)
    templates = editor.templates.get(model, tok, editor.config)
    cov = editor.second_moment(model, tok, 0)
    before = _params(model)
    update = compute_rome_update(
        model, tok, HARRY, 0, templates, objective_from(editor.config), cov, anchor=anchor, progress=False
    )
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())  # computing writes nothing
    delta = update.result.delta.double()
    assert float(delta.norm()) > 0
    w = read_weight(model, editor_arch(model), 0)[1]
    # In float64, exactly Eq. 2.
    torch.testing.assert_close((w + update.delta_w) @ update.k_star, update.v_star, rtol=1e-9, atol=1e-9)
    k_p = compute_key(model, tok, HARRY, "transformer.h.0.mlp.c_proj", ["{}"]).double()
    if anchor == "prompt":  # the bare rewrite prompt's key gets exactly δ added
        torch.testing.assert_close(update.delta_w @ k_p, delta, rtol=1e-7, atol=1e-7)
    else:  # v* = W k* + δ; the bare prompt gets ρ δ
        torch.testing.assert_close(update.v_star, w @ update.k_star + delta, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(update.delta_w @ k_p, update.key_ratio * delta, rtol=1e-7, atol=1e-7)
    # Written into the float32 parameter: W'k* = v* up to float32 rounding of W' (relative to |W'||k*|).
    add_to_weight(model, editor_arch(model), update.weight_name, update.delta_w)
    try:
        w_new = read_weight(model, editor_arch(model), 0)[1]
        err = float((w_new @ update.k_star - update.v_star).norm())
        scale = float(w_new.abs().max() * update.k_star.abs().sum())
        assert err <= 1e-6 * scale, (err, scale)
        diff = w_new - w
        s = torch.linalg.svdvals(diff)
        assert float(s[1] / s[0]) < 1e-5  # rank one up to the float32 cast
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(before[n])


def editor_arch(model):
    from knowgic.editors.arch import arch_for

    return arch_for(model)


def test_apply_touches_one_matrix_and_restores_exactly(random_gpt2, cache):
    model, tok = random_gpt2
    before = _params(model)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    handle = ROMEEditor(FAST, progress=False).apply(model, tok, [HARRY])
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p)]
    assert changed == ["transformer.h.0.mlp.c_proj.weight"]
    info = handle.info["edits"][0]
    assert info["layer"] == 0 and info["update_norm"] > 0 and info["delta_norm"] > 0
    assert info["delta_norm"] <= 4.0 * info["init_norm"] * (1 + 1e-5)  # the clamp
    handle.restore()
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert flags == {n: p.requires_grad for n, p in model.named_parameters()}


def test_optimisation_lowers_target_nll(random_gpt2, cache):
    """On the random fixture δ barely propagates (tiny init weights); it must still move the right way."""
    model, tok = random_gpt2
    hp = dict(FAST, v_num_grad_steps=10, v_weight_decay=0.0, kl_factor=0.0)
    handle = ROMEEditor(hp, progress=False).apply(model, tok, [HARRY])
    try:
        info = handle.info["edits"][0]
        assert info["nll"] < info["nll_init"] - 1e-3, info
    finally:
        handle.restore()


def test_bad_hparams_and_layers(random_gpt2, cache):
    model, tok = random_gpt2
    with pytest.raises(KnowgicError, match="layers"):
        ROMEEditor({})
    with pytest.raises(KnowgicError, match="v_lr"):
        ROMEEditor({"layers": [0], "v_lr": "fast"})
    with pytest.raises(KnowgicError, match="out of range"):
        ROMEEditor({"layers": [5]}, progress=False).apply(model, tok, [HARRY])
    with pytest.raises(KnowgicError, match="v_loss_layer"):
        ROMEEditor({"layers": [0], "v_loss_layer": 0}, progress=False).apply(model, tok, [HARRY])
    bad = EditRequest("studied at", "Harry Potter", "a", "b")
    before = _params(model)
    with pytest.raises(KnowgicError, match="exactly one"):
        ROMEEditor(FAST, progress=False).apply(model, tok, [bad])
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def tiny_llama(tokenizer, dtype: torch.dtype) -> torch.nn.Module:
    """A random 2-layer Llama for ``tokenizer`` (the random GPT-2's), in ``dtype``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config).to(dtype).eval()


def test_bf16_write_reports_its_rounding_once_per_run(random_gpt2, cache, caplog):
    """A bf16 weight cannot hold W + ΔW exactly: the residual ‖W'k* − v*‖/‖v*‖ after the write is measured
    (checked here against k*, v* computed independently and the weight as written), recorded per edit and
    logged once per editor."""
    from knowgic.editors.arch import arch_for

    _, tok = random_gpt2
    model = tiny_llama(tok, torch.bfloat16)
    before = _params(model)
    editor = ROMEEditor(FAST, progress=False)
    update = compute_rome_update(
        model,
        tok,
        HARRY,
        0,
        editor.templates.get(model, tok, editor.config),
        objective_from(editor.config),
        editor.second_moment(model, tok, 0),
        progress=False,
    )
    with caplog.at_level("WARNING", logger="knowgic.editors.rome.weights"):
        for _ in range(2):
            handle = editor.apply(model, tok, [HARRY])
            try:
                precision = handle.info["edits"][0]["write_precision"]
                _, written = read_weight(model, arch_for(model), 0)
                residual = written @ update.k_star - update.v_star
                expected = float(residual.norm() / update.v_star.norm())
            finally:
                handle.restore()
            assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
            assert precision["dtype"] == "bfloat16"
            assert precision["weight"] == "model.layers.0.mlp.down_proj.weight"
            assert precision["relative_residual"] == pytest.approx(expected, rel=1e-3)
            assert 0 < precision["relative_residual"] < 1e-2  # bf16 keeps 8 significant bits
            assert 0 < precision["update_lost"] < 1e-1
    warnings = [r for r in caplog.records if "write_precision" in r.getMessage()]
    assert len(warnings) == 1 and "bfloat16" in warnings[0].getMessage()


def test_float32_write_has_no_precision_report(random_gpt2, cache):
    model, tok = random_gpt2
    handle = ROMEEditor(FAST, progress=False).apply(model, tok, [HARRY])
    handle.restore()
    assert "write_precision" not in handle.info["edits"][0]


def test_shipped_hparams_validate():
    for key in (
        "knowgic-tiny",
        "gpt2-xl",
        "gpt-j-6b",
        "llama-3-8b",
        "qwen2.5-7b",
        "gemma3-270m",
        "smollm2-135m",
    ):
        hparams, source = load_hparams("rome", key, "unknown-family")
        assert source is not None and source.endswith(f"{key}.yaml")
        ROMEEditor(hparams)  # the typed reading accepts it too
    with pytest.raises(KnowgicError, match=r"at /lyaers: unknown key \(did you mean .layers.\?\)"):
        validate_hparams({"layers": [1], "lyaers": [2]}, "rome", "test")
    # The Llama and Qwen files use the paper's C⁻¹k* with Wikipedia statistics, a corpus datasets can name.
    for key in ("llama-3-8b", "qwen2.5-7b"):
        hparams, _ = load_hparams("rome", key, "unknown-family")
        config = ROMEEditor(hparams).config
        assert config.mom2_adjustment is True
        assert (config.mom2_n_samples, config.mom2_dtype) == (100000, "float32")
        assert parse_datasets_corpus(config.mom2_dataset) == ("wikimedia/wikipedia", "20231101.en", "train")


def test_unknown_key_is_an_error_when_built_from_python():
    """Not only the CLI: an editor constructed with a typo in its hparams refuses it, naming the key."""
    with pytest.raises(KnowgicError, match=r"unknown key 'lyaers'; did you mean 'layers'\?") as info:
        ROMEEditor({"layers": [0], "lyaers": [0]})
    assert "editor 'rome'" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(KnowgicError, match="unknown key 'lyaers'"):
        ROMEEditor({"lyaers": [0]})  # named before the missing 'layers'
    with pytest.raises(KnowgicError, match=r"/context_template_prompts"):
        ROMEEditor({"layers": [0], "context_template_prompts": []})  # the rest of the schema holds too


# ---------------------------------------------------------------------------------------- knowgic-tiny


def efficacy(loaded, editor_factory, requests):
    """Each request on the pristine model, scored with the logprob protocol, restored (checked bitwise)."""
    from knowgic.scoring.base import Query
    from knowgic.scoring.logprob import LogprobScorer

    model, tok = loaded.model, loaded.tokenizer
    scorer = LogprobScorer()
    before = _params(model)
    wins, seconds, margins = 0, [], []
    for request in requests:
        editor = editor_factory()
        started = time.perf_counter()
        handle = editor.apply(model, tok, [request])
        seconds.append(time.perf_counter() - started)
        q_new = Query(request.prompt, request.subject, (request.target_new,))
        q_true = Query(request.prompt, request.subject, (request.target_true,))
        p = scorer.score(model, tok, [q_new, q_true]).p
        wins += int(p[0] > p[1])
        margins.append(float(p[0] - p[1]))
        handle.restore()
        assert all(torch.equal(before[n], q) for n, q in model.named_parameters()), "restore not exact"
    return wins / len(requests), margins, seconds


def distinct_edits():
    from knowgic.paths import PACKAGE_DIR

    rows = json.loads((PACKAGE_DIR / "dataset" / "upstream" / "chains.json").read_text(encoding="utf-8"))
    return list(dict.fromkeys(EditRequest.from_upstream(r["requested_rewrite"][0]) for r in rows))


@pytest.mark.slow
def test_rome_efficacy_on_knowgic_tiny(knowgic_tiny):
    hparams, _ = load_hparams("rome", "knowgic-tiny", knowgic_tiny.family)
    requests = distinct_edits()
    assert len(requests) == 26
    share, margins, seconds = efficacy(knowgic_tiny, lambda: ROMEEditor(hparams, progress=False), requests)
    print(f"ROME efficacy {share:.3f}, {sum(seconds) / len(seconds):.2f} s/edit")
    assert share >= 0.9, (share, margins)


def test_hub_ids_of_the_reference_models_find_their_files():
    from knowgic.editors.hparams import find_default_hparams

    for hub_id, key in [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("EleutherAI/gpt-j-6b", "gpt-j-6b"),
        ("openai-community/gpt2-xl", "gpt2-xl"),
        ("google/gemma-3-270m-it", "gemma3-270m"),
    ]:
        found = find_default_hparams("rome", hub_id, "unknown-family")
        assert found is not None and found.name == f"{key}.yaml", (hub_id, found)
