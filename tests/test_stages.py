"""The runner's edit stage and score stage, in-process and as commands (no containers).

For honest editors the split must give what ``knowgic evaluate`` gives: every metric (and interval) equal to
1e-9, the same per-chain and per-edit records. The score stage must stream (the edit stage blocks on its
quota until deltas are consumed), refuse bad deltas with their reason, and ignore whatever a hostile editor
does in its own process.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from knowgic.editors.hparams import hparams_sha256, load_hparams
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.results import read_results
from knowgic.runner.stages.cli import main
from knowgic.runner.stages.contract import EditRequests, JobSpec
from knowgic.runner.stages.deltas import FAILED_MARKER, DeltaError
from knowgic.runner.stages.edit import run_edit_stage
from knowgic.runner.stages.prepare import edit_requests, run_prepare_stage
from knowgic.runner.stages.score import run_score_stage

LIMIT = 2
TOLERANCE = 1e-9


def _job(loaded, editor: str, mode: str = "independent", limit: int | None = LIMIT, **extra: Any) -> JobSpec:
    hparams, _ = load_hparams(editor, loaded.model_id, loaded.family, required=False)
    return JobSpec(model="knowgic-tiny", editor=editor, hparams=hparams, mode=mode, limit=limit, **extra)


_REFERENCES: dict[tuple[str, str, int | None], dict[str, Any]] = {}


def _reference(loaded, editor: str, mode: str, limit: int | None) -> dict[str, Any]:
    """``knowgic evaluate``'s document for the same arguments (computed once per module)."""
    key = (editor, mode, limit)
    if key not in _REFERENCES:
        request = EvaluationRequest(
            model="knowgic-tiny", editor=editor, mode=mode, limit=limit, use_cache=False
        )
        _REFERENCES[key] = evaluate(request, progress=False, loaded=loaded).document
    return _REFERENCES[key]


