"""``evaluate``: one (model, editor, protocol, mode, dataset version) run, end to end.

Stages, each its own module: checks (:mod:`knowgic.evaluation.preflight`) -> dataset -> plan -> model ->
scorer (pre-edit, cached) -> harness (edits) -> outcomes/metrics -> results document. All arguments are
checked before the model is loaded, so a typo fails in a second with a one-line error instead of after
minutes of work.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import knowgic
from knowgic.dataset.folder import open_dataset
from knowgic.dataset.private import PrivateSplit
from knowgic.editors.base import Editor
from knowgic.editors.hparams import hparams_sha256, load_hparams
from knowgic.editors.layer_stats import stats_overrides
from knowgic.errors import KnowgicError
from knowgic.evaluation.harness import RippleScoring, RunScores, run_edits
from knowgic.evaluation.outputs import environment, write_run_outputs
from knowgic.evaluation.plan import EvalPlan, build_plan
from knowgic.evaluation.preflight import DTYPES as DTYPES  # the runner's stages read it here
from knowgic.evaluation.preflight import check_request, editor_method_name, hparams_required
from knowgic.evaluation.private import private_document, private_plan
from knowgic.evaluation.reproducibility import reproducibility
from knowgic.evaluation.scored import scored_block
from knowgic.models.base import LoadedModel
from knowgic.models.loading import load_model
from knowgic.models.threads import cpu_threads
from knowgic.results import RESULTS_SCHEMA_VERSION, finalize
from knowgic.scoring import make_scorer
from knowgic.scoring.base import Query, Scorer, Scores
from knowgic.scoring.cache import ScoreCache, queries_sha256
from knowgic.scoring.continuation import ContinuationScorer
from knowgic.spec import benchmark_spec


@dataclass
class EvaluationRequest:
    model: str
    editor: str
    hparams_path: str | None = None
    protocol: str = field(default_factory=lambda: benchmark_spec().default_protocol)
    protocol_overrides: dict[str, Any] = field(default_factory=dict)
    mode: str = field(default_factory=lambda: benchmark_spec().default_mode)
    # A version name shipped with the package (None: the latest) or a dataset folder's path.
    dataset_version: str | None = None
    limit: int | None = None
    seed: int = 0
    dtype: str = "float32"
    device: str = "auto"
    out_dir: Path | None = None
    # Replace a run already in out_dir (else the request is refused before any work).
    overwrite: bool = False
    use_cache: bool = True
    # Corpus and sample count of the key statistics (editors with uses_key_statistics): they replace the
    # hparams' mom2_dataset and mom2_n_samples; None keeps the hparams' values.
    stats_corpus: str | None = None
    stats_samples: int | None = None


@dataclass(frozen=True)
class Provenance:
    """What a run's document records of the runner that made it: the submitted editor (name, class, hparams)
    in place of the replaying one, whether the per-edit seconds were observed by trusted code, and the
    document's ``submission`` and ``runner`` objects (``spec/schemas/results.schema.json``)."""

    editor: str
    editor_class: str
    hparams: dict[str, Any]
    submission: dict[str, Any]
    runner: dict[str, Any]
    edit_seconds_observed: bool = False


@dataclass
class EvaluationRun:
    """Everything a run produced: the results document plus the in-memory pieces (for plots and tests)."""

    document: dict[str, Any]
    plan: EvalPlan
    scores: RunScores
    results_path: Path | None = None
    plot_paths: list[Path] = field(default_factory=list)


def make_editor(
    request: EvaluationRequest, editor_cls: type[Editor], loaded: LoadedModel
) -> tuple[Editor, dict[str, Any], str | None]:
    hparams, source = editor_hparams(request, editor_cls, loaded.model_id, loaded.family)
    try:
        editor = editor_cls(hparams)
    except KnowgicError:
        raise
    except Exception as exc:
        raise KnowgicError(
            f"editor {request.editor!r} rejected its hparams: {type(exc).__name__}: {exc}"
        ) from exc
    return editor, hparams, source


def editor_hparams(
    request: EvaluationRequest, editor_cls: type[Editor], model_id: str, family: str | None
) -> tuple[dict[str, Any], str | None]:
    """The hparams ``request``'s editor runs with on the model ``model_id`` of ``family`` (what
    results.json records), and their source; nothing is loaded."""
    method = editor_method_name(request.editor, editor_cls)
    hparams, source = load_hparams(
        method,
        model_id,
        family,
        path=request.hparams_path,
        editor_schema=editor_cls.hparams_schema,
        required=hparams_required(request.editor, editor_cls),
    )
    overrides = stats_overrides(request.stats_corpus, request.stats_samples)
    if overrides:
        if hparams.get("mom2_adjustment") is False:
            raise KnowgicError(
                f"--stats-corpus/--stats-samples: the hparams of editor {request.editor!r} "
                f"({source or 'defaults'}) set mom2_adjustment: false, so no key statistics are collected"
            )
        hparams = {**hparams, **overrides}  # recorded in results.json as the hparams the run used
    return hparams, source


