"""AlphaEdit: the null-space projector, the closed-form update, and the editor's state handling."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from knowgic.dataset.loading import load_aliases, load_cases
from knowgic.editors.alphaedit.alphaedit_main import AlphaEditEditor
from knowgic.editors.alphaedit.projection import null_space, null_space_projector
from knowgic.editors.alphaedit.solve import alphaedit_delta
from knowgic.editors.arch import arch_for
from knowgic.editors.hparams import HPARAMS_DIR, load_hparams, validate_hparams
from knowgic.editors.memit.memit_main import LayerSystem
from knowgic.editors.memit.schema import memit_schema
from knowgic.editors.rome.weights import read_weight
from knowgic.errors import KnowgicError
from knowgic.evaluation.plan import build_plan
from knowgic.paths import spec_dir
from knowgic.records import EditRequest
from knowgic.scoring.factory import make_scorer


def _low_rank_keys(d: int, rank: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(d, rank, generator=g, dtype=torch.float64))[0]
    return basis @ torch.randn(rank, n, generator=g, dtype=torch.float64)


# --- projector ---------------------------------------------------------------------------------------


def test_projector_spans_the_null_space_of_the_preserved_keys() -> None:
    d, r = 24, 9
    k0 = _low_rank_keys(d, r, 400, seed=0)
    cov = k0 @ k0.T / k0.shape[1]
    ns = null_space(cov, threshold=1e-8)
    p = ns.projector
    assert ns.dim == d - r and ns.total == d
    assert torch.allclose(p, p.T, atol=1e-12)
    assert torch.allclose(p @ p, p, atol=1e-10)
    assert torch.linalg.matrix_rank(p).item() == d - r
    # (Δ P) K₀ = 0 for any Δ: P annihilates every preserved key.
    assert (p @ k0).abs().max().item() < 1e-9 * k0.abs().max().item()
    assert torch.allclose(ns.complement, torch.eye(d, dtype=torch.float64) - p)


def test_threshold_counts_small_nonzero_eigenvalues_as_null() -> None:
    g = torch.Generator().manual_seed(1)
    q = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))[0]
    eigenvalues = torch.tensor([1e-4, 5e-3, 0.019, 0.021, 0.5, 3.0], dtype=torch.float64)
    cov = q @ torch.diag(eigenvalues) @ q.T
    ns = null_space(cov, threshold=2e-2)
    assert ns.dim == 3
    assert ns.largest_kept == pytest.approx(0.019)
    assert ns.smallest_dropped == pytest.approx(0.021)
    expected = q[:, :3] @ q[:, :3].T
    assert torch.allclose(ns.projector, expected, atol=1e-10)
    assert torch.allclose(null_space_projector(cov, 2e-2), expected, atol=1e-10)


def test_threshold_below_the_spectrum_gives_an_empty_null_space() -> None:
    cov = torch.eye(5, dtype=torch.float64)
    ns = null_space(cov, threshold=0.5)
    assert ns.dim == 0
    assert ns.projector.abs().max().item() == 0.0


@pytest.mark.parametrize("threshold", [0.0, -1.0])
def test_nonpositive_threshold_is_a_user_error(threshold: float) -> None:
    with pytest.raises(KnowgicError, match="nullspace_threshold"):
        null_space(torch.eye(3, dtype=torch.float64), threshold)


def test_non_finite_second_moment_is_a_user_error() -> None:
    cov = torch.eye(3, dtype=torch.float64)
    cov[0, 1] = float("nan")
    with pytest.raises(KnowgicError, match="non-finite"):
        null_space(cov, 1e-2)


# --- closed-form update ------------------------------------------------------------------------------


def _problem(seed: int = 0, d_in: int = 20, d_out: int = 12, u: int = 3, with_prior: bool = True):
    g = torch.Generator().manual_seed(seed)
    k0 = _low_rank_keys(d_in, 8, 300, seed=seed + 100)
    p = null_space(k0 @ k0.T / k0.shape[1], threshold=1e-8).projector
    keys = torch.randn(d_in, u, generator=g, dtype=torch.float64)
    resid = torch.randn(d_out, u, generator=g, dtype=torch.float64)
    kp = torch.randn(d_in, 5, generator=g, dtype=torch.float64) if with_prior else None
    return k0, p, keys, resid, kp


def test_update_has_no_component_in_the_preserved_subspace() -> None:
    k0, p, keys, resid, kp = _problem()
    delta = alphaedit_delta(keys, resid, p, l2=10.0, prior_gram=kp @ kp.T)
    p_perp = torch.eye(p.shape[0], dtype=torch.float64) - p
    assert torch.linalg.norm(delta).item() > 1e-3
    assert torch.linalg.norm(delta @ p_perp).item() < 1e-10 * torch.linalg.norm(delta).item()
    # ... hence the preserved keys' outputs do not move.
    assert torch.linalg.norm(delta @ k0).item() < 1e-9 * torch.linalg.norm(delta).item() * torch.linalg.norm(
        k0
    )


def test_update_matches_the_papers_closed_form() -> None:
    _, p, keys, resid, kp = _problem(seed=3)
    alpha = 10.0
    delta = alphaedit_delta(keys, resid, p, l2=alpha, prior_gram=kp @ kp.T)
    eye = torch.eye(p.shape[0], dtype=torch.float64)
    expected = resid @ keys.T @ p @ torch.linalg.inv(kp @ kp.T @ p + keys @ keys.T @ p + alpha * eye)
    assert torch.allclose(delta, expected, atol=1e-10)


def test_update_is_a_stationary_point_of_the_objective() -> None:
    """‖ΔP K₁ − R‖² + α‖ΔP‖² + ‖ΔP K_p‖² has zero gradient at the closed form (checked by autograd)."""
    _, p, keys, resid, kp = _problem(seed=5)
    alpha = 2.5
    delta = alphaedit_delta(keys, resid, p, l2=alpha, prior_gram=kp @ kp.T).requires_grad_(True)
    dp = delta @ p
    loss = ((dp @ keys - resid) ** 2).sum() + alpha * (dp**2).sum() + ((dp @ kp) ** 2).sum()
    (grad,) = torch.autograd.grad(loss, delta)
    assert grad.abs().max().item() < 1e-9
    # ... and it is a minimum: moving along any null-space direction increases the loss.
    g = torch.Generator().manual_seed(7)
    step = torch.randn(delta.shape, generator=g, dtype=torch.float64) @ p * 1e-2
    dp2 = (delta.detach() + step) @ p
    loss2 = ((dp2 @ keys - resid) ** 2).sum() + alpha * (dp2**2).sum() + ((dp2 @ kp) ** 2).sum()
    assert loss2.item() > loss.item()


def test_without_projection_and_history_it_is_ridge_regression() -> None:
    _, _, keys, resid, _ = _problem(seed=8, with_prior=False)
    d_in = keys.shape[0]
    eye = torch.eye(d_in, dtype=torch.float64)
    delta = alphaedit_delta(keys, resid, eye, l2=0.5)
    expected = resid @ keys.T @ torch.linalg.inv(keys @ keys.T + 0.5 * eye)
    assert torch.allclose(delta, expected, atol=1e-10)


def test_earlier_edits_keys_are_protected() -> None:
    """The ‖ΔP K_p‖² term: with the history, the new update moves the old keys' outputs much less."""
    _, p, keys, resid, kp = _problem(seed=11)
    kp = kp * 30.0  # strong earlier keys, as after many edits
    free = alphaedit_delta(keys, resid, p, l2=1.0)
    guarded = alphaedit_delta(keys, resid, p, l2=1.0, prior_gram=kp @ kp.T)
    assert torch.linalg.norm(guarded @ kp) < 0.1 * torch.linalg.norm(free @ kp)


