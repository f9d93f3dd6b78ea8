"""The KnowGIC leaderboard: a Gradio app over a results store and its job queue.

``build_app(store_path)`` returns the :class:`gradio.Blocks`; ``launch_app`` serves it with the page's CSS
and the upload size limit. Run as a script (or as a Hugging Face Space, whose entry point this file is) it
is ``knowgic leaderboard`` (leaderboard/commands.py): it serves ``$KNOWGIC_STORE``, or, when
``KNOWGIC_STORE_REPO`` names a hub dataset repository, a snapshot of that repository fetched with
``huggingface_hub``; ``KNOWGIC_QUEUE_URL`` names the queue database (default: the store's SQLite file).

Everything shown comes from :meth:`runner.store.ResultsStore.scan`, so only results that pass every check
of :mod:`runner.store_checks` appear, and a run is *verified* only with a worker's signature by a trusted
key (``trusted_keys``); the files it skips are listed with their reasons. A timer re-scans the store and the
queue, so new results and job state changes appear without a restart.

The page answers at once: the store is first read without verifying anything new (rows verified before,
this process or another, appear at once); a background thread verifies the rest, and rows appear as they
pass, under a notice "verifying N of M results".
"""

from __future__ import annotations

import datetime as _dt
import html
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import gradio as gr
import pandas as pd

from knowgic.errors import KnowgicError
from leaderboard import plots, views
from leaderboard.table import (
    CATEGORICAL,
    COLUMN_HEADERS,
    DEFAULT_COLUMNS,
    DEFAULT_SORT,
    PAGE_SIZE,
    SORTABLE,
    Board,
    Row,
    TableQuery,
    row_label,
    skipped_frame,
)
from runner.signing import TrustedKeys
from runner.store import ResultsStore, SkippedFile, StoreEntry, StoreFileError, StoreScan

DEFAULT_UPLOAD_LIMIT_BYTES = 50 * 1024 * 1024
DEFAULT_REFRESH_SECONDS = 5.0

CSS = """
.kg-metric { white-space: nowrap; }
.kg-interval, .kg-n { color: var(--body-text-color-subdued); font-size: 0.8em; }
.kg-undefined { cursor: help; text-decoration: underline dotted; }
"""


def _fmt_seconds(seconds: float) -> str:
    if seconds < 1:
        return "<1 s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


VERIFY_PUBLISH_SECONDS = 2.0  # how often background verification shows the rows it has verified
# Worker processes that verify results files (each check is CPU work: processes keep requests answered).
VERIFY_PROCESSES = max(1, min(4, (os.cpu_count() or 2) - 1))


