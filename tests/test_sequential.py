"""``--mode sequential`` through the evaluation harness with real editors on knowgic-tiny: the edits are
applied one on top of another, all of them are in the model when it is scored, and restoring them in reverse
order gives back the pristine model (the harness's fingerprint check, and a bitwise comparison here)."""

from __future__ import annotations

import pytest
import torch

from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

EDITS = 3


def _weight_norms(record: dict) -> list[float]:
    """‖W‖ of the edited matrix before the edit, as the editor reported it (ROME: per edit, MEMIT: per
    layer)."""
    info = record["info"]
    rows = info["edits"] if info["method"] == "rome" else info["layer_updates"]
    return [row["weight_norm"] for row in rows]


@pytest.mark.parametrize("editor", ["rome", "memit", "rect"])
def test_sequential_run_holds_every_edit_and_restores(editor, knowgic_tiny) -> None:
    model = knowgic_tiny.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    request = EvaluationRequest(
        model="knowgic-tiny", editor=editor, mode="sequential", limit=EDITS, use_cache=False
    )
    run = evaluate(request, progress=False, loaded=knowgic_tiny)  # raises if a restore is not exact
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    doc = run.document
    assert doc["config"]["mode"] == "sequential" and doc["counts"]["edits"] == EDITS
    records = doc["per_edit"]
    # Each edit was made on top of the previous ones: the matrix it found had changed.
    norms = [_weight_norms(r) for r in records]
    assert all(norms[i] != norms[i + 1] for i in range(EDITS - 1)), norms
    # Scored once, after the last edit: every edit still holds (its new target beats the old one).
    flips = [(r["subject"], r["target_new"], r["p_new"], r["p_true"]) for r in records]
    assert all(r["efficacy"] == 1.0 for r in records), flips
    assert doc["metrics"]["efficacy"]["value"] == 1.0
