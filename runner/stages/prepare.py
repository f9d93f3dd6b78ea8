"""The prepare stage (trusted; the project's image, with the dataset): what the edit stage may know.

:func:`run_prepare_stage` reads the dataset and writes ``requests.json``
(:class:`knowgic.runner.stages.contract.EditRequests`: the distinct edit requests in order, and the mode
that groups them), plus the key statistics the job's hparams name (:func:`key_statistics`), which the
edit stage cannot compute because it holds no benchmark text. No submitted code runs here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from knowgic.dataset.loading import dataset_ref, load_aliases, load_cases
from knowgic.dataset.private import PrivateSplit, read_private_split
from knowgic.editors.key_statistics import compute_key_statistics, key_statistics
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import check_request
from knowgic.evaluation.plan import build_plan
from knowgic.evaluation.private import private_plan
from knowgic.models.loading import load_model
from knowgic.runner.stages.contract import REQUESTS_FILE, EditRequests, JobSpec
from knowgic.runner.stages.resolve import REPLAY_EDITOR, evaluation_request, resolved

if TYPE_CHECKING:
    from knowgic.models.base import LoadedModel


def edit_requests(spec: JobSpec, private: PrivateSplit | None = None) -> EditRequests:
    """The job's distinct edit requests in plan order, from the dataset (trusted side only); with a private
    split, its edit requests follow as a second group, in the order the score stage replays them."""
    spec = resolved(spec)
    ref = dataset_ref(spec.dataset_version, config="chains")
    cases = load_cases(ref.version)
    plan = build_plan(cases, load_aliases(ref.version), limit=spec.limit)
    public = [edit.request for edit in plan.edits]
    if private is None:
        return EditRequests.of(str(spec.mode), ref.version, public)
    problem = private.problem_for(spec.model, ref.version)
    if problem is not None:
        raise KnowgicError(f"{private.describe()} does not apply to this job: {problem}")
    second, _ = private_plan(private, cases, ref.version, plan)
    return EditRequests.of(str(spec.mode), ref.version, public, [edit.request for edit in second.edits])


def run_prepare_stage(
    spec: JobSpec,
    job_dir: str | Path,
    stats_dir: str | Path | None = None,
    *,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    loaded: LoadedModel | None = None,
    private_dataset: str | Path | None = None,
) -> EditRequests:
    """Write ``requests.json`` (the job's edit requests) into ``job_dir``, and into ``stats_dir`` the key
    statistics the hparams name (:func:`key_statistics`), unless already there. No submitted code runs
    here: the stage reads the dataset, which the edit stage never sees. ``private_dataset``: a private
    split folder, whose edit requests (never its chains) are appended as a second group."""
    spec = resolved(spec)
    check_request(evaluation_request(spec, editor=REPLAY_EDITOR))  # mode, protocol, dataset version
    private = read_private_split(private_dataset) if private_dataset is not None else None
    requests = edit_requests(spec, private)
    needed = key_statistics(spec.hparams)
    if needed is not None and stats_dir is not None:
        if loaded is None:
            loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, progress=progress)
        started = time.perf_counter()
        modules = compute_key_statistics(
            loaded.model, loaded.tokenizer, needed, Path(stats_dir), progress=progress
        )
        if log is not None:
            log(
                f"prepare stage: key statistics of {', '.join(modules)} ({needed.corpus}, "
                f"{needed.sample_count} documents) ready in {time.perf_counter() - started:.1f} s"
            )
    path = requests.write(Path(job_dir) / REQUESTS_FILE)
    path.chmod(0o644)
    if log is not None:
        groups = " + ".join(str(size) for size in requests.group_sizes())
        log(f"prepare stage: {len(requests.edits)} edit requests written ({groups})")
    return requests
