"""The runner's stages: the untrusted edit stage between two trusted ones (submitted code never touches the
scores, and never sees the test set).

- **Prepare stage** (:func:`run_prepare_stage`, the project's image only): reads the dataset and writes
  what an editing method is entitled to, ``requests.json`` (:class:`knowgic.runner.job.EditRequests`: the distinct
  edit requests in order, and the mode that groups them), plus the key statistics its hparams name
  (:func:`key_statistics`), which the edit stage cannot compute because it holds no benchmark text.
- **Edit stage** (:func:`run_edit_stage`, in the submission's container, an image without the dataset):
  loads the model, imports the submission's editor, applies the requested edits in order (one distinct edit request at
  a time in ``independent`` mode, restoring after each; all of them in ``sequential`` mode) and writes what
  each changed as a delta (:mod:`knowgic.runner.deltas`). It computes no score. Adapter editors (peft LoRA) are
  taken as the merged weights W + s B A of the layers they adapt (:func:`knowgic.runner.deltas.folded_adapters`);
  any other change of the model's structure fails the job with its reason.
- **Score stage** (:func:`run_score_stage`, the project's image only): loads the pristine model and runs
  the existing :func:`knowgic.evaluation.evaluate.evaluate` with a :class:`ReplayEditor`, a trusted editor
  that applies each validated delta and restores the saved values. So the pre-edit scores, the post-edit
  scores, the metrics, intervals and the document are computed by the same code as ``knowgic evaluate``,
  and for an honest editor they are equal to its. Nothing the edit stage reports (timings, numbers) enters
  a score; its ``info`` per edit is kept as the editor's own diagnostics, as ``knowgic evaluate`` keeps it.

Both stages may run at once over one deltas folder: the edit stage waits while the folder is over its quota,
the score stage consumes deltas in plan order and deletes each once scored.

Command line (run by the containers)::

    python -m knowgic.runner.stages prepare --job JOB.json --out JOB_DIR [--stats STATS_DIR]
    python -m knowgic.runner.stages edit  --job JOB.json --requests REQUESTS.json --submission DIR --out DELTAS_DIR [--quota 2G]
    python -m knowgic.runner.stages score --job JOB.json --deltas DELTAS_DIR --out RESULTS_DIR [--timeout 3600]
                                  [--private-dataset DIR]

With ``--private-dataset`` (a private split, :mod:`knowgic.dataset.private`, mounted into the score stage
only) the score stage also scores the split's chains of the job's edits, into ``results.json``'s
``private`` object beside the public figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from knowgic.runner.deltas import (
    SEQUENTIAL_KEY,
    Delta,
    DeltaEdit,
    DeltaError,
    DeltaReader,
    DeltaWriter,
    apply_tensors,
    changed_tensors,
    folded_adapters,
    independent_key,
    model_spec,
)
from knowgic.runner.job import DONE_MARKER, FAILED_MARKER, REQUESTS_FILE, EditRequests, JobSpec, one_line

from knowgic.argtypes import parse_size, positive_seconds
from knowgic.editors.base import EditHandle, Editor
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest
from knowgic.scoring.logprob import check_prefix_fits

DEFAULT_QUOTA_BYTES = 2 << 30
DEFAULT_TIMEOUT_SECONDS = 3600.0
REPLAY_EDITOR = "knowgic.runner.stages:ReplayEditor"

if TYPE_CHECKING:
    from knowgic.models.base import LoadedModel


def resolved(spec: JobSpec) -> JobSpec:
    """``spec`` with the benchmark's default protocol and mode filled in where it names none."""
    if spec.protocol is not None and spec.mode is not None:
        return spec
    from knowgic.spec import benchmark_spec

    bench = benchmark_spec()
    return replace(
        spec, protocol=spec.protocol or bench.default_protocol, mode=spec.mode or bench.default_mode
    )


def evaluation_request(spec: JobSpec, editor: str | None = None) -> Any:
    """The :class:`EvaluationRequest` of a job (``editor`` replaces the job's entry point)."""
    from knowgic.evaluation.evaluate import EvaluationRequest

    spec = resolved(spec)
    return EvaluationRequest(
        model=spec.model,
        editor=editor or spec.editor,
        protocol=str(spec.protocol),
        protocol_overrides=dict(spec.protocol_params),
        mode=str(spec.mode),
        dataset_version=spec.dataset_version,
        limit=spec.limit,
        seed=spec.seed,
        dtype=spec.dtype,
        device=spec.device,
        use_cache=False,  # the score stage trusts no file it did not compute in this run
    )


