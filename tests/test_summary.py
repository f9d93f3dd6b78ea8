"""The tables of ``knowgic sweep`` and ``knowgic summarize``: intervals, marks against the best row, row
order and labels, and the help of every option of the commands that print them."""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from knowgic.cli import build_parser, main
from knowgic.evaluation.sweep import TIED_MARK, headline_columns, length_columns, row_labels, summary_table
from knowgic.formatting import format_value
from knowgic.intervals import BOOTSTRAP_METHODS, METHOD_BY_KIND, METHODS
from knowgic.measure.compare import compare_results, ranked_path
from knowgic.measure.compute import metric_entry_at
from knowgic.spec import benchmark_spec


def _run_main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.fixture(scope="module")
def runs(knowgic_tiny, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name, args in (
        ("none", ["--editor", "none", "--limit", "3"]),
        ("rome", ["--editor", "rome", "--limit", "3"]),
        ("ice", ["--editor", "ice", "--limit", "3"]),
    ):
        assert main(["evaluate", "--model", "knowgic-tiny", *args, "--out", str(root / name)]) == 0
        out[name] = root / name
    return out


def _document(path: Path) -> dict[str, Any]:
    return json.loads((path / "results.json").read_text(encoding="utf-8"))


def _rows(table: str) -> list[list[str]]:
    """The body rows of every Markdown table in ``table``, as lists of cells."""
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| editor")
    ]


def test_each_value_has_its_interval_and_marks_follow_the_paired_comparison(runs) -> None:
    documents = [_document(runs[name]) for name in ("none", "ice", "rome")]
    table = summary_table(documents)
    rows = _rows(table)
    assert [r[0] for r in rows] == ["none", "ice", "rome"] * 2
    headline, lengths = rows[:3], rows[3:]
    for column_index, column in enumerate(headline_columns(benchmark_spec()), 1):
        cells = [r[column_index] for r in headline]
        _check_column(documents, column, cells)
    for column_index, column in enumerate(length_columns(benchmark_spec()), 1):
        _check_column(documents, column, [r[column_index] for r in lengths])
    # ROME makes the 3 edits, the others do not: its Efficacy is the best, but 3 of 3 against 0 of 3 is
    # McNemar's p = 0.25, Holm-adjusted 0.5: three edits cannot tell the rows apart, so they are marked tied.
    efficacy = 1 + [c.metric for c in headline_columns(benchmark_spec())].index("efficacy")
    assert headline[2][efficacy].startswith("**1.000**") and headline[0][efficacy].endswith(TIED_MARK)
    assert "Holm-adjusted" in table and "3 edits" in table
    # The footnote names the interval method of every column, as the metric's declared kind chooses it:
    # "labels: method; labels: method".
    footnote = " ".join(table.split())
    named = {}
    for group in footnote.partition("(docs/metrics.md): ")[2].partition(". †")[0].split("; "):
        labels, _, method = group.partition(": ")
        named.update(dict.fromkeys(re.split(r", | and ", labels), method))
    for column in (*headline_columns(benchmark_spec()), *length_columns(benchmark_spec())):
        declared = benchmark_spec().metric_paths()[column.metric]
        assert named[declared.label].startswith(METHODS[METHOD_BY_KIND[declared.kind]]), column.metric


def test_columns_follow_the_metric_declarations() -> None:
    """The headline columns are the metrics the spec marks ``headline``, each with its declared arrow."""
    headline = [name for name, m in benchmark_spec().metric_paths().items() if m.headline and "." not in name]
    assert [c.metric for c in headline_columns(benchmark_spec())] == headline
    for column in (*headline_columns(benchmark_spec()), *length_columns(benchmark_spec())):
        declared = benchmark_spec().metric_paths()[column.metric]
        assert column.lower_is_better == declared.lower_is_better
        assert column.header.endswith(declared.arrow)
    # The methods whose captions give resamples and seed are methods the module declares.
    assert BOOTSTRAP_METHODS.issubset(METHODS)


