"""The KnowGIC leaderboard: a Gradio app over a results store and its job queue.

``build_app(store_path)`` returns the :class:`gradio.Blocks`; ``launch_app`` serves it with the page's CSS
and the upload size limit. Run as a script (or as a Hugging Face Space, whose entry point this file is) it
is ``knowgic leaderboard`` (leaderboard/commands.py): it serves ``$KNOWGIC_STORE``, or, when
``KNOWGIC_STORE_REPO`` names a hub dataset repository, a snapshot of that repository fetched with
``huggingface_hub``; ``KNOWGIC_QUEUE_URL`` names the queue database (default: the store's SQLite file).

Everything shown comes from :meth:`knowgic.runner.store.store.ResultsStore.scan`, so only results that pass every check
of :mod:`knowgic.runner.store.checks` appear, and a run is *verified* only with a worker's signature by a trusted
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import gradio as gr
import pandas as pd

from knowgic.errors import KnowgicError
from knowgic.formatting import FEW_EDITS_MARK
from knowgic.intervals import FEW_EDITS
from knowgic.leaderboard import plots, views
from knowgic.leaderboard.about import about_markdown
from knowgic.leaderboard.accounts import leaderboard_policy, submit_upload
from knowgic.leaderboard.columns import Columns, leaderboard_columns
from knowgic.leaderboard.table import (
    ALL_MODELS,
    FILTERS,
    PAGE_SIZE,
    Board,
    RankCache,
    TableQuery,
    column_headers,
    default_columns,
    ranking_choice,
    row_label,
    skipped_frame,
    sortable,
    split_choice,
)
from knowgic.runner.store.signing import TrustedKeys
from knowgic.runner.store.store import ResultsStore, SkippedFile, StoreEntry, StoreFileError, StoreScan

DEFAULT_UPLOAD_LIMIT_BYTES = 50 * 1024 * 1024
DEFAULT_REFRESH_SECONDS = 5.0

CSS = """
.kg-metric { white-space: nowrap; }
.kg-value { font-weight: 600; }
.kg-interval { color: var(--body-text-color); font-size: 0.92em; }
.kg-rank { font-weight: 700; }
.kg-undefined { cursor: help; text-decoration: underline dotted; }
.kg-editor { font-weight: 600; }
.kg-verified { font-size: 0.85em; color: var(--color-accent); white-space: nowrap; }
#kg-header h1 { margin: 0; font-size: 1.5em; }
#kg-header p { margin: 0.2em 0 0; }
#kg-status { align-self: end; }
#kg-status .html-container { padding: 0; }  /* in line with the blocks beside and under it */
.kg-hint p { font-size: 0.9em; margin: 0; }
.kg-links { white-space: nowrap; }
#kg-about td:nth-child(-n+2), #kg-about th:nth-child(-n+2) { white-space: nowrap; }
#kg-about th, #kg-about td { word-break: normal; overflow-wrap: break-word; }
/* Words stay whole in every table, headers included: Gradio's tables break a word anywhere, so a
   narrow column put one letter a line. A column is now at least its longest word wide, and a table wider
   than the screen scrolls sideways; only a word longer than its column (a path) still breaks. */
.table-wrap th span.header, .table-wrap td span { word-break: normal; overflow-wrap: break-word; }
/* A phone: the title, then the model and the ranking (rank and editor pinned, IFR beside them), each
   interval under its value, so that the first metric column fits the screen whole. */
#kg-board-head { flex-wrap: wrap; }
#kg-status { flex: 1 1 320px; }
@media (max-width: 640px) {
  #kg-header p { display: none; }
  .kg-metric { display: inline-grid; grid-template-columns: max-content 1fr; column-gap: 0.3em; }
  .kg-metric .kg-interval { grid-row: 2; grid-column: 1 / span 2; }
}

"""


def header(columns: Columns) -> str:
    """The page's title and first lines: what is measured, which way is better, which figures are the
    paper's and which rank (from the metric declarations)."""
    papers = columns.papers()
    which = ""
    if papers:
        shown = " and ".join(f"**{paper.label}**" for paper, _ in papers)
        ranking = " and ".join(f"**{form.label}**" for _, form in papers)
        which = (
            f" {shown} are the paper's pooled figures, shown as it defines them; {ranking}, every edit "
            "weighing the same, are what ranks."
        )
    return (
        "# KnowGIC leaderboard\n"
        "Deep knowledge editing: after an edit, how much of the old fact can a model still deduce? "
        "**IFR** (Indirect Fact Recovery) is better lower ↓; **Preservation**, **Efficacy**, **Specificity** "
        "and the **deep-editing score** are better higher ↑. Values carry their 95% interval, ranks their 95% "
        f"range among runs of one model on one edit set (About).{which}"
    )


def _fmt_seconds(seconds: float) -> str:
    if seconds < 1:
        return "<1 s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# Worker processes that verify results files (each check is CPU work: processes keep requests answered).
VERIFY_PROCESSES = max(1, min(4, (os.cpu_count() or 2) - 1))
VERIFY_PUBLISH_SECONDS = 2.0  # how often background verification shows the rows it has verified


