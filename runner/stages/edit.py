"""The edit stage (untrusted; in the submission's container, from an image without the dataset).

:func:`run_edit_stage` loads the model, imports the submission's editor and applies the edit requests the
prepare stage wrote, in order (one distinct edit request at a time in ``independent`` mode, restoring
after each; all of them in ``sequential`` mode), and writes what each changed as a delta
(:mod:`knowgic.runner.stages.deltas`). It computes no score. Adapter editors (peft LoRA) are taken as the
merged weights W + s B A of the layers they adapt (:func:`knowgic.runner.stages.deltas.folded_adapters`);
any other change of the model's structure fails the job with its reason. Nothing of the dataset is read
here, and nothing this stage reports enters a score.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from knowgic.editors.base import EditHandle, Editor
from knowgic.editors.hparams import validate_hparams
from knowgic.editors.registry import resolve_editor
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import DTYPES, editor_method_name
from knowgic.evaluation.fingerprint import assert_restored, fingerprint
from knowgic.evaluation.harness import MODES
from knowgic.models.loading import load_model
from knowgic.models.threads import cpu_threads
from knowgic.records import EditRequest
from knowgic.runner.stages.contract import DONE_MARKER, FAILED_MARKER, EditRequests, JobSpec
from knowgic.runner.stages.deltas import (
    DeltaEdit,
    DeltaWriter,
    changed_tensors,
    folded_adapters,
    independent_key,
    sequential_key,
)
from knowgic.runner.stages.resolve import resolved

if TYPE_CHECKING:
    from knowgic.models.base import LoadedModel

DEFAULT_QUOTA_BYTES = 2 << 30


@dataclass
class EditStageSummary:
    deltas: int
    delta_bytes: int
    peak_folder_bytes: int
    quota_waits: int
    quota_wait_seconds: float
    edit_seconds: float
    total_seconds: float


@contextmanager
def _importable(folder: Path | None) -> Iterator[None]:
    """Put the submission's folder first on ``sys.path`` for the block (its ``module:Class`` lives there)."""
    if folder is None:
        yield
        return
    entry = str(Path(folder).resolve())
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)


def _prepare_deltas_dir(deltas_dir: Path) -> None:
    deltas_dir.mkdir(parents=True, exist_ok=True)
    stale = [n for n in (DONE_MARKER, FAILED_MARKER) if os.path.lexists(deltas_dir / n)]
    if stale:
        raise KnowgicError(
            f"deltas folder {deltas_dir} already holds a {stale[0]!r} marker of an earlier run"
        )


