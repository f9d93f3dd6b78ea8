"""PRUNE: the log restraint of the accumulated update's singular values, and the editor's state."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from knowgic.dataset.loading import load_aliases, load_cases
from knowgic.editors.arch import arch_for
from knowgic.editors.hparams import HPARAMS_DIR, load_hparams, validate_hparams
from knowgic.editors.memit.memit_main import MEMITEditor
from knowgic.editors.memit.schema import memit_schema
from knowgic.editors.prune import PRUNEEditor, largest_singular_value, log_restraint, restrain
from knowgic.editors.rome.weights import read_named_weight
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
# Two layers of a 3-layer model (z at layer 1 still reaches the prediction). α = 1000: F shrinks every σ̂
# above max σ(W₀) ≈ 0.19 here, since that is above 1/ln α
# (see test_the_rule_shrinks_only_above_one_over_ln_alpha).
SEQ = {**SMALL, "layers": [0, 1], "prune_log_base": 1000.0}
REQ_A = EditRequest("{} plays the sport of", "Harry Potter", "football", "tennis")
REQ_B = EditRequest("{} is married to", "Victoria Beckham", "David Beckham", "Diana Taurasi")
REQ_C = EditRequest("{} was developed by", "Overwatch", "Blizzard Entertainment", "Valve Corporation")
NAME = "transformer.h.0.mlp.c_proj.weight"
SEQ_NAMES = ("transformer.h.0.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.weight")


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
    """PRUNE that keeps each matrix as MEMIT's whole edit left it, just before the restraint."""

    def __init__(self, hparams: dict[str, Any]) -> None:
        super().__init__(hparams, progress=False)
        self.unrestrained: list[dict[str, torch.Tensor]] = []

    def apply(self, model, tokenizer, requests):
        self.unrestrained.append({})
        return super().apply(model, tokenizer, requests)

    def restrain_weight(self, model, name, base):
        self.unrestrained[-1][name] = read_named_weight(model, arch_for(model), name)
        return super().restrain_weight(model, name, base)


def _w(model: torch.nn.Module, name: str = NAME) -> torch.Tensor:
    return read_named_weight(model, arch_for(model), name)


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _same(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(p, saved[n]) for n, p in model.named_parameters())


def test_apply_then_restore_is_bitwise_exact_and_clears_the_state(random_gpt2) -> None:
    model, tok = random_gpt2
    before = _params(model)
    editor = PRUNEEditor(SMALL, progress=False)
    handle = editor.apply(model, tok, [REQ_A])
    base = editor.base_weight(NAME)
    assert base is not None and torch.equal(base.param, before[NAME])
    assert base.sigma_max == pytest.approx(largest_singular_value(before[NAME]))
    assert not _same(model, before)
    handle.restore()
    assert _same(model, before)
    assert editor.base_weight(NAME) is None
    handle = editor.apply(model, tok, [REQ_A])
    editor.reset()
    assert editor.base_weight(NAME) is None
    handle.restore()  # a handle from before a reset still restores the weights
    assert _same(model, before)


def test_sequential_edits_follow_the_papers_recursion(gpt2_3layer) -> None:
    """After edit n the model holds W₀ + F(ΔW_{n−1} + Δ_n) (not W₀ + F(Σ Δ_j)), where Δ_n is MEMIT's whole,
    unrestrained edit of W_{n−1}; every singular value above max σ(W₀) is mapped by F, so all of them obey
    F(σ̂) ≤ max σ(W₀) + log_α(σ̂_max / max σ(W₀)); each handle restores its predecessor bitwise."""
    model, tok = gpt2_3layer
    pristine = _params(model)
    w0 = {n: _w(model, n) for n in SEQ_NAMES}
    sigma = {n: largest_singular_value(w0[n]) for n in SEQ_NAMES}
    base = 1000.0
    editor = RecordingPRUNE(SEQ)
    editor.reset()
    handles, states, raw_sum = [], [], {n: torch.zeros_like(w0[n]) for n in SEQ_NAMES}
    try:
        for i, request in enumerate((REQ_A, REQ_B, REQ_C)):
            states.append(_params(model))
            previous = {n: _w(model, n) for n in SEQ_NAMES}
            if i == 1:
                # Δ_n is plain MEMIT's complete edit of W_{n−1} (all layers, none restrained in between).
                memit = MEMITEditor({k: v for k, v in SEQ.items() if k != "prune_log_base"}, progress=False)
                # the pristine model's templates and C, as PRUNE's own MEMIT step uses them
                memit.templates, memit.stats = editor.templates, editor.stats
                plain = memit.apply(model, tok, [request])
                memit_change = {n: _w(model, n) - previous[n] for n in SEQ_NAMES}
                plain.restore()
                assert _same(model, states[-1])
            handles.append(editor.apply(model, tok, [request]))
            info = handles[-1].info["prune"]["layers"]
            for j, n in enumerate(SEQ_NAMES):
                unrestrained = editor.unrestrained[-1][n]
                raw = unrestrained - previous[n]
                raw_sum[n] += raw
                if i == 1:
                    torch.testing.assert_close(raw, memit_change[n], rtol=1e-6, atol=1e-9)
                held = _w(model, n) - w0[n]  # ΔW_n
                s_hat = torch.linalg.svdvals(unrestrained - w0[n])  # of ΔW_{n−1} + Δ_n
                assert s_hat[0].item() > sigma[n]  # the restraint has work to do
                expected = restrain(unrestrained - w0[n], sigma[n], base).delta
                tol = 1e-5 * float(w0[n].abs().max())  # float32 weights
                assert torch.allclose(held, expected, atol=tol)
                s_held = torch.linalg.svdvals(held)
                over = int((s_hat > sigma[n]).sum())
                assert over == i + 1  # one direction per edit here, all of them above max σ(W₀)
                f = log_restraint(s_hat, sigma[n], base)
                assert torch.allclose(s_held[:over], f[:over], rtol=1e-4)
                bound = sigma[n] + math.log(s_hat[0].item() / sigma[n], base)
                assert s_held[0].item() <= bound * (1 + 1e-5)
                assert bool((s_held[:over] < s_hat[:over]).all())  # every one of them was reduced
                assert info[j]["n_restrained"] == over and info[j]["sigma_max_w0"] == pytest.approx(sigma[n])
                if i >= 1:
                    # The old reading, W₀ + F(Σ_j Δ_j), is a different matrix.
                    summed = restrain(raw_sum[n], sigma[n], base).delta
                    assert float(torch.linalg.norm(held - summed)) > 0.05 * float(torch.linalg.norm(held))
    finally:
        for handle, state in zip(reversed(handles), reversed(states), strict=False):
            handle.restore()
            assert _same(model, state)
    assert _same(model, pristine)
    assert all(editor.base_weight(n) is None for n in SEQ_NAMES)


def test_independent_edits_start_from_the_pristine_weight(gpt2_3layer) -> None:
    """With a reset between edits, an edit after another (restored) one writes exactly what a fresh editor
    writes: W₀ + F(Δ) of its own update."""
    model, tok = gpt2_3layer
    fresh = PRUNEEditor(SEQ, progress=False)
    handle = fresh.apply(model, tok, [REQ_B])
    expected = _params(model)
    handle.restore()
    editor = PRUNEEditor(SEQ, progress=False)
    editor.reset()
    editor.apply(model, tok, [REQ_A]).restore()
    editor.reset()
    handle = editor.apply(model, tok, [REQ_B])
    try:
        assert _same(model, expected)
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