def _without_dataset(patch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As in the edit image: no dataset folder, no upstream rows, and any attempt to load rows fails."""
    import knowgic.dataset.loading
    import knowgic.dataset.versions
    import knowgic.editors.layer_stats

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the edit stage read the dataset")

    patch.setattr(knowgic.dataset.versions, "HUB_DIR", tmp_path / "no-hub")
    patch.setattr(knowgic.editors.layer_stats, "PACKAGE_DIR", tmp_path / "no-package")
    for name in ("load_cases", "load_aliases", "dataset_ref"):
        patch.setattr(knowgic.dataset.loading, name, refused)


def _split(loaded, spec: JobSpec, tmp_path: Path) -> dict[str, Any]:
    """The prepare stage (dataset in reach), the edit stage (none: rows refused, statistics provided
    read-only), then the score stage."""
    deltas, stats = tmp_path / "deltas", tmp_path / "stats"
    run_prepare_stage(spec, tmp_path, stats, loaded=loaded)
    with pytest.MonkeyPatch.context() as patch:
        _without_dataset(patch, tmp_path)
        patch.setenv("KNOWGIC_STATS_DIR", str(stats))
        run_edit_stage(spec, EditRequests.read(tmp_path / "requests.json"), None, deltas, loaded=loaded)
    path = run_score_stage(spec, deltas, tmp_path / "results", loaded=loaded, timeout_seconds=30, plots=False)
    assert sorted(p.name for p in deltas.iterdir()) == ["done"], "every delta is deleted once scored"
    return read_results(path)


def _assert_close(
    expected: Any, actual: Any, where: str, tolerance: float = TOLERANCE, relative_above_one: bool = False
) -> None:
    """Equal structure and non-float values; floats within ``tolerance`` (absolute; with
    ``relative_above_one``, relative for values above 1, such as per-edit sums of probabilities)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(expected) == sorted(actual), where
        for key in expected:
            _assert_close(expected[key], actual[key], f"{where}/{key}", tolerance, relative_above_one)
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(expected) == len(actual), where
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _assert_close(e, a, f"{where}/{i}", tolerance, relative_above_one)
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert isinstance(actual, int | float), where
        bound = tolerance * max(1.0, abs(expected)) if relative_above_one else tolerance
        assert (math.isnan(expected) and math.isnan(actual)) or abs(expected - actual) <= bound, (
            f"{where}: {expected} != {actual}"
        )
    else:
        assert expected == actual, f"{where}: {expected!r} != {actual!r}"


def _untimed(value: Any) -> Any:
    """``value`` without its wall-clock fields (``seconds``, and the editor's own timings in ``info``)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not k.endswith("seconds")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _assert_same_scores(reference: dict[str, Any], document: dict[str, Any]) -> None:
    for section in ("metrics", "counts", "chains", "uncertainty", "dataset"):
        _assert_close(reference[section], document[section], section)
    assert reference["chains"] == document["chains"]
    # Per edit: everything but timings (the score stage times its own replay, not the editor).
    _assert_close(_untimed(reference["per_edit"]), _untimed(document["per_edit"]), "per_edit")


@pytest.mark.parametrize(
    ("editor", "mode"),
    [
        ("rome", "independent"),
        ("memit", "independent"),
        ("ice", "independent"),
        ("rome", "sequential"),
        ("ice", "sequential"),
    ],
)
def test_split_equals_evaluate(knowgic_tiny, tmp_path, editor: str, mode: str) -> None:
    spec = _job(knowgic_tiny, editor, mode, submission_name=f"{editor}-sub", submission_version="1.2.3")
    document = _split(knowgic_tiny, spec, tmp_path)
    _assert_same_scores(_reference(knowgic_tiny, editor, mode, LIMIT), document)
    assert document["config"]["editor"] == editor and document["config"]["hparams"] == spec.hparams
    assert document["config"]["hparams_sha256"] == hparams_sha256(spec.hparams)
    assert document["submission"] == {
        "name": f"{editor}-sub",
        "version": "1.2.3",
        "sha256": None,
        "editor": editor,
        "hparams_sha256": hparams_sha256(spec.hparams),
    }
    assert all(record["seconds"] is None for record in document["per_edit"])  # not the editor's time
    expected_deltas = 1 if mode == "sequential" else LIMIT
    assert document["runner"]["deltas"] == expected_deltas and document["runner"]["stages"] == "edit/score"
    assert (
        document["runner"]["adapters_merged"] is False and document["runner"]["adapters_merged_modules"] == []
    )
    if editor == "ice":  # in-context: no tensors at all, only sidecars
        assert document["runner"]["delta_bytes"] < 20_000
    else:
        assert document["runner"]["delta_bytes"] > 100_000


def test_a_job_on_another_dataset_track_runs_through_the_stages(knowgic_tiny, tmp_path) -> None:
    """A job names a version of another track (here by the track's name): prepare, edit and score run on
    its edits and chains, and give what evaluate gives."""
    spec = _job(knowgic_tiny, "ice", dataset_version="growth")
    document = _split(knowgic_tiny, spec, tmp_path)
    request = EvaluationRequest(
        model="knowgic-tiny", editor="ice", limit=LIMIT, dataset_version="growth-1.0.0", use_cache=False
    )
    _assert_same_scores(evaluate(request, progress=False, loaded=knowgic_tiny).document, document)
    assert document["dataset"]["version"] == "growth-1.0.0"
    requests = EditRequests.read(tmp_path / "requests.json")
    assert requests.dataset_version == "growth-1.0.0" and len(requests.edits) == LIMIT


@pytest.mark.slow
@pytest.mark.parametrize(
    ("editor", "mode"),
    [("rome", "independent"), ("memit", "independent"), ("ice", "independent"), ("memit", "sequential")],
)
def test_split_equals_evaluate_on_every_edit(knowgic_tiny, tmp_path, editor: str, mode: str) -> None:
    spec = _job(knowgic_tiny, editor, mode, limit=None)
    _assert_same_scores(_reference(knowgic_tiny, editor, mode, None), _split(knowgic_tiny, spec, tmp_path))


# Adapter editors (peft LoRA): the edit stage folds each adapter into its base weight, W' = W + (α/r) B A.
# Merged weights compute W'x where the adapter computes W x + s B (A x): the same map, rounded differently
# in float32. Measured on knowgic-tiny with LIMIT edits: metrics and per-chain probabilities differ by at
# most 4e-8, per-edit sums of probabilities (up to about 17) by at most 4e-7 relative. 1e-5 (absolute, and
# relative above 1) leaves a margin of 25x or more for other kernels, and stays far below what a wrong fold
# (a missed adapter, a wrong scale or transpose) changes: LoRA moves the per-chain numbers by more than 1e-3.
MERGED_TOLERANCE = 1e-5


def _max_float_difference(a: Any, b: Any) -> float:
    if isinstance(a, dict):
        return max((_max_float_difference(a[k], b[k]) for k in a if k in b), default=0.0)
    if isinstance(a, list):
        return max((_max_float_difference(x, y) for x, y in zip(a, b, strict=False)), default=0.0)
    if isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) or math.isnan(b)):
        return abs(a - b)
    return 0.0


@pytest.mark.parametrize("mode", ["independent", "sequential"])
def test_lora_split_scores_the_merged_adapters_within_rounding(knowgic_tiny, tmp_path, mode: str) -> None:
    from knowgic.evaluation.fingerprint import fingerprint

    pristine = fingerprint(knowgic_tiny.model)
    spec = _job(knowgic_tiny, "lora", mode)
    document = _split(knowgic_tiny, spec, tmp_path)
    reference = _reference(knowgic_tiny, "lora", mode, LIMIT)
    for section in ("metrics", "counts", "chains", "uncertainty", "dataset"):
        _assert_close(
            reference[section], document[section], section, MERGED_TOLERANCE, relative_above_one=True
        )
    _assert_close(
        _untimed(reference["per_edit"]),
        _untimed(document["per_edit"]),
        "per_edit",
        MERGED_TOLERANCE,
        relative_above_one=True,
    )
    unedited = _reference(knowgic_tiny, "none", mode, LIMIT)
    assert _max_float_difference(unedited["chains"], reference["chains"]) > 1e-3, "the tolerance must matter"

    targets = sorted(reference["per_edit"][0]["info"]["target_modules"])
    assert targets and all(sorted(r["info"]["target_modules"]) == targets for r in document["per_edit"])
    runner = document["runner"]
    assert runner["adapters_merged"] is True and runner["adapters_merged_modules"] == targets
    assert runner["adapters_merged_deltas"] == runner["deltas"] == (1 if mode == "sequential" else LIMIT)
    # Each delta holds exactly the adapted layers' weights, full tensors: 4 bytes per float32 element.
    weights = [knowgic_tiny.model.get_submodule(name).weight for name in targets]
    per_delta = sum(w.numel() * w.element_size() for w in weights)
    assert runner["deltas"] * per_delta < runner["delta_bytes"] < runner["deltas"] * (per_delta + 100_000)
    # The shared model is back to its pristine weights and structure (no peft layer, no peft_config).
    assert fingerprint(knowgic_tiny.model) == pristine
    assert not any("lora" in name for name, _ in knowgic_tiny.model.named_modules())
    assert not hasattr(knowgic_tiny.model, "peft_config")


def test_folding_adapters_merges_w_plus_sba_and_undoes_bitwise(knowgic_tiny) -> None:
    """Inside the block: the pristine structure with W + Σ s B A (peft's delta) in place of W; after it: the
    same peft layers, the same base weights bit for bit, the same logits bit for bit."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    from knowgic.dataset.loading import dataset_ref, load_aliases, load_cases
    from knowgic.editors.lora import LoRAEditor
    from knowgic.evaluation.fingerprint import assert_restored, fingerprint
    from knowgic.evaluation.plan import build_plan
    from knowgic.runner.stages.deltas import folded_adapters

    model, tokenizer = knowgic_tiny.model, knowgic_tiny.tokenizer
    pristine = fingerprint(model)
    ref = dataset_ref(None, config="chains")
    plan = build_plan(load_cases(ref.version), load_aliases(ref.version), limit=2)
    hparams, _ = load_hparams("lora", knowgic_tiny.model_id, knowgic_tiny.family, required=False)
    editor = LoRAEditor({**hparams, "num_steps": 3})
    handles = [editor.apply(model, tokenizer, [edit.request]) for edit in plan.edits]  # two stacked adapters
    try:
        tuners = {n: m for n, m in model.named_modules() if isinstance(m, BaseTunerLayer)}
        assert tuners and all(len(layer.active_adapters) == 2 for layer in tuners.values())
        bases = {n: layer.get_base_layer().weight.detach().clone() for n, layer in tuners.items()}
        expected = {
            n: bases[n] + sum(layer.get_delta_weight(a) for a in layer.active_adapters)
            for n, layer in tuners.items()
        }
        inputs = tokenizer(plan.edits[0].request.rewrite_text, return_tensors="pt")
        with torch.no_grad():
            adapter_logits = model(**inputs).logits
            with folded_adapters(model) as merged:
                assert merged == sorted(tuners)
                assert not any(isinstance(m, BaseTunerLayer) for m in model.modules())
                for name in tuners:
                    assert torch.allclose(model.get_submodule(name).weight, expected[name], atol=1e-6, rtol=0)
                    assert not torch.equal(model.get_submodule(name).weight, bases[name])
                merged_logits = model(**inputs).logits
            after_logits = model(**inputs).logits
        assert (merged_logits - adapter_logits).abs().max() < 1e-4
        assert all(model.get_submodule(n) is layer for n, layer in tuners.items())
        assert all(torch.equal(layer.get_base_layer().weight, bases[n]) for n, layer in tuners.items())
        assert all(not layer.merged for layer in tuners.values())
        assert torch.equal(after_logits, adapter_logits)
    finally:
        for handle in reversed(handles):
            handle.restore()
    assert_restored(model, pristine, "lora")


STRUCTURE_EDITORS = """
import torch

from knowgic.editors.base import EditHandle, Editor
from knowgic.editors.lora import LoRAEditor


class AddingEditor(Editor):
    \"\"\"Adds a plain (non-peft) module: a parameter the pristine model does not have.\"\"\"

    name = "adding"

    def apply(self, model, tokenizer, requests):
        model.add_module("extra_head", torch.nn.Linear(2, 2))
        return EditHandle(restore_fn=lambda: delattr(model, "extra_head"))


class LoRAPlusModuleEditor(LoRAEditor):
    \"\"\"A peft LoRA (which the edit stage can fold) plus a plain added module (which it cannot).\"\"\"

    name = "lora-plus"

    def apply(self, model, tokenizer, requests):
        handle = super().apply(model, tokenizer, requests)
        model.add_module("extra_head", torch.nn.Linear(2, 2))

        def restore():
            delattr(model, "extra_head")
            handle.restore()

        return EditHandle(restore_fn=restore, info=handle.info)
"""


@pytest.mark.parametrize("editor", ["AddingEditor", "LoRAPlusModuleEditor"])
def test_editor_adding_a_non_peft_module_fails_with_its_reason(knowgic_tiny, tmp_path, editor: str) -> None:
    from knowgic.evaluation.fingerprint import fingerprint

    pristine = fingerprint(knowgic_tiny.model)
    submission = _submission(tmp_path, "structure_editors", STRUCTURE_EDITORS)
    hparams = {}
    if editor == "LoRAPlusModuleEditor":
        hparams, _ = load_hparams("lora", knowgic_tiny.model_id, knowgic_tiny.family, required=False)
        hparams = {**hparams, "num_steps": 2}
    spec = JobSpec(model="knowgic-tiny", editor=f"structure_editors:{editor}", hparams=hparams, limit=1)
    deltas = tmp_path / "deltas"
    reason = (
        r"the edit changed the model's structure \(added param:extra_head\.bias, param:extra_head\.weight\); "
        "the runner replays changes to the values of existing parameters and buffers only"
    )
    with pytest.raises(DeltaError, match=reason):
        run_edit_stage(spec, edit_requests(spec), submission, deltas, loaded=knowgic_tiny)
    assert re.search(reason, (deltas / FAILED_MARKER).read_text())
    assert fingerprint(knowgic_tiny.model) == pristine  # the editor's restore still ran
    assert not any("lora" in name or "extra" in name for name, _ in knowgic_tiny.model.named_modules())
    with pytest.raises(DeltaError, match="the edit stage failed: the edit changed the model's structure"):
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)


def test_job_spec_round_trips_and_rejects_bad_fields() -> None:
    spec = JobSpec(
        model="knowgic-tiny",
        editor="pkg.mod:Cls",
        hparams={"layers": [1]},
        limit=3,
        submission_sha256="a" * 64,
    )
    assert JobSpec.from_json(spec.to_json()) == spec
    with pytest.raises(KnowgicError, match=r"job at /: unknown field 'colour' \(allowed: dataset_version, "):
        JobSpec.from_json(json.dumps({"model": "m", "editor": "e", "colour": 1}))
    with pytest.raises(KnowgicError, match="job at /limit: expected a number >= 1, got 0"):
        JobSpec.from_json(json.dumps({"model": "m", "editor": "e", "limit": 0}))
    with pytest.raises(KnowgicError, match="job is not valid JSON"):
        JobSpec.from_json("{")


def _stage_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "knowgic.runner.stages", *args]


def _run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        _stage_command(*args),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env or dict(os.environ),
    )


