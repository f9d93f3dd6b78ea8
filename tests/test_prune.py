"""PRUNE: the log restraint of the accumulated update's singular values, and the editor's state."""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from knowgic.dataset.loading import load_aliases, load_cases
from knowgic.editors.arch import arch_for, get_parameter
from knowgic.editors.hparams import HPARAMS_DIR, load_hparams, validate_hparams
from knowgic.editors.memit.memit_main import LayerSystem
from knowgic.editors.memit.schema import memit_schema
from knowgic.editors.prune import PRUNEEditor, largest_singular_value, log_restraint, restrain
from knowgic.editors.rome.weights import read_weight
from knowgic.errors import KnowgicError
from knowgic.evaluation.plan import build_plan
from knowgic.paths import spec_dir
from knowgic.records import EditRequest
from knowgic.scoring.factory import make_scorer


def _delta_with_spectrum(values: list[float], d_out: int = 16, d_in: int = 10, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(d_out, len(values), generator=g, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(d_in, len(values), generator=g, dtype=torch.float64))[0]
    return u @ torch.diag(torch.tensor(values, dtype=torch.float64)) @ v.T


@pytest.mark.parametrize("base", [math.e, 1.2, 2.0])
def test_log_restraint_formula(base: float) -> None:
    sigma_max = 3.0
    s = torch.tensor([50.0, 7.0, 3.0, 2.9, 0.1], dtype=torch.float64)
    f = log_restraint(s, sigma_max, base)
    for x, y in zip(s.tolist(), f.tolist(), strict=True):
        if x > sigma_max:
            assert y == pytest.approx(math.log(x, base) - math.log(sigma_max, base) + sigma_max)
        else:
            assert y == x
    # continuous at the bound and monotone beyond it
    assert log_restraint(torch.tensor([sigma_max], dtype=torch.float64), sigma_max, base).item() == sigma_max
    grid = torch.linspace(sigma_max, 100 * sigma_max, 200, dtype=torch.float64)
    assert bool((log_restraint(grid, sigma_max, base).diff() > 0).all())


def test_restrained_spectrum_is_bounded_as_the_paper_states() -> None:
    sigma_max = 4.0  # max σ(W₀)
    base = math.e
    values = [90.0, 30.0, 8.0, 3.5, 1.0, 0.2]
    delta = _delta_with_spectrum(values)
    out = restrain(delta, sigma_max, base)
    s_all = torch.linalg.svdvals(out.delta)
    assert s_all[len(values) :].abs().max().item() < 1e-10  # the rank does not grow
    s_after = s_all[: len(values)]
    expected = log_restraint(torch.tensor(values, dtype=torch.float64), sigma_max, base)
    assert torch.allclose(s_after, expected, atol=1e-10)
    assert out.n_restrained == 3
    # Every singular value above max σ(W₀) was reduced, and all obey F(σ̂) ≤ σ_max + log_α(σ̂_max / σ_max).
    assert bool((s_after[:3] < torch.tensor(values[:3], dtype=torch.float64)).all())
    bound = sigma_max + math.log(values[0] / sigma_max, base)
    assert s_after.max().item() <= bound + 1e-10
    # The values at or below the bound and all singular directions are untouched.
    assert torch.allclose(s_after[3:], torch.tensor(values[3:], dtype=torch.float64), atol=1e-10)
    u, _, vh = torch.linalg.svd(delta, full_matrices=False)
    r = len(values)
    assert torch.allclose(u[:, :r].T @ out.delta @ vh[:r].T, torch.diag(expected), atol=1e-10)


def test_the_rule_shrinks_only_above_one_over_ln_alpha() -> None:
    """F(σ) − σ decreases with slope 1/(σ ln α) − 1: F shrinks every σ > max σ(W₀) when max σ(W₀) ≥ 1/ln α
    (the case of trained LLM matrices); below that scale the paper's rule can raise a singular value."""
    s = torch.tensor([5.0, 20.0, 300.0], dtype=torch.float64)
    assert bool((log_restraint(s, 1.0, math.e) < s).all())
    assert bool((log_restraint(s, 1 / math.log(1.2), 1.2)[1:] < s[1:]).all())
    small = torch.tensor([0.5], dtype=torch.float64)
    assert log_restraint(small, 0.01, math.e).item() > small.item()


def test_update_below_the_bound_passes_unchanged() -> None:
    delta = _delta_with_spectrum([2.0, 1.0, 0.5], seed=3)
    out = restrain(delta, sigma_max=2.5, base=1.2)
    assert out.n_restrained == 0
    assert torch.equal(out.delta, delta)


def test_largest_singular_value() -> None:
    w = _delta_with_spectrum([7.5, 2.0, 1.0], seed=4)
    assert largest_singular_value(w) == pytest.approx(7.5)
    assert largest_singular_value(w.float()) == pytest.approx(7.5, rel=1e-6)


@pytest.mark.parametrize("base", [1.0, 0.5])
def test_log_base_must_exceed_one(base: float) -> None:
    with pytest.raises(ValueError):
        log_restraint(torch.ones(2, dtype=torch.float64), 1.0, base)


# --- the editor -------------------------------------------------------------------------------------

SMALL = {
    "layers": [0],
    "v_num_grad_steps": 3,
    "mom2_n_samples": 200,
    "mom2_update_weight": 100.0,
    "context_template_length_params": [[4, 2]],
}
REQ_A = EditRequest("{} plays the sport of", "Harry Potter", "football", "tennis")
REQ_B = EditRequest("{} is married to", "Victoria Beckham", "David Beckham", "Diana Taurasi")
NAME = "transformer.h.0.mlp.c_proj.weight"


@pytest.fixture(scope="module", autouse=True)
def _private_stats_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Key statistics of the random model go to a throwaway cache, not the user's."""
    old = os.environ.get("KNOWGIC_CACHE")
    os.environ["KNOWGIC_CACHE"] = str(tmp_path_factory.mktemp("knowgic-cache"))
    yield
    if old is None:
        os.environ.pop("KNOWGIC_CACHE", None)
    else:
        os.environ["KNOWGIC_CACHE"] = old


class RecordingPRUNE(PRUNEEditor):
    """PRUNE that keeps MEMIT's raw update of every layer solve."""

    def __init__(self, hparams: dict[str, Any]) -> None:
        super().__init__(hparams, progress=False)
        self.raw: list[torch.Tensor] = []

    def postprocess_delta(self, system: LayerSystem, delta: torch.Tensor) -> torch.Tensor:
        self.raw.append(delta.clone())
        return super().postprocess_delta(system, delta)


@pytest.fixture(scope="module")
def small_sigma_gpt2(random_gpt2):
    """The random GPT-2 with layer 0's W scaled down so that max σ(W₀) is below the updates' scale and
    the restraint acts (a copy; the shared fixture is left alone). At this scale (max σ(W₀) < 1 = 1/ln e)
    F raises rather than shrinks; the integration checks that the model holds W₀ + F(Σ Δ) either way."""
    model, tok = random_gpt2
    model = copy.deepcopy(model)
    with torch.no_grad():
        get_parameter(model, NAME).mul_(0.02)
    return model, tok


def _w(model: torch.nn.Module) -> torch.Tensor:
    return read_weight(model, arch_for(model), 0)[1]


def test_apply_then_restore_is_bitwise_exact_and_clears_the_state(random_gpt2) -> None:
    model, tok = random_gpt2
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    editor = RecordingPRUNE(SMALL)
    handle = editor.apply(model, tok, [REQ_A])
    assert torch.allclose(editor.accumulated[NAME], editor.raw[0])
    handle.restore()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert editor.accumulated == {}
    editor.apply(model, tok, [REQ_A])
    editor.reset()
    assert editor.accumulated == {}


def test_sequential_edits_restrain_the_accumulated_update(small_sigma_gpt2) -> None:
    model, tok = small_sigma_gpt2
    w0 = _w(model)
    sigma_max = largest_singular_value(w0)
    editor = RecordingPRUNE(SMALL)
    editor.reset()
    handle_a = editor.apply(model, tok, [REQ_A])
    handle_b = editor.apply(model, tok, [REQ_B])
    try:
        total = editor.raw[0] + editor.raw[1]
        assert torch.allclose(editor.accumulated[NAME], total)
        s_total = torch.linalg.svdvals(total)
        assert s_total[0].item() > sigma_max  # the restraint has work to do
        # The model holds W₀ + F(Δ₁ + Δ₂), not W₀ + Δ₁ + Δ₂ (float32 weights: compare loosely).
        written = _w(model) - w0
        expected = restrain(total, sigma_max, math.e).delta
        assert torch.allclose(written, expected, atol=1e-5 * float(w0.abs().max()) + 1e-7)
        s_written = torch.linalg.svdvals(written)
        f = log_restraint(s_total, sigma_max, math.e)
        rank = int((s_total > 1e-9 * s_total[0]).sum())  # one direction per edit here
        assert torch.allclose(s_written[:rank], f[:rank], rtol=1e-3)
        bound = sigma_max + math.log(s_total[0].item() / sigma_max)
        assert s_written[0].item() <= bound * (1 + 1e-4)
        info = handle_b.info["prune"]["layers"][0]
        assert info["n_restrained"] >= 1 and info["sigma_max_w0"] == pytest.approx(sigma_max)
    finally:
        handle_b.restore()
        assert torch.allclose(editor.accumulated[NAME], editor.raw[0], atol=1e-12)
        handle_a.restore()
    assert torch.equal(_w(model), w0)
    assert editor.accumulated == {}


def test_independent_edits_do_not_share_the_accumulated_update(small_sigma_gpt2) -> None:
    model, tok = small_sigma_gpt2
    fresh = RecordingPRUNE(SMALL)
    fresh.apply(model, tok, [REQ_B]).restore()
    editor = RecordingPRUNE(SMALL)
    editor.reset()
    editor.apply(model, tok, [REQ_A]).restore()
    editor.reset()
    handle = editor.apply(model, tok, [REQ_B])
    try:
        assert torch.equal(editor.raw[-1], fresh.raw[0])
        assert torch.equal(editor.accumulated[NAME], fresh.raw[0])
    finally:
        handle.restore()


def test_bad_log_base_is_a_user_error() -> None:
    with pytest.raises(KnowgicError, match="prune_log_base"):
        PRUNEEditor({**SMALL, "prune_log_base": 1.0}, progress=False)


# --- hparams files -------------------------------------------------------------------------------------

SHIPPED = ("knowgic-tiny", "gpt2-xl", "gpt-j-6b", "llama-3-8b", "qwen2.5-7b", "gemma3-270m", "smollm2-135m")


def test_schema_extends_memit_and_every_shipped_file_validates() -> None:
    schema = json.loads(
        (spec_dir() / "schemas" / "hparams" / "prune.schema.json").read_text(encoding="utf-8")
    )
    assert schema["additionalProperties"] is False
    for key, definition in memit_schema()["properties"].items():
        assert schema["properties"][key] == definition, key
    for model_key in SHIPPED:
        path = HPARAMS_DIR / "prune" / f"{model_key}.yaml"
        hparams, _ = load_hparams("prune", model_key, "unused", path=path)
        PRUNEEditor(hparams, progress=False)  # the typed hparams accept it too
    with pytest.raises(KnowgicError, match="no_such_key"):
        validate_hparams({"layers": [1], "mom2_update_weight": 1.0, "no_such_key": 1}, "prune", "test")


# --- efficacy on knowgic-tiny (slow) ---------------------------------------------------------------------


def _efficacy(editor: PRUNEEditor, loaded: Any) -> tuple[float, list[tuple[str, float, float]]]:
    """Efficacy as the benchmark defines it (logprob, aliases included) over the distinct edits of the
    latest dataset version, each applied to the pristine model and restored."""
    plan = build_plan(load_cases(), load_aliases())
    scorer = make_scorer("logprob")
    model, tok = loaded.model, loaded.tokenizer
    model.config._knowgic_revision = loaded.revision  # as the evaluation does: C keyed by the revision
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = []
    for edit in plan.edits:
        editor.reset()
        handle = editor.apply(model, tok, [edit.request])
        try:
            queries = [plan.queries[edit.rewrite.true_query], plan.queries[edit.rewrite.new_query]]
            p_true, p_new = scorer.score(model, tok, queries).p.tolist()
        finally:
            handle.restore()
        rows.append((edit.request.subject, p_true, p_new))
    editor.reset()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert len(rows) == 26
    return sum(p_new > p_true for _, p_true, p_new in rows) / len(rows), rows


@pytest.mark.slow
def test_efficacy_on_knowgic_tiny(knowgic_tiny) -> None:
    """The shipped knowgic-tiny hparams edit the 26 distinct requests (Efficacy >= 0.9)."""
    hparams, _ = load_hparams("prune", "knowgic-tiny", knowgic_tiny.family)
    value, rows = _efficacy(PRUNEEditor(hparams, progress=False), knowgic_tiny)
    assert value >= 0.9, rows