# ------------------------------------------------------------------------------------------------------
# Prepare stage (trusted): what the edit stage may know
# ------------------------------------------------------------------------------------------------------


def edit_requests(spec: JobSpec) -> EditRequests:
    """The job's distinct edit requests in plan order, from the dataset (trusted side only)."""
    from knowgic.dataset.loading import dataset_ref, load_aliases, load_cases
    from knowgic.evaluation.plan import build_plan

    spec = resolved(spec)
    ref = dataset_ref(spec.dataset_version, config="chains")
    plan = build_plan(load_cases(ref.version), load_aliases(ref.version), limit=spec.limit)
    return EditRequests.of(str(spec.mode), ref.version, [edit.request for edit in plan.edits])


@dataclass(frozen=True)
class KeyStatistics:
    """The second moments a job's hparams name (the ROME/MEMIT/AlphaEdit conventions): C = E[k kᵀ] at the
    MLP output projection of each of ``layers``, over ``sample_count`` documents of ``corpus``."""

    layers: tuple[int, ...]
    corpus: str
    sample_count: int
    dtype: str
    batch_tokens: int


def key_statistics(hparams: dict[str, Any]) -> KeyStatistics | None:
    """What :func:`run_prepare_stage` computes for ``hparams``: None unless they name ``layers`` and a
    ``mom2_*`` setting with ``mom2_adjustment`` left on; missing settings take ROME's defaults."""
    from knowgic.editors.rome.hparams import ROMEHyperParams

    layers = hparams.get("layers")
    named = any(key.startswith("mom2_") for key in hparams)
    if not named or hparams.get("mom2_adjustment", True) is False or not isinstance(layers, list):
        return None
    if not layers or not all(isinstance(x, int) and not isinstance(x, bool) for x in layers):
        return None
    defaults = {f.name: f.default for f in fields(ROMEHyperParams)}

    def value(name: str, kind: type) -> Any:
        found = hparams.get(name, defaults[name])
        if not isinstance(found, kind) or isinstance(found, bool):
            raise KnowgicError(f"hparams {name}: expected {kind.__name__}, got {found!r}")
        return found

    return KeyStatistics(
        layers=tuple(layers),
        corpus=value("mom2_dataset", str),
        sample_count=value("mom2_n_samples", int),
        dtype=value("mom2_dtype", str),
        batch_tokens=value("mom2_batch_tokens", int),
    )


def run_prepare_stage(
    spec: JobSpec,
    job_dir: str | Path,
    stats_dir: str | Path | None = None,
    *,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    loaded: LoadedModel | None = None,
) -> EditRequests:
    """Write ``requests.json`` (the job's edit requests) into ``job_dir``, and into ``stats_dir`` the key
    statistics the hparams name (:func:`key_statistics`), unless already there. No submitted code runs
    here: the stage reads the dataset, which the edit stage never sees."""
    from knowgic.evaluation.evaluate import check_request

    spec = resolved(spec)
    check_request(evaluation_request(spec, editor=REPLAY_EDITOR))  # mode, protocol, dataset version
    requests = edit_requests(spec)
    needed = key_statistics(spec.hparams)
    if needed is not None and stats_dir is not None:
        from knowgic.editors.arch import arch_for
        from knowgic.editors.layer_stats import model_identity, model_revision, second_moments
        from knowgic.editors.rome.weights import resolve_layers
        from knowgic.models.loading import load_model

        if loaded is None:
            loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, progress=progress)
        model = loaded.model
        modules = [
            arch_for(model).mlp_out.format(layer) for layer in resolve_layers(model, needed.layers, "job")
        ]
        started = time.perf_counter()
        second_moments(
            model,
            loaded.tokenizer,
            modules,
            model_id=model_identity(model),
            model_revision=model_revision(model),
            corpus=needed.corpus,
            sample_count=needed.sample_count,
            dtype=needed.dtype,
            batch_tokens=needed.batch_tokens,
            progress=progress,
            root=Path(stats_dir),
        )
        if log is not None:
            log(
                f"prepare stage: key statistics of {', '.join(modules)} ({needed.corpus}, "
                f"{needed.sample_count} documents) ready in {time.perf_counter() - started:.1f} s"
            )
    path = requests.write(Path(job_dir) / REQUESTS_FILE)
    path.chmod(0o644)
    if log is not None:
        log(f"prepare stage: {len(requests.edits)} edit requests written")
    return requests


