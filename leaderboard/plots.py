"""The leaderboard's plotly figures: the IFR/Preservation trade-off, IFR by chain length, a per-edit heatmap.

Hover texts carry only names and numbers; plotly renders them as text (markup in a name is escaped first).
"""

from __future__ import annotations

import colorsys
import hashlib
import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from knowgic.leaderboard.columns import Columns, MetricColumn, frame_column, leaderboard_columns
from knowgic.leaderboard.table import method_links

_SYMBOLS = {"verified": "circle", "local": "diamond", "reported": "square"}
UNDEFINED_GREY = "#bdbdbd"
# Legends sit under the plot, across it: beside it they take the width a phone does not have.
_LAYOUT: dict[str, Any] = {
    "autosize": True,
    "margin": {"l": 56, "r": 16, "t": 48, "b": 8},
    "legend": {"orientation": "h", "yanchor": "top", "y": -0.16, "xanchor": "left", "x": 0},
    "title": {"font": {"size": 14}},
}


def _plain(value: Any) -> str:
    """Plotly hover and legend text accept a few HTML tags: escape what a submitter wrote."""
    return html.escape(str(value), quote=False)


def editor_colour(editor: str) -> str:
    """The editor's colour in every plot: declared for the built-ins (leaderboard/data/methods.yaml), else
    derived from a hash of its name, so it never changes when other editors join."""
    declared = method_links().get(editor, {}).get("colour")
    if declared:
        return declared
    digest = hashlib.sha256(editor.encode("utf-8")).digest()
    hue = int.from_bytes(digest[:2], "big") / 65536
    lightness = 0.38 + 0.14 * digest[2] / 255
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, 0.65)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"


def _error(values: Sequence[Any], lows: Sequence[Any], highs: Sequence[Any]) -> dict[str, Any] | None:
    """Plotly error bars from each point's interval; none where a point has no interval."""

    def gap(a: Any, b: Any) -> float | None:
        if a is None or b is None or pd.isna(a) or pd.isna(b):
            return None
        return max(0.0, float(a) - float(b))

    plus = [gap(h, v) for v, h in zip(values, highs, strict=True)]
    minus = [gap(v, lo) for v, lo in zip(values, lows, strict=True)]
    if all(p is None for p in plus):
        return None
    return {"type": "data", "array": plus, "arrayminus": minus, "thickness": 1.2, "width": 3}


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    r"""The trade-off frontier of (IFR, Preservation) points: lower IFR and higher Preservation are better.

    A point :math:`(f, p)` is on the frontier when no other point has :math:`f' \le f` and
    :math:`p' \ge p` with one of them strict. Sorted by IFR, the frontier is the points whose Preservation
    exceeds every Preservation at a lower (or equal, earlier) IFR.
    """
    front: list[tuple[float, float]] = []
    best = -math.inf
    for f, p in sorted(points, key=lambda fp: (fp[0], -fp[1])):
        if p > best:
            front.append((f, p))
            best = p
    return front


