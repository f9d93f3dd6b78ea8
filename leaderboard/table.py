"""The leaderboard's rows: one per stored run (verified or local) or per published row (reported).

A row keeps each metric as value, n, interval and the reason it is undefined; :class:`Board` holds every
row as a pandas frame for search, filters and sorting, and renders one page of it as the table a person
sees. Nothing a submitter wrote (names, descriptions, links) is ever rendered as markup: text is escaped,
and a link is shown only when it is an http(s) URL.
"""

from __future__ import annotations

import csv
import html
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from knowgic.formatting import FEW_EDITS_MARK, UNDEFINED, few_edits_note, format_interval, format_number
from knowgic.intervals import FEW_EDITS
from knowgic.leaderboard.columns import Columns, frame_column, leaderboard_columns
from knowgic.measure.private import OLD_BLOCK
from knowgic.measure.ranks import RankingKey, RankRange, ranking_key
from knowgic.results import content_sha256
from knowgic.runner.store.store import SkippedFile, StoreEntry, StoreFileError, StoreScan
from knowgic.yamlfile import read_yaml

DATA_DIR = Path(__file__).parent / "data"
REPORTED_DIR = DATA_DIR / "reported"

CATEGORICAL: tuple[tuple[str, str], ...] = (
    ("model", "Model"),
    ("editor", "Editor"),
    ("protocol", "Protocol"),
    ("mode", "Mode"),
    ("dataset", "Dataset"),
    ("source", "Source"),
)
# The filters of the "Advanced" section: the model is chosen by the ranking's own selector.
FILTERS: tuple[tuple[str, str], ...] = tuple(c for c in CATEGORICAL if c[0] != "model")
EXTRA_COLUMNS: tuple[tuple[str, str], ...] = (
    ("private_ifr", "Private IFR"),
    ("active_chains", "Active chains"),
    ("edits", "Edits"),
    ("links", "Paper / code"),
    ("submitter", "Submitted by"),
    ("added", "Added"),
    ("row_id", "Id"),
)
RANK_HEADER = "Rank"
# Shown only where they differ between the rows asked for: a column holding one value says nothing. The
# editor names the row, so it always shows.
HIDE_WHEN_CONSTANT = frozenset(key for key, _ in CATEGORICAL if key != "editor")
HIDE_WHEN_EMPTY = frozenset({"private_ifr"})
_SORTABLE_EXTRA: tuple[tuple[str, str], ...] = (
    ("private_ifr", "Private IFR"),
    ("active_chains", "Active chains"),
    ("added", "Added"),
)


def column_headers(columns: Columns) -> dict[str, str]:
    """Every column a person can show, key -> header, in order: the names, the metric columns (keyed by
    metric path, headed by the declared label), then the others."""
    return {**dict(CATEGORICAL), **{c.path: c.label for c in columns.table}, **dict(EXTRA_COLUMNS)}


def default_columns(columns: Columns) -> tuple[str, ...]:
    """The compact view: the names, the rank metric and the metrics it summarises, the private IFR (shown
    only where some row has one) and the links. The source is a badge in the editor's cell (verified
    runs), not a column of its own."""
    return (
        *(key for key, _ in CATEGORICAL if key != "source"),
        *(c.path for c in columns.default),
        "private_ifr",
        "links",
    )


def sortable(columns: Columns) -> tuple[tuple[str, str], ...]:
    """The columns the table sorts by, (key, header): every metric column, then a few others."""
    return (*((c.path, c.label) for c in columns.table), *_SORTABLE_EXTRA)


NO_PRIVATE = "no private split was scored in this run"
PAGE_SIZE = 25
ALL_MODELS = "all models"
UNSTATED = "unstated"
_URL = re.compile(r"^https?://[^\s\"'<>`\\]+$", re.IGNORECASE)
_SEARCHED = ("row_id", "model", "editor", "protocol", "mode", "dataset", "source", "submitter", "label")


def safe_url(value: Any) -> str | None:
    """``value`` when it is an http(s) URL without characters that could leave an attribute, else None."""
    if isinstance(value, str) and _URL.match(value.strip()):
        return value.strip()
    return None


NAME_CHARS = 200  # characters of a name in a row (model, editor, submitter, label): a table cell, not a page


def short(value: Any) -> str:
    """A name cut to ``NAME_CHARS`` characters (a stored file may hold longer strings; a row never shows them)."""
    value = "" if value is None else str(value)
    return value if len(value) <= NAME_CHARS else value[:NAME_CHARS] + "…"


EDITOR_CHARS = 24  # characters of an editor's name in a table cell; the whole name is on hover
_PLUGIN = re.compile(r"^[A-Za-z_][\w.]*:([A-Za-z_]\w*)$")  # a plug-in editor's entry point, module:Class