@dataclass
class LeaderboardState:
    """One app's view of its store: the current board (rebuilt when the store changes) and the queue.

    The store is read and its new results verified by a background thread (the verification itself in
    ``verify_processes`` worker processes, so that requests never wait for it); ``progress`` is (done,
    total) while it runs ((0, 0) while the entries are being read), else None."""

    store: ResultsStore
    queue_url: str
    include_reported: bool = True
    verify_processes: int = VERIFY_PROCESSES
    board: Board = field(init=False)
    downloads: Path = field(init=False)
    version: int = field(default=0, init=False)  # bumped whenever the board changes
    progress: tuple[int, int] | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _scanned_at: float = field(default_factory=time.monotonic, init=False)
    _queue: Any = field(default=None, init=False)
    _verifier: threading.Thread | None = field(default=None, init=False)
    _closed: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        self.downloads = Path(tempfile.mkdtemp(prefix="knowgic-leaderboard-"))
        self.board = Board(StoreScan(), include_reported=self.include_reported)  # until the store is read
        self._start(None)

    def _start(self, scan: StoreScan | None) -> None:
        """Read (``scan`` None) and verify in a background thread (the caller holds the lock or is
        __init__)."""
        if (scan is not None and not scan.unverified) or self._closed.is_set():
            return
        self.progress = (0, 0) if scan is None else (0, len(scan.unverified))
        self._verifier = threading.Thread(
            target=self._verify, args=(scan,), name="knowgic-verify", daemon=True
        )
        self._verifier.start()

    def _verify(self, scan: StoreScan | None) -> None:
        if scan is None:
            scan = self.store.scan(verify=False)
            self._scanned_at = time.monotonic()
        entries: list[StoreEntry] = list(scan.entries)
        skipped: list[SkippedFile] = list(scan.skipped)
        total = len(scan.unverified)
        self._publish(entries, skipped, progress=(0, total) if total else None)
        published = time.monotonic()
        outcomes = self.store.verify_entries(scan.unverified, self.verify_processes, stop=self._closed.is_set)
        for done, (path, outcome) in enumerate(outcomes, start=1):
            if isinstance(outcome, StoreEntry):
                entries.append(outcome)
            else:
                skipped.append(SkippedFile(path, str(outcome)))
            self.progress = (done, total)
            if done < total and time.monotonic() - published >= VERIFY_PUBLISH_SECONDS:
                self._publish(entries, skipped, progress=(done, total))
                published = time.monotonic()
        if self._closed.is_set():
            return
        if total:
            self._publish(entries, skipped, progress=None)
        self.refresh()  # what changed in the store while this thread verified

    def _publish(
        self, entries: list[StoreEntry], skipped: list[SkippedFile], progress: tuple[int, int] | None
    ) -> None:
        """Show the rows verified so far (``progress`` None: all of them, and this thread is done)."""
        ordered = sorted(entries, key=lambda e: e.path.name)
        # Skipped entries in file order, then the other files (as a scan lists them).
        inside = self.store.entries_dir
        files = sorted((s for s in skipped if s.path.parent == inside), key=lambda s: s.path.name)
        others = [s for s in skipped if s.path.parent != inside]
        board = Board(
            StoreScan(entries=ordered, skipped=files + others), include_reported=self.include_reported
        )
        with self._lock:
            self.board = board
            self.progress = progress
            if progress is None:
                self._verifier = None
            self.version += 1

    def notice(self) -> str:
        """The line that says verification is under way, or ""."""
        progress = self.progress
        if progress is None:
            return ""
        done, total = progress
        if total == 0:
            return "reading the store: rows appear as they are verified"
        return f"verifying {done:,} of {total:,} results: rows appear as they are verified"

    def close(self, timeout: float | None = None) -> None:
        """Stop background verification (the app is closing); wait up to ``timeout`` s for its thread."""
        self._closed.set()
        verifier = self._verifier
        if verifier is not None:
            verifier.join(timeout)

    def refresh(self, *, min_age_seconds: float = 0.0) -> bool:
        """Re-scan the store unless the last scan is younger than ``min_age_seconds`` (every open page's
        timer calls this: one scan serves them all); True when the rows or the skipped files changed.

        While the background thread verifies, it owns the board; it re-scans when it is done."""
        with self._lock:
            now = time.monotonic()
            if self._verifier is not None or now - self._scanned_at < min_age_seconds:
                return False
            scan = self.store.scan(verify=False)
            self._scanned_at = time.monotonic()
            self._start(scan)
            signature = tuple((e.entry_id, e.results_sha256) for e in scan.entries)
            skipped = [(s.path, s.reason) for s in scan.skipped]
            if signature == self.board.signature and skipped == [
                (s.path, s.reason) for s in self.board.skipped
            ]:
                if scan.unverified:
                    self.version += 1  # the notice changed
                return bool(scan.unverified)
            self.board = Board(scan, include_reported=self.include_reported)
            self.version += 1
            return True

    def queue(self) -> Any:
        from runner.queue import JobQueue

        if self._queue is None:
            self._queue = JobQueue(self.queue_url)
        return self._queue


