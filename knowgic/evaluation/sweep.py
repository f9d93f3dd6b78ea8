"""``knowgic sweep``: several editors on one model, one results folder each, and one Markdown table."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.dataset.loading import dataset_label, dataset_ref
from knowgic.editors.hparams import hparams_sha256
from knowgic.editors.registry import resolve_editor
from knowgic.errors import KnowgicError
from knowgic.evaluation import BASELINES
from knowgic.evaluation.evaluate import EvaluationRequest, editor_hparams, evaluate
from knowgic.evaluation.outputs import describe_run, write_atomic
from knowgic.evaluation.preflight import check_request, check_sweep_editors, check_sweep_folder
from knowgic.formatting import FEW_EDITS_MARK, UNDEFINED, format_value
from knowgic.intervals import (
    BOOTSTRAP_METHODS,
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    FEW_EDITS,
    METHOD_BY_KIND,
    METHODS,
    BootstrapSettings,
    listing,
    methods_for,
)
from knowgic.measure.compute import metric_entry_at
from knowgic.measure.ranks import (
    RANK_METHOD,
    RANK_METHODS,
    MetricRanking,
    RankingKey,
    one_ranking,
    rank_runs,
    ranked_forms,
    ranking_key,
    with_paper_forms,
)
from knowgic.models.available import check_model
from knowgic.models.loading import load_model
from knowgic.results import read_results
from knowgic.scoring import make_scorer
from knowgic.spec import BenchmarkSpec, MetricSpec, benchmark_spec


@dataclass(frozen=True)
class Column:
    """A metric column of the summary table: its path in ``metrics``, header and direction; ``ranked``: the
    column is a metric's ranked form and its cells carry rank ranges; ``paper``: the paper's figure of a
    metric that ranks by another form (shown, never ranked)."""

    metric: str
    header: str
    lower_is_better: bool
    ranked: bool = False
    paper: bool = False


PAPER = "paper"
"""What a column header adds to a paper's figure that ranks by another form: ``IFR (paper) ↓``."""
RANK_MARK = "#"
"""Before a cell's rank range: ``0.442 [0.25, 0.65] #2–4``."""


def _columns(
    spec: BenchmarkSpec, paths: Sequence[str], header: Callable[[str, MetricSpec], str]
) -> list[Column]:
    """The columns of ``paths``: a paper's figure that ranks by another form, then that form
    (:func:`knowgic.measure.ranks.with_paper_forms`)."""
    declared = spec.metric_paths()
    columns = []
    for path, paper in with_paper_forms(spec, paths):
        metric = declared[path]
        shown = f"{header(path, metric)} ({PAPER})" if paper else header(path, metric)
        columns.append(
            Column(path, f"{shown} {metric.arrow}", metric.lower_is_better, ranked=not paper, paper=paper)
        )
    return columns


def headline_columns(spec: BenchmarkSpec) -> tuple[Column, ...]:
    """The summary's headline columns: the metrics ``spec`` marks ``headline``, in its order, a paper's
    figure that ranks by another form followed by that form (IFR (paper), IFR/edit; Pres. (paper), Pres.
    macro)."""
    paths = [p for p, m in spec.metric_paths().items() if m.headline and not m.parts]
    return tuple(_columns(spec, paths, lambda _, m: m.short or m.label))


def length_columns(spec: BenchmarkSpec) -> tuple[Column, ...]:
    """IFR by chain length, one column per declared length: the paper's pooled figures, then the per-edit
    forms that rank them."""
    paths = [p for p, m in spec.metric_paths().items() if m.name == "ifr_by_length"]
    forms = _columns(spec, paths, lambda p, m: f"{m.short}{p.partition('.')[2]}")
    return tuple(sorted(forms, key=lambda c: c.ranked))