def short_editor(name: str) -> str:
    """An editor's name as a table cell shows it: a plug-in's ``module.path:Class`` by its class name, any
    name cut to ``EDITOR_CHARS`` characters (the cell's title holds the whole name)."""
    plugin = _PLUGIN.match(name)
    shown = plugin.group(1) if plugin else name
    return shown if len(shown) <= EDITOR_CHARS else shown[: EDITOR_CHARS - 1] + "…"


def text(value: Any) -> str:
    """Anything shown inside table HTML: escaped, so a submitter's ``<script>`` stays text."""
    return html.escape("" if value is None else str(value), quote=True)


@dataclass(frozen=True)
class MetricCell:
    """One metric of one row: ``value`` None means undefined, for ``reason``."""

    value: float | None
    n: int | None = None
    low: float | None = None
    high: float | None = None
    reason: str | None = None
    interval_reason: str | None = None
    # Below 10 effective edits (results schema 1.3): the figure rests on few edits (docs/metrics.md).
    few_edits: bool = False
    effective_edits: float | None = None

    @classmethod
    def from_results(cls, entry: Mapping[str, Any] | None, missing: str) -> MetricCell:
        if not isinstance(entry, Mapping):
            return cls(None, reason=missing)
        interval = entry.get("interval")
        low, high = (
            (interval[0], interval[1]) if isinstance(interval, list) and len(interval) == 2 else (None, None)
        )
        value = entry.get("value")
        return cls(
            value=None if value is None else float(value),
            n=entry.get("n"),
            low=low,
            high=high,
            reason=entry.get("reason") if value is None else None,
            interval_reason=entry.get("interval_reason"),
            few_edits=bool(entry.get("few_edits", False)),
            effective_edits=entry.get("effective_edits"),
        )

    def html(self, level: float | None) -> str:
        """The cell: value and interval (n on hover); "–" with the reason on hover when undefined (never 0)."""
        if self.value is None:
            reason = self.reason or "undefined"
            return f'<span class="kg-undefined" title="{text(reason)}">{UNDEFINED}</span>'
        hover = [f"value {self.value:.6g}"]
        if self.n is not None:
            hover.append(f"n = {self.n}")
        parts = [f'<span class="kg-value">{format_number(self.value, 3)}</span>']
        if self.low is not None and self.high is not None:
            pct = f"{level * 100:g}% " if level else ""
            hover.append(f"{pct}interval {format_interval((self.low, self.high))}")
            parts.append(f'<span class="kg-interval">{format_interval((self.low, self.high), 2)}</span>')
        elif self.interval_reason:
            hover.append(f"no interval: {self.interval_reason}")
        if self.few_edits:
            hover.append(
                f"{few_edits_note(self.effective_edits, FEW_EDITS, mark=False)}, the interval covers less"
            )
            parts.append(
                f'<span class="kg-few-edits">{FEW_EDITS_MARK}</span>'
            )  # compact: the cell stays one line
        return f'<span class="kg-metric" title="{text("; ".join(hover))}">{" ".join(parts)}</span>'


@dataclass(frozen=True)
class Row:
    """One leaderboard row."""

    row_id: str
    source: str  # verified, local or reported
    model: str
    editor: str
    protocol: str
    mode: str
    dataset: str
    metrics: dict[str, MetricCell]
    active_chains: int | None = None
    edits: int | None = None
    paper: str | None = None
    code: str | None = None
    submitter: str = ""
    label: str = ""
    added: str = ""
    level: float | None = None
    # IFR on the operator's private split (None: none was scored), and its flag (results schema 1.5's
    # private.ifr_gap, decided again with the store's reference runs where there are enough: Board);
    # ``private_unranked``: a drill's block, or one of schema 1.4 or before: shown, never ranked or flagged.
    private_ifr: MetricCell | None = None
    private_check: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    private_unranked: bool = False
    entry: StoreEntry | None = field(default=None, compare=False, repr=False)

    # What a rank is among (knowgic.measure.ranks.RankingKey): one model and revision, one edit set (dataset
    # version and hash, limit), the protocol with its parameters and known rule, the mode. None: not ranked
    # (a reported row).
    ranking: RankingKey | None = None

    @property
    def private_flagged(self) -> bool:
        return bool(self.private_check and self.private_check.get("flagged"))


@lru_cache(maxsize=1)
def method_links() -> dict[str, dict[str, str]]:
    """Paper and code links of the built-in editors (leaderboard/data/methods.yaml)."""
    data = read_yaml(DATA_DIR / "methods.yaml", "the methods file") or {}
    return {str(k): {kk: str(vv) for kk, vv in (v or {}).items()} for k, v in data.items()}


