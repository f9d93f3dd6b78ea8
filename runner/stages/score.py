"""The score stage (trusted; the project's image, no submission code): the scores of a job.

:func:`run_score_stage` loads the pristine model and runs the existing
:func:`knowgic.evaluation.evaluate.evaluate` with a :class:`ReplayEditor`, a trusted editor that applies
each validated delta of the edit stage and restores the saved values. So the pre-edit scores, the
post-edit scores, the metrics, intervals and the document are computed by the same code as ``knowgic
evaluate``, and for an honest editor they are equal to its. Nothing the edit stage reports (timings,
numbers) enters a score; its ``info`` per edit is kept as the editor's own diagnostics, as ``knowgic
evaluate`` keeps it.

With a private split (:mod:`knowgic.dataset.private`, mounted into the score stage only) the stage also
scores the split's chains of the job's edits, into ``results.json``'s ``private`` object beside the public
figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from knowgic.dataset.loading import dataset_ref, load_cases
from knowgic.dataset.private import read_private_split
from knowgic.editors.base import EditHandle, Editor
from knowgic.editors.hparams import hparams_sha256
from knowgic.editors.registry import BUILTIN_EDITORS
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import Provenance, check_request, evaluate
from knowgic.evaluation.outputs import check_no_run, check_writable, write_run_outputs
from knowgic.evaluation.plots import write_plots
from knowgic.models.loading import load_model
from knowgic.records import EditRequest
from knowgic.runner.stages.contract import JobSpec
from knowgic.runner.stages.deltas import (
    Delta,
    DeltaError,
    DeltaReader,
    apply_tensors,
    independent_key,
    model_spec,
    sequential_key,
)
from knowgic.runner.stages.resolve import REPLAY_EDITOR, evaluation_request, resolved
from knowgic.scoring.logprob import check_prefix_fits

if TYPE_CHECKING:
    from knowgic.models.base import LoadedModel

DEFAULT_TIMEOUT_SECONDS = 3600.0


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

    One replay editor per group of the edit requests (:class:`EditRequests`): ``group`` is its number (the
    key of its sequential delta); ``after``, the previous group's replay editor, whose edits come first
    (independent keys count on across groups).
    """

    name: ClassVar[str] = "replay"

    def __init__(
        self, reader: DeltaReader, mode: str, group: int = 0, after: ReplayEditor | None = None
    ) -> None:
        super().__init__({})
        self.reader = reader
        self.mode = mode
        self.after = after
        self.key = sequential_key(group)
        self._index = 0
        self._sequential: Delta | None = None

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        if len(requests) != 1:
            raise KnowgicError(f"replay applies one edit request at a time, got {len(requests)}")
        edit_id = requests[0].edit_id
        index, self._index = self._index, self._index + 1
        if self.mode == "independent":
            first = self.first
            key = independent_key(first + index, edit_id)
            self.reader.wait_for(key)
            delta = self.reader.read(key, self.mode, expected_ids=[edit_id])
            check_prefix_fits(
                model,
                tokenizer,
                delta.edits[0].prompt_prefix,
                f"edit {first + index + 1} ({edit_id}): in-context prefix",
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
            self.reader.wait_for(self.key)
            self._sequential = self.reader.read(self.key, self.mode, expected_ids=None)
            joined = "".join(entry.prompt_prefix for entry in self._sequential.edits)
            check_prefix_fits(model, tokenizer, joined, "the sequential edits' in-context prefix")
        delta = self._sequential
        if delta is None or index >= len(delta.edits) or delta.edits[index].edit_id != edit_id:
            claimed = (
                delta.edits[index].edit_id if delta is not None and index < len(delta.edits) else "nothing"
            )
            raise DeltaError(
                f"delta {self.key}.json lists {claimed} as edit {index + 1}, the plan's is {edit_id}"
            )
        entry = delta.edits[index]
        restore_fn = None
        if index == 0:
            restore = apply_tensors(model, delta.tensors)
            delta.tensors = {}
            key = self.key

            def restore_fn() -> None:
                restore()
                self.reader.remove(key)

        return EditHandle(restore_fn=restore_fn, prompt_prefix=entry.prompt_prefix, info=entry.info)

    @property
    def first(self) -> int:
        """This group's first position: the edits every earlier group replayed."""
        return 0 if self.after is None else self.after.first + self.after.replayed

    @property
    def replayed(self) -> int:
        return self._index

    def check_complete(self) -> None:
        """After the run: a sequential delta must not claim edits beyond the plan's."""
        delta = self._sequential
        if self.mode == "sequential" and delta is not None and len(delta.edits) != self._index:
            raise DeltaError(
                f"delta {self.key}.json lists {len(delta.edits)} edits, the plan has {self._index}"
            )


def _editor_class_name(editor: str) -> str:
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
    started = time.perf_counter()
    deltas_dir, out_dir = Path(deltas_dir), Path(out_dir)
    if not deltas_dir.is_dir():
        raise KnowgicError(f"deltas folder {deltas_dir} does not exist")
    check_writable(out_dir)
    check_no_run(out_dir, overwrite)
    spec = resolved(spec)
    request = evaluation_request(spec, editor=REPLAY_EDITOR)
    check_request(request)  # bad job arguments fail before the model loads
    private = None
    if private_dataset is not None:
        private = read_private_split(private_dataset)
        public = dataset_ref(spec.dataset_version)
        problem = private.problem_for(spec.model, public.version)
        if problem is not None:
            raise KnowgicError(f"{private.describe()} does not apply to this job: {problem}")
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
    # The private split's edits: the second group of the edit requests, replayed after the public ones.
    private_replay = ReplayEditor(reader, str(spec.mode), group=1, after=replay) if private else None
    hparams = dict(spec.hparams)

    def provenance() -> Provenance:
        """Once every delta is replayed: what the document records of the submission and this stage."""
        replay.check_complete()
        if private_replay is not None:
            private_replay.check_complete()
        reader.wait_done()
        return Provenance(
            editor=spec.editor,
            editor_class=_editor_class_name(spec.editor),
            hparams=hparams,
            submission={
                "name": spec.submission_name or spec.editor,
                "version": spec.submission_version or None,
                "sha256": spec.submission_sha256 or None,
                "editor": spec.editor,
                "hparams_sha256": hparams_sha256(hparams),
            },
            runner={
                "stages": "edit/score",
                "deltas": reader.deltas_read,
                "delta_bytes": reader.bytes_read,
                "score_wait_seconds": reader.wait_seconds,
                "score_stage_seconds": time.perf_counter() - started,
                # Adapter-based edits arrive folded into their base weights (W + s B A): scored as merged
                # weights, equal to the adapter's own forward up to floating-point rounding.
                "adapters_merged": reader.merged_adapter_deltas > 0,
                "adapters_merged_deltas": reader.merged_adapter_deltas,
                "adapters_merged_modules": sorted(reader.merged_adapter_modules),
            },
            # A replayed edit's seconds would be the copy of its tensors, not the editor's work, which no
            # trusted code observes per edit: left unknown rather than reported as something else.
            edit_seconds_observed=False,
        )

    run = evaluate(
        request,
        progress=progress,
        loaded=loaded,
        log=log,
        editor=replay,
        private=private,
        provenance=provenance,
        private_editor=private_replay,
    )
    document = run.document  # built once with the fields above, and hashed: never patched here

    write_extras = None
    if plots:

        def write_extras(folder: Path) -> list[Path]:
            return write_plots(document, folder)

    results_path, _ = write_run_outputs(document, out_dir, write_extras, overwrite=overwrite)
    return results_path