def ripple_columns(spec: BenchmarkSpec) -> tuple[Column, ...]:
    """RippleEdits' criteria (the metrics of ``group: ripple``), one column per metric and criterion, in spec
    order; shown with their intervals and not ranked (optional columns, public data only)."""
    return tuple(
        Column(path, f"{m.short} {path.partition('.')[2]} {m.arrow}".replace("  ", " "), m.lower_is_better)
        for path, m in spec.metric_paths().items()
        if m.group == "ripple"
    )


RIPPLE_TITLE = (
    "RippleEdits' criteria (public data; acc.: the greedy continuation contains the target, "
    "p: p'(target) > p'(competitor)):"
)


def _bootstrap_settings(document: Mapping[str, Any]) -> BootstrapSettings:
    """The settings the run's own intervals used (the defaults for a document without them)."""
    recorded = document.get("uncertainty") or {}
    return BootstrapSettings(
        resamples=int(recorded.get("resamples", DEFAULT_RESAMPLES)),
        seed=int(recorded.get("seed", DEFAULT_SEED)),
        level=float(recorded.get("level", DEFAULT_LEVEL)),
    )


@dataclass(frozen=True)
class SummaryRanks:
    """The rank ranges of a summary's runs: ranked metric path -> :class:`MetricRanking`, or why there are
    none (``reason``)."""

    rankings: Mapping[str, MetricRanking]
    key: RankingKey | None
    settings: BootstrapSettings
    reason: str | None = None

    @property
    def basis(self) -> str:
        """What the ranks rest on, in words (:func:`knowgic.measure.compare.rank_basis`); "" without ranks."""
        return next((r.basis for r in self.rankings.values()), "")

    @property
    def private(self) -> bool:
        """Whether the ranks come from a private split every run was scored on."""
        return any(r.private for r in self.rankings.values())

    def report(self, spec: BenchmarkSpec) -> dict[str, Any]:
        """The ranking as JSON: what ranks (key, basis, method, level, resamples, seed)."""
        return {
            "ranking": None if self.key is None else self.key.label,
            "basis": self.basis,
            "method": RANK_METHODS[RANK_METHOD],
            "level": self.settings.level,
            "resamples": self.settings.resamples,
            "seed": self.settings.seed,
            "reason": self.reason,
        }

    def run(self, i: int, spec: BenchmarkSpec) -> dict[str, Any]:
        """Run ``i``'s rank range per headline metric: ``{path: {"ranked_by", "value", "rank": [low, high],
        "of"}}`` (``value``: the ranked form's, which orders the runs; empty without ranks)."""
        out = {}
        for path, form in ranked_forms(spec).items():
            ranking = self.rankings.get(form)
            if ranking is not None:
                record = ranking.record(i)
                out[path] = {"ranked_by": form, **{k: v for k, v in record.items() if k != "metric"}}
        return out


ONE_RUN = "one run, none to rank it among"
"""Why the table of a single run ranks nothing (its footnote and ``ranking.reason`` in JSON)."""


def summary_ranks(
    documents: Sequence[Mapping[str, Any]],
    spec: BenchmarkSpec | None = None,
    names: Sequence[str] | None = None,
) -> SummaryRanks:
    """Every ranked column's rank ranges (:func:`knowgic.measure.ranks.rank_runs`), with the settings of the
    runs' own intervals; none, with the reason, when the runs cannot share a ranking or are one run."""
    spec = spec or benchmark_spec()
    settings = _bootstrap_settings(documents[0])
    if len(documents) < 2:  # a rank among one row says nothing: no rank range, no bold
        return SummaryRanks({}, None, settings, ONE_RUN)
    forms = [c.metric for c in (*headline_columns(spec), *length_columns(spec)) if c.ranked]
    forms += [f for f in ranked_forms(spec).values() if f not in forms]
    try:
        key = one_ranking(documents, names)
        rankings = rank_runs(documents, forms, settings, spec, names)
    except KnowgicError as exc:
        return SummaryRanks({}, None, settings, str(exc))
    return SummaryRanks(rankings, key, settings)


