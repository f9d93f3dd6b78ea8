"""RECT: keep the top-k% entries of the update by relative change, deterministically."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from knowgic.dataset.loading import load_aliases, load_cases
from knowgic.editors.arch import arch_for
from knowgic.editors.hparams import HPARAMS_DIR, load_hparams, validate_hparams
from knowgic.editors.memit.memit_main import LayerSystem
from knowgic.editors.memit.schema import memit_schema
from knowgic.editors.rect import RECTEditor, kept_count, rect_mask, rect_sparsify, relative_change
from knowgic.editors.rome.weights import read_weight
from knowgic.errors import KnowgicError
from knowgic.evaluation.plan import build_plan
from knowgic.paths import spec_dir
from knowgic.records import EditRequest
from knowgic.scoring.factory import make_scorer


@pytest.mark.parametrize(
    ("shape", "fraction"), [((16, 10), 0.2), ((7, 13), 0.2), ((5, 5), 0.33), ((64, 48), 0.05)]
)
def test_exactly_the_stated_fraction_is_kept(shape: tuple[int, int], fraction: float) -> None:
    g = torch.Generator().manual_seed(0)
    delta = torch.randn(shape, generator=g, dtype=torch.float64)
    weight = torch.randn(shape, generator=g, dtype=torch.float32)
    mask = rect_mask(delta, weight, fraction)
    n = delta.numel()
    assert int(mask.sum()) == kept_count(n, fraction)
    assert abs(int(mask.sum()) / n - fraction) <= 0.5 / n + 1e-12
    rel = relative_change(delta, weight)
    # Every kept entry changes relatively at least as much as every dropped one.
    assert rel[mask].min().item() >= rel[~mask].max().item()


def test_kept_count_rounds_half_up() -> None:
    assert kept_count(100, 0.2) == 20
    assert kept_count(7, 0.5) == 4  # 3.5 -> 4
    assert kept_count(9, 0.2) == 2  # 1.8 -> 2
    assert kept_count(11, 0.2) == 2  # 2.2 -> 2
    assert kept_count(10, 0.0) == 0
    assert kept_count(10, 1.0) == 10
    with pytest.raises(ValueError):
        kept_count(10, 1.5)


def test_ties_are_broken_by_row_major_index() -> None:
    weight = torch.ones(4, 5)
    delta = torch.full((4, 5), 0.1, dtype=torch.float64)
    delta[3, 4] = 0.7  # the single largest change is always kept
    mask = rect_mask(delta, weight, 0.2)  # 4 of 20
    expected = torch.zeros(20, dtype=torch.bool)
    expected[[0, 1, 2, 19]] = True
    assert torch.equal(mask.reshape(-1), expected)
    assert torch.equal(rect_mask(delta, weight, 0.2), mask)  # and the same every time


def test_zero_weights() -> None:
    weight = torch.tensor([[0.0, 0.0, 1.0, 2.0]])
    delta = torch.tensor([[0.0, 1e-9, 0.5, 0.5]], dtype=torch.float64)
    rel = relative_change(delta, weight)
    assert rel.tolist() == [[0.0, float("inf"), 0.5, 0.25]]
    assert rect_mask(delta, weight, 0.5).tolist() == [[False, True, True, False]]


def test_sparsify_keeps_entries_exactly_and_zeros_the_rest() -> None:
    g = torch.Generator().manual_seed(2)
    delta = torch.randn(12, 9, generator=g, dtype=torch.float64)
    weight = torch.randn(12, 9, generator=g)
    out = rect_sparsify(delta, weight, 0.2)
    mask = rect_mask(delta, weight, 0.2)
    assert torch.equal(out[mask], delta[mask])
    assert bool((out[~mask] == 0).all())
    assert out.dtype == delta.dtype
    assert torch.equal(rect_sparsify(delta, weight, 1.0), delta)
    assert bool((rect_sparsify(delta, weight, 0.0) == 0).all())


# --- the editor -------------------------------------------------------------------------------------

SMALL = {
    "layers": [0],
    "v_num_grad_steps": 3,
    "mom2_n_samples": 200,
    "mom2_update_weight": 100.0,
    "context_template_length_params": [[4, 2]],
}
REQ_A = EditRequest("{} plays the sport of", "Harry Potter", "football", "tennis")


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


class RecordingRECT(RECTEditor):
    """RECT that keeps MEMIT's update and the sparsified one of every layer solve."""

    def __init__(self, hparams: dict[str, Any]) -> None:
        super().__init__(hparams, progress=False)
        self.seen: list[tuple[LayerSystem, torch.Tensor, torch.Tensor]] = []

    def postprocess_delta(self, system: LayerSystem, delta: torch.Tensor) -> torch.Tensor:
        out = super().postprocess_delta(system, delta)
        self.seen.append((system, delta.clone(), out.clone()))
        return out


