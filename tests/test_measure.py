"""knowgic.measure: each metric is one declaration plus one registered function, and the one computation.

- The registered functions give what the paper's per-item formulas (knowgic.metrics) give on a real run's
  outcomes: the check ``evaluate`` used to make at run time, made here once.
- A new metric takes one YAML entry and one decorated function, and then appears in ``results.json`` (with
  its interval, recomputable by a reader), in ``summarize`` and in the leaderboard.
- The registry refuses what would make a metric ambiguous: a name twice, a declaration without a function.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from knowgic import metrics as M
from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.evaluation.outcomes import collect_outcomes
from knowgic.measure.compute import compute, metric_entry_at
from knowgic.measure.definitions import METRICS
from knowgic.measure.records import Records
from knowgic.measure.registry import EditSums, MetricRegistry
from knowgic.paths import spec_dir
from knowgic.recompute import check_results
from knowgic.spec import benchmark_spec


@pytest.fixture(scope="module")
def rome_run(knowgic_tiny):
    return evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="rome", limit=5), progress=False, loaded=knowgic_tiny
    )


def test_registered_functions_give_the_papers_formulas(rome_run) -> None:
    """Every metric computed from the records equals the per-item formula applied to the raw outcomes."""
    out = collect_outcomes(rome_run.plan, rome_run.scores)
    by_kind = {
        kind: M.specificity(
            [n for n, k in zip(out.neighbours, out.neighbour_kinds, strict=True) if k == kind]
        )
        for kind in ("same-relation", "other-graphs")
    }
    direct: dict[str, M.MetricValue] = {
        "ifr": M.indirect_fact_recovery(out.chains),
        "ifr_uncapped": M.indirect_fact_recovery(out.chains, capped=False),
        **{f"ifr_by_length.{n}": v for n, v in M.ifr_by_length(out.chains).items()},
        "preservation": M.preservation(out.preservation),
        "preservation_macro": M.preservation_macro(out.preservation),
        "efficacy": M.efficacy(out.rewrite),
        "efficacy_magnitude": M.efficacy_magnitude(out.rewrite),
        "generalization": M.generalization(out.question),
        "specificity": M.specificity(out.neighbours),
        "specificity_same_relation": by_kind["same-relation"],
        "specificity_other_graphs": by_kind["other-graphs"],
    }
    direct["deep_editing_score"] = M.deep_editing_score(
        *(direct[p].value for p in ("ifr", "preservation", "efficacy", "specificity"))
    )
    computed = compute(Records.from_document(rome_run.document), benchmark_spec())
    assert set(direct) == set(benchmark_spec().metric_paths())
    for path, value in direct.items():
        entry = metric_entry_at(computed["metrics"], path)
        assert (entry["value"], entry["n"], entry.get("reason")) == (
            pytest.approx(value.value, abs=1e-12) if value.value is not None else None,
            value.n,
            value.reason,
        ), path
    counts = {k: v for k, v in rome_run.document["counts"].items() if k != "distinct_queries"}
    assert counts == computed["counts"]


def _margin(records: Records) -> EditSums:
    """A small new metric: the share of edits whose new target is more likely than not after the edit."""
    return EditSums.of(
        [float(e.p_new > 0.5) for e in records.edits], [1.0] * len(records.edits), len(records.edits)
    )


@pytest.fixture
def margin_metric(tmp_path: Path, use_spec):
    """The spec with one more YAML entry, and the registry with one more function."""
    data = yaml.safe_load((spec_dir() / "benchmark.yaml").read_text(encoding="utf-8"))
    data["metrics"]["confident_edits"] = {
        "label": "Confident edits",
        "short": "Conf.",
        "version": 1,
        "direction": "higher",
        "kind": "edit_outcome",
        "bounds": [0, 1],
        "headline": True,
        "description": "Share of edits after which p'(target_new) > 0.5 on the rewrite prompt.",
    }
    path = tmp_path / "spec" / "benchmark.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    use_spec(path)
    METRICS.register("confident_edits")(_margin)
    yield
    METRICS.remove("confident_edits")


def test_a_new_metric_is_one_entry_and_one_function(margin_metric, knowgic_tiny, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["evaluate", "--editor", "memit", "--limit", "4", "--out", str(out)]) == 0
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    entry = document["metrics"]["confident_edits"]
    expected = np.mean([r["p_new"] > 0.5 for r in document["per_edit"]])
    assert entry["value"] == pytest.approx(expected) and entry["n"] == 4
    assert entry["interval_method"].startswith("Clopper-Pearson") and len(entry["interval"]) == 2
    assert document["metric_versions"]["confident_edits"] == 1
    assert check_results(document) == []  # a reader recomputes it too
    printed = capsys.readouterr().out
    assert "Confident edits" in printed
    assert main(["summarize", str(out)]) == 0
    assert "Conf. ↑" in capsys.readouterr().out


def test_a_new_metric_appears_in_the_leaderboard(margin_metric, knowgic_tiny, tmp_path, monkeypatch) -> None:
    """A run made with the new metric, added to a store, shows it in the leaderboard with no change there: a
    column to switch on and to sort by, headed by its declared label, with its value; a line of the run's
    metrics; a line of the About page. The app reads the spec when it is built, not when it is imported."""
    from knowgic.leaderboard import views
    from knowgic.leaderboard.app import build_app
    from knowgic.leaderboard.table import TableQuery
    from tests.test_leaderboard import wait_verified

    # The store's verified summaries are shared through the cache: `store add` checks the run here, where
    # the new metric is declared, and the app finds it verified.
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path / "cache"))
    request = EvaluationRequest(model="knowgic-tiny", editor="ice", limit=3, out_dir=tmp_path / "run")
    run = evaluate(request, progress=False, loaded=knowgic_tiny)
    entry = run.document["metrics"]["confident_edits"]
    assert main(["store", "add", str(run.results_path), "--store", str(tmp_path / "store")]) == 0

    app = build_app(tmp_path / "store", include_reported=False)
    state = app.leaderboard_state
    try:
        wait_verified(app)
        blocks = {b.elem_id: b for b in app.blocks.values() if getattr(b, "elem_id", None)}
        assert ("Confident edits", "confident_edits") in blocks["kg-columns"].choices
        assert ("Confident edits", "confident_edits") in blocks["kg-sort"].choices
        assert "| Confident edits | higher ↑ | Share of edits after which" in blocks["kg-about"].value

        page = state.board.page(TableQuery(columns=["editor", "confident_edits"], sort="confident_edits"))
        assert page.headers == ["Editor", "Confident edits"] and page.total == 1
        cell = page.cells[0][1]
        assert f"{entry['value']:.3f}" in cell and f"n = {entry['n']}" in cell
        low, high = entry["interval"]
        assert f"[{low:.2f}, {high:.2f}]" in cell
        exported = state.board.export(TableQuery())
        assert exported["confident_edits"].tolist() == [pytest.approx(entry["value"])]

        row = state.board.rows[0]
        metrics = views.metrics_frame(row, row.entry.document, state.columns)
        line = metrics[metrics["Metric"] == "Confident edits"].iloc[0]
        assert line["Value"] == f"{entry['value']:.4f}" and line["Better"] == "higher ↑"
    finally:
        state.close(timeout=10)


def test_the_registry_refuses_ambiguity(use_spec) -> None:
    registry = MetricRegistry()
    registry.register("ifr")(_margin)
    with pytest.raises(KnowgicError, match="metric 'ifr' is registered twice"):
        registry.register("ifr")(_margin)
    problem = registry.problem(benchmark_spec())
    assert problem is not None and "does not compute" in problem and "preservation" in problem
    assert METRICS.problem(benchmark_spec()) is None
    with pytest.raises(KnowgicError, match="needs a reason"):
        EditSums.of([0.0], [0.0], 0)
