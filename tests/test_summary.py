"""The tables of ``knowgic sweep`` and ``knowgic summarize``: intervals, rank ranges in value order, the
paper's figures beside the forms that rank them, row order and labels, ``--json``'s ranks, the runs a table
refuses, and the help of every option of the commands that print them."""

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
from knowgic.evaluation import BASELINES
from knowgic.evaluation.sweep import (
    RANK_MARK,
    headline_columns,
    length_columns,
    ripple_columns,
    row_labels,
    summary_table,
)
from knowgic.formatting import format_value
from knowgic.intervals import BOOTSTRAP_METHODS, METHOD_BY_KIND, METHODS
from knowgic.measure.compute import metric_entry_at
from knowgic.measure.ranks import rank_runs, ranked_form
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


def test_each_value_has_its_interval_and_each_ranked_column_its_rank_range(runs) -> None:
    documents = [_document(runs[name]) for name in ("none", "ice", "rome")]
    table = summary_table(documents)
    rows = _rows(table)
    assert [r[0] for r in rows] == ["none", "ice", "rome"] * 3
    headline, lengths, ripple = rows[:3], rows[3:6], rows[6:]
    for column_index, column in enumerate(headline_columns(benchmark_spec()), 1):
        _check_column(documents, column, [r[column_index] for r in headline])
    for column_index, column in enumerate(length_columns(benchmark_spec()), 1):
        _check_column(documents, column, [r[column_index] for r in lengths])
    for column_index, column in enumerate(ripple_columns(benchmark_spec()), 1):
        _check_column(documents, column, [r[column_index] for r in ripple])
    assert "RippleEdits' criteria" in table
    # ROME makes the 3 edits, the others do not; 3 edits cannot tell 3 of 3 from 0 of 3 apart beyond doubt,
    # but ROME's range starts at 1 and is bold.
    efficacy = 1 + [c.metric for c in headline_columns(benchmark_spec())].index("efficacy")
    assert headline[2][efficacy].startswith("**1.000**") and f"{RANK_MARK}1" in headline[2][efficacy]
    assert "rank range" in table and "3 edits" in table and "2000 resamples" in table
    assert "(paper): the paper's pooled IFR, Preservation" in " ".join(table.split())
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
    """The headline columns are the metrics the spec marks ``headline``, each paper's figure followed by the
    form that ranks it (which only that form's column does), each with its declared arrow."""
    spec = benchmark_spec()
    headline = [name for name, m in spec.metric_paths().items() if m.headline and "." not in name]
    shown = [c.metric for c in headline_columns(spec)]
    assert [c for c in shown if c in headline] == headline
    assert (
        shown[:2] == ["ifr", "ifr_per_edit"]
        and shown[shown.index("preservation") + 1] == "preservation_macro"
    )
    for column in (*headline_columns(spec), *length_columns(spec)):
        declared = spec.metric_paths()[column.metric]
        assert column.lower_is_better == declared.lower_is_better
        assert column.header.endswith(declared.arrow)
        assert column.ranked == (ranked_form(spec, column.metric) == column.metric) != column.paper
        assert ("(paper)" in column.header) == column.paper
    # The methods whose captions give resamples and seed are methods the module declares.
    assert BOOTSTRAP_METHODS.issubset(METHODS)


def _check_column(documents: list[dict[str, Any]], column: Any, cells: list[str]) -> None:
    """One column: every cell is the value with its interval; a ranked column's cell adds the row's rank
    range, as knowgic.measure.ranks gives it, in bold where that range holds rank 1; a paper's figure has
    neither."""
    ranking = rank_runs(documents, [column.metric])[column.metric] if column.ranked else None
    for i, (cell, doc) in enumerate(zip(cells, documents, strict=True)):
        plain, _, rank = cell.replace("**", "").partition(f" {RANK_MARK}")
        assert plain == format_value(metric_entry_at(doc["metrics"], column.metric)), (column, cell)
        found = None if ranking is None else ranking.ranges[i]
        if found is None:
            assert rank == "" and not cell.startswith("**"), (column.metric, cell)
            continue
        assert rank == found.text and cell.startswith("**") == (found.low == 1), (column.metric, cell)


