"""knowgic.recompute: a results document's numbers are given back by its own records, and any stated number
that is not is listed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.measure.compute import metric_entry_at
from knowgic.recompute import check_results, recompute_metrics
from knowgic.spec import benchmark_spec


@pytest.fixture(scope="module")
def rome_run(knowgic_tiny, tmp_path_factory) -> dict[str, Any]:
    out: Path = tmp_path_factory.mktemp("rome")
    assert (
        main(["evaluate", "--model", "knowgic-tiny", "--editor", "rome", "--limit", "6", "--out", str(out)])
        == 0
    )
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_evaluate_writes_exactly_what_the_records_give_back(rome_run) -> None:
    recomputed = recompute_metrics(rome_run)
    assert recomputed["metrics"] == rome_run["metrics"]
    assert recomputed["uncertainty"] == rome_run["uncertainty"]
    assert {k: rome_run["counts"][k] for k in recomputed["counts"]} == recomputed["counts"]
    assert check_results(rome_run) == []
    # Every declared metric is there, in spec order.
    assert list(recomputed["metrics"]) == list(benchmark_spec().metrics)


def test_every_changed_number_is_listed_once(rome_run) -> None:
    doc = copy.deepcopy(rome_run)
    doc["metrics"]["ifr"]["value"] += 0.01
    doc["metrics"]["efficacy"]["interval"] = [0.0, 1.0]
    doc["metrics"]["ifr_by_length"]["1"]["n"] += 1
    doc["counts"]["active_chains"] += 2
    problems = check_results(doc)
    assert len(problems) == 4, problems
    assert any(p.startswith("metrics.ifr.value: stated ") for p in problems)
    assert any(p.startswith("metrics.efficacy.interval: stated [0, 1], recomputed [") for p in problems)
    assert any(p.startswith("metrics.ifr_by_length.1.n: ") for p in problems)
    assert any(p.startswith("counts.active_chains: ") for p in problems)
    # Below the tolerance nothing is listed; above it, it is.
    doc = copy.deepcopy(rome_run)
    doc["metrics"]["preservation"]["value"] += 1e-12
    assert check_results(doc) == []
    assert len(check_results(doc, tolerance=1e-14)) == 1


def test_a_changed_record_changes_the_recomputation(rome_run) -> None:
    doc = copy.deepcopy(rome_run)
    first = doc["per_edit"][0]
    first["p_new"], first["p_true"] = first["p_true"], first["p_new"]  # flips that edit's Efficacy
    recomputed = metric_entry_at(recompute_metrics(doc)["metrics"], "efficacy")
    assert recomputed["value"] != rome_run["metrics"]["efficacy"]["value"]
    assert any(p.startswith("metrics.efficacy.value") for p in check_results(doc))


def test_a_document_without_per_edit_sums_is_refused_in_one_line(rome_run) -> None:
    doc = copy.deepcopy(rome_run)
    doc["schema_version"] = "1.0"
    for record in doc["per_edit"]:
        del record["preservation_sum"], record["specificity_kept"]
    with pytest.raises(KnowgicError, match=r"^results schema 1\.0 records no per-edit preservation_sum, "):
        recompute_metrics(doc)


def test_summarize_recompute_shows_a_run_made_under_earlier_methods_in_todays_terms(tmp_path, capsys) -> None:
    """The golden ROME run was written under results schema 1.3 (the deep-editing score of the pooled forms,
    version 1): `summarize --recompute` shows every metric as this package computes it from the records,
    plain `summarize` what the file states; the file itself is not touched."""
    import gzip

    golden = Path(__file__).parent / "data" / "golden" / "rome.results.json.gz"
    with gzip.open(golden, "rt", encoding="utf-8") as handle:
        text = handle.read()
    run = tmp_path / "rome"
    run.mkdir()
    (run / "results.json").write_text(text, encoding="utf-8")
    stated = json.loads(text)

    def summarized(*flags: str) -> dict[str, Any]:
        capsys.readouterr()
        assert main(["summarize", str(run), "--json", *flags]) == 0
        [row] = json.loads(capsys.readouterr().out)["runs"]
        return row

    plain, recomputed = summarized(), summarized("--recompute")
    assert plain["metrics"] == stated["metrics"]
    assert recomputed["metrics"] == recompute_metrics(stated)["metrics"]
    deep = ("deep_editing_score", "value")
    assert recomputed["metrics"][deep[0]][deep[1]] != plain["metrics"][deep[0]][deep[1]]
    assert (run / "results.json").read_text(encoding="utf-8") == text