@dataclass
class LeaderboardState:
    """One app's view of its store: the current board (rebuilt when the store changes) and the queue.

    Results not verified yet are verified by one background thread; ``progress`` is (done, total) while it
    runs, else None. ``columns``: the metric columns of every board, view and plot of this app (default:
    the shipped spec's, read when the state is made)."""

    store: ResultsStore
    queue_url: str
    include_reported: bool = True
    verify_processes: int = VERIFY_PROCESSES
    columns: Columns = field(default_factory=leaderboard_columns)
    board: Board = field(init=False)
    downloads: Path = field(init=False)
    version: int = field(default=0, init=False)  # bumped whenever the board changes
    progress: tuple[int, int] | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _scanned_at: float = field(default_factory=time.monotonic, init=False)
    _queue: Any = field(default=None, init=False)
    _verifier: threading.Thread | None = field(default=None, init=False)
    _closed: threading.Event = field(default_factory=threading.Event, init=False)
    # Each track's ranks by the hashes of its runs, kept across boards (see knowgic.leaderboard.table.Board).
    rank_cache: RankCache = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.downloads = Path(tempfile.mkdtemp(prefix="knowgic-leaderboard-"))
        self.board = self._board(StoreScan())  # until the store is read: the page answers at once
        self._start(None)

    def _start(self, scan: StoreScan | None) -> None:
        """Read the store (``scan`` None) and verify its new results in a background thread (the caller
        holds the lock or is __init__)."""
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
        # The checks run in worker processes: each is CPU work, and requests must never wait for it.
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
        board = self._board(StoreScan(entries=ordered, skipped=files + others))
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
            self.board = self._board(scan)
            self.version += 1
            return True

    def _board(self, scan: Any) -> Board:
        return Board(
            scan, include_reported=self.include_reported, rank_cache=self.rank_cache, columns=self.columns
        )

    def queue(self) -> Any:
        from knowgic.runner.queue.queue import JobQueue

        if self._queue is None:
            self._queue = JobQueue(self.queue_url)
        return self._queue


# The queue view's columns, each with its width in pixels: wide enough for its header's words and its short
# values ("cancelled", "independent", a date). A screen narrower than all of them scrolls the table sideways,
# instead of cutting each column to a share of the screen and a header to a letter a line.
JOB_COLUMNS: dict[str, str] = {
    "Job": "150px",
    "Submission": "130px",
    "Model": "120px",
    "Protocol": "95px",
    "Mode": "115px",
    "State": "95px",
    "Lost runs": "60px",
    "Time in each state": "150px",
    "Reason": "200px",
    "Worker": "90px",
    "Updated": "110px",
}


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
                # Counts runs lost to dead workers or host faults, not the first run (see knowgic.runner.queue.queue).
                "Lost runs": f"{job.attempts}/{job.max_attempts}",
                "Time in each state": times or "–",
                "Reason": job.reason or "",
                "Worker": job.worker or "–",
                "Updated": job.updated_at.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            }
        )
    return pd.DataFrame.from_records(records, columns=list(JOB_COLUMNS))


CONTROL_NAMES: tuple[str, ...] = ("model", "search", *(key for key, _ in FILTERS), "sort", "order", "columns")
"""The Leaderboard tab's controls, in the order its inputs (and the /table, /csv, /plots API) take them."""


@dataclass(frozen=True)
class Controls:
    """What the ranking is asked to show: the controls' values by name (:data:`CONTROL_NAMES`)."""

    values: Mapping[str, Any]

    @classmethod
    def of(cls, values: Sequence[Any]) -> Controls:
        return cls(dict(zip(CONTROL_NAMES, values, strict=True)))

    @property
    def model(self) -> str | None:
        return self.values["model"] or None

    def query(self, page: Any = 1, part: str = "ranked", model: str | None = None) -> TableQuery:
        v = self.values
        return TableQuery(
            search=v["search"] or "",
            filters={key: list(v[key] or []) for key, _ in FILTERS},
            sort=v["sort"] or None,
            descending=v["order"] != "ascending",
            columns=list(v["columns"] or []) or None,
            page=int(page or 1),
            model=model or self.model,
            part=part,
        )


def _frame_update(shown: Any) -> gr.Dataframe:
    return gr.Dataframe(
        value=pd.DataFrame(shown.cells, columns=shown.headers)
        if shown.cells
        else pd.DataFrame(columns=shown.headers),
        datatype=shown.datatypes,
        column_widths=shown.widths,
    )


def _status(shown: Any, model: str | None, notice: str = "") -> str:
    """The line above the ranking, as HTML: how many results, of which model, the columns holding one value,
    and the ranking's edit set (its header); then the notice, if any.

    Every name in it comes from results files, so the line is escaped HTML text, not Markdown: no mark in a
    name (an image, a link, a bare address, emphasis, a tag) makes an element, and it shows as typed."""
    model, _ = split_choice(model)
    what = f"{shown.total} result(s)"
    if model and model != ALL_MODELS:
        what += f" of {_one_line(model)}"
    if shown.ranking is not None:
        what += f" · ranking on {_one_line(shown.ranking.edit_set)}"
    context = " · ".join(
        f"dataset {_one_line(value)}" if key == "dataset" else _one_line(value)
        for key, value in shown.constant.items()
        if key != "model"
    )
    parts = [what, *([f"all {context}"] if context else []), f"page {shown.page} of {shown.pages}"]
    line = html.escape(" · ".join(parts), quote=False)
    # What the ranks rest on: the private split every run was scored on, or the public data, and why.
    rank_note = getattr(shown, "rank_note", "")
    if rank_note:
        line += f'<br><span class="kg-rank-note">{html.escape(_one_line(rank_note), quote=False)}</span>'

    return line + (f'<br><em class="kg-notice">{html.escape(notice, quote=False)}</em>' if notice else "")