def test_streaming_edit_stage_blocks_on_its_quota_until_deltas_are_scored(knowgic_tiny, tmp_path) -> None:
    spec = _job(knowgic_tiny, "rome")
    job = tmp_path / "job.json"
    job.write_text(spec.to_json())
    requests = edit_requests(spec).write(tmp_path / "requests.json")
    deltas = tmp_path / "deltas"
    edit = subprocess.Popen(
        _stage_command(
            "edit", "--job", str(job), "--requests", str(requests), "--out", str(deltas), "--quota", "1"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: list[str] = []
    blocked = threading.Event()

    def read_stderr() -> None:
        assert edit.stderr is not None
        for line in edit.stderr:
            stderr.append(line)
            if "edit stage: waiting for room" in line:
                blocked.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert blocked.wait(timeout=180), "".join(stderr)
        # Blocked with the first delta unconsumed: nothing more appears until the score stage runs.
        time.sleep(0.5)
        assert [p.name for p in sorted(deltas.glob("*.json"))] == [f"edit-0000-{_first_edit_id()}.json"]
        assert edit.poll() is None
        path = run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=180)
        assert edit.stdout is not None
        out = edit.stdout.read()
        edit.wait(timeout=60)
    finally:
        if edit.poll() is None:
            edit.kill()
    reader.join(timeout=10)
    assert edit.returncode == 0, "".join(stderr)
    summary = json.loads(out)
    assert summary["deltas"] == LIMIT and summary["quota_waits"] >= 1
    # Never more than one delta on disk: the peak is one delta (all ROME deltas of a model are one size).
    assert summary["peak_folder_bytes"] <= summary["delta_bytes"] / LIMIT * 1.01
    _assert_same_scores(_reference(knowgic_tiny, "rome", "independent", LIMIT), read_results(path))


def _first_edit_id() -> str:
    from knowgic.dataset.loading import dataset_ref, load_aliases, load_cases
    from knowgic.evaluation.plan import build_plan

    ref = dataset_ref(None, config="chains")
    return build_plan(load_cases(ref.version), load_aliases(ref.version), limit=1).edits[0].edit_id


def _tampered_rome_deltas(knowgic_tiny, tmp_path: Path) -> tuple[JobSpec, Path, Path]:
    spec = _job(knowgic_tiny, "rome", limit=1)
    deltas = tmp_path / "deltas"
    run_edit_stage(spec, edit_requests(spec), None, deltas, loaded=knowgic_tiny)
    return spec, deltas, deltas / f"edit-0000-{_first_edit_id()}.safetensors"


def test_score_stage_fails_the_job_on_a_nan_delta_and_writes_nothing(knowgic_tiny, tmp_path) -> None:
    spec, deltas, tensors_path = _tampered_rome_deltas(knowgic_tiny, tmp_path)
    tensors = load_file(str(tensors_path))
    name = next(iter(tensors))
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(tensors_path))
    with pytest.raises(DeltaError, match=f"{name} has 1 non-finite value"):
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)
    assert not (tmp_path / "results").exists()