def test_editor_writes_exactly_the_kept_entries_and_restores_bitwise(random_gpt2) -> None:
    model, tok = random_gpt2
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _, w0 = read_weight(model, arch_for(model), 0)
    editor = RecordingRECT(SMALL)
    handle = editor.apply(model, tok, [REQ_A])
    try:
        system, raw, sparse = editor.seen[0]
        mask = rect_mask(raw, system.w0, 0.2)
        assert int(mask.sum()) == kept_count(raw.numel(), 0.2)
        assert torch.equal(sparse, torch.where(mask, raw, torch.zeros_like(raw)))
        _, w1 = read_weight(model, arch_for(model), 0)
        changed = w1 != w0
        assert bool(changed.any())
        assert not bool((changed & ~mask).any())  # nothing outside the kept entries moved
        info = handle.info["rect"]["layers"][0]
        assert info["kept"] == kept_count(raw.numel(), 0.2) and 0 < info["norm_kept"] < 1
    finally:
        handle.restore()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_editor_is_stateless(random_gpt2) -> None:
    model, tok = random_gpt2
    editor = RecordingRECT({**SMALL, "rect_keep_fraction": 0.5})
    editor.apply(model, tok, [REQ_A]).restore()
    editor.apply(model, tok, [REQ_A]).restore()
    assert torch.equal(editor.seen[0][2], editor.seen[1][2])


@pytest.mark.parametrize("value", [0.0, 1.5])
def test_bad_fraction_is_a_user_error(value: float) -> None:
    with pytest.raises(KnowgicError, match="rect_keep_fraction"):
        RECTEditor({**SMALL, "rect_keep_fraction": value}, progress=False)


# --- hparams files -------------------------------------------------------------------------------------

SHIPPED = ("knowgic-tiny", "gpt2-xl", "gpt-j-6b", "llama-3-8b", "qwen2.5-7b", "gemma3-270m", "smollm2-135m")


def test_schema_extends_memit_and_every_shipped_file_validates() -> None:
    schema = json.loads((spec_dir() / "schemas" / "hparams" / "rect.schema.json").read_text(encoding="utf-8"))
    assert schema["additionalProperties"] is False
    for key, definition in memit_schema()["properties"].items():
        assert schema["properties"][key] == definition, key
    for model_key in SHIPPED:
        path = HPARAMS_DIR / "rect" / f"{model_key}.yaml"
        hparams, _ = load_hparams("rect", model_key, "unused", path=path)
        RECTEditor(hparams, progress=False)  # the typed hparams accept it too
    with pytest.raises(KnowgicError, match="no_such_key"):
        validate_hparams({"layers": [1], "mom2_update_weight": 1.0, "no_such_key": 1}, "rect", "test")


# --- efficacy on knowgic-tiny (slow) ---------------------------------------------------------------------


def _efficacy(editor: RECTEditor, loaded: Any) -> tuple[float, list[tuple[str, float, float]]]:
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
    hparams, _ = load_hparams("rect", "knowgic-tiny", knowgic_tiny.family)
    value, rows = _efficacy(RECTEditor(hparams, progress=False), knowgic_tiny)
    assert value >= 0.9, rows