# ------------------------------------------------------------------------------------------------------
# Edit stage (untrusted)
# ------------------------------------------------------------------------------------------------------


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
    from knowgic.editors.registry import resolve_editor
    from knowgic.evaluation.evaluate import DTYPES
    from knowgic.evaluation.harness import MODES

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
    from tqdm.auto import tqdm

    from knowgic.editors.hparams import validate_hparams
    from knowgic.evaluation.evaluate import editor_method_name
    from knowgic.evaluation.fingerprint import assert_restored, fingerprint
    from knowgic.models.loading import load_model
    from knowgic.models.threads import cpu_threads

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
        if spec.mode == "independent":
            for index, (edit_id, edit) in enumerate(bar):
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
            editor.reset()
            handles: list[EditHandle] = []
            delta_edits: list[DeltaEdit] = []
            try:
                for index, (edit_id, edit) in enumerate(bar):
                    start = time.perf_counter()
                    handles.append(_apply_edit(editor, model, tokenizer, edit_id, edit))
                    seconds = time.perf_counter() - start
                    edit_seconds += seconds
                    delta_edits.append(
                        DeltaEdit(edit_id, handles[-1].prompt_prefix, dict(handles[-1].info), seconds)
                    )
                    if log is not None:
                        log(f"edit stage: edit {index + 1}/{len(edits)} ({edit_id}) applied")
                with folded_adapters(model) as merged:
                    tensors = changed_tensors(model, pristine)
            finally:
                for handle in reversed(handles):
                    handle.restore()
            assert_restored(model, pristine, editor.name)
            editor.reset()
            writer.write(SEQUENTIAL_KEY, spec.mode, delta_edits, tensors, merged)
    return EditStageSummary(
        deltas=writer.deltas,
        delta_bytes=writer.written_bytes,
        peak_folder_bytes=writer.peak_bytes,
        quota_waits=writer.waits,
        quota_wait_seconds=writer.wait_seconds,
        edit_seconds=edit_seconds,
        total_seconds=time.perf_counter() - started,
    )


# ------------------------------------------------------------------------------------------------------
# Score stage (trusted)
# ------------------------------------------------------------------------------------------------------


class ReplayEditor(Editor):
    """A trusted editor that replays the edit stage's deltas, in plan order.

    Independent mode: the i-th ``apply`` waits for ``edit-<i>-<edit_id>``, validates it (tensors and the
    claimed edit id), writes its tensors into the model and returns a handle whose restore writes the saved
    values back and deletes the delta. Sequential mode: the first ``apply`` loads the cumulative delta and
    applies it (the harness scores only after the last edit, so where the tensors go in is immaterial); each
    ``apply`` checks that the delta lists its edit id at its position and returns that edit's prefix.

    A prefix is bounded here by the model's context, in tokens (the sequential run's prefixes joined, as
    the harness scores them), before anything is scored with it: the limit is the model's, never a number
    the edit stage chose.
    """

    name: ClassVar[str] = "replay"

    def __init__(self, reader: DeltaReader, mode: str) -> None:
        super().__init__({})
        self.reader = reader
        self.mode = mode
        self._index = 0
        self._sequential: Delta | None = None

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        if len(requests) != 1:
            raise KnowgicError(f"replay applies one edit request at a time, got {len(requests)}")
        edit_id = requests[0].edit_id
        index, self._index = self._index, self._index + 1
        if self.mode == "independent":
            key = independent_key(index, edit_id)
            self.reader.wait_for(key)
            delta = self.reader.read(key, self.mode, expected_ids=[edit_id])
            check_prefix_fits(
                model,
                tokenizer,
                delta.edits[0].prompt_prefix,
                f"edit {index + 1} ({edit_id}): in-context prefix",
            )
            restore = apply_tensors(model, delta.tensors)
            delta.tensors = {}  # the model holds them now; the saved values are in ``restore``

            def restore_and_delete() -> None:
                restore()
                self.reader.remove(key)

            entry = delta.edits[0]
            return EditHandle(
                restore_fn=restore_and_delete, prompt_prefix=entry.prompt_prefix, info=entry.info
            )

        if index == 0:
            self.reader.wait_for(SEQUENTIAL_KEY)
            self._sequential = self.reader.read(SEQUENTIAL_KEY, self.mode, expected_ids=None)
            joined = "".join(entry.prompt_prefix for entry in self._sequential.edits)
            check_prefix_fits(model, tokenizer, joined, "the sequential edits' in-context prefix")
        delta = self._sequential
        if delta is None or index >= len(delta.edits) or delta.edits[index].edit_id != edit_id:
            claimed = (
                delta.edits[index].edit_id if delta is not None and index < len(delta.edits) else "nothing"
            )
            raise DeltaError(
                f"delta {SEQUENTIAL_KEY}.json lists {claimed} as edit {index + 1}, the plan's is {edit_id}"
            )
        entry = delta.edits[index]
        restore_fn = None
        if index == 0:
            restore = apply_tensors(model, delta.tensors)
            delta.tensors = {}

            def restore_fn() -> None:
                restore()
                self.reader.remove(SEQUENTIAL_KEY)

        return EditHandle(restore_fn=restore_fn, prompt_prefix=entry.prompt_prefix, info=entry.info)

    def check_complete(self) -> None:
        """After the run: a sequential delta must not claim edits beyond the plan's."""
        delta = self._sequential
        if self.mode == "sequential" and delta is not None and len(delta.edits) != self._index:
            raise DeltaError(
                f"delta {SEQUENTIAL_KEY}.json lists {len(delta.edits)} edits, the plan has {self._index}"
            )