def test_shape_mismatch_is_rejected() -> None:
    _, p, keys, resid, _ = _problem(seed=2)
    with pytest.raises(ValueError):
        alphaedit_delta(keys, resid[:, :2], p, l2=1.0)
    with pytest.raises(ValueError):
        alphaedit_delta(keys, resid, p[:-1, :-1], l2=1.0)


# --- the editor on a real (random) GPT-2 -------------------------------------------------------------

SMALL = {
    "layers": [0],
    "v_num_grad_steps": 3,
    "mom2_n_samples": 200,
    "context_template_length_params": [[4, 2]],
    "nullspace_threshold": 1e-2,
}
REQ_A = EditRequest("{} plays the sport of", "Harry Potter", "football", "tennis")
REQ_B = EditRequest("{} is married to", "Victoria Beckham", "David Beckham", "Diana Taurasi")


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


class RecordingAlphaEdit(AlphaEditEditor):
    """AlphaEdit that keeps every layer system it solved and the update it wrote (for the invariants)."""

    def __init__(self, hparams: dict[str, Any]) -> None:
        super().__init__(hparams, progress=False)
        self.seen: list[tuple[LayerSystem, torch.Tensor]] = []

    def postprocess_delta(self, system: LayerSystem, delta: torch.Tensor) -> torch.Tensor:
        out = super().postprocess_delta(system, delta)
        self.seen.append((system, out.clone()))
        return out


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _same(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(p, saved[n]) for n, p in model.named_parameters())