def pre_edit_scores(
    scorer: Scorer,
    loaded: LoadedModel,
    plan: EvalPlan,
    dataset_sha256: str,
    use_cache: bool,
) -> tuple[Scores, bool, float]:
    """The unedited model's scores of every plan query, from the on-disk cache when present."""
    return _cached_scores(scorer, loaded, plan.queries, dataset_sha256, use_cache)


def ripple_pre_scores(
    scorer: Scorer,
    continuation: Scorer,
    loaded: LoadedModel,
    plan: EvalPlan,
    dataset_sha256: str,
    use_cache: bool,
) -> tuple[Scores, bool, float]:
    """The unedited model's scores of the plan's ripple condition facts (from the on-disk cache when
    present), as scores of every ripple query: the others are left unscored (p 0, not known).

    A condition fact is known when the run's protocol knows it *and* its greedy continuation names the
    answer (RippleEdits' own test, ``continuation``): a test is kept only where the unedited model passes
    the very check its accuracy applies after the edit, so an editor that changes nothing keeps every
    Preservation and Relation Specificity test, under either form."""
    conditions = [plan.ripple_queries[i] for i in plan.ripple_conditions]
    scores, cached, seconds = _cached_scores(scorer, loaded, conditions, dataset_sha256, use_cache)
    greedy, greedy_cached, greedy_seconds = _cached_scores(
        continuation, loaded, conditions, dataset_sha256, use_cache
    )
    p = np.zeros(len(plan.ripple_queries), dtype=np.float64)
    known = np.zeros(len(plan.ripple_queries), dtype=bool)
    index = list(plan.ripple_conditions)
    p[index], known[index] = scores.p, scores.known & greedy.known
    return Scores(p, known), cached and greedy_cached, seconds + greedy_seconds


def _cached_scores(
    scorer: Scorer, loaded: LoadedModel, queries: list[Query], dataset_sha256: str, use_cache: bool
) -> tuple[Scores, bool, float]:
    """The unedited model's scores of ``queries``, from the on-disk cache when present."""
    if not queries:
        return Scores(np.zeros(0, dtype=np.float64), np.zeros(0, dtype=bool)), False, 0.0

    cache = ScoreCache() if use_cache else None
    key = None
    if cache is not None:
        key = cache.key(
            loaded.revision,
            scorer.protocol,
            scorer.params,
            dataset_sha256,
            queries_sha256(queries),
            dtype=loaded.dtype,
            device_type=torch.device(loaded.device).type,
        )
        cached = cache.get(key)
        if cached is not None and len(cached) == len(queries):
            return cached, True, 0.0
    start = time.perf_counter()
    scores = scorer.score(loaded.model, loaded.tokenizer, queries)
    seconds = time.perf_counter() - start
    if cache is not None and key is not None:
        cache.put(key, scores)
    return scores, False, seconds


def edit_logger(editor: str, total: int, log: Callable[[str], None]) -> Callable[[str, dict[str, Any]], None]:
    """An ``on_edit`` callback that logs one line per finished edit (for logs, where no bar is drawn)."""
    done = 0
    last = time.perf_counter()

    def on_edit(edit_id: str, _info: dict[str, Any]) -> None:
        nonlocal done, last
        done += 1
        now = time.perf_counter()
        log(f"{editor}: edit {done}/{total} ({edit_id}) done in {now - last:.1f} s")
        last = now

    return on_edit


