"""The plots say what they show: whole words, legends clear of the numbers, reasons for what is missing,
failed edits marked. Checked on the figures of real runs (the drawn text and the drawn boxes)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.text import Text

from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.evaluation.plots import ifr_by_length_figure, per_edit_figure, wrap_label, write_plots

NO_ACTIVE = "no active chains: the unedited model does not know every step of any chain"


@pytest.fixture(scope="module")
def runs(knowgic_tiny) -> dict[str, dict[str, Any]]:
    """Real runs: the `none` editor (every edit fails, IFR 1.0) and ICE, on one and on two edits."""
    out = {}
    for editor in ("none", "ice"):
        for limit in (1, 2):
            request = EvaluationRequest(model="knowgic-tiny", editor=editor, limit=limit)
            out[f"{editor}-{limit}"] = evaluate(request, progress=False, loaded=knowgic_tiny).document
    return out


def _texts(fig: plt.Figure) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def _legend_clear_of_axes(fig: plt.Figure) -> None:
    """The legend's box meets neither the axes' box nor any tick label, axis label or number drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    (ax,) = fig.axes
    assert not box.overlaps(ax.get_tightbbox(renderer)), "the legend covers the axes or their labels"
    for text in ax.texts:
        assert not box.overlaps(text.get_window_extent(renderer)), text.get_text()


def _null_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """A run in which no chain is active (as on a model that knows no chain step by step)."""
    doc = copy.deepcopy(dict(document))
    for edit in doc["per_edit"]:
        edit["ifr"] = None
        edit["reasons"] = {**edit.get("reasons", {}), "ifr": NO_ACTIVE}
    doc["metrics"]["ifr"] = {"value": None, "n": 0, "reason": NO_ACTIVE}
    for n in "12345":
        doc["metrics"]["ifr_by_length"][n] = {"value": None, "n": 0, "reason": NO_ACTIVE}
    return doc


def test_labels_are_wrapped_or_shortened_at_words() -> None:
    text = "Harry Potter → Ilvermorny School of Witchcraft and Wizardry of North America, Massachusetts"
    label = wrap_label(text, width=34, lines=2)
    lines = label.split("\n")
    assert len(lines) == 2 and all(len(line) <= 34 for line in lines)
    assert lines[-1].endswith(" …")
    words = set(text.split())
    assert {w for line in lines for w in line.split()} - {"…"} <= words  # every word whole
    assert wrap_label("Hillary Clinton → Alessandra Mussolini") == "Hillary Clinton → Alessandra\nMussolini"
    assert wrap_label("short") == "short"


@pytest.mark.parametrize("name", ["none-1", "none-2", "ice-1", "ice-2"])
def test_legends_cover_no_numbers(runs, name: str) -> None:
    """With one or two edits, and at IFR 1.0 (`none`), neither legend covers an axis number or a label."""
    for figure in (per_edit_figure(runs[name]), ifr_by_length_figure(runs[name])):
        _legend_clear_of_axes(figure)
        plt.close(figure)


def test_ifr_by_length_labels_every_bar_with_its_chain_count(runs) -> None:
    doc = runs["none-2"]
    fig = ifr_by_length_figure(doc)
    texts = _texts(fig)
    for n in "12345":
        entry = doc["metrics"]["ifr_by_length"][n]
        chains = "1 chain" if entry["n"] == 1 else f"{entry['n']} chains"
        assert f"{entry['value']:.2f}\n({chains})" in texts
    assert any(
        t.startswith(f"IFR over all {doc['metrics']['ifr']['n']} active chains = 1.000") for t in texts
    )
    plt.close(fig)


def test_failed_edits_are_marked(runs) -> None:
    none_doc, ice_doc = runs["none-2"], runs["ice-2"]
    assert [e["efficacy"] for e in none_doc["per_edit"]] == [0.0, 0.0]
    fig = per_edit_figure(none_doc)
    texts = _texts(fig)
    assert texts.count("✗ failed") == 2
    assert "edit failed: Efficacy 0 (2 of 2)" in texts
    plt.close(fig)
    fig = per_edit_figure(ice_doc)
    failed = sum(1 for e in ice_doc["per_edit"] if e["efficacy"] == 0)
    assert _texts(fig).count("✗ failed") == failed
    plt.close(fig)


def test_null_metrics_show_their_reason(runs) -> None:
    doc = _null_document(runs["none-2"])
    fig = per_edit_figure(doc)
    texts = _texts(fig)
    assert sum(t.startswith("n/a: no active chains") for t in texts) == 2  # one per edit's IFR bar
    _legend_clear_of_axes(fig)
    plt.close(fig)
    doc["metrics"]["preservation"] = {"value": None, "n": 0, "reason": "no broader-context facts"}
    for edit in doc["per_edit"]:
        edit["preservation"] = None
        edit["reasons"]["preservation"] = "no broader-context facts"
    fig = per_edit_figure(doc)
    whole = " ".join(" ".join(_texts(fig)).split())
    assert f"No IFR or Preservation to show. IFR: {NO_ACTIVE} Preservation: no broader-context facts" in whole
    plt.close(fig)
    fig = ifr_by_length_figure(doc)
    whole = " ".join(" ".join(_texts(fig)).split())
    assert f"No IFR to show: {NO_ACTIVE}" in whole
    assert not any(re.match(r"IFR over all", t) for t in _texts(fig))
    plt.close(fig)


def test_a_point_interval_a_bit_off_its_value_still_plots(runs) -> None:
    """The stated value comes from the chain records and a point interval from the per-edit sums: they can
    differ in the last bit, which must draw a zero-length bar rather than fail."""
    import math

    doc = copy.deepcopy(runs["ice-2"])
    entry = next(e for e in doc["metrics"]["ifr_by_length"].values() if e.get("value") is not None)
    point = math.nextafter(entry["value"], 2.0)
    entry["interval"] = [point, point]
    fig = ifr_by_length_figure(doc)
    plt.close(fig)


def test_write_plots_writes_pngs(runs, tmp_path: Path) -> None:
    paths = write_plots(_null_document(runs["ice-2"]), tmp_path)
    assert [p.name for p in paths] == ["ifr_by_length.png", "per_edit.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_ifr_by_length_draws_error_bars_only_where_an_interval_exists(runs) -> None:
    from matplotlib.collections import LineCollection

    doc = runs["none-2"]
    by_length = doc["metrics"]["ifr_by_length"]
    # The lengths are categories on the x axis: bar i (length i + 1) stands at x = i.
    expected = {
        float(i)
        for i, n in enumerate("12345")
        if by_length[n]["value"] is not None and by_length[n].get("interval")
    }
    assert len(expected) < 5, "the run should leave at least one length without an interval"
    (ax,) = ifr_by_length_figure(doc).axes
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    drawn = {float(segment[0][0]) for collection in bars for segment in collection.get_segments()}
    assert drawn == expected