def _one_line(name: Any) -> str:
    """A name inside a sentence: its whitespace (line and paragraph separators too) one space."""
    return " ".join(str(name).split())


class BoardTab:
    """The ranking: one model's runs ranked (model selector first), reported rows apart, controls folded."""

    def __init__(self, state: LeaderboardState) -> None:
        self.state = state

    def model_choices(self) -> list[tuple[str, str]]:
        """One choice per ranking: a model's default ranking (full runs first) by the model's name, its other
        rankings (other edit sets, protocols, modes) by ``model@<id>``; models with reported rows only."""
        board = self.state.board
        choices = []
        for model in board.models():
            rankings = board.rankings(model)
            if not rankings:
                choices.append((f"{model} (reported)", model))
                continue
            for k, (key, runs) in enumerate(rankings):
                what = f"{key.dataset_version}, {'all' if key.full else 'first'} {key.edits} edits"
                if key.rule:
                    what += f", {key.protocol} ({key.rule})"
                else:
                    what += f", {key.protocol}"
                label = f"{model} · {what}, {key.mode} ({runs} run{'s' if runs != 1 else ''})"
                choices.append((label, ranking_choice(model, None if k == 0 else key)))
        return [*choices, ("All models (no ranks)", ALL_MODELS)]

    def default_model(self) -> str:
        models = self.state.board.models()
        return models[0] if models else ALL_MODELS

    def build(self) -> None:
        board, columns = self.state.board, self.state.columns
        with gr.Tab("Leaderboard", id="board"):
            self.row_ids = gr.State([])  # the ids of the rows shown, for a click on a row
            with gr.Row(equal_height=True, elem_id="kg-board-head"):
                self.model = gr.Dropdown(
                    self.model_choices(),
                    value=self.default_model(),
                    label="Ranking (one model, one edit set; full runs first)",
                    # The store is read in the background: its models arrive after the page is built.
                    allow_custom_value=True,
                    scale=1,
                    min_width=220,
                    elem_id="kg-model",
                )
                self.status = gr.HTML(elem_id="kg-status", min_width=320)
            self.table = gr.Dataframe(
                interactive=False,
                wrap=True,
                max_height=1100,
                pinned_columns=2,
                show_label=False,
                elem_id="kg-table",
            )
            with gr.Row(elem_id="kg-pager"):
                self.prev_page = gr.Button("◀ previous", size="sm", elem_id="kg-prev", scale=0)
                self.page = gr.Number(
                    value=1, precision=0, label="Page", minimum=1, elem_id="kg-page", scale=0, min_width=90
                )
                self.next_page = gr.Button("next ▶", size="sm", elem_id="kg-next", scale=0)
                gr.Markdown(
                    f"{PAGE_SIZE} runs a page. Click a row for its details; hover a value for its n and "
                    f"interval, a rank for how it is computed (see About); {FEW_EDITS_MARK} fewer than {FEW_EDITS:g} "
                    "effective edits.",
                    elem_classes="kg-hint",
                )
            with gr.Column(visible=False, elem_id="kg-reported-box") as self.reported_box:
                gr.Markdown(
                    "**Reported by the KnowGIC paper's authors**, not re-run here and not ranked with the "
                    "runs above: IFR and Preservation only, protocol and mode not stated."
                )
                self.reported = gr.Dataframe(interactive=False, wrap=True, elem_id="kg-reported")
            with gr.Accordion(
                "Advanced: search, filters, columns, sort", open=False, elem_id="kg-advanced"
            ) as self.advanced:
                with gr.Row():
                    self.search = gr.Textbox(
                        label="Search",
                        placeholder="editor, id, submitter…",
                        scale=3,
                        elem_id="kg-search",
                    )
                    self.sort = gr.Dropdown(
                        [(label, key) for key, label in sortable(columns)],
                        value=columns.rank.path,
                        label="Sort by",
                        elem_id="kg-sort",
                    )
                    self.order = gr.Radio(
                        ["descending", "ascending"], value="descending", label="Order", elem_id="kg-order"
                    )
                with gr.Row():
                    self.filters = {
                        key: gr.Dropdown(
                            choices=board.choices(key),
                            multiselect=True,
                            allow_custom_value=True,  # choices arrive with the store (background read)
                            label=label,
                            elem_id=f"kg-filter-{key}",
                        )
                        for key, label in FILTERS
                    }
                self.columns = gr.CheckboxGroup(
                    [(label, key) for key, label in column_headers(columns).items()],
                    value=list(default_columns(columns)),
                    label="Columns (model, protocol, mode, dataset and source show only where rows differ)",
                    elem_id="kg-columns",
                )
                with gr.Row():
                    self.reload_button = gr.Button("Re-read the store now", size="sm", elem_id="kg-reload")
                    self.csv_button = gr.Button(
                        "Download the filtered table as CSV", size="sm", elem_id="kg-csv"
                    )
                self.csv_file = gr.File(label="CSV", interactive=False, visible=False, elem_id="kg-csv-file")
            with gr.Accordion(
                f"Skipped files ({len(board.skipped)})", open=False, elem_id="kg-skipped"
            ) as self.skipped_box:
                gr.Markdown("Files of the store that are not shown, and why (malformed, forged, unreadable).")
                self.skipped = gr.Dataframe(
                    skipped_frame(board.skipped, self.state.store.root),
                    interactive=False,
                    wrap=True,
                    column_widths=["30%", "70%"],
                    elem_id="kg-skipped-table",
                )
        self.controls = [
            self.model,
            self.search,
            *(self.filters[key] for key, _ in FILTERS),
            self.sort,
            self.order,
            self.columns,
        ]
        self.inputs = [*self.controls, self.page]
        self.outputs = [self.table, self.status, self.page, self.row_ids, self.reported_box, self.reported]
        self.refreshed = [self.model, *self.filters.values(), self.skipped_box, self.skipped]

    def render(self, *values: Any) -> tuple[Any, ...]:
        """The ranking and the reported rows for the controls' values (then the page number)."""
        controls = Controls.of(values[:-1])
        board = self.state.board
        shown = board.page(controls.query(values[-1]))
        reported = board.page(controls.query(1, "reported"))
        reported_view = reported if reported.total else None
        return (
            _frame_update(shown),
            _status(shown, controls.model, self.state.notice()),
            shown.page,
            shown.row_ids,
            gr.Column(visible=reported_view is not None),
            _frame_update(reported_view) if reported_view else gr.skip(),
        )

    def refresh_updates(self) -> dict[Any, Any]:
        """Choices that follow the store: models, filter values, the skipped files."""
        board = self.state.board
        updates: dict[Any, Any] = {self.model: gr.Dropdown(choices=self.model_choices())}
        updates.update({self.filters[key]: gr.Dropdown(choices=board.choices(key)) for key, _ in FILTERS})
        updates[self.skipped_box] = gr.Accordion(label=f"Skipped files ({len(board.skipped)})")
        updates[self.skipped] = skipped_frame(board.skipped, self.state.store.root)
        return updates

    def csv(self, *values: Any) -> gr.File:
        controls = Controls.of(values)
        frame = self.state.board.export(controls.query(1, "all"))
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
        target = self.state.downloads / f"knowgic-leaderboard-{stamp}.csv"
        frame.to_csv(target, index=False)
        return gr.File(value=str(target), visible=True)

    def wire(self) -> None:
        def first_page(*values: Any) -> tuple[Any, ...]:
            return self.render(*values[:-1], 1)

        def step(delta: int) -> Callable[..., tuple[Any, ...]]:
            return lambda *values: self.render(*values[:-1], int(values[-1] or 1) + delta)

        quiet = {"api_name": False, "show_progress": "hidden"}
        for control in self.controls:
            if control is not self.search:
                control.change(first_page, self.inputs, self.outputs, **quiet)
        self.search.change(first_page, self.inputs, self.outputs, trigger_mode="always_last", **quiet)
        self.page.submit(self.render, self.inputs, self.outputs, api_name="table", show_progress="hidden")
        self.prev_page.click(step(-1), self.inputs, self.outputs, **quiet)
        self.next_page.click(step(+1), self.inputs, self.outputs, **quiet)
        self.csv_button.click(self.csv, self.controls, self.csv_file, api_name="csv")