def test_score_stage_fails_the_job_on_a_delta_of_an_unknown_parameter(knowgic_tiny, tmp_path) -> None:
    spec, deltas, tensors_path = _tampered_rome_deltas(knowgic_tiny, tmp_path)
    tensors = load_file(str(tensors_path))
    save_file({"param:lm_head.backdoor": next(iter(tensors.values()))}, str(tensors_path))
    with pytest.raises(
        DeltaError, match=re.escape("'param:lm_head.backdoor' is not a parameter or buffer of the model")
    ):
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)


def test_score_stage_refuses_a_delta_for_another_edit(knowgic_tiny, tmp_path) -> None:
    spec, deltas, tensors_path = _tampered_rome_deltas(knowgic_tiny, tmp_path)
    sidecar_path = tensors_path.with_suffix(".json")
    sidecar = json.loads(sidecar_path.read_text())
    sidecar["edits"][0]["edit_id"] = "0" * 12
    sidecar_path.write_text(json.dumps(sidecar))
    with pytest.raises(DeltaError, match=f"claims edit id\\(s\\) 000000000000, expected {_first_edit_id()}"):
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)


def test_score_stage_refuses_merged_adapters_claimed_on_no_layer(knowgic_tiny, tmp_path) -> None:
    spec, deltas, tensors_path = _tampered_rome_deltas(knowgic_tiny, tmp_path)
    sidecar_path = tensors_path.with_suffix(".json")
    sidecar = json.loads(sidecar_path.read_text())
    sidecar["merged_adapters"] = ["transformer.h.0.attn.no_such_layer"]
    sidecar_path.write_text(json.dumps(sidecar))
    with pytest.raises(
        DeltaError, match=re.escape("says adapters were merged into 'transformer.h.0.attn.no_such_layer'")
    ):
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)


