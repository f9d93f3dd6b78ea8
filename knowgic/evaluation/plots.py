"""PNG plots of a results document: IFR by chain length, and IFR and Preservation per edit."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt

from knowgic.evaluation.results import write_atomic


def _title(document: Mapping[str, Any]) -> str:
    c = document["config"]
    return f"{c['editor']} on {c['model']} ({c['protocol']}, {c['mode']}, KnowGIC {document['dataset']['version']})"


def _save(fig: plt.Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    write_atomic(path, buffer.getvalue())
    return path


def plot_ifr_by_length(document: Mapping[str, Any], path: Path) -> Path:
    by_length = document["metrics"]["ifr_by_length"]
    lengths = [str(n) for n in range(1, 6)]
    values = [by_length[n]["value"] for n in lengths]
    counts = [by_length[n]["n"] for n in lengths]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    bars = ax.bar(lengths, [v if v is not None else 0.0 for v in values], color="#4C72B0")
    for bar, value, n in zip(bars, values, counts, strict=True):
        label = "n/a" if value is None else f"{value:.2f}\n(n={n})"
        ax.annotate(
            label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
        )
    overall = document["metrics"]["ifr"]["value"]
    if overall is not None:
        ax.axhline(overall, color="#C44E52", linestyle="--", linewidth=1, label=f"IFR = {overall:.3f}")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_ylim(0, 1.2)
    ax.set_xlabel("chain length n")
    ax.set_ylabel("IFR (lower is better)")
    ax.set_title(_title(document), fontsize=9)
    return _save(fig, path)


def plot_per_edit(document: Mapping[str, Any], path: Path) -> Path:
    edits = document["per_edit"]
    labels = [f"{e['subject']} -> {e['target_new']}"[:48] for e in edits]
    ifr = [e["ifr"] if e["ifr"] is not None else float("nan") for e in edits]
    pres = [e["preservation"] if e["preservation"] is not None else float("nan") for e in edits]
    height = max(2.5, 0.28 * len(edits) + 1.2)
    fig, ax = plt.subplots(figsize=(8, height))
    ys = range(len(edits))
    ax.barh([y - 0.2 for y in ys], ifr, height=0.4, label="IFR (lower is better)", color="#C44E52")
    ax.barh([y + 0.2 for y in ys], pres, height=0.4, label="Preservation (higher is better)", color="#55A868")
    ax.set_yticks(list(ys), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.05)
    for y, (i_val, p_val) in enumerate(zip(ifr, pres, strict=True)):
        for offset, value in ((-0.2, i_val), (0.2, p_val)):
            if value != value:  # NaN: the metric is undefined for this edit
                ax.annotate("n/a", (0.01, y + offset), va="center", fontsize=6, color="#555555")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.04), ncol=2, fontsize=8, frameon=False)
    ax.set_title(_title(document), fontsize=9)
    return _save(fig, path)


def write_plots(document: Mapping[str, Any], out_dir: Path) -> list[Path]:
    return [
        plot_ifr_by_length(document, out_dir / "ifr_by_length.png"),
        plot_per_edit(document, out_dir / "per_edit.png"),
    ]
