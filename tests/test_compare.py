"""``knowgic compare RUN_A RUN_B``: paired differences of real runs, and the runs it must refuse."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.intervals import OK, BootstrapSettings
from knowgic.measure.compare import comparability_problem, compare_results
from knowgic.paired import batch_differences
from knowgic.spec import benchmark_spec


def _run_main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code or 0)


def _evaluate(out: Path, *args: str) -> Path:
    assert main(["evaluate", "--model", "knowgic-tiny", *args, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def runs(knowgic_tiny, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "none": _evaluate(root / "none", "--editor", "none", "--limit", "3"),
        "rome": _evaluate(root / "rome", "--editor", "rome", "--limit", "3"),
        "sequential": _evaluate(root / "seq", "--editor", "none", "--limit", "3", "--mode", "sequential"),
        "greedy": _evaluate(root / "greedy", "--editor", "none", "--limit", "3", "--protocol", "greedy"),
        "v1.0.0": _evaluate(root / "v100", "--editor", "none", "--limit", "3", "--dataset-version", "1.0.0"),
        "two edits": _evaluate(root / "two", "--editor", "none", "--limit", "2"),
    }


def _document(path: Path) -> dict[str, Any]:
    return json.loads((path / "results.json").read_text(encoding="utf-8"))


def test_compare_prints_each_metrics_paired_difference(runs, capsys) -> None:
    capsys.readouterr()
    assert _run_main(["compare", str(runs["none"]), str(runs["rome"] / "results.json")]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 5}
    # ROME makes the 3 edits the unedited model does not: B - A = +1, but three one-way discordant edits
    # are not evidence at 5% (McNemar's exact p = 2 / 2^3 = 0.25), and the interval, the test inverted,
    # holds 0 too.
    efficacy = rows["Efficacy"]
    assert "+1.0000" in efficacy and "0.25 │" in efficacy and "not told apart † few edits" in efficacy
    assert "[-0.4152, +1.0000]" in efficacy
    # IFR is ranked, and so told apart or not, by its per-edit form; the paper's pooled IFR shows its own
    # difference, interval and p-value beside it, and points to the verdict.
    assert "not told apart" in rows["IFR (per edit)"]
    assert "verdict by IFR (per edit)" in rows["IFR"] and "told apart" not in rows["IFR"]
    assert "verdict by Preservation (macro)" in rows["Preservation"]
    # The footnote names each metric's test, from the metric kinds the spec declares.
    footnote = " ".join(out[out.index("Paired over the 3 edits:") :].split())
    assert (
        "McNemar's exact test (its interval: the test inverted, with Clopper-Pearson's share of discordant "
        "edits) for Efficacy and "
        "Generalization;" in footnote
    )
    assert (
        "paired t over edits (linearized differences, Satterthwaite degrees of freedom; its own interval)"
        in footnote
    )


def test_compare_json_matches_the_library(runs, capsys) -> None:
    capsys.readouterr()
    assert _run_main(["compare", str(runs["none"]), str(runs["rome"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["a"]["editor"] == "none" and report["b"]["editor"] == "rome"
    assert report["paired"]["level"] == 0.95 and report["paired"]["edits"] == 3
    library = compare_results(_document(runs["none"]), _document(runs["rome"]), resamples=500)
    keys = (
        "metric",
        "a",
        "b",
        "difference",
        "low",
        "high",
        "excludes_zero",
        "reason",
        "p_value",
        "few_edits",
    )
    assert [{k: d[k] for k in keys} for d in report["differences"]] == [
        {k: getattr(d, k) for k in keys} for d in library
    ]
    by_metric = {d["metric"]: d for d in report["differences"]}
    for name in ("ifr", "ifr_per_edit"):
        ifr = by_metric[name]
        assert ifr["difference"] == pytest.approx(ifr["b"] - ifr["a"])
        assert ifr["low"] <= ifr["difference"] <= ifr["high"] and ifr["difference"] < 0
        assert ifr["p_value"] > 0.05 and ifr["few_edits"] is True and ifr["ranked_by"] == "ifr_per_edit"
    assert by_metric["ifr_per_edit"]["excludes_zero"] is False
    assert (
        by_metric["ifr"]["excludes_zero"] is None
        and by_metric["ifr"]["verdict"] == "– (verdict by IFR (per edit))"
    )
    assert by_metric["efficacy"]["discordant"] == [0, 3] and by_metric["efficacy"]["verdict"].startswith(
        "not told"
    )


def test_a_run_compared_with_itself_differs_by_nothing(runs, capsys) -> None:
    capsys.readouterr()
    assert _run_main(["compare", str(runs["rome"]), str(runs["rome"]), "--json"]) == 0
    for d in json.loads(capsys.readouterr().out)["differences"]:
        if d["low"] is None:
            continue
        verdict = False if d["ranked_by"] == d["metric"] else None  # a pooled figure's verdict is its form's
        assert (d["difference"], d["p_value"], d["excludes_zero"]) == (0.0, 1.0, verdict)
        if d["metric"] not in ("efficacy", "generalization"):
            assert (d["low"], d["high"]) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("other", "reason"),
    [
        ("sequential", "differ in mode: independent (A) vs sequential (B)"),
        ("greedy", "differ in protocol: logprob (A) vs greedy (B)"),
        ("v1.0.0", "differ in dataset version: 1.1.0 (A) vs 1.0.0 (B)"),
        ("two edits", "cover different edits (3 edits, limit 3 (A) vs 2 edits, limit 2 (B))"),
    ],
)
def test_compare_refuses_runs_that_differ(runs, capsys, other, reason) -> None:
    capsys.readouterr()
    assert _run_main(["compare", str(runs["none"]), str(runs[other])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err and "Traceback" not in err


def test_comparability_names_the_model_and_says_no_limit(runs) -> None:
    a = _document(runs["none"])
    b = copy.deepcopy(a)
    b["config"]["model"] = "gemma3-270m"
    assert comparability_problem(a, b) == "the runs differ in model: knowgic-tiny (A) vs gemma3-270m (B)"
    with pytest.raises(KnowgicError, match="differ in model"):
        compare_results(a, b)
    c = copy.deepcopy(a)
    c["config"]["limit"] = None
    c["per_edit"] = c["per_edit"][:2]
    problem = comparability_problem(a, c)
    assert problem == "the runs cover different edits (3 edits, limit 3 (A) vs 2 edits, no limit (B))"


def test_compare_names_a_missing_or_empty_run(tmp_path, capsys) -> None:
    assert _run_main(["compare", str(tmp_path / "missing"), str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert _run_main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert "holds no results.json" in capsys.readouterr().err
    assert _run_main(["compare", str(tmp_path), str(tmp_path), "--level", "95"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err


def _random_sums(
    parts: tuple[str, ...], shift: np.ndarray, n_edits: int, rng: np.random.Generator
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-edit sums of ``len(shift)`` random runs: 0/1 outcomes for a 0/1 metric, values in [0, 1] weighted
    1..5 otherwise, each run's values moved by its ``shift``."""
    declared = benchmark_spec().metric_paths()
    samples = shift.shape[0]
    sums = {}
    for p in parts:
        b = rng.integers(1, 6, size=(samples, n_edits)).astype(float)
        if declared[p].kind == "edit_outcome":
            sums[p] = ((rng.random((samples, n_edits)) < 0.7 + shift).astype(float), np.ones_like(b))
        else:
            sums[p] = (np.clip(rng.beta(2, 2, (samples, n_edits)) + shift, 0, 1) * b, b)
    return sums


