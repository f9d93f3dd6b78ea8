"""The leaderboard's plotly figures: the IFR/Preservation trade-off, IFR by chain length, a per-edit heatmap.

Hover texts carry only names and numbers; plotly renders them as text (markup in a name is escaped first).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from leaderboard.table import CHAIN_LENGTHS

PER_EDIT_METRICS: tuple[tuple[str, str], ...] = (
    ("ifr", "IFR"),
    ("preservation", "Preservation"),
    ("efficacy", "Efficacy"),
    ("generalization", "Generalization"),
    ("specificity", "Specificity"),
)
_SYMBOLS = {"verified": "circle", "local": "diamond", "reported": "square"}


def _plain(value: Any) -> str:
    """Plotly hover and legend text accept a few HTML tags: escape what a submitter wrote."""
    return html.escape(str(value), quote=False)


def _colours(editors: Sequence[str]) -> dict[str, str]:
    palette = qualitative.Plotly + qualitative.D3 + qualitative.Set2
    return {editor: palette[i % len(palette)] for i, editor in enumerate(sorted(set(editors)))}


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
    figure.update_layout(xaxis_visible=False, yaxis_visible=False, height=420)
    return figure


def tradeoff_figure(frame: pd.DataFrame, model: str) -> go.Figure:
    """IFR (x, lower is better) against Preservation (y, higher is better) for one model, one point per
    result coloured by editor, marker by source, and the Pareto frontier as a line."""
    if frame.empty or not model:
        return _empty("no results to plot")
    rows = frame[(frame["model"] == model) & frame["ifr"].notna() & frame["preservation"].notna()]
    if rows.empty:
        return _empty(f"no result of {model} has both IFR and Preservation")
    colours = _colours(rows["editor"].tolist())
    figure = go.Figure()
    for (editor, source), group in rows.groupby(["editor", "source"], sort=True):
        figure.add_trace(
            go.Scatter(
                x=group["ifr"].tolist(),
                y=group["preservation"].tolist(),
                mode="markers",
                name=_plain(f"{editor} ({source})"),
                legendgroup=_plain(editor),
                marker={"color": colours[editor], "symbol": _SYMBOLS.get(source, "circle"), "size": 11},
                text=[
                    _plain(f"{r.editor} · {r.protocol} · {r.mode} · {r.row_id}") for r in group.itertuples()
                ],
                hovertemplate="%{text}<br>IFR %{x:.3f}<br>Preservation %{y:.3f}<extra></extra>",
            )
        )
    front = pareto_front(list(zip(rows["ifr"].tolist(), rows["preservation"].tolist(), strict=True)))
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
        title=_plain(f"{model}: IFR (lower is better) against Preservation (higher is better)"),
        xaxis={"title": "IFR", "range": [-0.02, 1.02]},
        yaxis={"title": "Preservation", "range": [-0.02, 1.02]},
        height=480,
        legend_title="editor (source)",
    )
    return figure


def length_figure(frame: pd.DataFrame, model: str) -> go.Figure:
    """IFR by chain length for one model: one line per editor (per source), the editor's result with the
    best deep-editing score among those shown (the first by IFR where none has one)."""
    if frame.empty or not model:
        return _empty("no results to plot")
    columns = [f"ifr_len_{n}" for n in CHAIN_LENGTHS]
    rows = frame[(frame["model"] == model) & frame[columns].notna().any(axis=1)]
    if rows.empty:
        return _empty(f"no result of {model} has IFR by chain length")
    colours = _colours(rows["editor"].tolist())
    figure = go.Figure()
    ordered = rows.sort_values(["deep_editing_score", "ifr"], ascending=[False, True], na_position="last")
    for (editor, source), group in ordered.groupby(["editor", "source"], sort=True):
        best = group.iloc[0]
        figure.add_trace(
            go.Scatter(
                x=list(CHAIN_LENGTHS),
                y=[None if pd.isna(best[c]) else float(best[c]) for c in columns],
                mode="lines+markers",
                name=_plain(f"{editor} ({source})"),
                line={"color": colours[editor], "dash": "dot" if source == "reported" else "solid"},
                text=[_plain(best["row_id"])] * len(CHAIN_LENGTHS),
                hovertemplate="%{text}<br>length %{x}: IFR %{y:.3f}<extra></extra>",
            )
        )
    figure.update_layout(
        title=_plain(f"{model}: IFR by chain length"),
        xaxis={"title": "chain length n", "dtick": 1},
        yaxis_title="IFR",
        height=480,
        legend_title="editor (source)",
    )
    return figure


def heatmap_figure(per_edit: Sequence[Mapping[str, Any]], title: str) -> go.Figure:
    """Edit x metric: each edit's IFR, Preservation, Efficacy, Generalization, Specificity; blank where
    undefined for that edit."""
    if not per_edit:
        return _empty("this result has no per-edit records")
    labels = [
        _plain(f"{r['edit_id']} · {r.get('subject', '')} → {r.get('target_new', '')}") for r in per_edit
    ]
    z = [[r.get(key) for key, _ in PER_EDIT_METRICS] for r in per_edit]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=[label for _, label in PER_EDIT_METRICS],
            y=labels,
            zmin=0.0,
            zmax=1.0,
            colorscale="Viridis",
            hovertemplate="%{y}<br>%{x}: %{z:.3f}<extra></extra>",
        )
    )
    figure.update_layout(
        title=_plain(title), height=max(320, 40 + 28 * len(per_edit)), yaxis={"autorange": "reversed"}
    )
    return figure
