"""What the detail and compare views show, as plain data (tables, dicts, figures) built from results documents.

Text from results and manifests goes into data frames and JSON viewers, which render it as text; the one
HTML block (:func:`detail_header`) escapes everything it holds.

A browser never gets more than a bounded page of one result: at most ``DETAIL_ROWS`` rows per table (a last
row says how many more there are), ``CELL_CHARS`` characters per cell and ``JSON_CHARS`` characters per JSON
viewer; the whole document is a download.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pandas as pd

from knowgic.errors import KnowgicError
from knowgic.formatting import (
    NOT_TOLD_APART,
    direction_text,
    format_interval,
    format_number,
    undefined_text,
    verdict_meaning,
    verdict_words,
)
from knowgic.leaderboard.columns import Columns, leaderboard_columns
from knowgic.leaderboard.table import (
    Row,
    links_html,
    row_label,
)
from knowgic.ripple.queries import CRITERIA
from knowgic.runner.store.store import StoreFileError

# The per-edit table: these columns, with the per-edit metrics the records carry between them.
PER_EDIT_BEFORE = ("edit_id", "subject", "prompt", "target_true", "target_new", "chains", "active_chains")
PER_EDIT_AFTER = ("p_new", "p_true", "reasons", "prompt_prefix")
# The per-edit table shows the start of an in-context prefix; the whole prefix is in the results.json download.
PREFIX_SHOWN_CHARS = 500
CHAIN_COLUMNS = ("case_id", "length", "active", "r_pre", "r_post", "known_post", "chain")
# Each short column as wide as its header's word in pixels (a share of a phone's width cut them to a letter a
# line); the chain's text takes a share of the table and wraps.
CHAIN_WIDTHS = ["85px", "70px", "70px", "70px", "70px", "110px", "60%"]
METRICS_COLUMNS = ["Metric", "Value", "n", "Interval", "Better", "Note"]
DETAIL_ROWS = 500  # rows of one per-edit, per-chain or edit-by-edit table sent to a browser
CELL_CHARS = 1000  # characters of one table cell
JSON_CHARS = 50_000  # characters of one JSON viewer (configuration, provenance, environment)


def clip_cell(value: Any) -> Any:
    """A cell's value, a long text cut to ``CELL_CHARS`` with a note of its full length."""
    if isinstance(value, str) and len(value) > CELL_CHARS:
        return f"{value[:CELL_CHARS]}… ({len(value):,} characters; download results.json for all)"
    return value


def bounded_json(value: Any) -> Any:
    """``value`` for a JSON viewer, or a note when it is larger than ``JSON_CHARS`` characters."""
    size = len(json.dumps(value, ensure_ascii=False, default=str))
    if size <= JSON_CHARS:
        return value
    return {
        "not shown": f"{size:,} characters, more than a page shows ({JSON_CHARS:,}); download results.json"
    }


def _bounded_records(
    records: list[dict[str, Any]], total: int, columns: tuple[str, ...] | list[str], what: str
) -> list[dict[str, Any]]:
    """At most ``DETAIL_ROWS`` records, long texts clipped, and a last row saying what was left out."""
    shown = [{k: clip_cell(v) for k, v in r.items()} for r in records[:DETAIL_ROWS]]
    if total > len(shown):
        note = {c: "" for c in columns}
        note[columns[0]] = (
            f"… {total - len(shown):,} more {what} not shown (first {len(shown):,} of {total:,}); download results.json for all"
        )
        shown.append(note)
    return shown