def test_apply_then_restore_is_bitwise_exact_and_forgets_the_keys(random_gpt2) -> None:
    model, tok = random_gpt2
    before = _weights(model)
    editor = RecordingAlphaEdit(SMALL)
    handle = editor.apply(model, tok, [REQ_A])
    assert not _same(model, before)
    (system, _), name = editor.seen[0], "transformer.h.0.mlp.c_proj.weight"
    assert torch.allclose(editor.prior_gram[name], system.keys @ system.keys.T)
    assert handle.info["alphaedit"]["layers"][0]["nullspace_dim"] > 0
    handle.restore()
    assert _same(model, before)
    assert editor.prior_gram == {}


def test_update_has_no_component_in_the_preserved_subspace_of_the_model(random_gpt2) -> None:
    model, tok = random_gpt2
    editor = RecordingAlphaEdit(SMALL)
    _, w_before = read_weight(model, arch_for(model), 0)
    handle = editor.apply(model, tok, [REQ_A])
    try:
        _, w_after = read_weight(model, arch_for(model), 0)
        system, delta = editor.seen[0]
        p_perp = editor.null_space_for(system).complement
        assert torch.linalg.norm(delta).item() > 0
        assert torch.linalg.norm(delta @ p_perp).item() < 1e-8 * torch.linalg.norm(delta).item()
        # The weight as written (float32) keeps the property up to its rounding.
        written = w_after - w_before
        assert torch.linalg.norm(written @ p_perp).item() < 1e-3 * torch.linalg.norm(written).item()
    finally:
        handle.restore()


def test_no_state_leaks_from_one_edit_to_the_next(random_gpt2) -> None:
    model, tok = random_gpt2
    before = _weights(model)

    fresh = RecordingAlphaEdit(SMALL)
    fresh.apply(model, tok, [REQ_B]).restore()
    _, fresh_delta = fresh.seen[0]

    # Independent mode as the harness runs it: reset, apply, restore, then the next edit.
    editor = RecordingAlphaEdit(SMALL)
    editor.reset()
    editor.apply(model, tok, [REQ_A]).restore()
    editor.reset()
    assert editor.prior_gram == {}
    editor.apply(model, tok, [REQ_B]).restore()
    assert torch.equal(editor.seen[-1][1], fresh_delta)

    # A reset alone (weights of A still in place) also empties the history; A's later restore leaves it.
    handle_a = editor.apply(model, tok, [REQ_A])
    editor.reset()
    assert editor.prior_gram == {}
    handle_a.restore()
    assert editor.prior_gram == {}
    assert _same(model, before)


def test_sequential_edits_use_and_then_drop_the_earlier_keys(random_gpt2) -> None:
    model, tok = random_gpt2
    before = _weights(model)
    editor = RecordingAlphaEdit(SMALL)
    editor.reset()
    handle_a = editor.apply(model, tok, [REQ_A])
    handle_b = editor.apply(model, tok, [REQ_B])
    (sys_a, _), (sys_b, delta_b) = editor.seen
    gram_a = sys_a.keys @ sys_a.keys.T
    assert handle_b.info["alphaedit"]["layers"][0]["prior_keys_trace"] == pytest.approx(float(gram_a.trace()))
    p = editor.null_space_for(sys_b).projector
    with_history = alphaedit_delta(sys_b.keys, sys_b.residuals, p, 1e1, prior_gram=gram_a)
    without = alphaedit_delta(sys_b.keys, sys_b.residuals, p, 1e1)
    assert torch.allclose(delta_b, with_history, atol=1e-12)
    assert not torch.allclose(delta_b, without, atol=1e-9)
    name = sys_a.weight_name
    assert torch.allclose(editor.prior_gram[name], gram_a + sys_b.keys @ sys_b.keys.T)
    handle_b.restore()
    assert torch.allclose(editor.prior_gram[name], gram_a, atol=1e-10)
    handle_a.restore()
    assert editor.prior_gram == {}
    assert _same(model, before)


