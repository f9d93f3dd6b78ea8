"""MEMIT: the per-layer linear system, the extension points, batched edits, exact restore, efficacy."""

from __future__ import annotations

import pytest
import torch

from knowgic.editors.hparams import load_hparams, validate_hparams
from knowgic.editors.memit import LayerSystem, MEMITEditor, memit_solve
from knowgic.editors.memit.schema import extend_memit_schema
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest

REQUESTS = [
    EditRequest(
        "{} studied at",
        "Harry Potter",
        "Hogwarts School of Witchcraft and Wizardry",
        "Ilvermorny School of Witchcraft and Wizardry",
    ),
    EditRequest("{} is married to", "Victoria Beckham", "David Beckham", "Diana Taurasi"),
    EditRequest("{} was developed by", "Overwatch", "Blizzard Entertainment", "Valve Corporation"),
]
FAST = {
    "layers": [0, 1],
    "mom2_update_weight": 100.0,
    "v_num_grad_steps": 6,
    "mom2_n_samples": 200,
    "context_template_length_params": [[6, 3]],
    "context_template_prompts": ["The"],
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


class Recording(MEMITEditor):
    """Uses the extension points as AlphaEdit/PRUNE/RECT do, and keeps what MEMIT solved."""

    name = "memit-recording"

    def __init__(self, hparams, **kw):
        super().__init__(hparams, **kw)
        self.systems: list[tuple[LayerSystem, torch.Tensor]] = []
        self.post_calls = 0

    def solve_layer(self, system):
        delta = super().solve_layer(system)
        self.systems.append((system, delta))
        return delta

    def postprocess_delta(self, system, delta):
        self.post_calls += 1
        return super().postprocess_delta(system, delta)


def _check_system(system: LayerSystem, delta: torch.Tensor, tol: float) -> None:
    k, r, c = system.keys, system.residuals, system.cov
    lhs = delta @ (system.mom2_update_weight * c + k @ k.T)
    rhs = r @ k.T
    assert float((lhs - rhs).norm()) <= tol * float(rhs.norm()) + 1e-12


def test_memit_solve_on_random_system():
    g = torch.Generator().manual_seed(0)
    d_out, d_in, n = 10, 16, 4
    a = torch.randn(d_in, 40, generator=g, dtype=torch.float64)
    system = LayerSystem(
        layer=0,
        weight_name="w",
        keys=torch.randn(d_in, n, generator=g, dtype=torch.float64),
        residuals=torch.randn(d_out, n, generator=g, dtype=torch.float64),
        cov=a @ a.T / 40,
        w0=torch.randn(d_out, d_in, generator=g, dtype=torch.float64),
        mom2_update_weight=50.0,
    )
    delta = memit_solve(system)
    assert delta.shape == (d_out, d_in) and delta.dtype == torch.float64
    _check_system(system, delta, 1e-10)
    # λ → 0 with a strong C-free system: the new keys are stored exactly (ΔW K = R when λ is tiny).
    exact = LayerSystem(**{**system.__dict__, "mom2_update_weight": 1e-9})
    torch.testing.assert_close(memit_solve(exact) @ exact.keys, exact.residuals, rtol=1e-5, atol=1e-5)


def test_batched_apply_solves_each_layer_and_restores(gpt2_3layer, cache):
    model, tok = gpt2_3layer
    before = _params(model)
    editor = Recording(FAST, progress=False)
    handle = editor.apply(model, tok, REQUESTS)
    assert [s.layer for s, _ in editor.systems] == [0, 1] and editor.post_calls == 2
    for system, delta in editor.systems:
        assert system.keys.shape == (256, 3) and system.residuals.shape == (64, 3)
        assert system.cov.shape == (256, 256) and system.w0.shape == (64, 256)
        assert all(t.dtype == torch.float64 for t in (system.keys, system.residuals, system.cov, system.w0))
        assert system.weight_name == f"transformer.h.{system.layer}.mlp.c_proj.weight"
        assert float(system.residuals.norm()) > 0
        _check_system(system, delta, 1e-8)
        # what was written is w0 + ΔW (Conv1D stores the transpose), up to the float32 cast
        written = model.get_parameter(system.weight_name).detach().double().T
        torch.testing.assert_close(written, system.w0 + delta, rtol=0, atol=1e-6)
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert changed == {"transformer.h.0.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.weight"}
    # Residuals are spread: the first layer carries 1/2 of what is missing at L, the last all that remains.
    assert handle.info["n_requests"] == 3 and len(handle.info["edits"]) == 3
    handle.restore()
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_first_layer_gets_half_of_the_residual(gpt2_3layer, cache):
    """Eq. 20: r_i^l = (z_i − h_i^L) / (L − l + 1); with two layers the first gets exactly half."""
    from knowgic.editors.arch import arch_for
    from knowgic.editors.memit.compute_z import compute_z
    from knowgic.editors.repr_tools import reps_at_tokens
    from knowgic.editors.rome.rome_main import objective_from

    model, tok = gpt2_3layer
    editor = Recording(FAST, progress=False)
    handle = editor.apply(model, tok, REQUESTS[:1])
    handle.restore()
    system0 = editor.systems[0][0]
    templates = editor.templates.get(model, tok, editor.config)
    z, _ = compute_z(model, tok, REQUESTS[0], 1, templates, objective_from(editor.config), progress=False)
    h = reps_at_tokens(
        model, tok, [REQUESTS[0].prompt], [REQUESTS[0].subject], arch_for(model).layer(1), track="out"
    )
    torch.testing.assert_close(system0.residuals[:, 0], (z - h[0].double()) / 2, rtol=1e-5, atol=1e-6)


def test_postprocess_delta_is_what_gets_written(gpt2_3layer, cache):
    class Zero(MEMITEditor):
        def postprocess_delta(self, system, delta):
            return torch.zeros_like(delta)

    model, tok = gpt2_3layer
    before = _params(model)
    handle = Zero(FAST, progress=False).apply(model, tok, REQUESTS[:2])
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    handle.restore()
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_failure_midway_restores(gpt2_3layer, cache):
    class Failing(MEMITEditor):
        def postprocess_delta(self, system, delta):
            if system.layer == 1:
                raise RuntimeError("boom")
            return delta

    model, tok = gpt2_3layer
    before = _params(model)
    with pytest.raises(RuntimeError, match="boom"):
        Failing(FAST, progress=False).apply(model, tok, REQUESTS[:1])
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_bad_hparams(gpt2_3layer, cache):
    model, tok = gpt2_3layer
    with pytest.raises(KnowgicError, match="mom2_update_weight"):
        MEMITEditor({"layers": [0], "mom2_update_weight": "big"})
    with pytest.raises(KnowgicError, match="out of range"):
        MEMITEditor({**FAST, "layers": [0, 7]}, progress=False).apply(model, tok, REQUESTS[:1])
    with pytest.raises(KnowgicError, match="twice"):
        MEMITEditor({**FAST, "layers": [1, -2]}, progress=False).apply(model, tok, REQUESTS[:1])
    with pytest.raises(KnowgicError, match="required"):
        validate_hparams({"layers": [1]}, "memit", "test")


def test_shipped_hparams_and_schema_extension():
    for key in (
        "knowgic-tiny",
        "gpt2-xl",
        "gpt-j-6b",
        "llama-3-8b",
        "qwen2.5-7b",
        "gemma3-270m",
        "smollm2-135m",
    ):
        hparams, source = load_hparams("memit", key, "unknown-family")
        assert source is not None and source.endswith(f"{key}.yaml")
        MEMITEditor(hparams)
    schema = extend_memit_schema({"fraction": {"type": "number"}}, ["fraction"], title="RECT")
    base, _ = load_hparams("memit", "gpt2-xl", "gpt2")
    validate_hparams({**base, "fraction": 0.2}, "rect", "test", editor_schema=schema)
    with pytest.raises(KnowgicError, match="fraction"):
        validate_hparams(base, "rect", "test", editor_schema=schema)
    with pytest.raises(KnowgicError, match="at /other: unknown key"):
        validate_hparams({**base, "fraction": 0.2, "other": 1}, "rect", "test", editor_schema=schema)


@pytest.mark.parametrize("name", ["memit", "alphaedit", "prune", "rect"])
def test_unknown_key_is_an_error_when_built_from_python(name):
    """Every editor on MEMIT checks its hparams against its own schema when constructed: a typo is named."""
    from knowgic.editors.registry import resolve_editor

    cls = resolve_editor(name)
    with pytest.raises(KnowgicError, match=r"unknown key 'lyaers'; did you mean 'layers'\?") as info:
        cls({**FAST, "lyaers": [0]})
    assert f"editor {name!r}" in str(info.value)
    with pytest.raises(KnowgicError, match="/layers"):
        cls({**FAST, "layers": "0"})  # the rest of the schema holds too
    cls(FAST)  # the valid keys (and each method's defaults for its own) are accepted


def test_subclass_declares_its_keys_with_the_extended_schema():
    """A method built on MEMIT adds its keys through hparams_schema; typos in them are still caught."""

    class WithFraction(MEMITEditor):
        name = "memit-fraction"
        hparams_schema = extend_memit_schema({"fraction": {"type": "number"}}, ["fraction"])

    WithFraction({**FAST, "fraction": 0.5})
    with pytest.raises(KnowgicError, match="unknown key 'fractoin'; did you mean 'fraction'"):
        WithFraction({**FAST, "fraction": 0.5, "fractoin": 0.5})
    with pytest.raises(KnowgicError, match="unknown key 'fraction'"):
        MEMITEditor({**FAST, "fraction": 0.5})  # MEMIT itself does not know it


def test_bf16_write_reports_its_rounding(random_gpt2, cache):
    """MEMIT's write into a bf16 weight: ‖W'K − (W + ΔW)K‖ / ‖(W + ΔW)K‖ on the layer's keys is recorded."""
    from tests.test_rome import HARRY, tiny_llama

    _, tok = random_gpt2
    model = tiny_llama(tok, torch.bfloat16)
    before = _params(model)
    handle = MEMITEditor({**FAST, "layers": [0]}, progress=False).apply(model, tok, [HARRY])
    handle.restore()
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    (layer,) = handle.info["layer_updates"]
    precision = layer["write_precision"]
    assert precision["dtype"] == "bfloat16" and precision["weight"] == layer["weight"]
    assert 0 < precision["relative_residual"] < 1e-2


def test_batched_edits_reach_their_targets(gpt2_3layer, cache):
    """Algorithm 1 end to end: with the bare prompts as the only templates and a small λ, the edited model's
    residual h_i^L on each request's prompt equals its target z_i (Eq. 16-21), for three requests at once."""
    from knowgic.editors.arch import arch_for
    from knowgic.editors.memit.compute_z import compute_z
    from knowgic.editors.repr_tools import reps_at_tokens
    from knowgic.editors.rome.rome_main import objective_from

    model, tok = gpt2_3layer
    hp = {**FAST, "context_template_length_params": [], "mom2_update_weight": 1e-4, "clamp_norm_factor": 4.0}
    editor = MEMITEditor(hp, progress=False)
    objective = objective_from(editor.config)
    templates = editor.templates.get(model, tok, editor.config)
    assert templates == ["{}"]
    module = arch_for(model).layer(1)
    zs = torch.stack([compute_z(model, tok, r, 1, templates, objective, progress=False)[0] for r in REQUESTS])
    h0 = reps_at_tokens(
        model, tok, [r.prompt for r in REQUESTS], [r.subject for r in REQUESTS], module, track="out"
    )
    handle = editor.apply(model, tok, REQUESTS)
    try:
        h1 = reps_at_tokens(
            model, tok, [r.prompt for r in REQUESTS], [r.subject for r in REQUESTS], module, track="out"
        )
        missing_before = (zs - h0.double()).norm(dim=1)
        missing_after = (zs - h1.double()).norm(dim=1)
        assert bool((missing_before > 0.1).all())
        assert bool((missing_after < 1e-2 * missing_before).all()), (missing_before, missing_after)
    finally:
        handle.restore()


@pytest.mark.slow
def test_memit_efficacy_on_knowgic_tiny(knowgic_tiny):
    from tests.test_rome import distinct_edits, efficacy

    hparams, _ = load_hparams("memit", "knowgic-tiny", knowgic_tiny.family)
    requests = distinct_edits()
    share, margins, seconds = efficacy(knowgic_tiny, lambda: MEMITEditor(hparams, progress=False), requests)
    print(f"MEMIT efficacy {share:.3f}, {sum(seconds) / len(seconds):.2f} s/edit")
    assert share >= 0.9, (share, margins)


@pytest.mark.slow
def test_memit_batch_of_all_edits_on_knowgic_tiny(knowgic_tiny):
    """All 26 edits in one apply: restored exactly, and about as many flips as the single edits give
    (measured: 0.962 batched, the same as one edit at a time; the bound leaves room for one more miss)."""
    from knowgic.scoring.base import Query
    from knowgic.scoring.logprob import LogprobScorer
    from tests.test_rome import distinct_edits

    model, tok = knowgic_tiny.model, knowgic_tiny.tokenizer
    hparams, _ = load_hparams("memit", "knowgic-tiny", knowgic_tiny.family)
    requests = distinct_edits()
    before = _params(model)
    handle = MEMITEditor(hparams, progress=False).apply(model, tok, requests)
    try:
        queries = [Query(r.prompt, r.subject, (a,)) for r in requests for a in (r.target_new, r.target_true)]
        p = LogprobScorer().score(model, tok, queries).p
        share = float((p[0::2] > p[1::2]).mean())
        print(f"MEMIT batched efficacy {share:.3f}")
        assert share >= 0.9, (share, (p[0::2] - p[1::2]).tolist())
    finally:
        handle.restore()
    assert all(torch.equal(before[n], q) for n, q in model.named_parameters())


def _gemma_norm(dead: int | None = None) -> torch.nn.Module:
    """A Gemma 3 RMSNorm with gains g = 1 + weight spread over orders of magnitude, as in the real model."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    torch.manual_seed(0)
    norm = Gemma3RMSNorm(32)
    with torch.no_grad():
        norm.weight.copy_(torch.logspace(-1.2, 2.4, 32)[torch.randperm(32)] - 1)
        if dead is not None:
            norm.weight[dead] = -1.0  # g = 1 + weight = 0: a dead output dimension
    return norm.double()


def test_residual_through_post_mlp_norm_is_exact_where_reachable():
    """Gemma 3 adds RMSNorm(m) to the residual: for any target the norm can give, RMSNorm(m + Δm) = y + r
    exactly (not only to first order), and with κ = ‖m*‖ / ‖m‖ the written output is m* itself."""
    from knowgic.editors.arch import ARCHITECTURES
    from knowgic.editors.memit.post_norm import residual_to_mlp_output

    assert ARCHITECTURES["gemma3"].mlp_post_norm == "model.layers.{}.post_feedforward_layernorm"
    assert ARCHITECTURES["llama"].mlp_post_norm is None
    norm = _gemma_norm()
    m = torch.randn(4, 32, dtype=torch.float64) * 0.3
    y = norm(m).detach()
    for size in (0.01, 1.0, 5.0):  # small changes and changes several times larger than m itself
        m_target = m + torch.randn(4, 32, dtype=torch.float64) * 0.3 * size
        r = norm(m_target).detach() - y
        dm = residual_to_mlp_output(norm, m, r)
        # Gemma3RMSNorm computes in float32: exact up to that precision.
        torch.testing.assert_close(norm(m + dm).detach(), y + r, rtol=1e-5, atol=1e-5 * float(y.abs().max()))
        torch.testing.assert_close((m + dm).norm(dim=1), m.norm(dim=1))  # κ = 1 keeps m's scale
        kappa = m_target.norm(dim=1) / m.norm(dim=1)
        torch.testing.assert_close(
            m + residual_to_mlp_output(norm, m, r, kappa), m_target, rtol=1e-4, atol=1e-4
        )
    zero = residual_to_mlp_output(norm, m, torch.zeros(4, 32, dtype=torch.float64))
    torch.testing.assert_close(zero, torch.zeros_like(zero), atol=1e-12, rtol=0)


def test_residual_through_post_mlp_norm_unreachable_and_dead_dimensions():
    """A target off the norm's output set keeps its direction (the scale is the norm's); a dead dimension
    (g = 0) is never divided by and stays 0."""
    from knowgic.editors.memit.post_norm import residual_to_mlp_output

    norm = _gemma_norm(dead=3)
    m = torch.randn(4, 32, dtype=torch.float64) * 40
    y = norm(m).detach()
    r = torch.randn(4, 32, dtype=torch.float64) * y.norm(dim=1, keepdim=True)
    r[:, 3] = 0
    dm = residual_to_mlp_output(norm, m, r)
    assert torch.isfinite(dm).all()
    got = norm(m + dm).detach()
    assert float(got[:, 3].abs().max()) == 0.0
    cos = torch.nn.functional.cosine_similarity(got, y + r, dim=1)
    assert float(cos.min()) > 1 - 1e-6, cos


def test_post_norm_z_is_optimised_before_the_norm(random_gpt2):
    """Behind a post-MLP norm, δ is added to the projection's output m^L (writable by construction) and
    z^L is the residual it produces: z − h^L = RMSNorm(m^L + δ) − RMSNorm(m^L) at the bare prompt."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from knowgic.editors.arch import arch_for, get_module
    from knowgic.editors.memit.compute_z import compute_z
    from knowgic.editors.repr_tools import reps_at_tokens
    from knowgic.editors.rome.compute_v import DeltaObjective

    _, tok = random_gpt2
    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        pad_token_id=tok.pad_token_id,
    )
    model = Gemma3ForCausalLM(config).eval()
    arch = arch_for(model)
    norm = get_module(model, arch.mlp_post_norm.format(1))
    with torch.no_grad():
        norm.weight.copy_(torch.logspace(-1.2, 2.4, 32)[torch.randperm(32)] - 1)
    objective = DeltaObjective(
        num_grad_steps=4, lr=0.5, weight_decay=1e-3, clamp_norm_factor=4, kl_factor=0.0625
    )
    request = REQUESTS[0]
    z, result = compute_z(model, tok, request, 1, ["{}", "The {}"], objective, progress=False)

    def at(module: str) -> torch.Tensor:
        return reps_at_tokens(model, tok, [request.prompt], [request.subject], module, track="out")

    m = at(arch.mlp_out.format(1))
    torch.testing.assert_close(result.init, m[0])
    assert float(result.delta.norm()) > 0
    with torch.no_grad():
        written = (norm(m + result.delta) - norm(m))[0].double()
    torch.testing.assert_close(z - at(arch.layer(1))[0].double(), written, rtol=1e-4, atol=1e-4)