NOT_RECORDED = "not recorded"
"""The cell of a metric the results file predates (``knowgic summarize --recompute`` computes it)."""


def _cell(document: Mapping[str, Any], row: int, column: Column, ranks: SummaryRanks) -> str:
    """``**0.442** [0.25, 0.65] #1–3`` for a ranked column's row whose range holds rank 1,
    ``0.523 [0.32, 0.72] #4–7`` for another; a paper's figure is its value and interval only."""
    if column.metric.partition(".")[0] not in document["metrics"]:
        return NOT_RECORDED  # a metric declared after the file was written: `summarize --recompute`
    text = format_value(metric_entry_at(document["metrics"], column.metric))
    ranking = ranks.rankings.get(column.metric)
    if not column.ranked or ranking is None or text == UNDEFINED or ranking.ranges[row] is None:
        return text
    found = ranking.ranges[row]
    assert found is not None
    if found.low == 1:
        value, _, rest = text.partition(" ")
        text = f"**{value}** {rest}".strip()
    return f"{text} {RANK_MARK}{found.text}"


def row_labels(documents: Sequence[Mapping[str, Any]], sources: Sequence[Path] | None = None) -> list[str]:
    """Each run's editor, with what tells apart runs of the same editor: the hparams hash where it differs,
    and the run's folder (``run 2``... without folders)."""
    editors = [str(d["config"]["editor"]) for d in documents]
    labels = []
    for i, (doc, editor) in enumerate(zip(documents, editors, strict=True)):
        same = [j for j, e in enumerate(editors) if e == editor]
        if len(same) == 1:
            labels.append(editor)
            continue
        hashes = {documents[j]["config"].get("hparams_sha256") for j in same}
        parts = [f"hparams {str(doc['config'].get('hparams_sha256'))[:8]}"] if len(hashes) > 1 else []
        parts.append(str(sources[i]) if sources is not None else f"run {same.index(i) + 1}")
        labels.append(f"{editor} ({', '.join(parts)})")
    # A '|' in a folder name would split the Markdown cell.
    return [label.replace("|", "\\|") for label in labels]