FAILING_EDITOR = """
from knowgic.editors.base import Editor


class FailingEditor(Editor):
    name = "failing"

    def apply(self, model, tokenizer, requests):
        raise RuntimeError("the optimiser diverged")
"""

HOSTILE_EDITOR = '''
import json
import os
import sys
from pathlib import Path

import numpy as np

import knowgic.scoring.logprob as logprob
from knowgic.editors.base import EditHandle, Editor
from knowgic.scoring.base import Scores


class PatchingEditor(Editor):
    """Changes no weight, but rewrites the scorer of its own process, and plants results."""

    name = "patching"

    def apply(self, model, tokenizer, requests):
        new_targets = {r.target_new for r in requests}

        def perfect(self, model, tokenizer, queries, prefix=""):  # every new target certain, nothing else
            hit = np.array([q.answers[0] in new_targets for q in queries])
            return Scores(p=hit.astype(np.float64), known=hit)

        logprob.LogprobScorer.score = perfect
        fake = {"schema_version": "1.2", "metrics": {"ifr": {"value": 1.0, "n": 1}}, "sha256": "0" * 64}
        if "--out" in sys.argv:
            out = Path(sys.argv[sys.argv.index("--out") + 1])
            (out / "results.json").write_text(json.dumps(fake))
        return EditHandle(info={"claimed_efficacy": 1.0})
'''