def _editor_class_name(editor: str) -> str:
    from knowgic.editors.registry import BUILTIN_EDITORS

    return BUILTIN_EDITORS.get(editor, editor)


def run_score_stage(
    spec: JobSpec,
    deltas_dir: str | Path,
    out_dir: str | Path,
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    poll_seconds: float = 0.05,
    max_delta_bytes: int | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    loaded: LoadedModel | None = None,
    plots: bool = True,
    overwrite: bool = False,
    private_dataset: str | Path | None = None,
) -> Path:
    """Score the edit stage's deltas on the pristine model and write ``results.json`` into ``out_dir``.

    Returns the path of results.json. Raises :class:`DeltaError` (the job's reason) when a delta is invalid,
    the edit stage failed or wrote nothing in ``timeout_seconds``. ``loaded`` reuses an already loaded
    model (tests); it is left as it was found. A run already in ``out_dir`` is refused before any work
    unless ``overwrite``. ``private_dataset``: a private split folder, checked before the model loads and
    scored beside the public chains.
    """
    from knowgic.editors.hparams import hparams_sha256
    from knowgic.evaluation.evaluate import evaluate
    from knowgic.evaluation.results import check_no_run, check_writable, finalize, write_run_outputs
    from knowgic.models.loading import load_model

    started = time.perf_counter()
    deltas_dir, out_dir = Path(deltas_dir), Path(out_dir)
    if not deltas_dir.is_dir():
        raise KnowgicError(f"deltas folder {deltas_dir} does not exist")
    check_writable(out_dir)
    check_no_run(out_dir, overwrite)
    spec = resolved(spec)
    request = evaluation_request(spec, editor=REPLAY_EDITOR)
    from knowgic.evaluation.evaluate import check_request

    check_request(request)  # bad job arguments fail before the model loads
    private = None
    if private_dataset is not None:
        from knowgic.dataset.loading import dataset_ref, load_cases
        from knowgic.dataset.private import read_private_split

        private = read_private_split(private_dataset)
        public = dataset_ref(spec.dataset_version)
        private.check_edits(load_cases(public.version), public.version)
    if loaded is None:
        loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, progress=progress)
    reader = DeltaReader(
        deltas_dir,
        model_spec(loaded.model),
        timeout_seconds=timeout_seconds,
        poll_seconds=poll_seconds,
        max_tensor_bytes=max_delta_bytes,
    )
    replay = ReplayEditor(reader, str(spec.mode))
    run = evaluate(request, progress=progress, loaded=loaded, log=log, editor=replay, private=private)
    replay.check_complete()
    reader.wait_done()

    document = run.document
    hparams = dict(spec.hparams)
    document["config"].update(
        {
            "editor": spec.editor,
            "editor_class": _editor_class_name(spec.editor),
            "hparams": hparams,
            "hparams_source": None,
            "hparams_sha256": hparams_sha256(hparams),
        }
    )
    # A replayed edit's seconds would be the copy of its tensors, not the editor's work, which no trusted
    # code observes per edit: left unknown rather than reported as something else.
    for record in [*document["per_edit"], *document.get("private", {}).get("per_edit", [])]:
        record["seconds"] = None
    document["submission"] = {
        "name": spec.submission_name or spec.editor,
        "version": spec.submission_version or None,
        "sha256": spec.submission_sha256 or None,
        "editor": spec.editor,
        "hparams_sha256": hparams_sha256(hparams),
    }
    document["runner"] = {
        "stages": "edit/score",
        "deltas": reader.deltas_read,
        "delta_bytes": reader.bytes_read,
        "score_wait_seconds": reader.wait_seconds,
        "score_stage_seconds": time.perf_counter() - started,
        # Adapter-based edits arrive folded into their base weights (W + s B A): scored as merged weights,
        # equal to the adapter's own forward up to floating-point rounding.
        "adapters_merged": reader.merged_adapter_deltas > 0,
        "adapters_merged_deltas": reader.merged_adapter_deltas,
        "adapters_merged_modules": sorted(reader.merged_adapter_modules),
    }
    document.pop("sha256", None)
    finalize(document)

    write_extras = None
    if plots:
        from knowgic.evaluation.plots import write_plots

        def write_extras(folder: Path) -> list[Path]:
            return write_plots(document, folder)

    results_path, _ = write_run_outputs(document, out_dir, write_extras, overwrite=overwrite)
    return results_path