def _table(
    documents: Sequence[Mapping[str, Any]],
    labels: Sequence[str],
    columns: Sequence[Column],
    ranks: SummaryRanks,
    extra_headers: Sequence[str] = (),
    extra_cells: Sequence[Sequence[str]] = (),
) -> list[str]:
    headers = ["editor", *(c.header for c in columns), *extra_headers]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for i, (doc, label) in enumerate(zip(documents, labels, strict=True)):
        cells = [label, *(_cell(doc, i, c, ranks) for c in columns), *(extra_cells[i] if extra_cells else ())]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary_table(
    documents: Sequence[Mapping[str, Any]],
    sources: Sequence[Path] | None = None,
    spec: BenchmarkSpec | None = None,
    ranks: SummaryRanks | None = None,
) -> str:
    """Three Markdown tables, one row per run: the headline metrics (with active chains and seconds per edit),
    then IFR by chain length, then RippleEdits' criteria (public data, not ranked); every value with its interval, every ranked column's value with its rank
    range among the rows (``#2–4``, :mod:`knowgic.measure.ranks`) and in bold where that range holds rank 1;
    the paper's pooled figures beside the per-edit forms that rank them; a footnote says how.

    ``sources`` (one path per run) tells apart runs of the same editor (:func:`row_labels`); ``ranks``: the
    rows' :func:`summary_ranks` when the caller has them already.
    """
    if not documents:
        return "No runs.\n"
    spec = spec or benchmark_spec()
    headline, lengths, ripple = headline_columns(spec), length_columns(spec), ripple_columns(spec)
    labels = row_labels(documents, sources)
    ranks = ranks or summary_ranks(documents, spec, labels)
    settings = ranks.settings
    extra = []
    for doc in documents:
        c = doc["counts"]
        extra.append(
            [
                f"{c['active_chains']}/{c['chains']}",
                f"{doc['timing']['edit_seconds'] / max(1, c['edits']):.2f}",
            ]
        )
    if ranks.private:  # the private split ranks; the public figures follow, unranked, to reproduce
        blocks = [d["private"] for d in documents]
        counts = [[f"{b['counts']['active_chains']}/{b['counts']['chains']}"] for b in blocks]
        lines = ["On the private split (these figures rank):", ""]
        lines += _table(blocks, labels, headline, ranks, ("active chains",), counts)
        lines += ["", "IFR by chain length on the private split (chains of n steps):", ""]
        lines += _table(blocks, labels, lengths, ranks)
        unranked = SummaryRanks({}, ranks.key, settings)
        lines += ["", "Public figures (to reproduce the run; not ranked):", ""]
        lines += _table(documents, labels, headline, unranked, ("active chains", "s/edit"), extra)
    else:
        lines = _table(documents, labels, headline, ranks, ("active chains", "s/edit"), extra)
        lines += ["", "IFR by chain length (chains of n steps):", ""]
        lines += _table(documents, labels, lengths, ranks)
    if ripple:
        lines += ["", RIPPLE_TITLE, ""]
        lines += _table(documents, labels, ripple, SummaryRanks({}, ranks.key, settings))

    first = documents[0]
    cfg = first["config"]
    edits = first["counts"]["edits"]
    level = round(100 * settings.level)
    declared = spec.metric_paths()
    paths = {c.metric: declared[c.metric] for c in (*headline, *lengths, *ripple)}
    intervals = "; ".join(
        f"{listing(labels)}: {METHODS[method]}"
        + (f", {settings.resamples} resamples, seed {settings.seed}" if method in BOOTSTRAP_METHODS else "")
        for method, labels in methods_for(paths, METHOD_BY_KIND)
    )
    papers = [c for c in (*headline, *lengths) if c.paper]
    paper_labels = listing(list(dict.fromkeys(declared[c.metric].label for c in papers)))
    lines.append("")
    lines.append(
        f"Model `{cfg['model']}` ({cfg['dtype']}, {cfg['device']}), {dataset_label(first['dataset'])}, "
        f"protocol `{cfg['protocol']}`, mode `{cfg['mode']}`, seed {cfg['seed']}, {edits} edits. "
        f"Each value: point estimate [{level}% interval], no interval where it cannot be computed (see "
        f"results.json); – : undefined. The interval's method follows the metric's kind (docs/metrics.md): "
        f"{intervals}. "
        f"{FEW_EDITS_MARK}: fewer than {FEW_EDITS:g} effective edits: the figure rests on few edits, and its "
        "interval is wide."
    )
    if papers:
        lines.append(
            f"({PAPER}): the paper's pooled {paper_labels}, shown as the paper defines them and never ranked; "
            "beside each is its per-edit form (every edit weighing the same), which ranks it."
        )
    if ranks.reason is not None:
        lines.append(f"Rows not ranked: {ranks.reason}.")
    else:
        lines.append(
            f"{RANK_MARK}a–b: the row's {level}% rank range among these rows, from one paired bootstrap of "
            f"the edits shared by every row ({settings.resamples} resamples, seed {settings.seed}; "
            "docs/metrics.md, Rank ranges); a better value never shows a worse rank, and rows whose ranges "
            "overlap are not told apart. **Bold**: rows whose range holds rank 1."
        )
        lines.append(f"Ranks: {ranks.basis}.")
    return "\n".join(lines) + "\n"


def _shown_limit(value: Any) -> str:
    return "no limit" if value is None else f"limit {value}"


# What must agree for runs to share one table: one ranking (knowgic.measure.ranks.RankingKey), and the
# settings the footnote states once for all rows.
_SHARED_SETTING: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    *(
        (
            words,
            lambda d, name=name: (
                _shown_limit(getattr(ranking_key(d), name))
                if name == "limit"
                else getattr(ranking_key(d), name)
            ),
        )
        for name, words in RankingKey.FIELDS
    ),
    ("dtype", lambda d: d["config"]["dtype"]),
    ("device", lambda d: d["config"]["device"]),
    ("seed", lambda d: d["config"]["seed"]),
)