def jobs_frame(jobs: Sequence[Any]) -> pd.DataFrame:
    """The queue view: one row per job, newest first."""
    records = []
    for job in sorted(jobs, key=lambda j: j.created_at, reverse=True):
        times = ", ".join(
            f"{str(state).lower()} {_fmt_seconds(s)}" for state, s in job.state_seconds.items() if s > 0
        )
        records.append(
            {
                "Job": job.job_id,
                "Submission": f"{job.submission_name} {job.submission_version}",
                "Model": job.model,
                "Protocol": job.protocol,
                "Mode": job.mode,
                "State": str(job.state).lower(),
                # Counts runs lost to dead workers or host faults, not the first run (see runner.queue).
                "Lost runs": f"{job.attempts}/{job.max_attempts}",
                "Time in each state": times or "–",
                "Reason": job.reason or "",
                "Worker": job.worker or "–",
                "Updated": job.updated_at.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            }
        )
    columns = ["Job", "Submission", "Model", "Protocol", "Mode", "State", "Lost runs", "Time in each state"]
    return pd.DataFrame.from_records(records, columns=[*columns, "Reason", "Worker", "Updated"])


def _query(
    search: str, filters: Sequence[Any], sort: str, order: str, columns: Sequence[str], page: Any
) -> TableQuery:
    return TableQuery(
        search=search or "",
        filters={key: list(values or []) for (key, _), values in zip(CATEGORICAL, filters, strict=True)},
        sort=sort or DEFAULT_SORT,
        descending=order != "ascending",
        columns=list(columns or DEFAULT_COLUMNS),
        page=int(page or 1),
    )