class PlotsTab:
    """IFR against Preservation and IFR by chain length, for one model, following the ranking's filters."""

    def __init__(self, state: LeaderboardState, board: BoardTab) -> None:
        self.state, self.board = state, board

    def build(self) -> None:
        with gr.Tab("Plots", id="plots") as self.tab:
            self.model = gr.Dropdown(label="Model", allow_custom_value=True, elem_id="kg-plot-model")
            gr.Markdown(
                "Points follow the ranking's search and filters; bars are 95% intervals; each editor keeps "
                "its colour; circles are verified runs, diamonds local runs, squares reported numbers."
            )
            self.tradeoff = gr.Plot(show_label=False, elem_id="kg-tradeoff")
            self.lengths = gr.Plot(show_label=False, elem_id="kg-lengths")

    def plot(self, model: str | None, *values: Any) -> tuple[Any, ...]:
        controls = Controls.of(values)
        frame = self.state.board.select(controls.query(1, "all", ALL_MODELS))
        models = [m for m in self.state.board.models() if not frame.empty and m in set(frame["model"])]
        if model not in models:  # the ranking's model, else the model with the most runs
            asked = split_choice(controls.model)[0]
            model = asked if asked in models else (models[0] if models else None)
        return (
            gr.Dropdown(choices=models, value=model),
            plots.tradeoff_figure(frame, model or "", self.state.columns),
            plots.length_figure(frame, model or "", self.state.columns),
        )

    def wire(self) -> None:
        inputs = [self.model, *self.board.controls]
        outputs = [self.model, self.tradeoff, self.lengths]
        self.model.input(self.plot, inputs, outputs, api_name="plots")
        # Drawn when the tab opens: a large board costs nothing for the plots until then.
        self.tab.select(self.plot, inputs, outputs, api_name=False)