def _empty(message: str) -> go.Figure:
    figure = go.Figure()
    figure.add_annotation(text=_plain(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_layout(xaxis_visible=False, yaxis_visible=False, height=320)
    return figure


def _figures(group: pd.DataFrame, column: MetricColumn) -> tuple[list[Any], list[Any], list[Any]]:
    """A metric's values and interval ends in a board's frame."""
    value, low, high = (group[frame_column(column.path, stat)].tolist() for stat in ("", "low", "high"))
    return value, low, high


def tradeoff_figure(frame: pd.DataFrame, model: str, columns: Columns | None = None) -> go.Figure:
    """The trade-off axes (:data:`knowgic.leaderboard.columns.TRADEOFF`: IFR, lower is better, against
    Preservation, higher is better) for one model, one point per result coloured by editor, marker by
    source, and the Pareto frontier as a line."""
    x, y = (columns or leaderboard_columns()).tradeoff
    if frame.empty or not model:
        return _empty("no results to plot")
    xs, ys = frame_column(x.path), frame_column(y.path)
    rows = frame[(frame["model"] == model) & frame[xs].notna() & frame[ys].notna()]
    if rows.empty:
        return _empty(f"no result of {model} has both {x.label} and {y.label}")
    figure = go.Figure()
    for (editor, source), group in rows.groupby(["editor", "source"], sort=True):
        x_values, y_values = _figures(group, x), _figures(group, y)
        figure.add_trace(
            go.Scatter(
                x=x_values[0],
                y=y_values[0],
                error_x=_error(*x_values),
                error_y=_error(*y_values),
                mode="markers",
                name=_plain(f"{editor} ({source})"),
                legendgroup=_plain(editor),
                marker={"color": editor_colour(editor), "symbol": _SYMBOLS.get(source, "circle"), "size": 11},
                text=[
                    _plain(f"{r.editor} · {r.protocol} · {r.mode} · {r.row_id}") for r in group.itertuples()
                ],
                hovertemplate=f"%{{text}}<br>{_plain(x.label)} %{{x:.3f}}<br>{_plain(y.label)} %{{y:.3f}}"
                "<extra></extra>",
            )
        )
    front = pareto_front(list(zip(rows[xs].tolist(), rows[ys].tolist(), strict=True)))
    figure.add_trace(
        go.Scatter(
            x=[f for f, _ in front],
            y=[p for _, p in front],
            mode="lines",
            line={"color": "black", "dash": "dash", "shape": "hv"},
            name="trade-off frontier",
            hoverinfo="skip",
        )
    )
    figure.update_layout(
        _LAYOUT,
        title_text=_plain(f"{model}: {x.label} against {y.label}"),
        xaxis={"title": f"{_axis(x)} (bars: 95% interval)", "range": [-0.02, 1.02]},
        yaxis={"title": _axis(y), "range": [-0.02, 1.02]},
        height=520,
    )
    return figure


def length_figure(frame: pd.DataFrame, model: str, columns: Columns | None = None) -> go.Figure:
    """IFR by chain length (the parts of :data:`knowgic.leaderboard.columns.BY_LENGTH`) for one model: one
    line per editor (per source), the editor's result with the best rank metric (deep-editing score) among
    those shown (the first by the trade-off's x, IFR, where none has one)."""
    columns = columns or leaderboard_columns()
    parts = columns.parts
    if frame.empty or not model or not parts:
        return _empty("no results to plot")
    metric = parts[0].metric
    keys = [frame_column(c.path) for c in parts]
    rows = frame[(frame["model"] == model) & frame[keys].notna().any(axis=1)]
    if rows.empty:
        return _empty(f"no result of {model} has {metric.label}")
    figure = go.Figure()
    first = (columns.rank, columns.tradeoff[0])
    ordered = rows.sort_values(
        [frame_column(c.path) for c in first],
        ascending=[c.lower_is_better for c in first],
        na_position="last",
    )
    for (editor, source), group in ordered.groupby(["editor", "source"], sort=True):
        best = group.iloc[0]
        figure.add_trace(
            go.Scatter(
                x=list(columns.lengths),
                y=[None if pd.isna(best[k]) else float(best[k]) for k in keys],
                error_y=_error(
                    [best[k] for k in keys],
                    [best[frame_column(c.path, "low")] for c in parts],
                    [best[frame_column(c.path, "high")] for c in parts],
                ),
                mode="lines+markers",
                name=_plain(f"{editor} ({source})"),
                line={"color": editor_colour(editor), "dash": "dot" if source == "reported" else "solid"},
                marker={"color": editor_colour(editor)},
                text=[_plain(best["row_id"])] * len(parts),
                hovertemplate=f"%{{text}}<br>{_plain(metric.short)}%{{x}}: %{{y:.3f}}<extra></extra>",
            )
        )
    figure.update_layout(
        _LAYOUT,
        title_text=_plain(f"{model}: {metric.label}"),
        xaxis={"title": "chain length n", "dtick": 1},
        yaxis_title=_axis(parts[0]),
        height=480,
    )
    return figure


def _axis(column: MetricColumn) -> str:
    """An axis title: the metric's label and which way is better (a part's: its metric's label)."""
    return f"{column.metric.label} ({column.direction} is better)"


# One colour means good in every column: red (worse) to blue (better), on each metric's own direction.
GOODNESS_SCALE = [[0.0, "#b2182b"], [0.5, "#f7f7f7"], [1.0, "#2166ac"]]


def heatmap_figure(
    per_edit: Sequence[Mapping[str, Any]], title: str, columns: Columns | None = None
) -> go.Figure:
    """Edit x metric (the per-edit metrics the records carry), coloured by how good each value is (1 − IFR
    for IFR, the value for the others: the value's place within its declared bounds, flipped where lower
    is better), the value itself written and on hover; grey where undefined."""
    if not per_edit:
        return _empty("this result has no per-edit records")
    labels = [
        _plain(f"{r['edit_id']} · {r.get('subject', '')} → {r.get('target_new', '')}") for r in per_edit
    ]
    metrics = (columns or leaderboard_columns()).per_edit_in(per_edit)

    def good(value: Any, column: MetricColumn) -> float | None:
        if value is None:
            return None
        low, high = column.metric.bounds
        share = float(value) if low is None or high is None else (float(value) - low) / (high - low)
        return 1.0 - share if column.lower_is_better else share

    values = [[r.get(c.path) for c in metrics] for r in per_edit]
    z = [[good(v, c) for v, c in zip(line, metrics, strict=True)] for line in values]
    shown = [["–" if v is None else f"{v:.2f}" for v in line] for line in values]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"{c.label} {c.metric.arrow}" for c in metrics],
            y=labels,
            zmin=0.0,
            zmax=1.0,
            colorscale=GOODNESS_SCALE,
            text=shown,
            texttemplate="%{text}",
            customdata=shown,
            hovertemplate="%{y}<br>%{x}: %{customdata}<extra></extra>",
            colorbar={
                "title": {"text": "", "side": "right"},
                "tickvals": [0.0, 1.0],
                "ticktext": ["worse", "better"],
                "thickness": 12,
                "len": 0.8,
            },
            xgap=1,
            ygap=1,
        )
    )
    figure.add_annotation(
        text="grey: undefined for this edit (its reason is in the per-edit table); ↓ lower is better, ↑ higher",
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0,
        y=1.0,
        yanchor="bottom",
        xanchor="left",
        font={"size": 11},
    )
    figure.update_layout(
        title={"text": _plain(title), "font": {"size": 14}, "y": 0.99, "yanchor": "top"},
        height=max(340, 110 + 26 * len(per_edit)),
        margin={"l": 8, "r": 8, "t": 64, "b": 8},
        plot_bgcolor=UNDEFINED_GREY,
        yaxis={"autorange": "reversed", "automargin": True},
        xaxis={"side": "bottom", "automargin": True},
    )
    return figure