# ------------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: one line, exit 2
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m knowgic.runner.stages",
        description="The runner's stages: 'prepare' (trusted) writes the edit requests and the key "
        "statistics the edit stage may read; 'edit' runs a submission's editor and writes what each edit "
        "changed; 'score' (trusted, no submission code) applies those deltas to the pristine model and "
        "writes results.json.",
    )
    sub = parser.add_subparsers(dest="stage", metavar="STAGE", parser_class=_Parser)
    sub.required = True
    prepare = sub.add_parser(
        "prepare", help="write requests.json and the key statistics for the edit stage (trusted)"
    )
    prepare.add_argument("--job", required=True, help="JOB.json (knowgic.runner.job.JobSpec)")
    prepare.add_argument("--out", required=True, help="folder that receives requests.json")
    prepare.add_argument("--stats", default=None, help="folder of key statistics (computed when missing)")
    edit = sub.add_parser("edit", help="run the submission's editor; write deltas (untrusted stage)")
    edit.add_argument("--job", required=True, help="JOB.json (knowgic.runner.job.JobSpec)")
    edit.add_argument("--requests", required=True, help="requests.json of the prepare stage")
    edit.add_argument("--submission", default=None, help="the submission's folder (put first on sys.path)")
    edit.add_argument("--out", required=True, help="deltas folder (created when missing)")
    edit.add_argument(
        "--quota",
        type=parse_size,
        default=DEFAULT_QUOTA_BYTES,
        help="wait while the deltas folder holds more than this (bytes, or 512M, 2G; default 2G)",
    )
    score = sub.add_parser(
        "score", help="score the deltas on the pristine model; write results.json (trusted)"
    )
    score.add_argument("--job", required=True, help="JOB.json (knowgic.runner.job.JobSpec)")
    score.add_argument("--deltas", required=True, help="the edit stage's deltas folder")
    score.add_argument("--out", required=True, help="output folder for results.json and plots")
    score.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_SECONDS,
        help="seconds to wait for each delta of the edit stage (default 3600)",
    )
    score.add_argument(
        "--private-dataset",
        default=None,
        metavar="DIR",
        help="a private split (dataset folder, same schemas) to score beside the public chains",
    )
    score.add_argument("--no-plots", action="store_true", help="write results.json only")
    score.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    return parser


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a stopped container's stage still writes its ``failed`` marker


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _run_stage(args)
    previous = signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    try:
        return _run_stage(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_stage(args: argparse.Namespace) -> int:
    interactive = sys.stderr.isatty()
    log = None if interactive else _stderr_log
    try:
        if args.stage == "prepare":
            spec = JobSpec.read(args.job)
            requests = run_prepare_stage(spec, args.out, args.stats, progress=interactive, log=log)
            print(f"{len(requests.edits)} edit requests")
        elif args.stage == "edit":
            try:
                spec = JobSpec.read(args.job)
                requests = EditRequests.read(args.requests)
                if args.submission is not None and not Path(args.submission).is_dir():
                    raise KnowgicError(f"submission folder {args.submission} does not exist")
            except KnowgicError as exc:  # the score stage, waiting on the folder, must learn it too
                _mark_failed(Path(args.out), str(exc))
                raise
            summary = run_edit_stage(
                spec, requests, args.submission, args.out, args.quota, progress=interactive, log=log
            )
            print(json.dumps(asdict(summary)))
        else:
            spec = JobSpec.read(args.job)
            path = run_score_stage(
                spec,
                args.deltas,
                args.out,
                timeout_seconds=args.timeout,
                progress=interactive,
                log=log,
                plots=not args.no_plots,
                overwrite=args.overwrite,
                private_dataset=args.private_dataset,
            )
            print(path)
    except KnowgicError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def _mark_failed(deltas_dir: Path, reason: str) -> None:
    with suppress(OSError):
        deltas_dir.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(deltas_dir / FAILED_MARKER):
            DeltaWriter(deltas_dir, quota_bytes=1).failed(reason)


def _main_entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _main_entry()