CHOOSE_RESULT = "Choose a result: click a row of the ranking, or open a permalink (?result=ID)."


class DetailTab:
    """One result: header, every metric, downloads, per-edit heatmap and table, chains, config, provenance."""

    def __init__(self, state: LeaderboardState) -> None:
        self.state = state

    def build(self) -> None:
        with gr.Tab("Result", id="detail"):
            with gr.Row():
                self.row_id = gr.Textbox(label="Result id", scale=4, elem_id="kg-detail-id")
                self.open = gr.Button("Open", scale=0, elem_id="kg-detail-open")
            self.header = gr.HTML(f"<p>{html.escape(CHOOSE_RESULT)}</p>", elem_id="kg-detail-header")
            # Shown once a result is chosen (no empty tables before); the records' part only for a stored run.
            with gr.Column(visible=False, elem_id="kg-detail-body") as self.body:
                self._build_body()
        self.outputs = [
            self.header,
            self.body,
            self.records,
            self.metrics,
            self.ripple,
            self.heatmap,
            self.per_edit,
            self.edit_choice,
            self.chains,
            self.config,
            self.provenance,
            self.environment,
            self.download,
        ]

    def _build_body(self) -> None:
        self.metrics = gr.Dataframe(
            label="Metrics",
            interactive=False,
            wrap=True,
            max_height=1200,  # every metric at once: no scrolling inside the table
            column_widths=["200px", "80px", "60px", "160px", "90px", "auto"],
            elem_id="kg-detail-metrics",
        )
        # RippleEdits' six criteria, one line each, where the run scored the version's ripple config.
        self.ripple = gr.Dataframe(
            label="RippleEdits' criteria (tests kept after their conditions on the unedited model)",
            interactive=False,
            wrap=True,
            visible=False,
            elem_id="kg-detail-ripple",
        )
        with gr.Column(visible=False, elem_id="kg-detail-records") as self.records:
            self.download = gr.File(
                label="results.json (and the submission archive of a verified run)",
                file_count="multiple",
                interactive=False,
                elem_id="kg-detail-download",
            )
            self.heatmap = gr.Plot(show_label=False, elem_id="kg-heatmap")
            self.per_edit = gr.Dataframe(
                label="Per edit", interactive=False, wrap=True, elem_id="kg-per-edit"
            )
            self.edit_choice = gr.Dropdown(
                label="Chains of edit", allow_custom_value=True, elem_id="kg-edit-choice"
            )
            self.chains = gr.Dataframe(
                label="Chains (r before and after the edit)",
                interactive=False,
                wrap=True,
                column_widths=views.CHAIN_WIDTHS,
                elem_id="kg-chains",
            )
            with gr.Accordion("Configuration and hyper-parameters", open=False):
                self.config = gr.JSON(label="config", elem_id="kg-config")
            with gr.Accordion("Provenance", open=False):
                self.provenance = gr.JSON(label="provenance", elem_id="kg-provenance")
            with gr.Accordion("Environment", open=False):
                self.environment = gr.JSON(label="environment", elem_id="kg-environment")

    def _without_document(self, header: str, metrics: Any | None) -> tuple[Any, ...]:
        """The outputs of a row without a results document: a reported row (``metrics``, no records), or
        none (``metrics`` None: only the header shows)."""
        return (
            header,
            gr.Column(visible=metrics is not None),
            gr.Column(visible=False),
            views.metrics_frame(None, None, self.state.columns) if metrics is None else metrics,
            gr.Dataframe(value=None, visible=False),
            plots.heatmap_figure([], "", self.state.columns),
            views.per_edit_frame({}, self.state.columns),
            gr.Dropdown(choices=[], value=None),
            views.empty_chains(),
            None,
            None,
            None,
            None,
        )

    def show(self, row_id: str | None) -> tuple[Any, ...]:
        state = self.state
        columns = state.columns
        row = state.board.by_id.get((row_id or "").strip())
        if row is None:
            message = f"No result with id {row_id!r} in this leaderboard." if row_id else CHOOSE_RESULT
            return self._without_document(f"<p>{html.escape(message)}</p>", None)
        permalink = f"?result={quote(row.row_id)}"
        if row.entry is None:  # reported: no document
            return self._without_document(
                views.detail_header(row, permalink), views.metrics_frame(row, None, columns)
            )
        try:
            document = row.entry.document
        except StoreFileError as exc:
            return self._without_document(f"<p>{html.escape(str(exc))}</p>", None)
        choices = views.edit_choices(document)
        first = choices[0][1] if choices else None
        ripple = views.ripple_frame(document, columns)
        files = [str(self._copy(row.entry.results_file, f"results-{row.entry.results_sha256[:16]}.json"))]
        sha = row.entry.submission_sha256
        archive = state.store.submission_path(sha) if sha else None
        if archive is not None:  # a verified run's code: the submission archive it was run from
            files.append(str(self._copy(archive, f"submission-{archive.name}")))
        return (
            views.detail_header(row, permalink) + views.private_note(document, row.private_check),
            gr.Column(visible=True),
            gr.Column(visible=True),
            views.metrics_frame(row, document, columns),
            gr.Dataframe(value=ripple, visible=ripple is not None),
            plots.heatmap_figure(
                document["per_edit"][: views.DETAIL_ROWS],
                f"{row.model} · {row.editor}: per-edit metrics",
                columns,
            ),
            views.per_edit_frame(document, columns),
            gr.Dropdown(choices=choices, value=first),
            views.chains_frame(document, first),
            views.bounded_json(dict(document["config"])),
            views.bounded_json(views.provenance(row, document)),
            views.bounded_json(document.get("environment")),
            files,
        )

    def _copy(self, source: Path, name: str) -> Path:
        target = self.state.downloads / name
        if not target.exists():
            shutil.copyfile(source, target)
        return target

    def chains_of(self, row_id: str | None, edit_id: str | None) -> pd.DataFrame:
        row = self.state.board.by_id.get((row_id or "").strip())
        if row is None or row.entry is None or not edit_id:
            return views.empty_chains()
        try:
            return views.chains_frame(row.entry.document, edit_id)
        except StoreFileError:
            return views.empty_chains()

    def wire(self) -> None:
        self.open.click(self.show, self.row_id, self.outputs, api_name="detail")
        self.row_id.submit(self.show, self.row_id, self.outputs, api_name=False)
        self.edit_choice.change(
            self.chains_of, [self.row_id, self.edit_choice], self.chains, api_name="chains"
        )