def _no_inversion(report: dict[str, Any]) -> list[str]:
    """Every headline metric of ``summarize --json``'s runs where a better value shows a worse rank end, or
    equal values different ranges."""
    spec = benchmark_spec()
    problems = []
    runs = report["runs"]
    for path in runs[0]["ranks"]:
        form = runs[0]["ranks"][path]["ranked_by"]
        sign = -1.0 if spec.metric_paths()[form].lower_is_better else 1.0
        ranked = [(r["editor"], r["ranks"][path]) for r in runs if r["ranks"][path]["rank"] is not None]
        for name_a, a in ranked:
            for name_b, b in ranked:
                if sign * a["value"] > sign * b["value"] and (
                    a["rank"][0] > b["rank"][0] or a["rank"][1] > b["rank"][1]
                ):
                    problems.append(f"{path}: {name_a} {a} ranks below {name_b} {b}")
                if a["value"] == b["value"] and a["rank"] != b["rank"]:
                    problems.append(
                        f"{path}: {name_a} and {name_b} are equal but ranked {a['rank']}, {b['rank']}"
                    )
    return problems


def test_summarize_json_gives_each_runs_rank_range_per_headline_metric(runs, capsys) -> None:
    capsys.readouterr()
    assert _run_main(["summarize", str(runs["none"]), str(runs["ice"]), str(runs["rome"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "3 edits" in report["ranking"]["ranking"] and report["ranking"]["level"] == 0.95
    spec = benchmark_spec()
    headline = [p for p, m in spec.metric_paths().items() if m.headline and not m.parts]
    for run in report["runs"]:
        assert list(run["ranks"]) == headline
        ifr = run["ranks"]["ifr"]
        assert ifr["ranked_by"] == "ifr_per_edit" and ifr["value"] == run["metrics"]["ifr_per_edit"]["value"]
        assert ifr["of"] == 3 and 1 <= ifr["rank"][0] <= ifr["rank"][1] <= 3
    assert _no_inversion(report) == []
    # The check sees an inversion when there is one.
    broken = copy.deepcopy(report)
    broken["runs"][0]["ranks"]["efficacy"]["rank"] = [3, 3]
    broken["runs"][0]["ranks"]["efficacy"]["value"] = 2.0
    assert _no_inversion(broken) != []


@pytest.mark.slow
def test_no_headline_rank_range_of_the_nine_baselines_inverts_the_values(
    knowgic_tiny, tmp_path, capsys
) -> None:
    """The nine baselines on knowgic-tiny 1.1.0, all 26 edits (`knowgic sweep`, about 3 minutes on 2 cores):
    `summarize --json` ranks every headline metric in the order of its values."""
    out = tmp_path / "sweep"
    sweep = ["sweep", "--model", "knowgic-tiny", "--dataset-version", "1.1.0", "--out", str(out)]
    assert _run_main([*sweep, "--editors", ",".join(BASELINES)]) == 0
    capsys.readouterr()
    assert _run_main(["summarize", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["runs"]) == 9 and "all 26 edits" in report["ranking"]["ranking"]
    assert _no_inversion(report) == []
    # The first runs differ in their rank somewhere: the ranges are not all [1, 9].
    assert any(r["ranks"]["deep_editing_score"]["rank"] != [1, 9] for r in report["runs"])


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


GOLDEN_RUN = Path(__file__).resolve().parent / "data" / "golden" / "ice.results.json.gz"


def test_one_run_is_neither_ranked_nor_bold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table of one run: no rank range and no bold (each cell would be "the best" of one)."""
    import gzip

    from knowgic.evaluation.sweep import ONE_RUN

    path = tmp_path / "results.json"
    path.write_bytes(gzip.decompress(GOLDEN_RUN.read_bytes()))
    assert _run_main(["summarize", str(path)]) == 0
    table = capsys.readouterr().out
    assert "**" not in table and f" {RANK_MARK}1" not in table
    assert f"Rows not ranked: {ONE_RUN}." in table
    assert _run_main(["summarize", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ranking"]["reason"] == ONE_RUN and report["runs"][0]["ranks"] == {}


def test_a_build_dataset_is_named_apart_from_the_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    """A ``knowgic build`` output's version (0.1.0 by default) never reads as the benchmark's: not in the
    results table's header, nor in the summary's footnote."""
    import gzip

    from knowgic.dataset.loading import DATASET_NAME, dataset_label
    from knowgic.evaluation.commands import print_results

    assert dataset_label({"name": DATASET_NAME, "version": "1.1.0"}) == "KnowGIC 1.1.0"
    assert dataset_label({"name": DATASET_NAME, "version": "growth-1.0.0"}) == "KnowGIC growth-1.0.0"
    assert dataset_label({"name": "knowgic-build", "version": "0.1.0"}) == "dataset knowgic-build 0.1.0"
    document = json.loads(gzip.decompress(GOLDEN_RUN.read_bytes()))
    document["dataset"].update(name="knowgic-build", version="0.1.0")  # as a build's run records it
    print_results(document)
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("dataset knowgic-build 0.1.0 | ") and "KnowGIC" not in header
    assert "), dataset knowgic-build 0.1.0, protocol" in summary_table([document])