def test_threshold_below_every_eigenvalue_is_a_clear_error(random_gpt2) -> None:
    model, tok = random_gpt2
    before = _weights(model)
    editor = AlphaEditEditor({**SMALL, "nullspace_threshold": 1e-12}, progress=False)
    with pytest.raises(KnowgicError, match="raise nullspace_threshold"):
        editor.apply(model, tok, [REQ_A])
    assert _same(model, before)


@pytest.mark.parametrize(("key", "value"), [("nullspace_threshold", 0), ("l2_regularization", -1.0)])
def test_bad_hparams_are_user_errors(key: str, value: float) -> None:
    with pytest.raises(KnowgicError, match=key):
        AlphaEditEditor({**SMALL, key: value}, progress=False)


# --- hparams files -------------------------------------------------------------------------------------

SHIPPED = ("knowgic-tiny", "gpt2-xl", "gpt-j-6b", "llama-3-8b", "qwen2.5-7b", "gemma3-270m", "smollm2-135m")


def test_schema_extends_memit_and_every_shipped_file_validates() -> None:
    schema = json.loads(
        (spec_dir() / "schemas" / "hparams" / "alphaedit.schema.json").read_text(encoding="utf-8")
    )
    assert schema["additionalProperties"] is False
    for key, definition in memit_schema()["properties"].items():
        assert schema["properties"][key] == definition, key
    for model_key in SHIPPED:
        path = HPARAMS_DIR / "alphaedit" / f"{model_key}.yaml"
        hparams, _ = load_hparams("alphaedit", model_key, "unused", path=path)
        AlphaEditEditor(hparams, progress=False)  # the typed hparams accept it too
    with pytest.raises(KnowgicError, match="no_such_key"):
        validate_hparams({"layers": [1], "mom2_update_weight": 1.0, "no_such_key": 1}, "alphaedit", "test")


# --- efficacy on knowgic-tiny (slow) ---------------------------------------------------------------------


def _efficacy(editor: AlphaEditEditor, loaded: Any) -> tuple[float, list[tuple[str, float, float]]]:
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
    hparams, _ = load_hparams("alphaedit", "knowgic-tiny", knowgic_tiny.family)
    value, rows = _efficacy(AlphaEditEditor(hparams, progress=False), knowgic_tiny)
    assert value >= 0.9, rows


@pytest.mark.slow
def test_sequential_run_on_knowgic_tiny_keeps_every_update_in_the_null_space(knowgic_tiny) -> None:
    """All 26 edits one after another (the sequential mode): each update stays in the null space while the
    history K_p grows, and restoring in reverse order gives back the pristine model and an empty history."""
    hparams, _ = load_hparams("alphaedit", "knowgic-tiny", knowgic_tiny.family)
    editor = RecordingAlphaEdit(hparams)
    model, tok = knowgic_tiny.model, knowgic_tiny.tokenizer
    model.config._knowgic_revision = knowgic_tiny.revision
    before = _weights(model)
    requests = list(dict.fromkeys(case.request for case in load_cases()))
    editor.reset()
    handles = [editor.apply(model, tok, [request]) for request in requests]
    try:
        traces = [h.info["alphaedit"]["layers"][0]["prior_keys_trace"] for h in handles]
        assert traces[0] == 0.0 and all(b > a for a, b in itertools.pairwise(traces))
        for system, delta in editor.seen:
            p_perp = editor.null_space_for(system).complement
            assert torch.linalg.norm(delta @ p_perp).item() < 1e-8 * torch.linalg.norm(delta).item()
    finally:
        for handle in reversed(handles):
            handle.restore()
    assert _same(model, before)
    assert editor.prior_gram == {}