def _submitter(manifest: Mapping[str, Any] | None, label: str | None) -> str:
    if not manifest:
        return label or ""
    authors = manifest.get("authors") or []
    names = [a.get("name", "") if isinstance(a, Mapping) else str(a) for a in authors if a]
    who = ", ".join(str(n) for n in names if n)
    what = f"{manifest.get('name', '')} {manifest.get('version', '')}".strip()
    return " · ".join(part for part in (what, who) if part)


def _entry_at(metrics: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """The entry at a metric path of a results document's ``metrics``; None where it has none."""
    head, _, part = path.partition(".")
    entry = metrics.get(head)
    if part:
        entry = entry.get(part) if isinstance(entry, Mapping) else None
    return entry if isinstance(entry, Mapping) else None


def row_from_entry(entry: StoreEntry, columns: Columns) -> Row:
    """A stored run as a row: its metrics (one cell per metric column), counts and links."""
    summary = entry.summary
    config = summary["config"]
    metrics = summary["metrics"]
    cells = {
        c.path: MetricCell.from_results(_entry_at(metrics, c.path), "not in this results file")
        for c in columns.table
    }
    editor = str(config["editor"])
    builtin = method_links().get(editor, {})
    builtin_class = config.get("editor_class", "").startswith("knowgic.editors.")
    manifest = entry.manifest or {}
    paper = safe_url(manifest.get("paper")) if entry.manifest else None
    if paper is None and builtin_class:
        paper = safe_url(builtin.get("paper"))
    code = safe_url(builtin.get("code")) if builtin_class else None
    counts = summary.get("counts", {})
    private = summary.get("private")
    private_ifr = private_check = None
    private_unranked = False
    if isinstance(private, Mapping) and isinstance(private.get("metrics"), Mapping):
        private_ifr = MetricCell.from_results(private["metrics"].get("ifr"), "not in this file")
        gap = private.get("ifr_gap")
        private_check = gap if isinstance(gap, Mapping) else None
        # Results schema 1.4 and before (a same-edit holdout), or a drill: shown, never ranked or flagged.
        private_unranked = "ifr_gap" not in private or private.get("kind") != "disjoint"
    return Row(
        row_id=entry.entry_id,
        source=entry.source,
        model=short(config["model"]),
        editor=short(editor),
        protocol=str(config["protocol"]),
        ranking=ranking_key(summary),
        mode=str(config["mode"]),
        dataset=str(summary["dataset"]["version"]),
        metrics=cells,
        active_chains=counts.get("active_chains"),
        edits=counts.get("edits"),
        paper=paper,
        code=code,
        submitter=short(_submitter(entry.manifest, None)),
        label=short(entry.label),
        added=entry.added_at,
        level=(summary.get("uncertainty") or {}).get("level"),
        private_ifr=private_ifr,
        private_check=private_check,
        private_unranked=private_unranked,
        entry=entry,
    )


def reference_row(row: Row) -> bool:
    """Whether a row's run calibrates the private split's flag for the others: verified, by a built-in
    editor that edits (its editor is a built-in's name and its class that editor's class), with a gap on
    the private split."""
    from knowgic.editors.registry import BUILTIN_EDITORS
    from knowgic.measure.gap import is_reference_editor

    if row.entry is None or row.source != "verified" or row.private_check is None:
        return False
    config = row.entry.summary["config"]
    return (
        is_reference_editor(config)
        and BUILTIN_EDITORS.get(str(config.get("editor"))) == config.get("editor_class")
        and row.private_check.get("gap") is not None
    )


def calibrated_rows(rows: Sequence[Row]) -> list[Row]:
    """``rows`` with the private flag of each run its file could not calibrate (the split records no
    calibration for its ranking) decided again from the store's reference runs (:func:`reference_row`) of
    its ranking and private split, its own run left out, where there are at least
    :data:`knowgic.measure.gap.MIN_REFERENCE_RUNS`. A flag the split's own record calibrated (the
    operator's reference runs) is kept: a verified run's editor class is what its job named, and the
    split's record is the operator's own."""
    from dataclasses import replace

    from knowgic.measure.gap import MIN_REFERENCE_RUNS, STORE_SOURCE, calibration, recalibrated

    def split_of(row: Row) -> tuple[Any, ...]:
        private = row.entry.summary.get("private") if row.entry is not None else None
        dataset = private.get("dataset") if isinstance(private, Mapping) else None
        return (row.ranking, dataset.get("sha256") if isinstance(dataset, Mapping) else None)

    references: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        if reference_row(row):
            references.setdefault(split_of(row), []).append(row)
    out = []
    for row in rows:
        check = row.private_check
        if check is not None and check.get("calibration") is None and row.entry is not None:
            gaps = [
                float(r.private_check["gap"])  # type: ignore[index]
                for r in references.get(split_of(row), [])
                if r is not row
            ]
            if len(gaps) >= MIN_REFERENCE_RUNS:
                row = replace(row, private_check=recalibrated(check, calibration(gaps, STORE_SOURCE)))
        out.append(row)
    return out


# The upstream file names editors by the paper's spelling; rows use the benchmark's editor names.
_REPORTED_EDITORS = {
    "ROME": "rome",
    "MEMIT": "memit",
    "AlphaEdit": "alphaedit",
    "MEMIT-prune": "prune",
    "MEMIT-rect": "rect",
}
REPORTED_NOTE = "published by the KnowGIC paper's authors: IFR and Preservation only"
_REPORTED_ORDER_NOTE = "the authors' file has no length column; its row order is read as lengths 1 to 5"


def _slug(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")


# The authors' files name metrics by these columns (the lengths file's rows are the parts of IFR by length).
_REPORTED_METRICS = {"IFR": "ifr", "Preservation": "preservation"}


@lru_cache(maxsize=2)
def reported_rows(columns: Columns) -> tuple[Row, ...]:
    """The KnowGIC authors' published IFR and Preservation (leaderboard/data/reported/), a cell for each
    of ``columns``' metric columns (undefined where they report nothing)."""
    with (REPORTED_DIR / "ifr_by_chain_length.csv").open(encoding="utf-8", newline="") as handle:
        by_length: dict[tuple[str, str], list[float]] = {}
        for record in csv.DictReader(handle):
            by_length.setdefault((record["Model"], record["Technique"]), []).append(float(record["IFR"]))
    rows = []
    with (REPORTED_DIR / "ifr_preservation_results.csv").open(encoding="utf-8", newline="") as handle:
        for record in csv.DictReader(handle):
            model, technique = record["Model"], record["Technique"]
            editor = _REPORTED_EDITORS.get(technique, technique.lower())
            absent = f"not reported ({REPORTED_NOTE})"
            cells = {c.path: MetricCell(None, reason=absent) for c in columns.table}
            for name, path in _REPORTED_METRICS.items():
                cells[path] = MetricCell(
                    float(record[name]), interval_reason="the authors report no interval"
                )
            lengths = by_length.get((model, technique), [])
            if len(lengths) == len(columns.parts):
                for column, value in zip(columns.parts, lengths, strict=True):
                    cells[column.path] = MetricCell(value, interval_reason=_REPORTED_ORDER_NOTE)
            links = method_links().get(editor, {})
            rows.append(
                Row(
                    row_id=f"reported-{_slug(model)}-{_slug(technique)}",
                    source="reported",
                    model=model,
                    editor=editor,
                    protocol=UNSTATED,
                    mode=UNSTATED,
                    dataset="upstream",
                    metrics=cells,
                    paper=safe_url(links.get("paper")),
                    code=safe_url(links.get("code")),
                    submitter="KnowGIC authors (manitbaser/KnowGIC, MIT)",
                )
            )
    return tuple(rows)


def _frame(rows: Sequence[Row], columns: Columns) -> pd.DataFrame:
    """Numbers for filtering and sorting: one column per value, n and interval end (named by
    :func:`~knowgic.leaderboard.columns.frame_column`)."""
    records = []
    for index, row in enumerate(rows):
        record: dict[str, Any] = {
            "index": index,
            "row_id": row.row_id,
            "model": row.model,
            "editor": row.editor,
            "protocol": row.protocol,
            "mode": row.mode,
            "dataset": row.dataset,
            "source": row.source,
            "ranking": "" if row.ranking is None else row.ranking.digest,
            "active_chains": row.active_chains,
            "edits": row.edits,
            "paper": row.paper or "",
            "code": row.code or "",
            "submitter": row.submitter,
            "label": row.label,
            "added": row.added,
        }
        for column in columns.table:
            cell = row.metrics[column.path]
            record[frame_column(column.path)] = math.nan if cell.value is None else cell.value
            record[frame_column(column.path, "n")] = cell.n
            record[frame_column(column.path, "low")] = cell.low
            record[frame_column(column.path, "high")] = cell.high
            record[frame_column(column.path, "reason")] = cell.reason or ""
        private = row.private_ifr
        record["private_ifr"] = math.nan if private is None or private.value is None else private.value
        record["private_ifr_low"] = None if private is None else private.low
        record["private_ifr_high"] = None if private is None else private.high
        record["private_flagged"] = row.private_flagged
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        return frame
    frame["haystack"] = frame[list(_SEARCHED)].astype(str).agg(" ".join, axis=1).str.lower()
    return frame


@dataclass(frozen=True)
class TableQuery:
    """What a person asked the table for.

    ``model``: one model's ranking (None or :data:`ALL_MODELS`: every model); ``model@<id>`` names one of
    the model's rankings (:func:`ranking_choice`), a plain model name its default one (:meth:`Board.rankings`).
    ``part``: the ranked rows (runs in the store), the reported rows (published numbers, never ranked with
    runs), or both.
    """

    search: str = ""
    filters: Mapping[str, Sequence[str]] = field(default_factory=dict)  # column -> allowed values
    sort: str | None = None  # a column key; None: the rank metric
    descending: bool = True
    columns: Sequence[str] | None = None  # column keys; None: the compact default view
    page: int = 1
    page_size: int = PAGE_SIZE
    model: str | None = None
    part: str = "all"  # "ranked", "reported" or "all"

    @property
    def model_name(self) -> str | None:
        """The model asked for (None: every model)."""
        model, _ = split_choice(self.model)
        return None if model in (None, "", ALL_MODELS) else model

    @property
    def ranking(self) -> str | None:
        """The id (:attr:`RankingKey.digest`) of the ranking asked for; None: the model's default."""
        return split_choice(self.model)[1]


RANKING_MARK = "@"
_DIGEST = re.compile(r"^[0-9a-f]{12}$")


def ranking_choice(model: str, key: RankingKey | None = None) -> str:
    """The selector's value for ``model``'s ranking ``key`` (``model@<id>``); the model alone for its default."""
    return model if key is None else f"{model}{RANKING_MARK}{key.digest}"


def split_choice(value: str | None) -> tuple[str | None, str | None]:
    """``(model, ranking id or None)`` of a selector value (:func:`ranking_choice`)."""
    if not value:
        return None, None
    model, mark, digest = value.rpartition(RANKING_MARK)
    if mark and _DIGEST.match(digest):
        return model, digest
    return value, None


@dataclass(frozen=True)
class TablePage:
    headers: list[str]
    datatypes: list[str]
    widths: list[str]
    cells: list[list[Any]]
    row_ids: list[str]
    total: int  # rows matching the query
    page: int
    pages: int
    constant: dict[str, str] = field(default_factory=dict)  # hidden column -> the one value it holds
    ranking: RankingKey | None = None  # the ranking shown (its label names the edit set)
    # What the ranks rest on, to show beside the ranking: "ranked on the private split ..." or "ranked on
    # the public data: no private split" ("" without ranks).
    rank_note: str = ""


RankCache = dict[tuple[str, ...], tuple[dict[str, tuple[RankRange | None, float | None]], str]]
"""Each ranking's ranks by the sorted hashes of its runs: (results sha256 -> (rank range, ranked value),
what the ranks rest on in words: the private split or the public data)."""


def verified_document(entry: StoreEntry) -> dict[str, Any]:
    """The full results document of an entry the store verified, read again for the ranking: checked by
    its content hash (the store's full checks ran when it accepted the entry, and take a second a file)."""
    document = json.loads(entry.results_file.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or content_sha256(document) != entry.results_sha256:
        raise ValueError(f"{entry.results_file}: its content changed since the store verified it")
    return document


class Board:
    """Every row of a store scan plus the reported rows, ready to search, filter, sort and page.

    ``columns``: the metric columns (default: the shipped spec's, read on first use); an app builds them
    once and hands them to every board. ``rank_cache`` (shared between the boards of one app) keeps each
    track's ranks by the hashes of its runs, so a store change recomputes only the tracks it touched.
    """

    def __init__(
        self,
        scan: StoreScan,
        *,
        include_reported: bool = True,
        rank_cache: RankCache | None = None,
        columns: Columns | None = None,
    ) -> None:
        self.columns = columns if columns is not None else leaderboard_columns()
        self.headers = column_headers(self.columns)
        rows = calibrated_rows([row_from_entry(e, self.columns) for e in scan.entries])
        if include_reported:
            rows.extend(reported_rows(self.columns))
        self.rows: list[Row] = rows
        self.skipped: list[SkippedFile] = list(scan.skipped)
        self.by_id: dict[str, Row] = {row.row_id: row for row in rows}
        self.frame = _frame(rows, self.columns)
        self.signature = tuple((e.entry_id, e.results_sha256) for e in scan.entries)
        self._rank_cache: RankCache = {} if rank_cache is None else rank_cache

    def choices(self, column: str) -> list[str]:
        if self.frame.empty:
            return []
        return sorted(self.frame[column].astype(str).unique().tolist())

    def models(self) -> list[str]:
        """Models with runs in the store, most runs first, then models with reported rows only."""
        stored: dict[str, int] = {}
        for row in self.rows:
            if row.entry is not None:
                stored[row.model] = stored.get(row.model, 0) + 1
        ordered = sorted(stored, key=lambda m: (-stored[m], m))
        reported = sorted({row.model for row in self.rows if row.entry is None} - set(stored))
        return ordered + reported

    def select(self, query: TableQuery) -> pd.DataFrame:
        """The rows matching ``query``, sorted (undefined values last, whatever the direction)."""
        frame = self.frame
        if frame.empty:
            return frame
        mask = pd.Series(True, index=frame.index)
        model = query.model_name
        if model is not None:
            mask &= frame["model"] == model
            key = self.ranking_of(query) if query.part != "reported" else None
            if key is not None:  # one ranking's runs; reported rows are never in a ranking
                mask &= (frame["source"] == "reported") | (frame["ranking"] == key.digest)
        if query.part == "ranked":
            mask &= frame["source"] != "reported"
        elif query.part == "reported":
            mask &= frame["source"] == "reported"
        for column, allowed in query.filters.items():
            if allowed:
                mask &= frame[column].isin(list(allowed))
        needle = query.search.strip().lower()
        if needle:
            for word in needle.split():
                mask &= frame["haystack"].str.contains(word, regex=False)
        selected = frame[mask]
        return selected.sort_values(
            [self._sort_column(query), "row_id"],
            ascending=[not query.descending, True],
            na_position="last",
            kind="stable",
        )

    def _sort_column(self, query: TableQuery) -> str:
        """The frame column a query sorts by: its own where the frame has it, else the rank metric's."""
        asked = frame_column(query.sort) if query.sort else ""
        return asked if asked in self.frame.columns else frame_column(self.columns.rank.path)

    def rankings(self, model: str) -> list[tuple[RankingKey, int]]:
        """The rankings of ``model``'s stored runs with their number of runs, the default first: full runs
        (no ``--limit``) before subsets, then the latest dataset version, then the most runs."""
        counts: dict[RankingKey, int] = {}
        for row in self.rows:
            if row.model == model and row.entry is not None and row.ranking is not None:
                counts[row.ranking] = counts.get(row.ranking, 0) + 1

        def version(key: RankingKey) -> tuple[int, ...]:
            return tuple(int(x) for x in key.dataset_version.split(".") if x.isdigit())

        return sorted(
            counts.items(),
            key=lambda kv: (
                not kv[0].full,
                tuple(-v for v in version(kv[0])),
                -kv[1],
                -kv[0].edits,
                kv[0].label,
            ),
        )

    def ranking_of(self, query: TableQuery) -> RankingKey | None:
        """The ranking a query shows: the one it names, else its model's default; None for every model or
        a model without stored runs."""
        model = query.model_name
        if model is None:
            return None
        found = self.rankings(model)
        asked = query.ranking
        for key, _ in found:
            if key.digest == asked:
                return key
        return found[0][0] if found else None

    def ranks(self, key: RankingKey) -> dict[str, tuple[RankRange | None, float | None]]:
        """Row id -> (rank range, the value it ranks by) among the stored runs of ranking ``key``, on the
        rank metric's ranked form (see :mod:`knowgic.leaderboard.ranking`)."""
        from knowgic.leaderboard.ranking import rank_ranges

        rows = [row for row in self.rows if row.entry is not None and row.ranking == key]
        cache_key = tuple(sorted(row.entry.results_sha256 for row in rows if row.entry is not None))
        if cache_key not in self._rank_cache:
            readable, documents = [], []
            for row in rows:
                try:
                    documents.append(verified_document(row.entry))  # type: ignore[arg-type]
                    readable.append(row)
                except (OSError, ValueError, StoreFileError):  # changed since the scan: the next says why
                    continue
            found, basis = rank_ranges(documents, self.columns.rank.path)
            ranked = {
                row.entry.results_sha256: item  # type: ignore[union-attr]
                for row, item in zip(readable, found, strict=True)
            }
            self._rank_cache[cache_key] = (ranked, basis)
        cached = self._rank_cache[cache_key][0]
        return {row.row_id: cached.get(row.entry.results_sha256, (None, None)) for row in rows}  # type: ignore[union-attr]

    def rank_basis(self, key: RankingKey) -> str:
        """What the ranks of ranking ``key`` rest on, in words: the private split every run was scored on,
        or the public data and why (:func:`knowgic.measure.compare.rank_basis`)."""
        rows = [row for row in self.rows if row.entry is not None and row.ranking == key]
        cache_key = tuple(sorted(row.entry.results_sha256 for row in rows if row.entry is not None))
        if cache_key not in self._rank_cache:
            self.ranks(key)
        return self._rank_cache[cache_key][1]

    def page(self, query: TableQuery) -> TablePage:
        selected = self.select(query)
        columns = [c for c in query.columns or () if c in self.headers] or list(default_columns(self.columns))
        constant: dict[str, str] = {}
        if len(selected):
            for column in columns:
                if column in HIDE_WHEN_CONSTANT:
                    values = selected[column].astype(str).unique()
                    if len(values) == 1:
                        constant[column] = str(values[0])
            empty = {c for c in columns if c in HIDE_WHEN_EMPTY and selected[c].isna().all()}
            columns = [c for c in columns if c not in constant and c not in empty]
        key = self.ranking_of(query) if query.part == "ranked" else None
        ranked = key is not None
        ranks = self.ranks(key) if key is not None and len(selected) else {}
        rank_note = self.rank_basis(key) if ranks and key is not None else ""
        if ranks and query.sort in (None, self.columns.rank.path) and query.descending:
            # The ranking's own order: by the value that ranks (best first), undefined last.
            sign = 1.0 if self.columns.rank.metric.lower_is_better else -1.0
            order = selected["row_id"].map(
                lambda i: math.inf if ranks.get(i, (None, None))[1] is None else sign * ranks[i][1]  # type: ignore[operator]
            )
            selected = selected.assign(_order=order).sort_values(
                ["_order", "row_id"], ascending=[True, True], na_position="last", kind="stable"
            )
        total = len(selected)
        pages = max(1, math.ceil(total / query.page_size))
        page = min(max(1, query.page), pages)
        start = (page - 1) * query.page_size
        shown = selected.iloc[start : start + query.page_size]
        rows = [self.rows[int(i)] for i in shown["index"].tolist()] if total else []
        cells = [[self._cell(row, c) for c in columns] for row in rows]
        headers = [self.headers[c] for c in columns]
        datatypes = ["html" if self._html(c) else "str" for c in columns]
        widths = [column_width(c, self.columns) for c in columns]
        if ranked:
            label = self.columns.rank.label.lower()
            cells = [
                [rank_html(ranks.get(row.row_id, (None, None))[0], len(ranks), label, rank_note), *line]
                for row, line in zip(rows, cells, strict=True)
            ]
            headers, datatypes, widths = [RANK_HEADER, *headers], ["html", *datatypes], ["50px", *widths]
        return TablePage(
            headers=headers,
            datatypes=datatypes,
            widths=widths,
            cells=cells,
            row_ids=[row.row_id for row in rows],
            total=total,
            page=page,
            pages=pages,
            constant=constant,
            ranking=key,
            rank_note=rank_note,
        )

    def _html(self, column: str) -> bool:
        return self.columns.is_table_metric(column) or column in _HTML_COLUMNS

    def _cell(self, row: Row, column: str) -> Any:
        if self.columns.is_table_metric(column):
            return row.metrics[column].html(row.level)
        if column == "private_ifr":
            return private_ifr_html(row)
        if column == "links":
            return links_html(row.paper, row.code)
        if column == "row_id":
            return f'<a href="?result={text(quote(row.row_id))}" class="kg-permalink">{text(row.row_id)}</a>'
        if column == "editor":
            # The editor names the row: its link opens the run's page (a click anywhere on the row does too).
            # A long name (a plug-in's module:Class) shows shortened, and whole on hover.
            shown = short_editor(row.editor)
            who = row.submitter or row.label or row.row_id
            title = text(who if shown == row.editor else f"{row.editor} · {who}")
            badge = ""
            if row.source == "verified":
                badge = (
                    ' <span class="kg-verified" title="run by the leaderboard\'s runner">✓ verified</span>'
                )
            return (
                f'<a href="?result={text(quote(row.row_id))}" class="kg-editor" title="{title}">'
                f"{text(shown)}</a>{badge}"
            )
        if column == "active_chains":
            return "–" if row.active_chains is None else str(row.active_chains)
        if column == "edits":
            return "–" if row.edits is None else str(row.edits)
        return str(getattr(row, column))

    def export(self, query: TableQuery) -> pd.DataFrame:
        """The filtered, sorted table with every number (for the CSV download); undefined stays empty."""
        selected = self.select(query)
        columns = ["row_id", *(k for k, _ in CATEGORICAL), "active_chains", "edits"]
        for column in self.columns.table:
            columns += [frame_column(column.path, stat) for stat in ("", "n", "low", "high", "reason")]
        columns += ["private_ifr", "private_ifr_low", "private_ifr_high", "private_flagged"]
        columns += ["paper", "code", "submitter", "label", "added"]
        if selected.empty:
            return pd.DataFrame(columns=columns)
        return selected[columns].reset_index(drop=True)


RANK_TITLE = (
    "95% rank range on the {metric} among the runs of this ranking (one model, one edit set, one "
    "protocol and known rule, one mode), from one paired bootstrap of the edits they share: a better score "
    "never shows a worse rank, and runs whose ranges overlap are not told apart (About)"
)


def rank_html(
    rank: RankRange | None, of: int | None = None, metric: str = "deep-editing score", basis: str = ""
) -> str:
    """A rank range as the Rank cell shows it ("2–5"); "–" for a run without a value to rank. ``metric``:
    the rank metric's label, in lower case; ``basis``: what the ranks rest on, in words (hover)."""
    if rank is None:
        return f'<span class="kg-undefined" title="no {text(metric)}: not ranked">–</span>'
    title = RANK_TITLE.format(metric=metric) + (f"; {of} runs ranked" if of else "")
    title += f"; {basis}" if basis else ""
    return f'<span class="kg-rank" title="{text(title)}">{text(rank.text)}</span>'


_WIDTHS = {
    "model": "150px",
    "editor": "96px",
    "links": "110px",
    "row_id": "200px",
    "submitter": "220px",
    "added": "170px",
}


def column_width(column: str, columns: Columns) -> str:
    """A metric cell holds value, interval and the few-edits mark on one line; names wrap."""
    if columns.is_table_metric(column) or column == "private_ifr":
        return "170px"
    return _WIDTHS.get(column, "110px")


_HTML_COLUMNS = frozenset({"links", "row_id", "editor", "private_ifr"})  # and every metric column


FLAG_MARK = "⚑ public IFR below private"
"""The mark of a run whose private split's flag is raised (:mod:`knowgic.measure.gap`)."""


def flag_text(check: Mapping[str, Any]) -> str:
    """A flag record in words: the run's per-edit IFR on both edit sets and its gap, the honest editors'
    gaps, the statistic and the verdict (or why there is none)."""

    def number(key: str, signed: bool = False) -> str:
        value = check.get(key)
        return "–" if value is None else format_number(float(value), 3, signed=signed)

    words = (
        f"per-edit IFR public {number('public')} ({check.get('public_edits')} edits), private "
        f"{number('private')} ({check.get('private_edits')} edits): gap {number('gap', True)}, SE {number('se')}"
    )
    calibration = check.get("calibration")
    if isinstance(calibration, Mapping):
        words += (
            f"; honest editors' gaps {format_number(float(calibration['mean']), 3, signed=True)} ± "
            f"{format_number(float(calibration['sd']), 3)} over {calibration['runs']} runs ({calibration['source']})"
        )
    if check.get("flagged") is None:
        return f"{words}; not decided: {check.get('reason', '')}"
    statistic = check.get("statistic")
    shown = "–" if statistic is None else f"{float(statistic):.2f}"
    verdict = "flagged" if check.get("flagged") else "not flagged"
    return f"{words}; t = {shown}, {verdict} at one-sided {check.get('alpha')}"


def private_ifr_html(row: Row) -> str:
    """The private split's IFR as a metric cell; its flag's verdict on hover, and a mark where it is raised
    (:mod:`knowgic.measure.gap`); "–" when the run scored no private split."""
    if row.private_ifr is None:
        return f'<span class="kg-undefined" title="{text(NO_PRIVATE)}">–</span>'
    cell = row.private_ifr.html(row.level)
    check = row.private_check
    if row.private_unranked:
        cell += f' <span class="kg-private-old" title="{text(OLD_BLOCK)}">(holdout)</span>'
    elif check is not None and row.private_flagged:
        cell += f' <span class="kg-flag" title="{text(flag_text(check))}">{FLAG_MARK}</span>'
    elif check is not None:
        cell += f' <span class="kg-flag-note" title="{text(flag_text(check))}">ⓘ</span>'
    return cell


def links_html(paper: str | None, code: str | None) -> str:
    links = []
    for label, url in (("paper", safe_url(paper)), ("code", safe_url(code))):
        if url:
            links.append(
                f'<a href="{text(url)}" target="_blank" rel="noopener noreferrer nofollow">{label}</a>'
            )
    return f'<span class="kg-links">{" · ".join(links)}</span>' if links else "–"


def row_label(row: Row) -> str:
    """A short text naming a row in drop-downs."""
    return f"{row.model} · {row.editor} · {row.protocol} · {row.mode} · {row.row_id}"


def skipped_frame(skipped: Iterable[SkippedFile], root: Path) -> pd.DataFrame:
    records = []
    for item in skipped:
        try:
            shown = str(item.path.relative_to(root))
        except ValueError:
            shown = str(item.path)
        # Reasons name files by their full path; inside the store, the relative one says as much.
        reason = item.reason.replace(f"{root}/", "")
        records.append({"File": shown, "Reason": reason})
    return pd.DataFrame.from_records(records, columns=["File", "Reason"])