def _check_column(documents: list[dict[str, Any]], column: Any, cells: list[str]) -> None:
    """One column: every cell is the value with its interval; the bold row is the best by the column's
    ranked form (IFR's is IFR per edit); a row carries the tied mark exactly when the Holm-adjusted paired
    test of that form against the best row is at least 0.05."""
    declared = benchmark_spec().metric_paths()
    ranker = ranked_path(declared, column.metric)
    shown = [metric_entry_at(d["metrics"], column.metric)["value"] for d in documents]
    values = [
        None if v is None else metric_entry_at(d["metrics"], ranker)["value"]
        for v, d in zip(shown, documents, strict=True)
    ]
    for cell, doc in zip(cells, documents, strict=True):
        plain = cell.replace("**", "").removesuffix(f" {TIED_MARK}")
        assert plain == format_value(metric_entry_at(doc["metrics"], column.metric)), (column, cell)
    bold = [i for i, cell in enumerate(cells) if cell.startswith("**")]
    defined = [v for v in values if v is not None]
    if not defined:
        assert bold == []
        return
    assert len(bold) == 1
    best = bold[0]
    assert values[best] == (min(defined) if column.lower_is_better else max(defined))
    candidates = [i for i in range(len(cells)) if i != best and values[i] is not None]
    tests = {
        i: {d.metric: d for d in compare_results(documents[best], documents[i])}[ranker].p_value
        for i in candidates
    }
    for i in candidates:
        if tests[i] is None:  # no paired test (the metric rests on one edit): no mark
            assert not cells[i].endswith(TIED_MARK), (column.metric, cells[i])
    others = [i for i in candidates if tests[i] is not None]
    p_values = [float(tests[i]) for i in others]
    # Holm over the column's comparisons with the best, written out: the k-th smallest p times (m - k + 1),
    # kept non-decreasing.
    order = sorted(range(len(others)), key=lambda k: p_values[k])
    adjusted, running = {}, 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[k]))
        adjusted[others[k]] = running
    for i in others:
        assert cells[i].endswith(TIED_MARK) == (adjusted[i] >= 0.05), (column.metric, cells[i], adjusted[i])


def test_summarize_orders_rows_as_sweep_does_and_tells_same_editor_runs_apart(runs, tmp_path, capsys) -> None:
    again = tmp_path / "none-again"
    shutil.copytree(runs["none"], again)
    capsys.readouterr()
    assert _run_main(["summarize", str(runs["rome"]), str(again), str(runs["none"] / "results.json")]) == 0
    rows = _rows(capsys.readouterr().out)
    first, second = sorted([str(runs["none"]), str(again)])
    assert [r[0] for r in rows[:3]] == [f"none ({first})", f"none ({second})", "rome"]
    assert len({tuple(r) for r in rows}) == len(rows)  # no two identical rows


def test_summarize_out_refuses_an_existing_file_unless_overwrite(runs, tmp_path, capsys) -> None:
    out = tmp_path / "summary.md"
    out.write_text("a table someone kept\n")
    assert _run_main(["summarize", str(runs["none"]), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert out.read_text() == "a table someone kept\n"
    assert _run_main(["summarize", str(runs["none"]), "--out", str(out), "--overwrite"]) == 0
    assert out.read_text().startswith("| editor |")


def test_runs_of_one_editor_with_other_hparams_show_the_hash(runs) -> None:
    a = _document(runs["rome"])
    b = copy.deepcopy(a)
    b["config"]["hparams_sha256"] = "f" * 64
    labels = row_labels([a, b], [Path("sweep-a/rome"), Path("sweep|b/rome")])
    assert labels == [
        f"rome (hparams {a['config']['hparams_sha256'][:8]}, sweep-a/rome)",
        "rome (hparams ffffffff, sweep\\|b/rome)",
    ]
    assert row_labels([a, copy.deepcopy(a)]) == ["rome (run 1)", "rome (run 2)"]


def test_a_mismatched_limit_says_no_limit(runs, knowgic_tiny, tmp_path, capsys) -> None:
    whole = tmp_path / "whole"
    assert main(["evaluate", "--model", "knowgic-tiny", "--editor", "none", "--out", str(whole)]) == 0
    capsys.readouterr()
    assert _run_main(["summarize", str(runs["none"]), str(whole)]) == 2
    err = capsys.readouterr().err
    assert "None" not in err
    assert f"limit 3 in {runs['none'] / 'results.json'}; no limit in {whole / 'results.json'}" in err


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("command", ["sweep", "summarize", "compare", "evaluate", "probe", "timing"])
def test_every_option_has_a_help_text(command) -> None:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = subparsers.choices[command]
    missing = [a.dest for a in _options(parser) if not (a.help and a.help.strip())]
    assert missing == [], f"{command}: {missing}"
    assert re.search(r"\S", parser.description or "")
