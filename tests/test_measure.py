"""knowgic.measure: each metric is one declaration plus one registered function, and the one computation.

- The registered functions give what the paper's per-item formulas (knowgic.metrics) give on a real run's
  outcomes: the check ``evaluate`` used to make at run time, made here once.
- A new metric takes one YAML entry and one decorated function, and then appears in ``results.json`` (with
  its interval, recomputable by a reader), in ``summarize`` and in the leaderboard.
- The registry refuses what would make a metric ambiguous: a name twice, a declaration without a function.
"""

from __future__ import annotations

import json
import math
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


def _weighted(pairs: list[tuple[float, float]]) -> M.MetricValue:
    """sum_i w_i x_i / sum_i w_i over (w, x) pairs, written out here independently of knowgic.measure."""
    den = math.fsum(w for w, _ in pairs)
    return (
        M.MetricValue(math.fsum(w * x for w, x in pairs) / den, len(pairs))
        if den > 0
        else M.MetricValue(None, 0)
    )


def test_registered_functions_give_the_papers_formulas(rome_run) -> None:
    """Every metric computed from the records equals the paper's formula written out on the raw item
    outcomes (the check evaluate used to make at run time, made here once)."""
    out = collect_outcomes(rome_run.plan, rome_run.scores)
    active = [c for c in out.chains if c.active and c.r_pre > 0]

    def ifr(chains: list[M.ChainOutcome], capped: bool = True) -> M.MetricValue:
        return _weighted(
            [
                (1 / math.sqrt(c.length), min(1.0, c.r_post / c.r_pre) if capped else c.r_post / c.r_pre)
                for c in chains
            ]
        )

    known_pairs = [p for p in out.preservation if p.known_pre and p.p_pre > 0]
    by_edit: dict[str, list[float]] = {}
    for p in known_pairs:
        by_edit.setdefault(p.edit_id, []).append(min(1.0, p.p_post / p.p_pre))
    kinds = dict(zip(map(id, out.neighbours), out.neighbour_kinds, strict=True))

    def specificity(kind: str | None) -> M.MetricValue:
        known = [n for n in out.neighbours if n.known_pre and kind in (None, kinds[id(n)])]
        return _weighted([(1.0, float(n.p_true_post > n.p_new_post)) for n in known])

    def per_edit(chains: list[M.ChainOutcome]) -> M.MetricValue:
        """Each edit's own IFR, the edits weighing the same."""
        edits: dict[str, list[M.ChainOutcome]] = {}
        for c in chains:
            edits.setdefault(c.edit_id, []).append(c)
        return _weighted([(1.0, ifr(own).value) for own in edits.values()])  # type: ignore[misc]

    direct: dict[str, M.MetricValue] = {
        "ifr": ifr(active),
        "ifr_uncapped": ifr(active, capped=False),
        "ifr_indirect": ifr([c for c in active if not c.restates_edit]),
        **{f"ifr_by_length.{n}": ifr([c for c in active if c.length == n]) for n in range(1, 6)},
        "ifr_per_edit": per_edit(active),
        **{
            f"ifr_by_length_per_edit.{n}": per_edit([c for c in active if c.length == n]) for n in range(1, 6)
        },
        "preservation": _weighted([(1.0, min(1.0, p.p_post / p.p_pre)) for p in known_pairs]),
        "preservation_macro": _weighted([(1.0, sum(v) / len(v)) for v in by_edit.values()]),
        "efficacy": _weighted([(1.0, float(o.p_new > o.p_true)) for o in out.rewrite]),
        "efficacy_magnitude": _weighted([(1.0, o.p_new - o.p_true) for o in out.rewrite]),
        "generalization": _weighted([(1.0, float(o.p_new > o.p_true)) for o in out.question]),
        "specificity": specificity(None),
        "specificity_same_relation": specificity("same-relation"),
        "specificity_other_graphs": specificity("other-graphs"),
    }
    ripple = rome_run.document["ripple"]

    def ripple_form(criterion: str, probability: bool) -> M.MetricValue:
        """RippleEdits: the mean over an edit's kept queries of the criterion, then over the edits."""
        edits: dict[str, list[float]] = {}
        for r in ripple:
            if r["criterion"] != criterion or not r["kept"]:
                continue
            if not probability:
                edits.setdefault(r["edit_id"], []).append(r["accuracy"])
            elif r["p_competitor"] is not None:
                edits.setdefault(r["edit_id"], []).append(float(r["p_target"] > r["p_competitor"]))
        return _weighted([(1.0, sum(v) / len(v)) for v in edits.values()])

    for criterion in ("LG", "CI", "CII", "SA", "PV", "RS"):
        direct[f"ripple_accuracy.{criterion}"] = ripple_form(criterion, False)
        direct[f"ripple_probability.{criterion}"] = ripple_form(criterion, True)
    parts = [direct[p].value for p in ("ifr_per_edit", "preservation_macro", "efficacy", "specificity")]
    xs = [1 - min(1.0, parts[0]), *parts[1:]]  # type: ignore[operator, list-item]
    direct["deep_editing_score"] = M.MetricValue(
        0.0 if min(xs) <= 0 else len(xs) / math.fsum(1 / x for x in xs), 4
    )
    computed = compute(Records.from_document(rome_run.document), benchmark_spec())
    assert set(direct) == set(benchmark_spec().metric_paths())
    for path, value in direct.items():
        entry = metric_entry_at(computed["metrics"], path)
        if value.value is None:
            assert entry["value"] is None and entry["reason"], path
        else:
            assert (entry["value"], entry["n"]) == (pytest.approx(value.value, abs=1e-12), value.n), path
    counts = {k: v for k, v in rome_run.document["counts"].items() if k != "distinct_queries"}
    assert counts == computed["counts"]
    # Each edit's own figures in the document are the same metrics on that edit's records alone.
    for record in rome_run.document["per_edit"]:
        own = [c for c in active if c.edit_id == record["edit_id"]]
        assert record["ifr"] == (pytest.approx(ifr(own).value, abs=1e-12) if own else None)


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


def test_ifr_indirect_leaves_out_the_chains_that_restate_the_edit(rome_run) -> None:
    """A run made now records which chains restate the edit; ifr_indirect is IFR without them, and a
    document whose chains do not record the flag gets no value (not IFR's by default)."""
    chains = rome_run.document["chains"]
    assert all(isinstance(c["restates_edit"], bool) for c in chains)
    records = Records.from_document(rome_run.document)
    restating = [c for c in records.chains if c.restates_edit]
    assert restating and all(c.length == 1 for c in restating)
    older = {
        **rome_run.document,
        "chains": [{k: v for k, v in c.items() if k != "restates_edit"} for c in chains],
    }
    entry = compute(Records.from_document(older), benchmark_spec())["metrics"]["ifr_indirect"]
    assert entry["value"] is None and "restates_edit" in entry["reason"]
    assert (
        compute(Records.from_document(older), benchmark_spec())["metrics"]["ifr"]
        == rome_run.document["metrics"]["ifr"]
    )