def _apply_edit(
    editor: Editor, model: torch.nn.Module, tokenizer: Any, edit_id: str, request: EditRequest
) -> EditHandle:
    """``editor.apply`` on one edit request, with the harness's one-line errors."""
    try:
        handle = editor.apply(model, tokenizer, [request])
    except KnowgicError:
        raise
    except Exception as exc:
        raise KnowgicError(
            f"editor {editor.name!r} failed on edit {edit_id} "
            f"({request.rewrite_text!r} -> {request.target_new!r}): {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(handle, EditHandle):
        raise KnowgicError(
            f"editor {editor.name!r}.apply returned {type(handle).__name__}, expected knowgic.editors.EditHandle"
        )
    return handle


def run_edit_stage(
    spec: JobSpec,
    requests: EditRequests,
    submission_dir: str | Path | None,
    deltas_dir: str | Path,
    quota_bytes: int = DEFAULT_QUOTA_BYTES,
    *,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    loaded: LoadedModel | None = None,
    poll_seconds: float = 0.05,
    wait_timeout: float | None = None,
) -> EditStageSummary:
    """Apply ``requests`` (written by the prepare stage) with the submission's editor and write one delta
    per edit (or one cumulative delta in sequential mode) into ``deltas_dir``, then ``done``; on any error
    write ``failed`` with the reason and raise it. Nothing of the dataset is read here. ``loaded`` reuses an
    already loaded model (tests); it is left as it was found."""
    deltas_dir = Path(deltas_dir)
    _prepare_deltas_dir(deltas_dir)
    writer = DeltaWriter(
        deltas_dir,
        quota_bytes,
        poll_seconds=poll_seconds,
        wait_timeout=wait_timeout,
        on_wait=(
            lambda used, size: log(f"edit stage: waiting for room ({used} bytes held, quota {quota_bytes})")
        )
        if log is not None
        else None,
    )
    try:
        with _importable(Path(submission_dir) if submission_dir is not None else None):
            summary = _edit_stage(spec, requests, writer, progress=progress, log=log, loaded=loaded)
    except BaseException as exc:
        if isinstance(exc, KnowgicError):
            reason = str(exc)
        elif isinstance(exc, KeyboardInterrupt):
            reason = "interrupted"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        with suppress(OSError):
            writer.failed(reason)
        raise
    writer.done()
    return summary


def _check_edit_job(spec: JobSpec, requests: EditRequests) -> type[Editor]:
    """What the edit stage can check without the dataset: mode, dtype, the requests, the editor's import."""
    if spec.mode not in MODES:
        raise KnowgicError(f"unknown mode {spec.mode!r}; known: {', '.join(MODES)}")
    if requests.mode != spec.mode:
        raise KnowgicError(f"the edit requests are for mode {requests.mode!r}, the job's is {spec.mode!r}")
    if spec.dtype not in DTYPES:
        raise KnowgicError(f"unknown dtype {spec.dtype!r}; known: {', '.join(DTYPES)}")
    return resolve_editor(spec.editor)


def _plan_requests(requests: EditRequests) -> list[tuple[str, EditRequest]]:
    """(edit id, request) in order; an id that is not its request's is refused."""
    out = []
    for edit in requests.edits:
        request = EditRequest(edit.prompt, edit.subject, edit.target_true, edit.target_new)
        if request.edit_id != edit.edit_id:
            raise KnowgicError(
                f"edit request {edit.position} has id {edit.edit_id}, its content's id is {request.edit_id}"
            )
        out.append((edit.edit_id, request))
    return out


def _edit_stage(
    spec: JobSpec,
    requests: EditRequests,
    writer: DeltaWriter,
    *,
    progress: bool,
    log: Callable[[str], None] | None,
    loaded: LoadedModel | None,
) -> EditStageSummary:

    started = time.perf_counter()
    spec = resolved(spec)
    editor_cls = _check_edit_job(spec, requests)
    validate_hparams(
        spec.hparams, editor_method_name(spec.editor, editor_cls), "of the job", editor_cls.hparams_schema
    )
    edits = _plan_requests(requests)
    if loaded is None:
        loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, progress=progress)
    try:
        editor = editor_cls(dict(spec.hparams))
    except KnowgicError:
        raise
    except Exception as exc:
        raise KnowgicError(
            f"editor {spec.editor!r} rejected its hparams: {type(exc).__name__}: {exc}"
        ) from exc

    model, tokenizer = loaded.model, loaded.tokenizer
    edit_seconds = 0.0
    with cpu_threads(model, loaded.device):
        # As evaluate(): one seed before the edits, the edits in plan order.
        torch.manual_seed(spec.seed)
        pristine = fingerprint(model)
        bar = tqdm(edits, desc=f"{editor.name} ({spec.mode}, edit stage)", unit="edit", disable=not progress)
        group_starts = {sum(requests.group_sizes()[:g]) for g in range(len(requests.group_sizes()))}
        if spec.mode == "independent":
            for index, (edit_id, edit) in enumerate(bar):
                if index in group_starts:  # each group starts from the seed, as evaluate() runs it
                    torch.manual_seed(spec.seed)
                editor.reset()
                start = time.perf_counter()
                handle = _apply_edit(editor, model, tokenizer, edit_id, edit)
                applied = time.perf_counter() - start
                try:
                    with folded_adapters(model) as merged:
                        tensors = changed_tensors(model, pristine)
                finally:
                    restore_start = time.perf_counter()
                    handle.restore()
                    applied += time.perf_counter() - restore_start
                assert_restored(model, pristine, editor.name)
                edit_seconds += applied
                delta_edit = DeltaEdit(edit_id, handle.prompt_prefix, dict(handle.info), applied)
                writer.write(independent_key(index, edit_id), spec.mode, [delta_edit], tensors, merged)
                if log is not None:
                    log(f"edit stage: edit {index + 1}/{len(edits)} ({edit_id}) written")
            editor.reset()
        else:
            # Each group (the public edits, then a private split's) is its own sequence on the pristine
            # model, written as its own cumulative delta.
            start_at = 0
            for group, size in enumerate(requests.group_sizes()):
                torch.manual_seed(spec.seed)
                edit_seconds += _sequence(
                    editor,
                    model,
                    tokenizer,
                    edits[start_at : start_at + size],
                    start_at,
                    len(edits),
                    pristine,
                    writer,
                    sequential_key(group),
                    spec.mode,
                    bar,
                    log,
                )
                start_at += size
            bar.close()
    return EditStageSummary(
        deltas=writer.deltas,
        delta_bytes=writer.written_bytes,
        peak_folder_bytes=writer.peak_bytes,
        quota_waits=writer.waits,
        quota_wait_seconds=writer.wait_seconds,
        edit_seconds=edit_seconds,
        total_seconds=time.perf_counter() - started,
    )


def _sequence(
    editor: Editor,
    model: torch.nn.Module,
    tokenizer: Any,
    edits: list[tuple[str, EditRequest]],
    first: int,
    total: int,
    pristine: dict[str, Any],
    writer: DeltaWriter,
    key: str,
    mode: str,
    bar: Any,
    log: Callable[[str], None] | None,
) -> float:
    """Apply ``edits`` one on top of the other, write their cumulative delta under ``key``, restore; the
    seconds the editor took."""
    editor.reset()
    handles: list[EditHandle] = []
    delta_edits: list[DeltaEdit] = []
    seconds_total = 0.0
    try:
        for offset, (edit_id, edit) in enumerate(edits):
            start = time.perf_counter()
            handles.append(_apply_edit(editor, model, tokenizer, edit_id, edit))
            seconds = time.perf_counter() - start
            seconds_total += seconds
            delta_edits.append(DeltaEdit(edit_id, handles[-1].prompt_prefix, dict(handles[-1].info), seconds))
            bar.update(1)
            if log is not None:
                log(f"edit stage: edit {first + offset + 1}/{total} ({edit_id}) applied")
        with folded_adapters(model) as merged:
            tensors = changed_tensors(model, pristine)
    finally:
        for handle in reversed(handles):
            handle.restore()
    assert_restored(model, pristine, editor.name)
    editor.reset()
    writer.write(key, mode, delta_edits, tensors, merged)
    return seconds_total


def mark_failed(deltas_dir: Path, reason: str) -> None:
    """Write the ``failed`` marker (when none is there) so that a score stage waiting on the folder learns
    the reason; for failures before :func:`run_edit_stage` starts (an unreadable job, say)."""
    with suppress(OSError):
        deltas_dir.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(deltas_dir / FAILED_MARKER):
            DeltaWriter(deltas_dir, quota_bytes=1).failed(reason)