def per_edit_columns(columns: Columns, records: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The per-edit table's columns for ``records``: the edit, its per-edit metrics, its probabilities."""
    return (*PER_EDIT_BEFORE, *(c.path for c in columns.per_edit_in(records)), *PER_EDIT_AFTER)


def better_text(path: str, columns: Columns) -> str:
    return direction_text(columns.direction(path))


def _interval(entry: Mapping[str, Any]) -> str:
    return format_interval(entry.get("interval"))


def _value(value: Any) -> str:
    return format_number(value)


def metrics_frame(
    row: Row | None, document: Mapping[str, Any] | None, columns: Columns | None = None
) -> pd.DataFrame:
    """Every metric of a result (all of results.json's when there is a document, else the row's); with a
    private split, its figures beside the public ones (Private, Private n, Private interval). Labels and
    directions come from ``columns`` (default: the shipped spec's)."""
    columns = columns or leaderboard_columns()
    records = []
    private = (document or {}).get("private") if document is not None else None
    private_metrics = private.get("metrics") if isinstance(private, Mapping) else None
    if row is None:
        pass
    elif document is not None:
        for name, entry in document["metrics"].items():
            if columns.parts_of(name):  # a metric with parts: one line per part
                items = [(f"{name}.{part}", e) for part, e in entry.items()]
            else:
                items = [(name, entry)]
            for path, item in items:
                note = undefined_text(item) if item.get("value") is None else item.get("interval_reason")
                record = {
                    "Metric": columns.label(path),
                    "Value": _value(item.get("value")),
                    "n": item.get("n"),
                    "Interval": _interval(item),
                    "Better": better_text(path, columns),
                    "Note": note or "",
                }
                if private_metrics is not None:
                    other = _entry_at(private_metrics, path)
                    record["Private"] = _value(other.get("value"))
                    record["Private n"] = other.get("n")
                    record["Private interval"] = _interval(other)
                records.append(record)
    else:
        for column in columns.table:
            cell = row.metrics[column.path]
            records.append(
                {
                    "Metric": column.label,
                    "Value": _value(cell.value),
                    "n": cell.n,
                    "Interval": "–",
                    "Better": better_text(column.path, columns),
                    "Note": (cell.reason if cell.value is None else cell.interval_reason) or "",
                }
            )
    headers = list(METRICS_COLUMNS)
    if private_metrics is not None:
        headers += ["Private", "Private n", "Private interval"]
    return pd.DataFrame.from_records(records, columns=headers).astype(
        {"n": "object", **({"Private n": "object"} if private_metrics is not None else {})}
    )


RIPPLE_GROUP = "ripple"
"""The declared group of RippleEdits' criteria (``group: ripple`` in spec/benchmark.yaml)."""


def ripple_frame(document: Mapping[str, Any] | None, columns: Columns | None = None) -> pd.DataFrame | None:
    """RippleEdits' criteria of a result, one line per criterion: its tests (kept after the conditions, of
    all), those its conditions dropped, and each metric of the ``ripple`` group with its interval and n;
    None where the document scored no ripple queries (written before, or no ripple config)."""
    columns = columns or leaderboard_columns()
    counts = ((document or {}).get("counts") or {}).get(RIPPLE_GROUP)
    group = columns.group(RIPPLE_GROUP)
    if not isinstance(counts, Mapping) or not group:
        return None
    labels = {c.metric.name: c.metric.label for c in group}
    records = []
    for part in dict.fromkeys(c.part for c in group):
        count = counts.get(part) or {}
        record: dict[str, Any] = {
            "Criterion": f"{CRITERIA.get(part, part)} ({part})",
            "Tests": f"{count.get('kept', 0)} of {count.get('queries', 0)}",
            "Dropped": count.get("dropped_by_conditions", 0),
        }
        notes = []
        for name, label in labels.items():
            entry = _entry_at(document["metrics"], f"{name}.{part}")
            record[label] = _value(entry.get("value"))
            record[f"{label}: interval"] = _interval(entry)
            record[f"{label}: n"] = entry.get("n")
            if entry.get("value") is None:
                notes.append(f"{label}: {undefined_text(entry)}")
        record["Note"] = "; ".join(dict.fromkeys(notes))
        records.append(record)
    return pd.DataFrame.from_records(records).astype("object")


def _entry_at(metrics: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    head, _, tail = path.partition(".")
    entry = metrics.get(head) or {}
    entry = entry.get(tail) or {} if tail else entry
    return entry if isinstance(entry, Mapping) else {}


def private_note(document: Mapping[str, Any], check: Mapping[str, Any] | None = None) -> str:
    """What the detail header says about a private split: which one, both IFRs, and the flag (``check``: the
    board's, decided with the store's reference runs, :attr:`Row.private_check`; default the file's)."""
    from knowgic.leaderboard.table import flag_text
    from knowgic.measure.private import OLD_BLOCK

    private = document.get("private")
    if not isinstance(private, Mapping):
        return ""
    esc = html.escape
    dataset = private.get("dataset") or {}
    counts = private.get("counts") or {}
    metrics = private.get("metrics") or {}
    public_ifr = (document.get("metrics") or {}).get("ifr") or {}
    private_ifr = metrics.get("ifr") or {} if isinstance(metrics, Mapping) else {}
    lines = [
        f'<p class="kg-private">Private split {esc(str(dataset.get("name", "")))} '
        f"{esc(str(dataset.get('version', '')))} (sha256 {esc(str(dataset.get('sha256', ''))[:12])}…, "
        f"{esc(str(counts.get('chains', '–')))} chains of {esc(str(counts.get('edits', '–')))} edits): "
        f"IFR (paper) public {esc(_value(public_ifr.get('value')))} {esc(_interval(public_ifr))}, private "
        f"{esc(_value(private_ifr.get('value')))} {esc(_interval(private_ifr))}.</p>"
    ]
    if "ifr_gap" not in private:
        lines.append(f'<p class="kg-private">{esc(OLD_BLOCK[0].upper() + OLD_BLOCK[1:])}.</p>')
        return "\n".join(lines)
    check = check if check is not None else private.get("ifr_gap") or {}
    if check.get("flagged"):
        lines.append(
            '<p class="kg-flag"><strong>⚑ The public IFR is below the private one by more than honest '
            "editors' gaps</strong>: the method may have learned the published chains rather than edited the "
            f"facts ({esc(flag_text(check))}).</p>"
        )
    else:
        lines.append(f'<p class="kg-private">Flag: {esc(flag_text(check))}.</p>')
    return "\n".join(lines)


def detail_header(row: Row, permalink: str) -> str:
    """The title block of a detail view: escaped names, safe links, the permalink."""
    esc = html.escape
    lines = [
        f'<h3 class="kg-detail-title">{esc(row.model)} · {esc(row.editor)}</h3>',
        f"<p>{esc(row.protocol)} · {esc(row.mode)} · dataset {esc(row.dataset)} · "
        f'<span class="kg-source">{esc(row.source)}</span> · {links_html(row.paper, row.code)}</p>',
    ]
    if row.ranking is not None:
        lines.append(f'<p class="kg-ranking">ranked among runs on {esc(row.ranking.edit_set)}</p>')
    if row.submitter:
        lines.append(f'<p class="kg-submitter">submitted by: {esc(row.submitter)}</p>')
    if row.entry is not None and row.entry.manifest and row.entry.manifest.get("description"):
        description = clip_cell(str(row.entry.manifest["description"]))
        lines.append(f'<p class="kg-description">{esc(description)}</p>')
    if row.entry is not None and row.entry.trust:
        lines.append(f'<p class="kg-trust">{esc(row.source)}: {esc(row.entry.trust)}</p>')
    if row.label:
        lines.append(f'<p class="kg-label">label: {esc(row.label)}</p>')
    if row.source == "reported":
        lines.append(
            "<p>Numbers published by the KnowGIC paper's authors (repository manitbaser/KnowGIC, MIT "
            "license): IFR and Preservation only; protocol and mode are not stated there.</p>"
        )
    lines.append(f'<p>Permalink: <a class="kg-permalink" href="{esc(permalink)}">{esc(permalink)}</a></p>')
    return "\n".join(lines)


def provenance(row: Row, document: Mapping[str, Any]) -> dict[str, Any]:
    """Versions, hashes and where the run comes from (store entry, manifest, job)."""
    entry = row.entry
    config = document["config"]
    info: dict[str, Any] = {
        "source": row.source,
        "results_sha256": document["sha256"],
        "schema_version": document["schema_version"],
        "knowgic_version": document["knowgic_version"],
        "created_at": document["created_at"],
        "dataset": document["dataset"],
        "model_revision": config.get("model_revision"),
        "editor_class": config.get("editor_class"),
        "hparams_source": config.get("hparams_source"),
        "hparams_sha256": config.get("hparams_sha256"),
        "metric_versions": document.get("metric_versions"),
        "uncertainty": document.get("uncertainty"),
        "timing": document.get("timing"),
    }
    if entry is not None:
        info["store_entry"] = {
            "entry_id": entry.entry_id,
            "added_at": entry.added_at,
            "label": entry.label,
            "submission_sha256": entry.submission_sha256,
            "trust": entry.trust,
            "manifest": entry.manifest,
            "job": entry.job,
        }
    return info


def per_edit_frame(document: Mapping[str, Any], columns: Columns | None = None) -> pd.DataFrame:
    """The per-edit table (at most ``DETAIL_ROWS`` rows)."""
    records = []
    per_edit = document.get("per_edit", [])
    shown_columns = per_edit_columns(columns or leaderboard_columns(), per_edit)
    for record in per_edit[:DETAIL_ROWS]:
        shown = {}
        for column in shown_columns:
            value = record.get(column)
            if column == "reasons":
                value = "; ".join(f"{k}: {v}" for k, v in (value or {}).items())
            elif column == "prompt_prefix":
                value = _prefix_cell(value)
            elif isinstance(value, float):
                value = round(value, 4)
            elif value is None and column not in ("subject", "prompt", "target_true", "target_new"):
                value = "–"
            shown[column] = value
        records.append(shown)
    records = _bounded_records(records, len(per_edit), shown_columns, "edits")
    return pd.DataFrame.from_records(records, columns=list(shown_columns)).astype("object")


def _prefix_cell(prefix: Any) -> str:
    """An edit's in-context prefix as the table shows it: "–" for none (or a document from before prefixes
    were recorded), else its start, bounded, with its full length."""
    if not isinstance(prefix, str) or not prefix:
        return "–"
    if len(prefix) <= PREFIX_SHOWN_CHARS:
        return prefix
    return f"{prefix[:PREFIX_SHOWN_CHARS]}… ({len(prefix)} characters; all of it in results.json)"


def edit_choices(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The first ``DETAIL_ROWS`` edits (the drop-down also takes any edit id typed into it)."""
    return [
        (clip_cell(f"{r['edit_id']} · {r.get('subject', '')} → {r.get('target_new', '')}"), r["edit_id"])
        for r in document.get("per_edit", [])[:DETAIL_ROWS]
    ]


@lru_cache(maxsize=4)
def _chain_texts(version: str) -> dict[int, str]:
    """case_id -> the chain's questions, when this dataset version is available here (else empty)."""
    try:
        from knowgic.dataset.loading import load_cases

        cases = load_cases(version)
    except (KnowgicError, OSError, ValueError):
        return {}
    return {
        case.case_id: " → ".join(
            f"{q} [{a}]" for q, a in zip(case.chain.questions, case.chain.answers, strict=False)
        )
        for case in cases
    }


def empty_chains() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CHAIN_COLUMNS))


def chains_frame(document: Mapping[str, Any], edit_id: str | None) -> pd.DataFrame:
    """The chains of one edit: length, whether active, the chain's r before and after the edit."""
    texts = _chain_texts(str(document["dataset"]["version"]))
    records = []
    total = 0
    for chain in document.get("chains", []):
        if chain.get("edit_id") != edit_id:
            continue
        total += 1
        if total > DETAIL_ROWS:
            continue
        records.append(
            {
                "case_id": chain["case_id"],
                "length": chain["length"],
                "active": chain["active"],
                "r_pre": round(chain["r_pre"], 4),
                "r_post": round(chain["r_post"], 4),
                "known_post": chain.get("known_post", "–"),
                "chain": texts.get(int(chain["case_id"]), ""),
            }
        )
    records = _bounded_records(records, total, CHAIN_COLUMNS, "chains")
    return pd.DataFrame.from_records(records, columns=list(CHAIN_COLUMNS)).astype("object")


@dataclass(frozen=True)
class Comparison:
    """``summary``: one sentence per outcome in words (which run is better on what); ``message``: the
    runs compared and how, or why they cannot be."""

    message: str
    metrics: pd.DataFrame
    edits: pd.DataFrame
    summary: tuple[str, ...] = ()


_COMPARE_COLUMNS = [
    "Metric",
    "Better",
    "A",
    "A interval",
    "B",
    "B interval",
    "B − A",
    "Paired interval",
    "Verdict",
    "Note",
]


def verdict(difference: Any) -> str | None:
    """What the paired test of B − A says, in words (:func:`knowgic.formatting.verdict_words`): "B better
    (told apart)", "A better (told apart)" (by the metric's declared direction) or "not told apart"; None
    where there is no test."""
    if difference is None:
        return None
    return verdict_words(difference.told_apart, difference.better)


def _side_by_side(
    a: Mapping[str, Any], b: Mapping[str, Any], differences: Mapping[str, Any], columns: Columns
) -> pd.DataFrame:
    from knowgic.measure.compute import metric_entry_at

    records = []
    for path in (c.path for c in columns.declared):
        try:
            ea, eb = metric_entry_at(a["metrics"], path), metric_entry_at(b["metrics"], path)
        except KeyError:
            continue
        diff = differences.get(path)
        va, vb = ea.get("value"), eb.get("value")
        if diff is not None:
            delta = format_number(diff.difference, signed=True)
            paired = format_interval((diff.low, diff.high), signed=True)
            said = verdict(diff) or "–"
            note = diff.reason or ""
        else:
            delta = format_number(None if va is None or vb is None else vb - va, signed=True)
            paired, said = "–", "–"
            note = ea.get("reason") or eb.get("reason") or ""
        records.append(
            {
                "Metric": columns.label(path),
                "Better": better_text(path, columns),
                "A": _value(va),
                "A interval": _interval(ea),
                "B": _value(vb),
                "B interval": _interval(eb),
                "B − A": delta,
                "Paired interval": paired,
                "Verdict": said,
                "Note": note,
            }
        )
    return pd.DataFrame.from_records(records, columns=_COMPARE_COLUMNS)


def summary_sentences(differences: Mapping[str, Any], columns: Columns | None = None) -> tuple[str, ...]:
    """The comparison in words: the deep-editing score first, then which run is better on which metric."""
    columns = columns or leaderboard_columns()
    rank = columns.rank
    by_verdict: dict[str, list[str]] = {}
    sentences = []
    for path in (c.path for c in columns.declared):
        diff = differences.get(path)
        if diff is None:
            continue
        said = verdict(diff)
        if path == rank.path:
            if said is None:
                sentences.append(f"{rank.label}: no paired interval ({diff.reason or 'undefined'}).")
            elif said == NOT_TOLD_APART:
                sentences.append(
                    f"{rank.label}: {NOT_TOLD_APART} (B − A = {diff.difference:+.3f}, p = {diff.p_value:.3g})."
                )
            else:
                sentences.append(
                    f"{rank.label}: {diff.better} is better (B − A = {diff.difference:+.3f}, "
                    f"p = {diff.p_value:.3g})."
                )
            continue
        if said is not None and path in (c.path for c in columns.metrics):
            by_verdict.setdefault(said, []).append(columns.label(path))
    for better in ("B", "A"):
        said = verdict_words(True, better)
        if said is not None and by_verdict.get(said):
            sentences.append(f"{better} is better on {', '.join(by_verdict[said])}.")
    if by_verdict.get(NOT_TOLD_APART):
        sentences.append(f"{NOT_TOLD_APART.capitalize()} on {', '.join(by_verdict[NOT_TOLD_APART])}.")
    return tuple(sentences)


def _edits_side_by_side(a: Mapping[str, Any], b: Mapping[str, Any], columns: Columns) -> pd.DataFrame:
    by_id_b = {r["edit_id"]: r for r in b.get("per_edit", [])}
    headers = ["edit_id", "subject", "target_new"]
    per_edit = [*a.get("per_edit", []), *b.get("per_edit", [])]
    labels = [(c.path, c.label) for c in columns.per_edit_in(per_edit)]
    for _, label in labels:
        headers += [f"{label} A", f"{label} B"]
    records = []
    for ra in a.get("per_edit", [])[:DETAIL_ROWS]:
        rb = by_id_b.get(ra["edit_id"], {})
        record = {"edit_id": ra["edit_id"], "subject": ra.get("subject"), "target_new": ra.get("target_new")}
        for key, label in labels:
            record[f"{label} A"] = _value(ra.get(key))
            record[f"{label} B"] = _value(rb.get(key)) if rb else "not in B"
        records.append(record)
    records = _bounded_records(records, len(a.get("per_edit", [])), headers, "edits")
    return pd.DataFrame.from_records(records, columns=headers)


def compare(row_a: Row | None, row_b: Row | None, columns: Columns | None = None) -> Comparison:
    """Two results of one model, metric by metric (with paired bootstrap intervals of B − A when the runs
    cover the same edits) and edit by edit."""
    from knowgic.intervals import DEFAULT_LEVEL
    from knowgic.measure.compare import compare_results

    columns = columns or leaderboard_columns()
    empty = Comparison("", pd.DataFrame(columns=_COMPARE_COLUMNS), pd.DataFrame())
    if row_a is None or row_b is None:
        return Comparison("Choose two results (A and B) of one model.", empty.metrics, empty.edits)
    if row_a.model != row_b.model:
        return Comparison(
            f"A and B are results of different models ({row_a.model} vs {row_b.model}); compare results of "
            "one model.",
            empty.metrics,
            empty.edits,
        )
    if row_a.entry is None or row_b.entry is None:
        return Comparison(
            "Reported rows carry no per-edit records; compare two stored runs.", empty.metrics, empty.edits
        )
    try:
        doc_a, doc_b = row_a.entry.document, row_b.entry.document
    except StoreFileError as exc:
        return Comparison(f"cannot read a result: {exc}", empty.metrics, empty.edits)
    header = f"A = {row_label(row_a)}\nB = {row_label(row_b)}\n"
    try:
        differences = {d.metric: d for d in compare_results(doc_a, doc_b)}
        message = (
            header + "B − A with a paired cluster-bootstrap interval over the same resampled edits (95%). "
            f"{verdict_meaning(DEFAULT_LEVEL)}; '{NOT_TOLD_APART}': these edits cannot tell A from B."
        )
    except KnowgicError as exc:
        differences = {}
        message = header + f"No paired intervals: {exc}"
    return Comparison(
        message,
        _side_by_side(doc_a, doc_b, differences, columns),
        _edits_side_by_side(doc_a, doc_b, columns),
        summary_sentences(differences, columns),
    )