@pytest.mark.parametrize(
    "kind", ["edit_outcome", "edit_mean", "clustered_proportion", "ratio_of_sums", "composite"]
)
def test_a_verdict_and_its_interval_never_disagree(kind: str) -> None:
    """One method gives the p-value and the interval: p < 0.05 exactly when the interval excludes 0, over
    many random pairs of runs (at 3, 6 and 26 edits; some B identical to A, or A with one edit changed)."""
    declared = benchmark_spec().metric_paths()
    path = {
        "edit_outcome": "efficacy",
        "edit_mean": "ifr_per_edit",
        "clustered_proportion": "specificity",
        "ratio_of_sums": "ifr",
        "composite": "deep_editing_score",
    }[kind]
    parts = declared[path].of or (path,)
    rng = np.random.default_rng(11)
    for n_edits in (3, 6, 26):
        a = _random_sums(parts, np.zeros((400, 1)), n_edits, rng)
        b = _random_sums(parts, rng.normal(0, 0.15, (400, 1)), n_edits, rng)
        same = rng.random(400) < 0.2
        for p in parts:
            b[p] = (np.where(same[:, None], a[p][0], b[p][0]), np.where(same[:, None], a[p][1], b[p][1]))
            b[p][0][same, 0] = a[p][0][same, 0] * rng.random(int(same.sum()))
        result = batch_differences(path, declared, a, b, BootstrapSettings())
        ok = result.status == OK
        told = result.p_value < 0.05
        excludes = (result.low > 0) | (result.high < 0)
        assert (told == excludes)[ok].all(), (kind, n_edits)
        assert n_edits < 26 or 0 < told[ok].sum() < ok.sum(), (kind, n_edits)  # both verdicts occur
