"""PNG plots of a results document: IFR by chain length, and IFR and Preservation per edit.

Each picture says what it shows: labels are wrapped or shortened at a word, never cut mid-word; legends sit
below the axes, where they cover no bar, number or tick; a metric that is null shows its reason on the chart
(a chart with nothing to draw says why); edits that failed (Efficacy 0: the edited model still prefers the
old answer) are marked.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from knowgic.dataset.loading import dataset_label
from knowgic.evaluation.outputs import write_atomic

IFR_COLOR = "#C44E52"
PRESERVATION_COLOR = "#55A868"
LENGTH_COLOR = "#4C72B0"
FAILED_COLOR = "#B00020"
NOTE_COLOR = "#555555"
LABEL_WIDTH = 34
"""Characters per line of a per-edit label; a label has at most :data:`LABEL_LINES` lines."""
LABEL_LINES = 2
REASON_WIDTH = 70


def wrap_label(text: str, width: int = LABEL_WIDTH, lines: int = LABEL_LINES) -> str:
    """``text`` wrapped at words into at most ``lines`` lines of ``width`` characters; what does not fit is
    replaced by ``…`` after the last whole word (a single word longer than a line is the only thing cut)."""
    wrapped = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False)
    if len(wrapped) <= lines:
        return "\n".join(wrapped)
    kept = wrapped[:lines]
    kept[-1] = textwrap.shorten(" ".join(wrapped[lines - 1 :]), width, placeholder=" …")
    return "\n".join(kept)


def _title(document: Mapping[str, Any]) -> str:
    c = document["config"]
    limit = {None: "", 1: ", first edit only"}.get(c.get("limit"), f", first {c.get('limit')} edits")
    return (
        f"{c['editor']} on {c['model']} ({c['protocol']}, {c['mode']}, {dataset_label(document['dataset'])}"
        f"{limit})"
    )


def _reason_text(reason: str | None, width: int = REASON_WIDTH, lines: int = 3) -> str:
    """A metric's reason for being null, wrapped (and if need be shortened) at words."""
    return wrap_label(reason or "no reason recorded", width, lines)


def _reason_head(reason: str | None) -> str:
    """The summary before a reason's explanation ("no active chains" of "no active chains: the ...")."""
    return (reason or "no reason recorded").split(":")[0]


def _save(fig: plt.Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    write_atomic(path, buffer.getvalue())
    return path


def _empty_note(ax: plt.Axes, text: str) -> None:
    """A chart with nothing to draw says why, in the middle of its axes."""
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=9,
        color=NOTE_COLOR,
        zorder=5,
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 2},
    )


def plot_ifr_by_length(document: Mapping[str, Any], path: Path) -> Path:
    return _save(ifr_by_length_figure(document), path)