def _submission(tmp_path: Path, module: str, source: str) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / f"{module}.py").write_text(source)
    return folder


def test_failing_editor_fails_both_stages_with_its_reason(knowgic_tiny, tmp_path, capsys) -> None:
    submission = _submission(tmp_path, "failing_editor", FAILING_EDITOR)
    spec = JobSpec(model="knowgic-tiny", editor="failing_editor:FailingEditor", limit=1)
    job = tmp_path / "job.json"
    job.write_text(spec.to_json())
    requests = edit_requests(spec).write(tmp_path / "requests.json")
    deltas = tmp_path / "deltas"
    command = ["edit", "--job", str(job), "--requests", str(requests), "--submission", str(submission)]
    assert main([*command, "--out", str(deltas)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: editor 'failing' failed on edit ") and err.endswith(
        "RuntimeError: the optimiser diverged"
    )
    assert "\n" not in err
    assert "the optimiser diverged" in (deltas / FAILED_MARKER).read_text()
    with pytest.raises(
        DeltaError, match=r"the edit stage failed: editor 'failing' failed on edit .* diverged"
    ):
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)


def test_hostile_editor_cannot_change_the_scores(knowgic_tiny, tmp_path) -> None:
    """The attack works on a plain ``knowgic evaluate`` (same process), and not on the split."""
    submission = _submission(tmp_path, "hostile_editor", HOSTILE_EDITOR)
    entry = "hostile_editor:PatchingEditor"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(submission), os.environ.get("PYTHONPATH", "")])}
    evaluate_command = [sys.executable, "-m", "knowgic.cli", "evaluate", "--model", "knowgic-tiny"]
    evaluate_command += ["--editor", entry, "--limit", str(LIMIT), "--no-cache", "--json"]
    plain = subprocess.run(evaluate_command, capture_output=True, text=True, timeout=300, env=env)
    assert plain.returncode == 0, plain.stderr
    cheated = json.loads(plain.stdout)["metrics"]
    assert cheated["efficacy"]["value"] == 1.0, (
        "the attack must work where the editor shares the scorer's process"
    )

    spec = JobSpec(model="knowgic-tiny", editor=entry, limit=LIMIT)
    job = tmp_path / "job.json"
    job.write_text(spec.to_json())
    deltas, results = tmp_path / "deltas", tmp_path / "results"
    requests = edit_requests(spec).write(tmp_path / "requests.json")
    edit = _run(
        "edit",
        "--job",
        str(job),
        "--requests",
        str(requests),
        "--submission",
        str(submission),
        "--out",
        str(deltas),
    )
    assert edit.returncode == 0, edit.stderr
    assert (deltas / "results.json").exists()
    score = _run("score", "--job", str(job), "--deltas", str(deltas), "--out", str(results), "--no-plots")
    assert score.returncode == 0, score.stderr
    document = read_results(score.stdout.strip())
    honest = _reference(knowgic_tiny, "none", "independent", LIMIT)
    _assert_close(honest["metrics"], document["metrics"], "metrics")
    assert document["metrics"]["efficacy"]["value"] != 1.0
    assert document["config"]["editor"] == entry
    # The planted file in the deltas folder was never read, and it is not what the score stage wrote.
    assert json.loads((deltas / "results.json").read_text())["sha256"] == "0" * 64


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["edit", "--job", "missing.json", "--requests", "REQ", "--out", "d"],
            "error: job file missing.json does not exist",
        ),
        (
            ["edit", "--job", "JOB", "--requests", "missing.json", "--out", "d"],
            "error: edit requests file missing.json does not exist",
        ),
        (
            ["edit", "--job", "JOB", "--requests", "BADREQ", "--out", "d"],
            "error: edit requests BADREQ at /edits/0/edit_id: expected the request's id",
        ),
        (
            ["score", "--job", "JOB", "--deltas", "nowhere", "--out", "r"],
            "error: deltas folder nowhere does not exist",
        ),
        (
            ["edit", "--job", "JOB", "--requests", "REQ", "--out", "d", "--quota", "lots"],
            "error: argument --quota: not a size: 'lots'",
        ),
        (
            ["score", "--job", "JOB", "--deltas", "d", "--out", "r", "--timeout", "-1"],
            "error: argument --timeout: '-1' must be more than 0 seconds",
        ),
        (
            ["edit", "--job", "BAD", "--requests", "REQ", "--out", "d"],
            "error: job file BAD at /mode: expected a string or null, got integer 3",
        ),
        (
            ["edit", "--job", "JOB", "--requests", "REQ", "--submission", "nowhere", "--out", "d"],
            "error: submission folder nowhere does not exist",
        ),
    ],
)
def test_bad_command_lines_are_one_line_errors(
    tmp_path, monkeypatch, capsys, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = JobSpec(model="knowgic-tiny", editor="none", limit=1)
    Path("JOB").write_text(spec.to_json())
    edit_requests(spec).write("REQ")
    bad = edit_requests(spec).to_document()
    bad["edits"][0]["edit_id"] = "x"
    Path("BADREQ").write_text(json.dumps(bad))
    Path("BAD").write_text(json.dumps({"model": "knowgic-tiny", "editor": "none", "mode": 3}))
    with pytest.raises(SystemExit) as exited:
        sys.exit(main(args))
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(message), err


def test_unknown_mode_fails_before_the_model_loads(tmp_path) -> None:
    spec = JobSpec(model="knowgic-tiny", editor="none", mode="shuffled")
    with pytest.raises(KnowgicError, match="unknown mode 'shuffled'"):
        run_edit_stage(spec, edit_requests(spec), None, tmp_path / "deltas")
    assert "unknown mode 'shuffled'" in (tmp_path / "deltas" / FAILED_MARKER).read_text()
    with pytest.raises(KnowgicError, match="unknown mode 'shuffled'"):
        run_score_stage(spec, tmp_path / "deltas", tmp_path / "results")


def test_edit_stage_with_a_bad_job_marks_its_folder_failed(tmp_path) -> None:
    """The score stage, already waiting on the folder, learns the reason instead of timing out."""
    deltas = tmp_path / "deltas"
    command = ["edit", "--job", str(tmp_path / "missing.json"), "--requests", str(tmp_path / "requests.json")]
    assert main([*command, "--out", str(deltas)]) == 2
    assert "missing.json does not exist" in (deltas / FAILED_MARKER).read_text()


def test_score_stage_refuses_a_folder_holding_a_run_before_any_work(tmp_path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.json").write_text("{}")
    (tmp_path / "deltas").mkdir()
    spec = JobSpec(model="knowgic-tiny", editor="none", limit=1)
    with pytest.raises(KnowgicError, match="already holds a run"):
        run_score_stage(spec, tmp_path / "deltas", results, timeout_seconds=0.1)
    assert (results / "results.json").read_text() == "{}"


@pytest.mark.slow
def test_timing_split_measures_the_three_runs_and_they_agree(capsys) -> None:
    from knowgic.runner.stages.timing_split import main as timing_split

    assert timing_split(["--editor", "rome", "--limit", "2", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["metrics_agree"] is True and figures["deltas"] == 2
    assert figures["peak_bytes_streaming"] <= figures["delta_bytes_written"] / 2 * 1.01
    assert figures["split_then_seconds"] > 0 and figures["plain_seconds"] > 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda edits: edits.reverse(),
            r"delta sequential.json lists \w{12} as edit 1, the plan's is \w{12}",
        ),
        (lambda edits: edits.append({**edits[0]}), "delta sequential.json lists 3 edits, the plan has 2"),
        (lambda edits: edits.pop(), r"delta sequential.json lists nothing as edit 2"),
    ],
    ids=["reordered", "extra-edit", "missing-edit"],
)
def test_sequential_delta_must_list_the_plan_s_edits_in_order(
    knowgic_tiny, tmp_path, change, message
) -> None:
    spec = _job(knowgic_tiny, "ice", "sequential")
    deltas = tmp_path / "deltas"
    run_edit_stage(spec, edit_requests(spec), None, deltas, loaded=knowgic_tiny)
    sidecar = json.loads((deltas / "sequential.json").read_text())
    change(sidecar["edits"])
    (deltas / "sequential.json").write_text(json.dumps(sidecar))
    with pytest.raises(DeltaError, match=message):
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)
    assert not (tmp_path / "results").exists()