def compare_html(comparison: views.Comparison, a: str | None, b: str | None) -> str:
    """The comparison in words, and its permalink as a link (everything escaped)."""
    esc = html.escape
    lines = [f"<p><strong>{esc(sentence)}</strong></p>" for sentence in comparison.summary]
    lines += [f"<p>{esc(line)}</p>" for line in comparison.message.splitlines() if line]
    if a and b and comparison.edits.size:
        link = f"?a={quote(a)}&b={quote(b)}"
        lines.append(f'<p>Permalink: <a class="kg-permalink" href="{esc(link)}">{esc(link)}</a></p>')
    return "\n".join(lines)


CHOOSE_RUNS = "Choose a model, then two of its runs (A and B), and Compare."


class CompareTab:
    """Two runs of one model: B − A per metric with the paired interval, said in words; edit by edit."""

    def __init__(self, state: LeaderboardState) -> None:
        self.state = state

    def build(self) -> None:
        with gr.Tab("Compare", id="compare"):
            gr.Markdown("Two runs of one model: B − A per metric, with the interval of its paired test.")
            with gr.Row():
                self.model = gr.Dropdown(label="Model", allow_custom_value=True, elem_id="kg-compare-model")
                self.a = gr.Dropdown(label="A", allow_custom_value=True, elem_id="kg-compare-a")
                self.b = gr.Dropdown(label="B", allow_custom_value=True, elem_id="kg-compare-b")
            self.button = gr.Button("Compare", elem_id="kg-compare-button")
            self.message = gr.HTML(f"<p>{html.escape(CHOOSE_RUNS)}</p>", elem_id="kg-compare-message")
            # Shown once there is a comparison (no empty tables before).
            with gr.Column(visible=False, elem_id="kg-compare-tables") as self.tables:
                self.metrics = gr.Dataframe(
                    label="Metric by metric",
                    interactive=False,
                    wrap=True,
                    max_height=1200,  # every metric at once
                    elem_id="kg-compare-metrics",
                )
                self.edits = gr.Dataframe(
                    label="Edit by edit", interactive=False, wrap=True, elem_id="kg-compare-edits"
                )
        self.outputs = [self.message, self.tables, self.metrics, self.edits]
        self.lists_shown = [self.model, self.a, self.b]

    def stored_models(self) -> list[str]:
        return [
            m
            for m in self.state.board.models()
            if any(r.entry for r in self.state.board.rows if r.model == m)
        ]

    def lists(self, model: str | None, a: str | None = None, b: str | None = None) -> tuple[Any, Any, Any]:
        """The model list, its choice (``model`` where it has stored runs, else the first model with
        stored runs) and that model's runs as the choices of A and B."""
        models = self.stored_models()
        model = model if model in models else (models[0] if models else None)
        return (gr.Dropdown(choices=models, value=model), *self.choices(model, a, b))

    def choices(self, model: str | None, a: str | None = None, b: str | None = None) -> tuple[Any, Any]:
        rows = [r for r in self.state.board.rows if r.model == model and r.entry is not None] if model else []
        options = [(row_label(r), r.row_id) for r in rows]
        ids = {r.row_id for r in rows}
        return (
            gr.Dropdown(choices=options, value=a if a in ids else None),
            gr.Dropdown(choices=options, value=b if b in ids else None),
        )

    def run(self, a: str | None, b: str | None) -> tuple[Any, ...]:
        board = self.state.board
        comparison = views.compare(board.by_id.get(a or ""), board.by_id.get(b or ""), self.state.columns)
        return (
            compare_html(comparison, a, b),
            gr.Column(visible=not comparison.metrics.empty),
            comparison.metrics,
            comparison.edits,
        )

    def wire(self) -> None:
        self.model.input(self.choices, self.model, [self.a, self.b], api_name=False)
        self.button.click(self.run, [self.a, self.b], self.outputs, api_name="compare")