def evaluate(
    request: EvaluationRequest,
    progress: bool = True,
    loaded: LoadedModel | None = None,
    log: Callable[[str], None] | None = None,
    editor: Editor | None = None,
    private: PrivateSplit | None = None,
    provenance: Callable[[], Provenance] | None = None,
    plots: bool = True,
    private_editor: Editor | None = None,
) -> EvaluationRun:
    """Run one evaluation and (when ``request.out_dir`` is set) write ``results.json`` and plots there.

    ``log`` gets one line per finished edit (applied, in sequential mode): the progress of a run whose
    stderr is not a terminal, where no bar is drawn. ``editor``: a ready editor instance to use instead of
    constructing ``request.editor`` (its ``hparams`` are recorded, with no source file); the runner's
    score stage passes the editor that replays recorded deltas. ``private``: a private split, whose edits are
    applied and scored after the public ones, on the restored model (:mod:`knowgic.evaluation.private`),
    into ``document["private"]``; ``private_editor`` applies them (default: the same editor; the score
    stage replays the private edits' deltas with an editor of their own).
    ``provenance``: called once the edits are done, before the document is built, by the runner's score
    stage (:class:`Provenance`); the document is built once with its fields and hashed, never patched.
    ``plots``: write the plots beside ``results.json``.
    """

    editor_cls = check_request(request)
    started = time.perf_counter()
    dataset = open_dataset(request.dataset_version)
    ref = dataset.ref("chains")
    cases = dataset.cases()
    ripple_rows = dataset.rows("ripple") if dataset.has_config("ripple") else None
    plan = build_plan(cases, dataset.clean_aliases(), limit=request.limit, ripple=ripple_rows)
    second = None
    if private is not None:
        second = private_plan(private, cases, ref.version, plan)

    load_start = time.perf_counter()
    if loaded is None:
        loaded = load_model(request.model, dtype=request.dtype, device=request.device, progress=progress)
    load_seconds = time.perf_counter() - load_start

    overrides = dict(request.protocol_overrides)
    if request.protocol == "generate":
        overrides.setdefault("seed", request.seed)
    if request.protocol in ("generate", "greedy"):
        overrides.setdefault("chat", loaded.is_chat)
    scorer = make_scorer(request.protocol, **overrides)
    if editor is None:
        editor, hparams, hparams_source = make_editor(request, editor_cls, loaded)
    else:
        hparams, hparams_source = dict(editor.hparams), None

    with cpu_threads(loaded.model, loaded.device) as threads:
        pre, pre_cached, pre_seconds = pre_edit_scores(scorer, loaded, plan, ref.sha256, request.use_cache)
        ripple = None
        if plan.has_ripple:
            continuation = ContinuationScorer()
            ripple_pre, _, ripple_pre_seconds = ripple_pre_scores(
                scorer, continuation, loaded, plan, ref.sha256, request.use_cache
            )
            ripple = RippleScoring(ripple_pre, continuation)
        torch.manual_seed(request.seed)
        on_edit = None if log is None else edit_logger(editor.name, len(plan.edits), log)
        run = run_edits(
            loaded.model,
            loaded.tokenizer,
            editor,
            scorer,
            plan,
            pre,
            mode=request.mode,
            progress=progress,
            on_edit=on_edit,
            ripple=ripple,
        )
        if ripple is not None:
            run.ripple_seconds += ripple_pre_seconds
        if private is not None and second is not None:
            # After the public edits, on the restored model: the public scores are a run's without it.
            private_pre, _, private_pre_seconds = pre_edit_scores(
                scorer, loaded, second[0], private.ref.sha256, request.use_cache
            )
            torch.manual_seed(request.seed)  # as the public run starts: a drill's edits are the public ones
            run.private = run_edits(
                loaded.model,
                loaded.tokenizer,
                private_editor or editor,
                scorer,
                second[0],
                private_pre,
                mode=request.mode,
                progress=progress,
            )
            run.private.pre_scoring_seconds = private_pre_seconds
    run.pre_from_cache, run.pre_scoring_seconds = pre_cached, pre_seconds

    if provenance is not None:
        fields = provenance()
        editor_name, editor_class = fields.editor, fields.editor_class
        hparams, hparams_source = fields.hparams, None
    else:
        fields = None
        editor_name, editor_class = request.editor, f"{editor_cls.__module__}:{editor_cls.__qualname__}"
    spec = benchmark_spec()
    seconds_observed = fields is None or fields.edit_seconds_observed
    scored = scored_block(plan, run, spec, seconds_observed=seconds_observed)
    document: dict[str, Any] = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "knowgic_version": knowgic.__version__,
        "created_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "dataset": asdict(ref),
        "config": {
            "model": loaded.model_id,
            "model_revision": loaded.revision,
            "model_family": loaded.family,
            "editor": editor_name,
            "editor_class": editor_class,
            "hparams": hparams,
            "hparams_source": _display_path(hparams_source),
            "hparams_sha256": hparams_sha256(hparams),
            "protocol": scorer.protocol,
            "protocol_params": dict(scorer.params),
            "mode": request.mode,
            "seed": request.seed,
            "dtype": loaded.dtype,
            "device": loaded.device,
            "limit": request.limit,
        },
        "environment": {**environment(), "torch_threads": threads, **reproducibility(loaded.device)},
        "metrics": scored["metrics"],
        "metric_versions": spec.metric_versions(),
        "counts": scored["counts"],
        "per_edit": scored["per_edit"],
        "chains": scored["chains"],
        "ripple": scored["ripple"],
        "uncertainty": scored["uncertainty"],
        "timing": {
            "total_seconds": time.perf_counter() - started,
            "load_seconds": load_seconds,
            "pre_scoring_seconds": pre_seconds,
            "pre_scores_cached": pre_cached,
            "edit_seconds": sum(run.edit_seconds.values()),
            "scoring_seconds": run.scoring_seconds,
            "ripple_seconds": run.ripple_seconds,
        },
    }
    if private is not None and second is not None and run.private is not None:
        document["private"] = private_document(second[0], run.private, private, second[1], document, spec)
    if fields is not None:
        document["submission"] = fields.submission
        document["runner"] = fields.runner
    finalize(document)
    result = EvaluationRun(document=document, plan=plan, scores=run)
    if request.out_dir is not None:
        from knowgic.evaluation.plots import write_plots  # matplotlib, only when plots are written

        result.results_path, result.plot_paths = write_run_outputs(
            document,
            request.out_dir,
            (lambda folder: write_plots(document, folder)) if plots else None,
            request.overwrite,
        )
    return result


def _display_path(path: str | None) -> str | None:
    """Hparams shipped in the package are recorded relative to it, so results don't leak local paths."""
    if path is None:
        return None
    resolved = Path(path).resolve()
    package = Path(knowgic.__file__).resolve().parent
    try:
        return "knowgic/" + str(resolved.relative_to(package))
    except ValueError:
        return str(path)
