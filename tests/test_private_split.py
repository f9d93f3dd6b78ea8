"""Private splits, end to end without containers: `knowgic dataset holdout` writes one from the published
chains; the score stage given `--private-dataset` scores its chains of the job's edits beside the public ones
(public figures unchanged, private ones recomputable from their own records); a split that is tampered with
or that edits anything the public version does not request is refused with one line; the leaderboard shows
both IFRs and flags a run whose intervals do not overlap. Also: every in-context prefix lands in
results.json and in the leaderboard's per-edit table.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from knowgic.dataset.loading import load_rows
from knowgic.dataset.private import read_private_split, write_drill, write_split
from knowgic.dataset.validate import validate_folder
from knowgic.editors.hparams import load_hparams
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.measure.compare import IFR_CHECK_RULE, ifr_check
from knowgic.recompute import check_results
from knowgic.records import Case
from knowgic.results import read_results, validation_errors
from knowgic.runner.stages.cli import main
from knowgic.runner.stages.contract import JobSpec
from knowgic.runner.stages.edit import run_edit_stage
from knowgic.runner.stages.prepare import edit_requests
from knowgic.runner.stages.score import run_score_stage

LIMIT = 3


@pytest.fixture(scope="module")
def holdout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_drill(tmp_path_factory.mktemp("private") / "split", fraction=0.2, seed=0)


def _edit_id(row: dict[str, Any]) -> str:
    return Case.from_row(dict(row)).request.edit_id


def test_holdout_holds_out_published_chains_of_every_edit(holdout: Path) -> None:
    published = {row["case_id"]: row for row in load_rows("chains")}
    split = read_private_split(holdout)
    held = [json.loads(line) for line in (holdout / "data" / "chains-test.jsonl").read_text().splitlines()]
    assert held and all(published[row["case_id"]] == row for row in held), "held-out rows are published rows"
    per_edit_all = Counter(_edit_id(r) for r in published.values())
    per_edit_held = Counter(_edit_id(r) for r in held)
    assert set(per_edit_held) == set(per_edit_all), "every edit has private chains"
    for edit_id, n in per_edit_all.items():
        expected = max(1, round(0.2 * n))
        expected = min(expected, n - 1) if n > 1 else expected
        assert per_edit_held[edit_id] == expected, edit_id
    report = validate_folder(holdout)
    assert report.ok, report.render_text()
    assert split.ref.name == "knowgic-private" and split.ref.version == "1.1.0"
    assert len(split.cases) == len(held)


def test_holdout_command_refuses_a_folder_in_use(holdout: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "knowgic.cli", "dataset", "holdout", "--drill", "--out", str(holdout)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip() == f"error: {holdout} already exists and is not an empty folder: choose a new one"
    )


def test_a_tampered_split_is_refused_in_one_line(holdout: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "split"
    shutil.copytree(holdout, copy)
    chains = copy / "data" / "chains-test.jsonl"
    chains.write_text(chains.read_text().replace('"Chelsea Clinton"', '"Someone Else"', 1))
    with pytest.raises(KnowgicError) as caught:
        read_private_split(copy)
    message = str(caught.value)  # the path once, in the validator's words
    assert (
        message.startswith(f"private split: {copy}/version.json: content hash mismatch")
        and "\n" not in message
    )


def test_a_split_editing_what_the_public_version_does_not_request_is_refused(tmp_path: Path) -> None:
    row = dict(load_rows("chains")[0])
    row["requested_rewrite"] = [{**row["requested_rewrite"][0], "target_new": {"str": "Nobody Known"}}]
    drill = {"private_kind": "drill", "based_on": "1.1.0"}
    split = write_split(tmp_path / "split", [row], {}, "1.1.0", "A split with a foreign edit.", drill)
    spec = JobSpec(model="knowgic-tiny", editor="none", limit=1)
    (tmp_path / "deltas").mkdir()
    with pytest.raises(KnowgicError) as caught:  # before the model loads: loaded is not given
        run_score_stage(spec, tmp_path / "deltas", tmp_path / "out", private_dataset=split)
    message = str(caught.value)
    assert message.startswith(f"private split {split} (a drill): chain {row['case_id']} edits ")
    assert message.endswith("which is not an edit request of the public dataset 1.1.0")


@pytest.fixture(scope="module", params=["independent", "sequential"])
def split_run(
    request: pytest.FixtureRequest, knowgic_tiny, holdout: Path, tmp_path_factory
) -> dict[str, Any]:
    """ROME on the first three edits through the two stages with the private split, and a plain evaluate."""
    mode = request.param
    hparams, _ = load_hparams("rome", knowgic_tiny.model_id, knowgic_tiny.family, required=False)
    spec = JobSpec(model="knowgic-tiny", editor="rome", hparams=hparams, mode=mode, limit=LIMIT)
    root = tmp_path_factory.mktemp(f"split-{mode}")
    # The prepare stage appends the split's edit requests (here: the public ones again) as a second group.
    requests = edit_requests(spec, read_private_split(holdout))
    assert requests.group_sizes() == (LIMIT, LIMIT)
    run_edit_stage(spec, requests, None, root / "deltas", loaded=knowgic_tiny)
    path = run_score_stage(
        spec, root / "deltas", root / "out", loaded=knowgic_tiny, plots=False, private_dataset=holdout
    )
    reference = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="rome", mode=mode, limit=LIMIT, use_cache=False),
        progress=False,
        loaded=knowgic_tiny,
    ).document
    return {"document": read_results(path), "reference": reference, "path": path}


def test_public_figures_are_those_of_a_run_without_the_private_split(split_run: dict[str, Any]) -> None:
    document, reference = split_run["document"], split_run["reference"]
    assert document["metrics"] == reference["metrics"]
    assert document["chains"] == reference["chains"]
    assert document["counts"] == reference["counts"]
    assert [r["ifr"] for r in document["per_edit"]] == [r["ifr"] for r in reference["per_edit"]]


def test_private_chains_of_the_job_s_edits_are_scored_and_recomputable(
    split_run: dict[str, Any], holdout: Path
) -> None:
    document = split_run["document"]
    assert validation_errors(document) == []
    private = document["private"]
    split = read_private_split(holdout)
    run_edits = [r["edit_id"] for r in document["per_edit"]]
    expected = sorted(c.case_id for c in split.cases if c.request.edit_id in run_edits)
    assert sorted(c["case_id"] for c in private["chains"]) == expected
    assert [r["edit_id"] for r in private["per_edit"]] == run_edits
    assert private["edits_outside_run"] == len({c.request.edit_id for c in split.cases}) - LIMIT
    assert private["dataset"] == {
        "name": "knowgic-private",
        "version": "1.1.0",
        "config": "chains",
        "sha256": split.ref.sha256,
    }
    # A held-out chain is a published chain: the same model, edit and chain give the same r before and after
    # (to float32 rounding: it was scored in other batches).
    public = {c["case_id"]: c for c in document["chains"]}
    for chain in private["chains"]:
        twin = public[chain["case_id"]]
        assert chain["active"] == twin["active"]
        assert math.isclose(chain["r_pre"], twin["r_pre"], abs_tol=1e-5)
        assert math.isclose(chain["r_post"], twin["r_post"], abs_tol=1e-5)
    # Every private figure is what its own records give (the recomputation the store applies).
    assert check_results(private) == []
    check = private["ifr_check"]
    assert check == ifr_check(document["metrics"], private["metrics"])
    assert check["public"] == document["metrics"]["ifr"]["value"]
    assert check["private"] == private["metrics"]["ifr"]["value"]
    assert all(record["seconds"] is None for record in private["per_edit"])


def test_ifr_check_flags_only_intervals_that_do_not_overlap() -> None:
    def metrics(value: float | None, interval: list[float] | None, reason: str | None = None) -> dict:
        entry: dict[str, Any] = {"value": value, "n": 10, "interval": interval}
        if reason:
            entry["interval_reason"] = reason
        return {"ifr": entry}

    apart = ifr_check(metrics(0.01, [0.0, 0.05]), metrics(0.35, [0.2, 0.5]))
    assert apart["flagged"] and math.isclose(apart["difference"], 0.34) and apart["rule"] == IFR_CHECK_RULE
    assert ifr_check(metrics(0.5, [0.4, 0.6]), metrics(0.3, [0.1, 0.45]))["flagged"] is False
    assert ifr_check(metrics(0.5, [0.4, 0.6]), metrics(0.3, [0.1, 0.4]))["flagged"] is False  # touching
    assert ifr_check(metrics(0.7, [0.61, 0.8]), metrics(0.3, [0.1, 0.6]))["flagged"] is True
    one_edit = ifr_check(metrics(0.5, [0.4, 0.6]), metrics(0.1, None, "the run has one edit"))
    assert (
        one_edit["flagged"] is False
        and one_edit["reason"] == "the private IFR has no interval (the run has one edit)"
    )
    undefined = ifr_check(metrics(None, None), metrics(0.1, [0.0, 0.2]))
    assert undefined["flagged"] is False and undefined["reason"] == "IFR is undefined on the public chains"


def test_the_score_command_takes_the_private_split(knowgic_tiny, holdout: Path, tmp_path: Path) -> None:
    spec = JobSpec(model="knowgic-tiny", editor="none", limit=2)
    job = tmp_path / "job.json"
    job.write_text(spec.to_json())
    requests = edit_requests(spec, read_private_split(holdout))
    run_edit_stage(spec, requests, None, tmp_path / "deltas", loaded=knowgic_tiny)
    args = ["score", "--job", str(job), "--deltas", str(tmp_path / "deltas"), "--out", str(tmp_path / "out")]
    code = main([*args, "--no-plots", "--private-dataset", str(holdout)])
    assert code == 0
    document = read_results(tmp_path / "out" / "results.json")
    assert document["private"]["counts"]["edits"] == 2
    # The unedited model loses nothing: both IFRs are 1, with intervals that overlap.
    assert document["private"]["ifr_check"]["flagged"] is False


def test_every_in_context_prefix_is_recorded_per_edit(knowgic_tiny) -> None:
    document = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="ice", limit=2, use_cache=False),
        progress=False,
        loaded=knowgic_tiny,
    ).document
    assert validation_errors(document) == []
    for record in document["per_edit"]:
        assert record["prompt_prefix"], record["edit_id"]
        assert record["target_new"] in record["prompt_prefix"]
    weights = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1, use_cache=False),
        progress=False,
        loaded=knowgic_tiny,
    ).document
    assert [r["prompt_prefix"] for r in weights["per_edit"]] == [""]


def test_the_leaderboard_shows_prefixes_and_both_ifrs_and_flags_a_gap(split_run: dict[str, Any]) -> None:
    from knowgic.leaderboard import views
    from knowgic.leaderboard.table import MetricCell, Row, private_ifr_html

    document = split_run["document"]
    frame = views.metrics_frame(_row(document), document)
    assert list(frame.columns)[-3:] == ["Private", "Private n", "Private interval"]
    ifr = frame[frame["Metric"] == "IFR (paper)"].iloc[0]  # the paper's pooled IFR, beside its per-edit form
    assert ifr["Private"] == f"{document['private']['metrics']['ifr']['value']:.4f}"
    note = views.private_note(document)
    assert "Private split knowgic-private 1.1.0" in note and "differ beyond" not in note

    gap = json.loads(json.dumps(document))
    gap["metrics"]["ifr"].update(value=0.01, interval=[0.0, 0.02])
    gap["private"]["metrics"]["ifr"].update(value=0.4, interval=[0.3, 0.5])
    assert "⚑ Public and private IFR differ beyond their intervals" in views.private_note(gap)
    row = Row(
        row_id="r",
        source="local",
        model="m",
        editor="e",
        protocol="logprob",
        mode="independent",
        dataset="1.1.0",
        metrics={},
        private_ifr=MetricCell(0.4, 30, 0.3, 0.5),
        private_check=ifr_check(gap["metrics"], gap["private"]["metrics"]),
    )
    assert "⚑ differs from public" in private_ifr_html(row)
    assert "differs" not in private_ifr_html(
        Row(
            **{
                **row.__dict__,
                "private_check": ifr_check(document["metrics"], document["private"]["metrics"]),
            }
        )
    )

    prefixed = json.loads(json.dumps(document))
    prefixed["per_edit"][0]["prompt_prefix"] = "Imagine that " + "x" * 1000
    table = views.per_edit_frame(prefixed)
    assert table["prompt_prefix"].iloc[0].startswith("Imagine that xxx")
    assert table["prompt_prefix"].iloc[0].endswith("… (1013 characters; all of it in results.json)")
    assert table["prompt_prefix"].iloc[1] == "–"


def _row(document: dict[str, Any]):
    from knowgic.leaderboard.table import Row

    return Row(
        row_id="r",
        source="local",
        model="knowgic-tiny",
        editor="rome",
        protocol="logprob",
        mode=document["config"]["mode"],
        dataset="1.1.0",
        metrics={},
    )