def results_paths(paths: Sequence[str | Path]) -> list[Path]:
    """The ``results.json`` files named by ``paths``: files, run folders, or sweep folders of run folders."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            direct = path / "results.json"
            inner = sorted(p / "results.json" for p in path.iterdir() if (p / "results.json").is_file())
            if direct.is_file():
                found.append(direct)
            elif inner:
                found.extend(inner)
            else:
                raise KnowgicError(f"{path} holds no results.json, neither directly nor in a sub-folder")
        elif path.exists():
            found.append(path)
        else:
            raise KnowgicError(f"{path} does not exist")
    return found


def _sweep_order(document: Mapping[str, Any], source: Path) -> tuple[int, str, str]:
    """Rows in `knowgic sweep`'s default order (the baselines', then other editors by name), then by folder."""
    editor = str(document["config"]["editor"])
    rank = BASELINES.index(editor) if editor in BASELINES else len(BASELINES)
    return rank, editor, str(source)


def summarize(paths: Sequence[str | Path]) -> str:
    """The :func:`summary_table` of runs written separately (e.g. one sweep split over processes).

    Every file is verified (schema and content hash); runs must share model, dataset version, protocol,
    mode, limit, dtype, device and seed, else the table's footnote (one setting for all rows) would be false.
    Rows are ordered as `knowgic sweep` orders them; runs of one editor are told apart by their folders.
    """
    documents, folders = summarized_runs(paths)
    return summary_table(documents, sources=folders)


def summarized_runs(paths: Sequence[str | Path]) -> tuple[list[dict[str, Any]], list[Path]]:
    """The verified runs :func:`summarize` tabulates, in its row order, with their folders."""
    files = results_paths(paths)
    if not files:
        raise KnowgicError("no results files given")
    documents = [read_results(path) for path in files]
    for label, key in _SHARED_SETTING:
        values = {key(d): path for d, path in zip(documents, files, strict=True)}
        if len(values) > 1:
            listed = "; ".join(f"{v} in {p}" for v, p in values.items())
            raise KnowgicError(f"runs differ in {label}, one table cannot compare them: {listed}")
    folders = [path.parent if path.name == "results.json" else path for path in files]
    rows = sorted(zip(documents, folders, strict=True), key=lambda pair: _sweep_order(*pair))
    return [d for d, _ in rows], [f for _, f in rows]


def run_sweep(
    model: str,
    editors: Sequence[str],
    out_dir: Path,
    protocol: str | None = None,
    mode: str | None = None,
    dataset_version: str | None = None,
    limit: int | None = None,
    dtype: str = "float32",
    device: str = "auto",
    progress: bool = True,
    stats_corpus: str | None = None,
    stats_samples: int | None = None,
    report: Callable[[str], None] | None = None,
    log: Callable[[str], None] | None = None,
    overwrite: bool = False,
    seed: int = 0,
    protocol_overrides: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """``stats_corpus``/``stats_samples`` go to the editors with key statistics (ROME, MEMIT, ...) only.

    ``report`` gets one line per finished editor (a sweep of a real model runs for hours), ``log`` one line
    per finished edit (see :func:`~knowgic.evaluation.evaluate.evaluate`).

    A sweep resumes: an editor whose folder already holds a finished run of the same request (model,
    dataset version and hash, protocol and its parameters, mode, seed, limit, dtype, device, hparams,
    package version) is not run again, its run is reused. A folder holding a run of another request, or one
    that cannot be verified, is refused before any work unless ``overwrite`` (which runs every editor anew).
    summary.md is written from all the runs at the end.
    """

    requests = sweep_requests(
        model,
        editors,
        out_dir,
        protocol=protocol,
        mode=mode,
        dataset_version=dataset_version,
        limit=limit,
        dtype=dtype,
        device=device,
        stats_corpus=stats_corpus,
        stats_samples=stats_samples,
        overwrite=overwrite,
        seed=seed,
        protocol_overrides=protocol_overrides,
    )
    summary_path = out_dir / "summary.md"
    finished: dict[int, dict[str, Any]] = {}
    for i, request in enumerate(requests):  # every editor and every folder is checked before anything runs
        if not overwrite and request.out_dir is not None and describe_run(request.out_dir) is not None:
            finished[i] = finished_run(request)
        else:
            check_request(request, model=False)
    check_model(model)  # once, last: it may ask the hub
    loaded = load_model(model, dtype=dtype, device=device, progress=progress)
    for i, document in finished.items():  # what only the loaded model tells: hparams, device, chat
        check_same_run(document, requests[i], _after_load_settings(requests[i], loaded))
    documents = []
    start = time.perf_counter()
    for i, request in enumerate(requests, 1):
        reused = i - 1 in finished
        if reused:
            document = finished[i - 1]
        else:
            document = evaluate(request, progress=progress, loaded=loaded, log=log).document
        documents.append(document)
        if report is not None:
            ifr, seconds = document["metrics"]["ifr"]["value"], document["timing"]["total_seconds"]
            how = "finished run reused" if reused else f"{seconds:.0f} s"
            report(
                f"[{i}/{len(requests)}] {request.editor}: IFR {'–' if ifr is None else f'{ifr:.3f}'}, "
                f"{how}, {request.out_dir}"
            )
    table = sweep_table(documents, time.perf_counter() - start, len(finished))
    write_atomic(summary_path, table.encode("utf-8"))
    return documents, table


def sweep_requests(
    model: str,
    editors: Sequence[str],
    out_dir: Path,
    *,
    protocol: str | None = None,
    mode: str | None = None,
    dataset_version: str | None = None,
    limit: int | None = None,
    dtype: str = "float32",
    device: str = "auto",
    stats_corpus: str | None = None,
    stats_samples: int | None = None,
    overwrite: bool = False,
    seed: int = 0,
    protocol_overrides: Mapping[str, Any] | None = None,
) -> list[EvaluationRequest]:
    """One request per editor, each into its :func:`run_folder` of ``out_dir`` (checked: the editors and
    the folder); ``stats_corpus``/``stats_samples`` go to the editors with key statistics only. The same
    for a sweep run here and one run as Slurm jobs."""
    stats = {"stats_corpus": stats_corpus, "stats_samples": stats_samples}
    with_stats = check_sweep_editors(editors, stats_corpus is not None or stats_samples is not None)
    check_sweep_folder(out_dir)
    # Protocol and mode left as None take the spec's defaults (EvaluationRequest's field defaults).
    chosen = {k: v for k, v in (("protocol", protocol), ("mode", mode)) if v is not None}
    return [
        EvaluationRequest(
            model=model,
            editor=editor,
            **chosen,
            dataset_version=dataset_version,
            limit=limit,
            dtype=dtype,
            device=device,
            seed=seed,
            protocol_overrides=dict(protocol_overrides or {}),
            out_dir=run_folder(out_dir, editor),
            overwrite=overwrite,
            **(stats if editor in with_stats else {}),
        )
        for editor in editors
    ]


def sweep_table(documents: Sequence[Mapping[str, Any]], seconds: float, reused: int) -> str:
    """summary.md: the :func:`summary_table` of a sweep's runs, in its editors' order, and its wall time."""
    table = summary_table(documents)
    reused_note = f" ({reused} of {len(documents)} editors' runs reused)" if reused else ""
    return table + f"\nSweep wall time: {seconds:.0f} s{reused_note}.\n"


def run_folder(out_dir: Path, editor: str) -> Path:
    """The sub-folder of a sweep's ``out_dir`` that holds ``editor``'s run."""
    return out_dir / editor.replace(":", "_").replace("/", "_")


def _expected_settings(request: EvaluationRequest) -> dict[str, Any]:
    """What a run of ``request`` records, as far as it is known before the model loads."""
    import knowgic

    ref = dataset_ref(request.dataset_version, config="chains")
    overrides = dict(request.protocol_overrides)
    if request.protocol == "generate":
        overrides.setdefault("seed", request.seed)
    params = {k: v for k, v in make_scorer(request.protocol, **overrides).params.items() if k != "chat"}
    return {
        "model": request.model,
        "editor": request.editor,
        "dataset": f"{ref.version} ({ref.sha256[:12]})",
        "protocol": request.protocol,
        **{f"protocol parameter {k}": v for k, v in params.items()},
        "mode": request.mode,
        "seed": request.seed,
        "limit": request.limit,
        "dtype": request.dtype,
        "knowgic version": knowgic.__version__,
    }


def _after_load_settings(request: EvaluationRequest, loaded: Any) -> dict[str, Any]:
    """What a run of ``request`` records that only the loaded model tells: hparams, device, chat."""
    return model_settings(request, loaded.model_id, loaded.family, loaded.device, loaded.is_chat)


def model_settings(
    request: EvaluationRequest,
    model_id: str,
    family: str | None,
    device: str | None,
    is_chat: bool | None = None,
) -> dict[str, Any]:
    """What a run of ``request`` records that depends on the model and the machine: the hparams' hash (for
    ``model_id`` of ``family``), the device and, for the generating protocols, whether the model chats;
    ``device`` or ``is_chat`` None: not known here, not checked."""
    hparams, _ = editor_hparams(request, resolve_editor(request.editor), model_id, family)
    settings: dict[str, Any] = {"hparams sha256": hparams_sha256(hparams)[:12]}
    if device is not None:
        settings["device"] = device
    if (
        is_chat is not None
        and request.protocol in ("generate", "greedy")
        and "chat" not in request.protocol_overrides
    ):
        settings["protocol parameter chat"] = is_chat
    return settings


def _recorded(document: Mapping[str, Any], name: str) -> Any:
    c, d = document["config"], document["dataset"]
    recorded = {
        "dataset": f"{d['version']} ({d['sha256'][:12]})",
        "knowgic version": document.get("knowgic_version"),
        "hparams sha256": str(c.get("hparams_sha256"))[:12],
    }
    if name in recorded:
        return recorded[name]
    if name.startswith("protocol parameter "):
        return c["protocol_params"].get(name.removeprefix("protocol parameter "))
    return c.get(name)


def check_same_run(
    document: Mapping[str, Any], request: EvaluationRequest, expected: Mapping[str, Any]
) -> None:
    """Refuse in one line a finished run that another request made: a sweep reuses only what it would make."""
    differ = [
        f"{name} {_recorded(document, name)!r} there, {value!r} asked"
        for name, value in expected.items()
        if _recorded(document, name) != value
    ]
    if differ:
        raise KnowgicError(
            f"{request.out_dir} holds a finished run of another request ({'; '.join(differ)}); pass "
            "--overwrite to replace the runs, or choose another folder"
        )


def finished_run(request: EvaluationRequest) -> dict[str, Any]:
    """The verified run in ``request.out_dir`` when it is one ``request`` would make, else a one-line error."""
    assert request.out_dir is not None
    path = request.out_dir / "results.json"
    if not path.is_file():
        raise KnowgicError(
            f"{request.out_dir} holds {describe_run(request.out_dir)} but no results.json; pass --overwrite "
            "to replace it, or choose another folder"
        )
    try:
        document = read_results(path)
    except KnowgicError as exc:
        raise KnowgicError(f"{exc}; pass --overwrite to replace the run, or choose another folder") from None
    check_same_run(document, request, _expected_settings(request))
    return document