class QueueTab:
    """Upload a submission (Submit) and follow the jobs (Queue)."""

    def __init__(self, state: LeaderboardState, upload_limit_bytes: int) -> None:
        self.state, self.upload_limit_bytes = state, upload_limit_bytes
        self.policy = leaderboard_policy()  # who may submit, and quotas (leaderboard/accounts.py)
        self.token: gr.Textbox | None = None

    def build(self) -> None:
        with gr.Tab("Submit", id="submit"):
            gr.Markdown(
                "Upload a submission archive (.tar.gz or .zip with `submission.yaml` at its root): it is "
                "checked as `knowgic runner submit` checks it (schema, size, safe archive) and its jobs "
                f"are queued. Uploads are limited to {self.upload_limit_bytes // (1024 * 1024)} MiB. "
                "The About tab says what a submission holds."
            )
            self.upload = gr.File(
                label="Submission archive", file_types=[".gz", ".tgz", ".zip"], elem_id="kg-upload"
            )
            # Accounts (leaderboard/accounts.py): a sign-in, or a token field, where the deployment needs one.
            if self.policy.accounts == "huggingface":
                gr.LoginButton(elem_id="kg-login")
            elif self.policy.accounts == "token":
                self.token = gr.Textbox(label="Submitter token", type="password", elem_id="kg-token")
            self.submit = gr.Button("Validate and queue", variant="primary", elem_id="kg-submit")
            self.result = gr.Textbox(label="Result", lines=4, interactive=False, elem_id="kg-submit-message")
        with gr.Tab("Queue", id="queue"):
            with gr.Row():
                self.note = gr.Markdown(elem_id="kg-queue-note")
                self.refresh = gr.Button("Refresh", size="sm", elem_id="kg-queue-refresh", scale=0)
            self.table = gr.Dataframe(
                jobs_frame([]),
                interactive=False,
                wrap=True,
                column_widths=list(JOB_COLUMNS.values()),
                elem_id="kg-queue",
            )
        self.outputs = [self.note, self.table]

    def jobs(self) -> tuple[str, pd.DataFrame]:
        try:
            frame = jobs_frame(self.state.queue().jobs())
        except KnowgicError as exc:
            return f"Cannot read the queue: {exc}", jobs_frame([])
        if frame.empty:
            return "No jobs yet: submissions uploaded on the Submit tab are queued here.", frame
        counts = frame["State"].value_counts()
        return f"{len(frame)} job(s): " + ", ".join(f"{n} {state}" for state, n in counts.items()), frame

    def do_submit(
        self, upload: str | None, profile: gr.OAuthProfile | None = None, token: str | None = None
    ) -> str:
        """``profile``: the signed-in Hugging Face user, injected by Gradio from its session."""
        if not upload:
            return "Choose a submission archive (.tar.gz or .zip) first."
        path = Path(upload)
        try:
            size = path.stat().st_size
        except OSError as exc:
            return f"error: cannot read the upload: {exc.strerror or exc}"
        limit = self.upload_limit_bytes
        if size > limit:
            return f"error: {path.name} is {size} bytes; uploads are limited to {limit} bytes"
        try:
            username = profile.username if profile is not None else None
            submission, jobs = submit_upload(
                path, self.state.store, self.state.queue(), self.policy, hub_username=username, token=token
            )
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

    def wire(self) -> None:
        inputs = [self.upload] if self.token is None else [self.upload, self.token]
        self.submit.click(self.do_submit, inputs, self.result, api_name="submit").then(
            self.jobs, None, self.outputs, api_name=False
        )
        self.refresh.click(lambda: self.jobs()[1], None, self.table, api_name="queue")


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
    ``trusted_keys``: the workers' public keys (default: :func:`knowgic.runner.store.signing.default_trusted_keys_path`);
    a run signed by none of them is shown as local."""
    store = ResultsStore(
        store_path, verified_cache=verified_cache, trusted_keys=TrustedKeys.load(trusted_keys)
    )
    state = LeaderboardState(store, queue_url or store.queue_url(), include_reported)
    board = BoardTab(state)
    plot_tab = PlotsTab(state, board)
    detail = DetailTab(state)
    compare = CompareTab(state)
    queue = QueueTab(state, upload_limit_bytes)

    with gr.Blocks(title=title, fill_width=True) as app:
        gr.Markdown(header(state.columns), elem_id="kg-header")
        with gr.Tabs(selected="board") as tabs:
            board.build()
            plot_tab.build()
            detail.build()
            compare.build()
            queue.build()
            with gr.Tab("About", id="about"):
                gr.Markdown(about_markdown(state.columns), elem_id="kg-about")
        seen_version = gr.State(-1)  # the board version this page shows
        timer = gr.Timer(refresh_seconds)
        for piece in (board, plot_tab, detail, compare, queue):
            piece.wire()

        def redraw(values: Mapping[Any, Any]) -> dict[Any, Any]:
            """Everything that follows the store, for a page whose controls hold ``values``."""
            drawn = dict(zip(board.outputs, board.render(*(values[c] for c in board.inputs)), strict=True))
            drawn.update(board.refresh_updates())
            if compare.model in values:  # the Compare tab's lists, filled for its model (else the ranking's)
                model = values[compare.model] or split_choice(values[board.model])[0]
                lists = compare.lists(model, values[compare.a], values[compare.b])
                drawn.update(zip(compare.lists_shown, lists, strict=True))
            else:
                drawn[compare.model] = gr.Dropdown(choices=compare.stored_models())
            return drawn

        def tick(values: dict[Any, Any]) -> dict[Any, Any]:
            """A page's timer: its tables are redrawn only when the board changed since the page drew them."""
            state.refresh(min_age_seconds=refresh_seconds * 0.8)
            updates: dict[Any, Any] = dict(zip(queue.outputs, queue.jobs(), strict=True))
            # -1: the page's first draw (on_load) has not come back yet; drawing here could land after a
            # person's first choice and be overwritten by it, or overwrite it.
            if values[seen_version] != -1 and values[seen_version] != state.version:
                updates.update(redraw(values))
                updates[seen_version] = state.version
            return updates

        def reload(*values: Any) -> dict[Any, Any]:
            state.refresh()
            return {**redraw(dict(zip(board.inputs, values, strict=True))), seen_version: state.version}

        def on_load(values: dict[Any, Any], request: gr.Request) -> dict[Any, Any]:
            """The first draw, and the permalinks: ?result=ID (a run's page), ?a=ID&b=ID (a comparison),
            ?model=NAME (that model's default ranking; NAME@ID one of its others)."""
            params = dict(request.query_params) if request is not None else {}
            version = state.version  # read before drawing: a change in between is redrawn by the next tick
            model = params.get("model")
            if split_choice(model)[0] not in state.board.models():
                # The page was built before the store was read, perhaps: its default is this board's.
                model = board.default_model()
            values = {**values, board.model: model}
            updates = {**redraw(values), seen_version: version}
            updates.update(zip(queue.outputs, queue.jobs(), strict=True))
            updates[board.model] = gr.Dropdown(choices=board.model_choices(), value=model)
            result, a, b = params.get("result"), params.get("a"), params.get("b")
            if result:
                updates[tabs] = gr.Tabs(selected="detail")
                updates[detail.row_id] = result
                updates.update(zip(detail.outputs, detail.show(result), strict=True))
            elif a and b:
                updates[tabs] = gr.Tabs(selected="compare")
                row_a = state.board.by_id.get(a)
                lists = compare.lists(row_a.model if row_a else None, a, b)
                updates.update(zip(compare.lists_shown, lists, strict=True))
                updates.update(zip(compare.outputs, compare.run(a, b), strict=True))
            return updates

        def open_clicked(row_ids: list[str], evt: gr.SelectData) -> dict[Any, Any]:
            index = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
            if not row_ids or index is None or index >= len(row_ids):
                return {}
            row_id = row_ids[index]
            return {
                tabs: gr.Tabs(selected="detail"),
                detail.row_id: row_id,
                **dict(zip(detail.outputs, detail.show(row_id), strict=True)),
            }

        followed = [*board.outputs, *board.refreshed, *compare.lists_shown, seen_version]
        board.reload_button.click(reload, board.inputs, followed, api_name="reload", show_progress="hidden")
        board.table.select(
            open_clicked, board.row_ids, [tabs, detail.row_id, *detail.outputs], api_name=False
        )
        timer.tick(
            tick,
            {seen_version, *board.inputs, *compare.lists_shown},
            [*followed, *queue.outputs],
            api_name=False,
            show_progress="hidden",
        )
        app.load(
            on_load,
            {*board.inputs, *compare.lists_shown},
            [*followed, *queue.outputs, tabs, detail.row_id, *detail.outputs, *compare.outputs],
            api_name=False,
            show_progress="hidden",
        )
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
    """Serve ``app`` with the leaderboard's CSS and its upload size limit (Gradio refuses larger files).

    Gradio's own launch messages are never printed (they give advice about Gradio's options, such as a
    share link, that this command does not take): one line says where the page is, unless ``quiet``.
    ``block``: serve until interrupted (Ctrl+C closes the server without a message)."""
    launched = None
    # The server's thread keeps the process alive until it is closed: a Ctrl+C that lands anywhere after the
    # launch (a client can be served before the line below is printed) must close it, or nothing exits.
    try:
        launched = app.launch(
            server_name=host,
            server_port=port,
            prevent_thread_lock=True,
            max_file_size=getattr(app, "upload_limit_bytes", DEFAULT_UPLOAD_LIMIT_BYTES),
            css=CSS,
            quiet=True,
            footer_links=["api"],
        )
        if not quiet:
            print(f"KnowGIC leaderboard at {launched[1]} (Ctrl+C stops it)", flush=True)
        while block and app.is_running:
            time.sleep(0.1)
    except KeyboardInterrupt:
        app.close(verbose=False)
        if launched is None:
            raise
    return launched


def main() -> int:
    """Entry point of a Hugging Face Space (``python leaderboard/app.py [OPTIONS]``): ``knowgic leaderboard``
    itself, so the store, the queue and the one-line errors are the command's (leaderboard/commands.py)."""
    from knowgic.cli import main as cli_main

    return cli_main(["leaderboard", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