def ifr_by_length_figure(document: Mapping[str, Any]) -> plt.Figure:
    """Bars of IFR per chain length 1..5 with their chain counts and intervals, and the overall IFR."""
    metrics = document["metrics"]
    by_length = metrics["ifr_by_length"]
    lengths = [str(n) for n in range(1, 6)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    handles: list[Any] = []
    values = [by_length[n]["value"] for n in lengths]
    bars = ax.bar(lengths, [v if v is not None else 0.0 for v in values], color=LENGTH_COLOR, zorder=2)
    handles.append(Patch(color=LENGTH_COLOR, label="IFR of the active chains of that length"))
    lows, highs = [], []
    for n, value in zip(lengths, values, strict=True):
        interval = by_length[n].get("interval")
        # Clamped at 0: the stated value (from the chain records) and a point interval (from the per-edit
        # sums) can differ in the last bit.
        lows.append(max(0.0, value - interval[0]) if value is not None and interval else 0.0)
        highs.append(max(0.0, interval[1] - value) if value is not None and interval else 0.0)
    # Error bars only where an interval exists: a zero-length bar would read as an interval of width 0.
    with_interval = [
        i for i, n in enumerate(lengths) if values[i] is not None and by_length[n].get("interval")
    ]
    if with_interval:
        level = document.get("uncertainty", {}).get("level", 0.95)
        ax.errorbar(
            [lengths[i] for i in with_interval],
            [values[i] for i in with_interval],
            yerr=[[lows[i] for i in with_interval], [highs[i] for i in with_interval]],
            fmt="none",
            ecolor="#222222",
            capsize=3,
            linewidth=1,
            zorder=3,
        )
        handles.append(
            Line2D(
                [],
                [],
                color="#222222",
                marker="|",
                linestyle="none",
                markersize=10,
                label=f"{level:.0%} interval (bootstrap over edits)",
            )
        )
    for bar, n, value in zip(bars, lengths, values, strict=True):
        entry = by_length[n]
        x = bar.get_x() + bar.get_width() / 2
        if value is None:
            ax.text(
                x,
                0.02,
                "n/a:\n" + _reason_text(_reason_head(entry.get("reason")), 14, 4),
                ha="center",
                va="bottom",
                fontsize=7,
                color=NOTE_COLOR,
                zorder=4,
            )
            continue
        top = value + (highs[int(n) - 1] or 0.0)
        # White behind the numbers: the overall-IFR line never strikes through them.
        ax.text(
            x,
            top + 0.02,
            f"{value:.2f}\n({entry['n']} chain{'' if entry['n'] == 1 else 's'})",
            ha="center",
            va="bottom",
            fontsize=8,
            zorder=4,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
        )
    overall = metrics["ifr"]
    if overall["value"] is not None:
        ax.axhline(overall["value"], color=IFR_COLOR, linestyle="--", linewidth=1, zorder=1)
        handles.append(
            Line2D(
                [],
                [],
                color=IFR_COLOR,
                linestyle="--",
                label=f"IFR over all {overall['n']} active chains = {overall['value']:.3f}",
            )
        )
    if all(v is None for v in values) and overall["value"] is None:
        _empty_note(ax, _reason_text(f"No IFR to show: {overall.get('reason')}", 60, 4))
    ax.set_ylim(0, 1.3)
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_xlabel("chain length: facts from the edited subject back to the old answer")
    ax.set_ylabel("IFR (lower is better)")
    ax.set_title(_title(document), fontsize=9)
    fig.legend(handles=handles, loc="outside lower center", ncol=1, fontsize=8, frameon=False)
    return fig


def _edit_label(edit: Mapping[str, Any]) -> str:
    return wrap_label(f"{edit['subject']} → {edit['target_new']}")


def _failed(edit: Mapping[str, Any]) -> bool:
    """An edit that did not take: the edited model still prefers the old answer (Efficacy 0)."""
    return edit.get("efficacy") == 0


def plot_per_edit(document: Mapping[str, Any], path: Path) -> Path:
    return _save(per_edit_figure(document), path)


def per_edit_figure(document: Mapping[str, Any]) -> plt.Figure:
    """Per edit: IFR (red) and Preservation (green) bars; n/a with its reason where a value is null; a mark
    on the edits that failed (Efficacy 0)."""
    edits: Sequence[Mapping[str, Any]] = document["per_edit"]
    labels = [_edit_label(e) for e in edits]
    lines = sum(label.count("\n") + 1 for label in labels)
    height = max(2.2, 0.22 * lines + 0.25 * len(edits) + 1.6)
    fig, ax = plt.subplots(figsize=(8.5, height), layout="constrained")
    bar = 0.36
    ys = list(range(len(edits)))
    # No bar at all: the reasons are said once, in the middle, instead of beside every missing bar.
    nothing_drawn = bool(edits) and all(e["ifr"] is None and e["preservation"] is None for e in edits)
    for offset, key, color in ((-bar / 2, "ifr", IFR_COLOR), (bar / 2, "preservation", PRESERVATION_COLOR)):
        values = [e[key] if e[key] is not None else 0.0 for e in edits]
        ax.barh([y + offset for y in ys], values, height=bar, color=color, zorder=2)
        for y, edit in zip(ys, edits, strict=True):
            if edit[key] is None:
                reason = (edit.get("reasons") or {}).get(key)
                ax.text(
                    0.01,
                    y + offset,
                    "n/a" if nothing_drawn else f"n/a: {_reason_text(reason, 100, 1)}",
                    va="center",
                    fontsize=6.5,
                    color=NOTE_COLOR,
                    zorder=3,
                )
            else:
                ax.text(edit[key] + 0.01, y + offset, f"{edit[key]:.2f}", va="center", fontsize=6.5, zorder=3)
    ax.set_yticks(ys, labels, fontsize=7)
    for tick, edit in zip(ax.get_yticklabels(), edits, strict=True):
        if _failed(edit):
            tick.set_color(FAILED_COLOR)
    failed = [y for y, edit in zip(ys, edits, strict=True) if _failed(edit)]
    # The mark sits right of the axes (x in axes coordinates), clear of the bars and their numbers.
    transform = ax.get_yaxis_transform()
    for y in failed:
        ax.text(
            1.01,
            y,
            "✗ failed",
            transform=transform,
            va="center",
            ha="left",
            fontsize=7,
            color=FAILED_COLOR,
            clip_on=False,
        )
    ax.set_ylim(len(edits) - 0.5, -0.5)  # first edit on top, half a row of margin each side
    ax.set_xlim(0, 1.12)
    ax.set_xticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_xlabel("score (0 to 1)")
    ax.set_title(_title(document), fontsize=9)
    if nothing_drawn:
        metrics = document["metrics"]
        _empty_note(
            ax,
            "No IFR or Preservation to show.\n"
            + _reason_text(f"IFR: {metrics['ifr'].get('reason')}", 70, 2)
            + "\n"
            + _reason_text(f"Preservation: {metrics['preservation'].get('reason')}", 70, 2),
        )
    if not edits:
        _empty_note(ax, "The run has no edits.")
    handles = [
        Patch(color=IFR_COLOR, label="IFR (lower is better)"),
        Patch(color=PRESERVATION_COLOR, label="Preservation (higher is better)"),
    ]
    if failed:
        handles.append(
            Line2D(
                [],
                [],
                color=FAILED_COLOR,
                marker="$✗$",
                linestyle="none",
                label=f"edit failed: Efficacy 0 ({len(failed)} of {len(edits)})",
            )
        )
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    return fig


def write_plots(document: Mapping[str, Any], out_dir: Path) -> list[Path]:
    return [
        plot_ifr_by_length(document, out_dir / "ifr_by_length.png"),
        plot_per_edit(document, out_dir / "per_edit.png"),
    ]
