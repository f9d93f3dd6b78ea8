"""The runner's two stages: the untrusted edit stage and the trusted score stage (issue: submitted code never
touches the scores).

- **Edit stage** (:func:`run_edit_stage`, in the submission's container): loads the model, imports the
  submission's editor, applies the benchmark's edits in the harness's order (one distinct edit request at
  a time in ``independent`` mode, restoring after each; all of them in ``sequential`` mode) and writes what
  each changed as a delta (:mod:`runner.deltas`). It computes no score. Adapter editors (peft LoRA) are
  taken as the merged weights W + s B A of the layers they adapt (:func:`runner.deltas.folded_adapters`);
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

    python -m runner.stages edit  --job JOB.json --submission DIR --out DELTAS_DIR [--quota 2G]
    python -m runner.stages score --job JOB.json --deltas DELTAS_DIR --out RESULTS_DIR [--timeout 3600]
                                  [--private-dataset DIR]

With ``--private-dataset`` (a private split, :mod:`knowgic.dataset.private`, mounted into the score stage
only) the score stage also scores the split's chains of the job's edits, into ``results.json``'s
``private`` object beside the public figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import jsonschema
import torch

from knowgic.argtypes import positive_seconds
from knowgic.editors.base import EditHandle, Editor
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest
from knowgic.scoring.logprob import check_prefix_fits
from runner.deltas import (
    DONE_MARKER,
    FAILED_MARKER,
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
    one_line,
)

DEFAULT_QUOTA_BYTES = 2 << 30
DEFAULT_TIMEOUT_SECONDS = 3600.0
REPLAY_EDITOR = "runner.stages:ReplayEditor"

if TYPE_CHECKING:
    from knowgic.models.base import LoadedModel

JOB_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Runner job: what both stages run",
    "type": "object",
    "additionalProperties": False,
    "required": ["model", "editor"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "editor": {"type": "string", "minLength": 1, "description": "module:Class, or a built-in name"},
        "hparams": {"type": "object"},
        "protocol": {"type": "string", "minLength": 1},
        "protocol_params": {"type": "object"},
        "mode": {"type": "string", "minLength": 1},
        "dataset_version": {"type": ["string", "null"]},
        "limit": {"type": ["integer", "null"], "minimum": 1},
        "seed": {"type": "integer"},
        "dtype": {"type": "string"},
        "device": {"type": "string", "minLength": 1},
        "submission_name": {"type": "string"},
        "submission_version": {"type": "string"},
        "submission_sha256": {"type": "string", "pattern": "^([0-9a-f]{64})?$"},
    },
}


def _default_protocol() -> str:
    from knowgic.evaluation.spec import load_evaluation_spec

    return load_evaluation_spec().default_protocol


def _default_mode() -> str:
    from knowgic.evaluation.spec import load_evaluation_spec

    return load_evaluation_spec().default_mode


@dataclass(frozen=True)
class JobSpec:
    """One job as both stages see it (``JOB.json``): what ``knowgic evaluate`` takes, plus the submission.

    ``editor`` is the submission's entry point ``module:Class`` (or a built-in name); ``hparams`` are the
    hyper-parameters for ``model``, already read from the manifest.
    """

    model: str
    editor: str
    hparams: dict[str, Any] = field(default_factory=dict)
    protocol: str = field(default_factory=_default_protocol)
    protocol_params: dict[str, Any] = field(default_factory=dict)
    mode: str = field(default_factory=_default_mode)
    dataset_version: str | None = None
    limit: int | None = None
    seed: int = 0
    dtype: str = "float32"
    device: str = "auto"
    submission_name: str = ""
    submission_version: str = ""
    submission_sha256: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, where: str = "job") -> JobSpec:
        """Parse and validate a job document; raise one line naming the problem and ``where``."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise KnowgicError(f"{where} is not valid JSON: {exc}") from None
        errors = sorted(
            jsonschema.Draft202012Validator(JOB_SCHEMA).iter_errors(data), key=lambda e: list(e.absolute_path)
        )
        if errors:
            first = errors[0]
            pointer = "/" + "/".join(str(p) for p in first.absolute_path)
            raise KnowgicError(f"{where} at {pointer}: {one_line(first.message, 300)}")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls, path: str | Path) -> JobSpec:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KnowgicError(f"job file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KnowgicError(f"cannot read job file {path}: {exc}") from None
        return cls.from_json(text, where=f"job file {path}")

    def request(self, editor: str | None = None) -> Any:
        """The :class:`EvaluationRequest` of this job (``editor`` replaces the job's entry point)."""
        from knowgic.evaluation.evaluate import EvaluationRequest

        return EvaluationRequest(
            model=self.model,
            editor=editor or self.editor,
            protocol=self.protocol,
            protocol_overrides=dict(self.protocol_params),
            mode=self.mode,
            dataset_version=self.dataset_version,
            limit=self.limit,
            seed=self.seed,
            dtype=self.dtype,
            device=self.device,
            use_cache=False,  # the score stage trusts no file it did not compute in this run
        )


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


def _apply_edit(editor: Editor, model: torch.nn.Module, tokenizer: Any, edit: Any) -> EditHandle:
    """``editor.apply`` on one plan edit, with the harness's one-line errors."""
    try:
        handle = editor.apply(model, tokenizer, [edit.request])
    except KnowgicError:
        raise
    except Exception as exc:
        raise KnowgicError(
            f"editor {editor.name!r} failed on edit {edit.edit_id} "
            f"({edit.request.rewrite_text!r} -> {edit.request.target_new!r}): {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(handle, EditHandle):
        raise KnowgicError(
            f"editor {editor.name!r}.apply returned {type(handle).__name__}, expected knowgic.editors.EditHandle"
        )
    return handle


def run_edit_stage(
    spec: JobSpec,
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
    """Apply the job's edits with the submission's editor and write one delta per edit (or one cumulative
    delta in sequential mode) into ``deltas_dir``, then ``done``; on any error write ``failed`` with the
    reason and raise it. ``loaded`` reuses an already loaded model (tests); it is left as it was found."""
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
            summary = _edit_stage(spec, writer, progress=progress, log=log, loaded=loaded)
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


def _edit_stage(
    spec: JobSpec,
    writer: DeltaWriter,
    *,
    progress: bool,
    log: Callable[[str], None] | None,
    loaded: LoadedModel | None,
) -> EditStageSummary:
    from tqdm.auto import tqdm

    from knowgic.dataset.loading import dataset_ref, load_aliases, load_cases
    from knowgic.editors.hparams import validate_hparams
    from knowgic.evaluation.evaluate import check_request, editor_method_name
    from knowgic.evaluation.fingerprint import assert_restored, fingerprint
    from knowgic.evaluation.plan import build_plan
    from knowgic.models.loading import load_model
    from knowgic.models.threads import cpu_threads

    started = time.perf_counter()
    request = spec.request()
    editor_cls = check_request(request)  # mode, dtype, limit, protocol, dataset version, editor import
    validate_hparams(
        spec.hparams, editor_method_name(spec.editor, editor_cls), "of the job", editor_cls.hparams_schema
    )
    ref = dataset_ref(spec.dataset_version, config="chains")
    plan = build_plan(load_cases(ref.version), load_aliases(ref.version), limit=spec.limit)
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
        bar = tqdm(
            plan.edits, desc=f"{editor.name} ({spec.mode}, edit stage)", unit="edit", disable=not progress
        )
        if spec.mode == "independent":
            for index, edit in enumerate(bar):
                editor.reset()
                start = time.perf_counter()
                handle = _apply_edit(editor, model, tokenizer, edit)
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
                delta_edit = DeltaEdit(edit.edit_id, handle.prompt_prefix, dict(handle.info), applied)
                writer.write(independent_key(index, edit.edit_id), spec.mode, [delta_edit], tensors, merged)
                if log is not None:
                    log(f"edit stage: edit {index + 1}/{len(plan.edits)} ({edit.edit_id}) written")
            editor.reset()
        else:
            editor.reset()
            handles: list[EditHandle] = []
            delta_edits: list[DeltaEdit] = []
            try:
                for index, edit in enumerate(bar):
                    start = time.perf_counter()
                    handles.append(_apply_edit(editor, model, tokenizer, edit))
                    seconds = time.perf_counter() - start
                    edit_seconds += seconds
                    delta_edits.append(
                        DeltaEdit(edit.edit_id, handles[-1].prompt_prefix, dict(handles[-1].info), seconds)
                    )
                    if log is not None:
                        log(f"edit stage: edit {index + 1}/{len(plan.edits)} ({edit.edit_id}) applied")
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
    request = spec.request(editor=REPLAY_EDITOR)
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
    replay = ReplayEditor(reader, spec.mode)
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

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"512M"``, ``"2G"``, ``"1048576"`` -> bytes (binary units)."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 1048576, 512M, 2G)")
    number, unit = float(match.group(1)), match.group(2).lower()
    value = int(number * (1 << (10 * " kmgt".index(unit or " "))))
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: one line, exit 2
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m runner.stages",
        description="The runner's two stages: 'edit' runs a submission's editor and writes what each edit "
        "changed; 'score' (trusted, no submission code) applies those deltas to the pristine model and "
        "writes results.json.",
    )
    sub = parser.add_subparsers(dest="stage", metavar="STAGE", parser_class=_Parser)
    sub.required = True
    edit = sub.add_parser("edit", help="run the submission's editor; write deltas (untrusted stage)")
    edit.add_argument("--job", required=True, help="JOB.json (runner.stages.JobSpec)")
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
    score.add_argument("--job", required=True, help="JOB.json (runner.stages.JobSpec)")
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
        if args.stage == "edit":
            try:
                spec = JobSpec.read(args.job)
                if args.submission is not None and not Path(args.submission).is_dir():
                    raise KnowgicError(f"submission folder {args.submission} does not exist")
            except KnowgicError as exc:  # the score stage, waiting on the folder, must learn it too
                _mark_failed(Path(args.out), str(exc))
                raise
            summary = run_edit_stage(
                spec, args.submission, args.out, args.quota, progress=interactive, log=log
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
