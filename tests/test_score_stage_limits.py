"""The trusted score stage takes no limit from the untrusted edit stage (no containers).

Each case is written as a hostile editor would attack, and ends with a one-line reason:

- a huge in-context prefix is refused in tokens by the model's own context, before any query is tokenized
  with it (it used to take the score stage past its memory limit);
- weights set to 3e38 (finite in float32, so a valid delta) make the logits non-finite: the reason says so,
  names the edit and the dtype the model ran in, and suggests no other dtype;
- a second delta for an edit already scored fails the job (the first used to be scored, the second ignored).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.runner.stages.contract import JobSpec
from knowgic.runner.stages.deltas import (
    DeltaEdit,
    DeltaError,
    DeltaReader,
    DeltaWriter,
    independent_key,
    model_spec,
)
from knowgic.runner.stages.edit import run_edit_stage
from knowgic.runner.stages.prepare import edit_requests
from knowgic.runner.stages.score import run_score_stage

PREFIX_EDITOR = '''
from knowgic.editors.base import EditHandle, Editor


class LongPrefixEditor(Editor):
    """An in-context editor whose prefix is as long as the delta format allows (100,000 characters)."""

    name = "long-prefix"

    def apply(self, model, tokenizer, requests):
        chars = int(self.hparams.get("chars", 100_000))
        return EditHandle(prompt_prefix=("Paris is lovely. " * chars)[:chars])
'''

OVERFLOW_EDITOR = '''
import torch

from knowgic.editors.base import EditHandle, Editor


class OverflowEditor(Editor):
    """Sets one MLP weight to 3e38: finite in float32, so the delta is valid, but the activations overflow."""

    name = "overflow"

    def apply(self, model, tokenizer, requests):
        weight = model.transformer.h[0].mlp.c_fc.weight
        saved = weight.detach().clone()
        with torch.no_grad():
            weight.fill_(3e38)

        def restore():
            with torch.no_grad():
                weight.copy_(saved)

        return EditHandle(restore_fn=restore)
'''

EARLY_DELTA_EDITOR = '''
import time
from pathlib import Path

from knowgic.editors.base import EditHandle, Editor
from knowgic.runner.stages.deltas import DeltaEdit, DeltaWriter, independent_key


class EarlyDeltaEditor(Editor):
    """Writes its first edit's delta itself (no change at all), waits until the score stage has scored it,
    then lets the harness write the real delta (a prefix) for the same edit."""

    name = "early-delta"

    def __init__(self, hparams):
        super().__init__(hparams)
        self.calls = 0

    def apply(self, model, tokenizer, requests):
        index, self.calls = self.calls, self.calls + 1
        if index == 0:
            folder = Path(self.hparams["deltas"])
            key = independent_key(0, requests[0].edit_id)
            DeltaWriter(folder, 1 << 30).write(key, "independent", [DeltaEdit(requests[0].edit_id)], {})
            deadline = time.monotonic() + 60
            while (folder / f"{key}.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return EditHandle(prompt_prefix="Forget everything you knew. ")
'''


def _submission(tmp_path: Path, module: str, source: str) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / f"{module}.py").write_text(source)
    return folder


def _edit_then_score(
    loaded, tmp_path: Path, module: str, source: str, entry: str, **job: object
) -> tuple[JobSpec, Path]:
    submission = _submission(tmp_path, module, source)
    spec = JobSpec(model="knowgic-tiny", editor=f"{module}:{entry}", **job)  # type: ignore[arg-type]
    deltas = tmp_path / "deltas"
    run_edit_stage(spec, edit_requests(spec), submission, deltas, loaded=loaded)
    return spec, deltas


@pytest.mark.parametrize(
    ("mode", "limit", "chars", "what"),
    [
        ("independent", 1, 100_000, r"edit 1 \([0-9a-f]{12}\): in-context prefix \(100000 characters\)"),
        ("sequential", 2, 60_000, r"the sequential edits' in-context prefix \(120000 characters\)"),
    ],
)
def test_a_huge_prefix_is_refused_in_tokens_by_the_model_s_context(
    knowgic_tiny, tmp_path, mode: str, limit: int, chars: int, what: str
) -> None:
    spec, deltas = _edit_then_score(
        knowgic_tiny,
        tmp_path,
        f"long_prefix_{mode}",
        PREFIX_EDITOR,
        "LongPrefixEditor",
        mode=mode,
        limit=limit,
        hparams={"chars": chars},
    )
    positions = knowgic_tiny.model.config.n_positions
    with pytest.raises(KnowgicError) as caught:
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)
    message = str(caught.value)
    assert re.fullmatch(rf"{what}: (\d+) tokens exceed the model's {positions} positions", message), message
    assert not (tmp_path / "results").exists()


def test_a_huge_prefix_fails_the_score_command_with_one_line_in_bounded_memory(
    knowgic_tiny, tmp_path
) -> None:
    """As the container runs it: the score command exits 2 with the reason, and its peak memory stays
    that of the model, not gigabytes of tokenized rows."""
    spec, deltas = _edit_then_score(
        knowgic_tiny, tmp_path, "long_prefix_command", PREFIX_EDITOR, "LongPrefixEditor", limit=2
    )
    job = tmp_path / "job.json"
    job.write_text(spec.to_json())
    # The child's peak resident set, measured by a parent that runs nothing else.
    wrapper = textwrap.dedent(
        """
        import resource, subprocess, sys
        done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
        sys.stderr.write(done.stderr)
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        sys.exit(done.returncode)
        """
    )
    command = [sys.executable, "-c", wrapper, sys.executable, "-m", "knowgic.runner.stages", "score"]
    command += ["--job", str(job), "--deltas", str(deltas), "--out", str(tmp_path / "out"), "--timeout", "10"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert re.fullmatch(
        r"error: edit 1 \([0-9a-f]{12}\): in-context prefix \(100000 characters\): \d+ tokens exceed the "
        r"model's 1024 positions",
        line,
    ), line
    peak_mib = int(done.stdout.strip()) / 1024
    assert peak_mib < 1024, f"the refused prefix took the score stage to {peak_mib:.0f} MiB"


def test_overflowing_weights_say_what_happened_in_the_dtype_used(knowgic_tiny, tmp_path) -> None:
    spec, deltas = _edit_then_score(
        knowgic_tiny, tmp_path, "overflow_editor", OVERFLOW_EDITOR, "OverflowEditor", limit=1
    )
    assert spec.dtype == "float32"
    with pytest.raises(KnowgicError) as caught:
        run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=10)
    message = str(caught.value)
    assert re.fullmatch(
        r"edit [0-9a-f]{12} \(.* -> .*\): query \d+ \(.*\): the edited model returned non-finite "
        r"logits \(NaN/inf\) in float32",
        message,
    ), message
    assert "float16" not in message
    # A local run of the same editor says the same.
    sys.path.insert(0, str(tmp_path / "submission"))
    try:
        request = EvaluationRequest(
            model="knowgic-tiny", editor="overflow_editor:OverflowEditor", limit=1, use_cache=False
        )
        with pytest.raises(KnowgicError) as local:
            evaluate(request, progress=False, loaded=knowgic_tiny)
    finally:
        sys.path.remove(str(tmp_path / "submission"))
    assert str(local.value) == message


def test_a_second_delta_for_an_edit_already_scored_fails_the_job(knowgic_tiny, tmp_path) -> None:
    submission = _submission(tmp_path, "early_delta_editor", EARLY_DELTA_EDITOR)
    deltas = tmp_path / "deltas"
    spec = JobSpec(
        model="knowgic-tiny",
        editor="early_delta_editor:EarlyDeltaEditor",
        hparams={"deltas": str(deltas)},
        limit=2,
    )
    deltas.mkdir()
    errors: list[BaseException] = []

    def edit() -> None:
        try:
            run_edit_stage(
                spec, edit_requests(spec), submission, deltas, loaded=knowgic_tiny, poll_seconds=0.02
            )
        except BaseException as exc:  # the score stage's outcome is what the test checks
            errors.append(exc)

    # One model for both stages: the edit stage's edits happen between the score stage's reads.
    edit_thread = threading.Thread(target=edit, daemon=True)
    edit_thread.start()
    try:
        with pytest.raises(DeltaError) as caught:
            run_score_stage(spec, deltas, tmp_path / "results", loaded=knowgic_tiny, timeout_seconds=60)
    finally:
        edit_thread.join(timeout=120)
    assert re.fullmatch(
        r"the edit stage wrote a second delta for edit 1 \([0-9a-f]{12}\) after that edit was scored; "
        r"each edit's delta is written once",
        str(caught.value),
    ), str(caught.value)
    assert not (tmp_path / "results").exists()


def test_a_delta_replaced_while_being_scored_fails_the_job(knowgic_tiny, tmp_path) -> None:
    edit_id = "0123456789ab"
    key = independent_key(0, edit_id)
    writer = DeltaWriter(tmp_path, 1 << 30)
    writer.write(key, "independent", [DeltaEdit(edit_id, prompt_prefix="first")], {})
    reader = DeltaReader(tmp_path, model_spec(knowgic_tiny.model), timeout_seconds=5)
    reader.wait_for(key)
    assert reader.read(key, "independent", [edit_id]).edits[0].prompt_prefix == "first"
    writer.write(key, "independent", [DeltaEdit(edit_id, prompt_prefix="second")], {})
    reader.remove(key)  # the restore goes on; the job fails at the next wait
    writer.done()
    with pytest.raises(
        DeltaError, match=r"second delta for edit 1 \(0123456789ab\) while that edit was being"
    ):
        reader.wait_done()