def build_app(
    store_path: str | Path,
    *,
    queue_url: str | None = None,
    include_reported: bool = True,
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    upload_limit_bytes: int = DEFAULT_UPLOAD_LIMIT_BYTES,
    title: str = "KnowGIC leaderboard",
    verified_cache: Path | None = None,
    trusted_keys: Path | None = None,
) -> gr.Blocks:
    """The leaderboard over the store at ``store_path`` (its queue: ``queue_url``, default the store's).

    ``verified_cache``: where the store remembers the files it verified (default: the user cache).
    ``trusted_keys``: the workers' public keys (default: :func:`runner.signing.default_trusted_keys_path`);
    a run signed by none of them is shown as local."""
    store = ResultsStore(
        store_path, verified_cache=verified_cache, trusted_keys=TrustedKeys.load(trusted_keys)
    )
    state = LeaderboardState(store, queue_url or store.queue_url(), include_reported)
    sort_choices = [(label, key) for key, label in SORTABLE]
    column_choices = [(label, key) for key, label in COLUMN_HEADERS.items()]

    def render(search, *rest):  # filters..., sort, order, columns, page
        filters, (sort, order, columns, page) = rest[: len(CATEGORICAL)], rest[len(CATEGORICAL) :]
        query = _query(search, filters, sort, order, columns, page)
        board = state.board
        shown = board.page(query)
        table = gr.Dataframe(
            value=pd.DataFrame(shown.cells, columns=shown.headers)
            if shown.cells
            else pd.DataFrame(columns=shown.headers),
            datatype=shown.datatypes,
            column_widths=shown.widths,
        )
        status = f"{shown.total} result(s) match of {len(board.rows)} · page {shown.page} of {shown.pages}"
        notice = state.notice()
        if notice:
            status += f"\n\n*{notice}*"
        return table, status, shown.page, shown.row_ids

    def render_first_page(search, *rest):
        return render(search, *rest[:-1], 1)

    def filter_updates() -> list[Any]:
        board = state.board
        return [gr.Dropdown(choices=board.choices(key)) for key, _ in CATEGORICAL]

    def skipped_updates() -> tuple[Any, Any]:
        board = state.board
        return (
            gr.Accordion(label=f"Skipped files ({len(board.skipped)})"),
            skipped_frame(board.skipped, store.root),
        )

    def stored_models() -> list[str]:
        return sorted({row.model for row in state.board.rows if row.entry is not None})

    def model_rows(model: str) -> list[Row]:
        return [row for row in state.board.rows if row.model == model and row.entry is not None]

    # -- detail view --------------------------------------------------------------------------------------
    def show_detail(row_id: str | None):
        row = state.board.by_id.get((row_id or "").strip())
        nothing = gr.Dropdown(choices=[], value=None)

        def no_run_detail(header: str, metrics: Any) -> tuple[Any, ...]:
            """The detail outputs of a row without a results document (none chosen, or a reported row)."""
            return (
                header,
                metrics,
                plots.heatmap_figure([], ""),
                views.per_edit_frame({}),
                nothing,
                views.empty_chains(),
                None,
                None,
                None,
                None,
            )

        if row is None:
            message = "Choose a result: click a row of the table, or open a permalink (?result=ID)."
            if row_id:
                message = f"No result with id {row_id!r} in this leaderboard."
            return no_run_detail(f"<p>{html.escape(message)}</p>", views.metrics_frame(None, None))
        permalink = f"?result={quote(row.row_id)}"
        if row.entry is None:  # reported: no document
            return no_run_detail(views.detail_header(row, permalink), views.metrics_frame(row, None))
        try:
            document = row.entry.document
        except StoreFileError as exc:
            return (f"<p>{html.escape(str(exc))}</p>", *show_detail(None)[1:])
        choices = views.edit_choices(document)
        first = choices[0][1] if choices else None
        download = state.downloads / f"results-{row.entry.results_sha256[:16]}.json"
        if not download.exists():
            shutil.copyfile(row.entry.results_file, download)
        files = [str(download)]
        archive = store.submission_path(row.entry.submission_sha256) if row.entry.submission_sha256 else None
        if archive is not None:  # a verified run's code: the submission archive it was run from
            copy = state.downloads / f"submission-{archive.name}"
            if not copy.exists():
                shutil.copyfile(archive, copy)
            files.append(str(copy))
        config = dict(document["config"])
        shown_edits = document["per_edit"][: views.DETAIL_ROWS]
        return (
            views.detail_header(row, permalink) + views.private_note(document),
            views.metrics_frame(row, document),
            plots.heatmap_figure(shown_edits, f"{row.model} · {row.editor}: per-edit metrics"),
            views.per_edit_frame(document),
            gr.Dropdown(choices=choices, value=first),
            views.chains_frame(document, first),
            views.bounded_json(config),
            views.bounded_json(views.provenance(row, document)),
            views.bounded_json(document.get("environment")),
            files,
        )

    def show_chains(row_id: str | None, edit_id: str | None):
        row = state.board.by_id.get((row_id or "").strip())
        if row is None or row.entry is None or not edit_id:
            return views.empty_chains()
        try:
            return views.chains_frame(row.entry.document, edit_id)
        except StoreFileError:
            return views.empty_chains()

    # -- compare ------------------------------------------------------------------------------------------
    def compare_choices(model: str | None, a: str | None = None, b: str | None = None):
        rows = model_rows(model) if model else []
        choices = [(row_label(r), r.row_id) for r in rows]
        ids = {r.row_id for r in rows}
        return (
            gr.Dropdown(choices=choices, value=a if a in ids else None),
            gr.Dropdown(choices=choices, value=b if b in ids else None),
        )

    def run_compare(a: str | None, b: str | None):
        comparison = views.compare(state.board.by_id.get(a or ""), state.board.by_id.get(b or ""))
        permalink = f"?a={quote(a)}&b={quote(b)}" if a and b else ""
        message = comparison.message + (
            f"\nPermalink: {permalink}" if permalink and comparison.edits.size else ""
        )
        return message, comparison.metrics, comparison.edits

    # -- submit and queue ---------------------------------------------------------------------------------
    def do_submit(upload: str | None):
        from runner.submission import submit

        if not upload:
            return "Choose a submission archive (.tar.gz or .zip) first."
        path = Path(upload)
        try:
            size = path.stat().st_size
        except OSError as exc:
            return f"error: cannot read the upload: {exc.strerror or exc}"
        if size > upload_limit_bytes:
            return f"error: {path.name} is {size} bytes; uploads are limited to {upload_limit_bytes} bytes"
        try:
            submission, jobs = submit(path, store, state.queue())
        except KnowgicError as exc:
            return f"error: {' '.join(str(exc).replace(str(path.parent) + os.sep, '').split())}"
        lines = [
            f"queued {len(jobs)} job(s) for {submission.name} {submission.version} (sha256 {submission.sha256[:12]}…):"
        ]
        lines += [
            f"  {job.job_id}: {job.model} · {job.protocol} · {job.mode} · {str(job.state).lower()}"
            for job in jobs
        ]
        return "\n".join(lines)

    def queue_table():
        try:
            return jobs_frame(state.queue().jobs())
        except KnowgicError as exc:
            return pd.DataFrame({"Queue": [f"cannot read the queue: {exc}"]})

    # -- refresh ------------------------------------------------------------------------------------------
    def tick(seen_version: int, search, *rest):
        """A page's timer: its table is redrawn only when the board changed since that page last drew it."""
        state.refresh(min_age_seconds=refresh_seconds * 0.8)
        jobs = queue_table()
        if seen_version == state.version:
            return (*[gr.skip()] * (4 + len(CATEGORICAL) + 2 + 1), jobs, seen_version)
        return (
            *render(search, *rest),
            *filter_updates(),
            *skipped_updates(),
            gr.Dropdown(choices=stored_models()),
            jobs,
            state.version,
        )

    def reload(search, *rest):
        state.refresh()
        return (
            *render(search, *rest),
            *filter_updates(),
            *skipped_updates(),
            gr.Dropdown(choices=stored_models()),
            state.version,
        )

    def csv_download(search, *rest):
        query = _query(search, rest[: len(CATEGORICAL)], *rest[len(CATEGORICAL) :], 1)
        frame = state.board.export(query)
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
        target = state.downloads / f"knowgic-leaderboard-{stamp}.csv"
        frame.to_csv(target, index=False)
        return gr.File(value=str(target), visible=True)

    # -- page load: permalinks ----------------------------------------------------------------------------
    def on_load(
        search: str,
        models_: list[str],
        editors: list[str],
        protocols: list[str],
        modes: list[str],
        datasets: list[str],
        sources: list[str],
        sort: str,
        order: str,
        columns: list[str],
        page: int,
        request: gr.Request,
    ):
        params = dict(request.query_params) if request is not None else {}
        version = state.version  # read before drawing: a change in between is redrawn by the next tick
        table = render(
            search, models_, editors, protocols, modes, datasets, sources, sort, order, columns, page
        )
        models = stored_models()
        result = params.get("result")
        a, b = params.get("a"), params.get("b")
        tab = gr.Tabs()
        model_choice: Any = gr.Dropdown(choices=models)
        detail = [gr.skip()] * 11
        compare_out = [gr.skip()] * 5
        if result:
            tab = gr.Tabs(selected="detail")
            detail = [result, *show_detail(result)]
        elif a and b:
            tab = gr.Tabs(selected="compare")
            row_a = state.board.by_id.get(a)
            model = row_a.model if row_a else None
            dropdown_a, dropdown_b = compare_choices(model, a, b)
            model_choice = gr.Dropdown(choices=models, value=model)
            compare_out = [dropdown_a, dropdown_b, *run_compare(a, b)]
        return (*table, *filter_updates(), model_choice, tab, *detail, *compare_out, version)

    def open_clicked(row_ids: list[str], evt: gr.SelectData):
        index = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        if not row_ids or index is None or index >= len(row_ids):
            return gr.skip(), gr.skip(), *[gr.skip()] * 10
        row_id = row_ids[index]
        return gr.Tabs(selected="detail"), row_id, *show_detail(row_id)

    # -- layout -------------------------------------------------------------------------------------------
    with gr.Blocks(title=title) as app:
        gr.Markdown(
            "# KnowGIC leaderboard\nDeep knowledge editing: IFR (Indirect Fact Recovery: how much of the "
            "old fact stays deducible, lower is better), Preservation, Efficacy, Generalization, "
            "Specificity and the deep-editing score (higher is better), each with its n and 95% interval. "
            "Rows are *verified* (run by the runner and signed by a worker key this leaderboard trusts), "
            "*local* (a results.json someone ran, or any unsigned entry) or *reported* "
            "(published by the KnowGIC paper's authors). "
            'Hover a value for its interval; hover "–" for why a metric is undefined.'
        )
        with gr.Tabs(selected="board") as tabs:
            with gr.Tab("Leaderboard", id="board"):
                with gr.Row():
                    search = gr.Textbox(
                        label="Search",
                        placeholder="model, editor, id, submitter…",
                        scale=3,
                        elem_id="kg-search",
                    )
                    sort = gr.Dropdown(sort_choices, value=DEFAULT_SORT, label="Sort by", elem_id="kg-sort")
                    order = gr.Radio(
                        ["descending", "ascending"], value="descending", label="Order", elem_id="kg-order"
                    )
                with gr.Row():
                    filters = [
                        gr.Dropdown(
                            choices=state.board.choices(key),
                            multiselect=True,
                            label=label,
                            elem_id=f"kg-filter-{key}",
                        )
                        for key, label in CATEGORICAL
                    ]
                columns = gr.CheckboxGroup(
                    column_choices, value=list(DEFAULT_COLUMNS), label="Columns", elem_id="kg-columns"
                )
                with gr.Row():
                    status = gr.Markdown(elem_id="kg-status")
                    prev_page = gr.Button("◀ previous", size="sm", elem_id="kg-prev")
                    page = gr.Number(
                        value=1, precision=0, label="Page", minimum=1, elem_id="kg-page", scale=0
                    )
                    next_page = gr.Button("next ▶", size="sm", elem_id="kg-next")
                table = gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    max_height=900,
                    elem_id="kg-table",
                    label=f"Results ({PAGE_SIZE} per page; click a row for its details)",
                )
                row_ids = gr.State([])
                seen_version = gr.State(-1)  # the board version this page shows
                with gr.Row():
                    reload_button = gr.Button("Re-read the store now", size="sm", elem_id="kg-reload")
                    csv_button = gr.Button("Download the filtered table as CSV", size="sm", elem_id="kg-csv")
                    csv_file = gr.File(label="CSV", interactive=False, visible=False, elem_id="kg-csv-file")
                with gr.Accordion(
                    f"Skipped files ({len(state.board.skipped)})", open=False, elem_id="kg-skipped"
                ) as skipped_box:
                    gr.Markdown(
                        "Files of the store that are not shown, and why (malformed, forged, unreadable)."
                    )
                    skipped = gr.Dataframe(
                        skipped_frame(state.board.skipped, store.root),
                        interactive=False,
                        wrap=True,
                        elem_id="kg-skipped-table",
                    )
            with gr.Tab("Plots", id="plots") as plots_tab:
                plot_model = gr.Dropdown(label="Model", allow_custom_value=True, elem_id="kg-plot-model")
                gr.Markdown("Points and lines follow the table's search and filters.")
                tradeoff_plot = gr.Plot(label="IFR against Preservation", elem_id="kg-tradeoff")
                length_plot = gr.Plot(label="IFR by chain length", elem_id="kg-lengths")
            with gr.Tab("Result", id="detail"):
                with gr.Row():
                    detail_id = gr.Textbox(label="Result id", scale=4, elem_id="kg-detail-id")
                    detail_open = gr.Button("Open", scale=0, elem_id="kg-detail-open")
                detail_header = gr.HTML(elem_id="kg-detail-header")
                detail_metrics = gr.Dataframe(
                    label="Metrics", interactive=False, wrap=True, elem_id="kg-detail-metrics"
                )
                detail_download = gr.File(
                    label="results.json (and the submission archive of a verified run)",
                    file_count="multiple",
                    interactive=False,
                    elem_id="kg-detail-download",
                )
                heatmap = gr.Plot(label="Per-edit metrics", elem_id="kg-heatmap")
                per_edit = gr.Dataframe(label="Per edit", interactive=False, wrap=True, elem_id="kg-per-edit")
                edit_choice = gr.Dropdown(
                    label="Chains of edit", allow_custom_value=True, elem_id="kg-edit-choice"
                )
                chains = gr.Dataframe(
                    label="Chains (r before and after the edit)",
                    interactive=False,
                    wrap=True,
                    elem_id="kg-chains",
                )
                with gr.Accordion("Configuration and hyper-parameters", open=False):
                    config_json = gr.JSON(label="config", elem_id="kg-config")
                with gr.Accordion("Provenance", open=False):
                    provenance_json = gr.JSON(label="provenance", elem_id="kg-provenance")
                with gr.Accordion("Environment", open=False):
                    environment_json = gr.JSON(label="environment", elem_id="kg-environment")
            with gr.Tab("Compare", id="compare"):
                gr.Markdown(
                    "Two results of one model, side by side: B − A per metric, with a paired bootstrap interval."
                )
                with gr.Row():
                    compare_model = gr.Dropdown(
                        label="Model", allow_custom_value=True, elem_id="kg-compare-model"
                    )
                    compare_a = gr.Dropdown(label="A", allow_custom_value=True, elem_id="kg-compare-a")
                    compare_b = gr.Dropdown(label="B", allow_custom_value=True, elem_id="kg-compare-b")
                compare_button = gr.Button("Compare", elem_id="kg-compare-button")
                compare_message = gr.Textbox(
                    label="Comparison", lines=3, interactive=False, elem_id="kg-compare-message"
                )
                compare_metrics = gr.Dataframe(
                    label="Metric by metric", interactive=False, wrap=True, elem_id="kg-compare-metrics"
                )
                compare_edits = gr.Dataframe(
                    label="Edit by edit", interactive=False, wrap=True, elem_id="kg-compare-edits"
                )
            with gr.Tab("Submit", id="submit"):
                gr.Markdown(
                    "Upload a submission archive (.tar.gz or .zip with `submission.yaml` at its root): it is "
                    "checked as `knowgic runner submit` checks it (schema, size, safe archive) and its jobs "
                    f"are queued. Uploads are limited to {upload_limit_bytes // (1024 * 1024)} MiB."
                )
                upload = gr.File(
                    label="Submission archive", file_types=[".gz", ".tgz", ".zip"], elem_id="kg-upload"
                )
                submit_button = gr.Button("Validate and queue", variant="primary", elem_id="kg-submit")
                submit_message = gr.Textbox(
                    label="Result", lines=4, interactive=False, elem_id="kg-submit-message"
                )
            with gr.Tab("Queue", id="queue"):
                queue_refresh = gr.Button("Refresh", size="sm", elem_id="kg-queue-refresh")
                queue_view = gr.Dataframe(
                    queue_table(),
                    interactive=False,
                    wrap=True,
                    column_widths=["13%", "10%", "9%", "6%", "8%", "6%", "5%", "12%", "17%", "7%", "7%"],
                    elem_id="kg-queue",
                )
        timer = gr.Timer(refresh_seconds)

        table_inputs = [search, *filters, sort, order, columns, page]
        table_outputs = [table, status, page, row_ids]
        for control in (*filters, sort, order, columns):
            control.change(
                render_first_page, table_inputs, table_outputs, api_name=False, show_progress="hidden"
            )
        search.change(
            render_first_page,
            table_inputs,
            table_outputs,
            api_name=False,
            show_progress="hidden",
            trigger_mode="always_last",
        )
        page.submit(render, table_inputs, table_outputs, api_name="table", show_progress="hidden")

        def step(delta: int):
            def go(search, *rest):
                return render(search, *rest[:-1], int(rest[-1] or 1) + delta)

            return go

        prev_page.click(step(-1), table_inputs, table_outputs, api_name=False, show_progress="hidden")
        next_page.click(step(+1), table_inputs, table_outputs, api_name=False, show_progress="hidden")
        csv_button.click(csv_download, table_inputs[:-1], csv_file, api_name="csv")
        reload_button.click(
            reload,
            table_inputs,
            [*table_outputs, *filters, skipped_box, skipped, compare_model, seen_version],
            api_name="reload",
            show_progress="hidden",
        )

        detail_outputs = [
            detail_header,
            detail_metrics,
            heatmap,
            per_edit,
            edit_choice,
            chains,
            config_json,
            provenance_json,
            environment_json,
            detail_download,
        ]
        detail_open.click(show_detail, detail_id, detail_outputs, api_name="detail")
        detail_id.submit(show_detail, detail_id, detail_outputs, api_name=False)
        edit_choice.change(show_chains, [detail_id, edit_choice], chains, api_name="chains")
        table.select(open_clicked, row_ids, [tabs, detail_id, *detail_outputs], api_name=False)

        def plot(model, search, *rest):
            query = _query(search, rest[: len(CATEGORICAL)], *rest[len(CATEGORICAL) :], 1)
            frame = state.board.select(query)
            models = sorted(frame["model"].unique().tolist()) if not frame.empty else []
            if model not in models:  # first the model with the most runs shown (stored before reported)
                counts = frame.groupby("model")["source"].agg(lambda s: ((s != "reported").sum(), len(s)))
                model = max(models, key=lambda m: (*counts[m], -models.index(m))) if models else None
            return (
                gr.Dropdown(choices=models, value=model),
                plots.tradeoff_figure(frame, model),
                plots.length_figure(frame, model),
            )

        plot_inputs = [plot_model, *table_inputs[:-1]]
        plot_outputs = [plot_model, tradeoff_plot, length_plot]
        plot_model.input(plot, plot_inputs, plot_outputs, api_name="plots")

        compare_model.input(compare_choices, compare_model, [compare_a, compare_b], api_name=False)
        compare_button.click(
            run_compare,
            [compare_a, compare_b],
            [compare_message, compare_metrics, compare_edits],
            api_name="compare",
        )

        submit_button.click(do_submit, upload, submit_message, api_name="submit").then(
            queue_table, None, queue_view, api_name=False
        )
        queue_refresh.click(queue_table, None, queue_view, api_name="queue")

        timer.tick(
            tick,
            [seen_version, *table_inputs],
            [*table_outputs, *filters, skipped_box, skipped, compare_model, queue_view, seen_version],
            api_name=False,
            show_progress="hidden",
        )
        app.load(
            on_load,
            table_inputs,
            [
                *table_outputs,
                *filters,
                compare_model,
                tabs,
                detail_id,
                *detail_outputs,
                compare_a,
                compare_b,
                compare_message,
                compare_metrics,
                compare_edits,
                seen_version,
            ],
            api_name=False,
            show_progress="hidden",
        )
        # The plots are drawn when their tab opens: a large board costs nothing for them until then.
        plots_tab.select(plot, plot_inputs, plot_outputs, api_name=False)
    app.leaderboard_state = state  # type: ignore[attr-defined]
    app.upload_limit_bytes = upload_limit_bytes  # type: ignore[attr-defined]
    return app


def launch_app(
    app: gr.Blocks,
    *,
    host: str | None = None,
    port: int | None = None,
    block: bool = True,
    quiet: bool = False,
) -> tuple[Any, str, str]:
    """Serve ``app`` with the leaderboard's CSS and its upload size limit (Gradio refuses larger files)."""
    return app.launch(
        server_name=host,
        server_port=port,
        prevent_thread_lock=not block,
        max_file_size=getattr(app, "upload_limit_bytes", DEFAULT_UPLOAD_LIMIT_BYTES),
        css=CSS,
        quiet=quiet,
        footer_links=["api"],
    )


def main() -> int:
    """Entry point of a Hugging Face Space (``python leaderboard/app.py [OPTIONS]``): ``knowgic leaderboard``
    itself, so the store, the queue and the one-line errors are the command's (leaderboard/commands.py)."""
    from knowgic.cli import main as cli_main

    return cli_main(["leaderboard", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
