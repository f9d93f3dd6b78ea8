"""Private splits, end to end without containers: `knowgic dataset holdout` writes one from the published
chains; the score stage given `--private-dataset` scores its chains of the job's edits beside the public ones
(public figures unchanged); the private block publishes only what ranking needs (edit keys, per-edit sums,
metrics recomputed from them, the flag) and every number of it is checked; runs on one private split rank
from it, and say so; a split that is tampered with or that edits anything the public version does not
request is refused with one line; the leaderboard shows both IFRs and the flag. Also: every in-context
prefix lands in results.json and in the leaderboard's per-edit table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowgic.dataset.loading import load_rows
from knowgic.dataset.private import read_private_split, write_drill, write_split
from knowgic.dataset.validate import validate_folder
from knowgic.editors.hparams import load_hparams
from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.evaluation.private import PRIVATE_NO_RIPPLE
from knowgic.measure.compute import metrics_of_sums
from knowgic.measure.private import edit_key, read_private
from knowgic.recompute import check_results, settings_of
from knowgic.records import Case
from knowgic.results import read_results, validation_errors
from knowgic.runner.stages.cli import main
from knowgic.runner.stages.contract import JobSpec
from knowgic.runner.stages.edit import run_edit_stage
from knowgic.runner.stages.prepare import edit_requests
from knowgic.runner.stages.score import run_score_stage
from knowgic.spec import benchmark_spec

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


def test_the_private_block_publishes_only_what_ranking_needs(
    split_run: dict[str, Any], holdout: Path
) -> None:
    document = split_run["document"]
    assert validation_errors(document) == []
    private = document["private"]
    split = read_private_split(holdout)
    run_edits = [r["edit_id"] for r in document["per_edit"]]
    assert set(private) == {
        "dataset", "kind", "edits_outside_run", "counts", "edits", "sums", "metrics", "uncertainty", "ifr_gap"
    }  # fmt: skip
    assert private["kind"] == "drill" and private["ifr_gap"]["flagged"] is None
    assert private["ifr_gap"]["reason"] == "the split is a drill (chains of the public edits): no flag"
    assert private["edits"] == [edit_key(split.ref.sha256, e) for e in run_edits]
    assert private["edits_outside_run"] == len({c.request.edit_id for c in split.cases}) - LIMIT
    assert private["dataset"] == {
        "name": "knowgic-private",
        "version": "1.1.0",
        "config": "chains",
        "sha256": split.ref.sha256,
    }
    # Nothing names an edit, a chain or a fact: no case id, edit id, chain record, subject or answer.
    text = json.dumps(private)

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {k for v in value.values() for k in keys(v)}
        return {k for v in value for k in keys(v)} if isinstance(value, list) else set()

    found = keys(private)
    assert not found & {
        "case_id",
        "per_edit",
        "edit_id",
        "r_pre",
        "r_post",
        "prompt_prefix",
        "info",
        "length",
    }
    assert isinstance(private["counts"]["chains"], int)  # "chains" only as a count
    cases = [c for c in split.cases if c.request.edit_id in run_edits]
    for case in cases:
        for word in (case.request.edit_id, case.request.subject, case.request.target_new):
            assert f'"{word}"' not in text, word
    # The metrics are what the sums give, by the top level's computation.
    sums = read_private(private).sums
    assert private["metrics"] == metrics_of_sums(sums, benchmark_spec(), settings_of(private))
    assert sums["efficacy"].ratio.numerator.size == LIMIT
    # RippleEdits' criteria are public-data only: null on the split, with the reason, and no ripple count.
    assert "ripple" not in private["counts"] and document["counts"]["ripple"]
    for name in ("ripple_accuracy", "ripple_probability"):
        for entry in private["metrics"][name].values():
            assert entry["value"] is None and entry["reason"] == PRIVATE_NO_RIPPLE
    gap = private["ifr_gap"]
    assert gap["metric"] == "ifr_per_edit" and gap["public_edits"] == gap["private_edits"] == LIMIT
    assert gap["flagged"] is None  # a drill: no flag (the reason is checked above)
    assert check_results(document) == []


def test_every_private_number_is_checked(split_run: dict[str, Any]) -> None:
    """A private figure, sum, edit count or flag edited by hand is listed by the store's recomputation."""
    document = split_run["document"]

    def edited(change) -> list[str]:
        copy = json.loads(json.dumps(document))
        change(copy["private"])
        return check_results(copy)

    value = document["private"]["metrics"]["ifr_per_edit"]["value"]
    lines = edited(lambda p: p["metrics"]["ifr_per_edit"].update(value=0.0))
    assert lines == [f"private.metrics.ifr_per_edit.value: stated 0, recomputed {value:.6g}"]
    lines = edited(lambda p: p["sums"]["efficacy"]["numerator"].__setitem__(0, 0.0))
    assert any(line.startswith("private.metrics.efficacy.value: stated") for line in lines)
    assert any(line.startswith("private.ifr_gap") for line in edited(lambda p: p["ifr_gap"].update(gap=-0.5)))
    assert edited(lambda p: p["ifr_gap"].update(flagged=True)) == [
        "private.ifr_gap.flagged: stated True, recomputed null"
    ]
    assert edited(lambda p: p["counts"].update(edits=7)) == [
        f"private.counts.edits: stated 7, recomputed {LIMIT}"
    ]
    assert edited(lambda p: p["sums"]["efficacy"]["numerator"].pop()) == [
        f"private.sums.efficacy: numerator and denominator differ in length ({LIMIT - 1} vs {LIMIT})"
    ]


def test_an_old_private_block_is_read_shown_and_never_ranked(split_run: dict[str, Any]) -> None:
    """A results schema 1.4 document with the private block of a same-edit holdout stays readable."""
    from knowgic.leaderboard import views
    from knowgic.measure.compare import rank_basis
    from knowgic.results import content_sha256, results_document

    old = json.loads(json.dumps(split_run["reference"]))
    old["schema_version"] = "1.4"
    old["private"] = {
        "dataset": dict(split_run["document"]["private"]["dataset"]),
        "edits_outside_run": 0,
        "metrics": old["metrics"],
        "counts": old["counts"],
        "per_edit": old["per_edit"],
        "chains": old["chains"],
        "uncertainty": old["uncertainty"],
        "ifr_check": {
            "public": 0.5, "private": 0.5, "difference": 0.0, "public_interval": [0.4, 0.6],
            "private_interval": [0.4, 0.6], "flagged": False, "rule": "intervals do not overlap",
        },
    }  # fmt: skip
    old["sha256"] = content_sha256(old)
    document = results_document(old, "old.json")
    assert not document.private_ranks and check_results(document) == []
    basis = rank_basis([document, split_run["document"]])
    assert not basis.private and "results schema 1.4 or before" in basis.note
    assert "never ranked from or flagged" in views.private_note(document)
    assert "sums" not in document.summary()["private"] and "chains" not in document.summary()["private"]


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
    # The unedited model loses nothing: its IFR is 1 on both edit sets, so no gap; no calibration here.
    gap = document["private"]["ifr_gap"]
    assert abs(gap["gap"]) < 1e-6 and gap["flagged"] is None and gap["calibration"] is None


@pytest.fixture(scope="module")
def ranked_runs(unpublished_model, world_split: Path, tmp_path_factory) -> dict[str, Path]:
    """ROME and the unedited model on the first public edits with a private split of new edits (the
    unpublished-world model: knowgic-tiny can have none), and the unedited model without it: results files,
    as a store holds them."""
    from tests.private_world import hparams_file

    root = tmp_path_factory.mktemp("ranked")
    split = read_private_split(world_split)
    runs = {}
    for name, editor, private in (("rome", "rome", split), ("none", "none", split), ("public", "none", None)):
        request = EvaluationRequest(
            model=unpublished_model.model_id,
            editor=editor,
            hparams_path=str(hparams_file(editor)) if editor == "rome" else None,
            limit=LIMIT,
            use_cache=False,
            out_dir=root / name,
        )
        runs[name] = evaluate(request, progress=False, loaded=unpublished_model, private=private).results_path
    return runs


def test_runs_on_one_private_split_rank_from_it_and_say_so(ranked_runs: dict[str, Path], tmp_path) -> None:
    from knowgic.evaluation.sweep import summary_table
    from knowgic.leaderboard.table import Board, TableQuery
    from knowgic.measure.compare import PUBLIC_BASIS, compare_private, compare_results, rank_basis
    from knowgic.measure.ranks import rank_runs
    from knowgic.runner.store.store import ResultsStore

    rome, none, public = (read_results(ranked_runs[n]) for n in ("rome", "none", "public"))
    ranking = rank_runs([rome, none])["deep_editing_score"]
    assert ranking.private and ranking.basis.startswith("ranked on the private split knowgic-private 0.1.0")
    assert ranking.values == (
        rome["private"]["metrics"]["deep_editing_score"]["value"],
        none["private"]["metrics"]["deep_editing_score"]["value"],
    )
    assert [r.text for r in ranking.ranges] == ["1", "2"]
    on_public = rank_runs([rome, none], private=False)["deep_editing_score"]
    assert on_public.values[0] == rome["metrics"]["deep_editing_score"]["value"] and not on_public.private
    # A run without the split: the ranking is the public data's, and says why.
    assert rank_basis([rome, public]).note == "ranked on the public data: 1 of 2 runs have no private split"
    assert rank_basis([public]).note == PUBLIC_BASIS
    # compare: the private split's verdicts beside the public ones
    differences, basis = compare_private(rome, none)
    assert basis.private and differences is not None
    efficacy = {d.metric: d for d in differences}["efficacy"]
    assert efficacy.a == rome["private"]["metrics"]["efficacy"]["value"]
    assert len(differences) == len(compare_results(rome, none))
    # summarize: the private table ranks, the public figures follow unranked
    table = summary_table([rome, none])
    assert table.startswith("On the private split (these figures rank):")
    assert "Public figures (to reproduce the run; not ranked):" in table
    assert "Ranks: ranked on the private split knowgic-private 0.1.0" in table
    # the leaderboard: ranks and order from the private split, and the note beside the ranking
    store = ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")
    entries = {n: store.add_local(ranked_runs[n], label=n).entry_id for n in ("rome", "none")}
    model = rome["config"]["model"]
    page = Board(store.scan(), include_reported=False).page(TableQuery(model=model, part="ranked"))
    assert page.rank_note == ranking.basis and page.row_ids == [entries["rome"], entries["none"]]
    assert ranking.basis in page.cells[0][0]  # the rank cell's hover says it too
    other = ResultsStore(tmp_path / "other", verified_cache=tmp_path / "cache2")
    other.add_local(ranked_runs["public"], label="public")
    shown = Board(other.scan(), include_reported=False).page(TableQuery(model=model, part="ranked"))
    assert shown.rank_note == PUBLIC_BASIS


def test_the_split_s_calibration_record_decides_the_flag(
    ranked_runs: dict[str, Path], world_split: Path, unpublished_model, tmp_path
) -> None:
    """The operator's reference runs, recorded in the split's version.json, calibrate the flag at scoring
    time; a record of another ranking does not."""
    import shutil

    from knowgic.measure.gap import calibration_record
    from knowgic.measure.ranks import ranking_key

    rome, none = read_results(ranked_runs["rome"]), read_results(ranked_runs["none"])
    record = calibration_record([rome, none])
    assert record["ranking"] == ranking_key(rome).digest and record["split_sha256"] == split_sha(rome)
    assert [r["editor"] for r in record["runs"]] == ["rome"]  # the unedited model is never a reference
    assert record["runs"][0]["gap"] == rome["private"]["ifr_gap"]["gap"]
    # Three reference runs (the operator's; their gaps written here by hand) calibrate the next run.
    record["runs"] = [{**record["runs"][0], "gap": g} for g in (-0.02, 0.0, 0.03)]
    copy = tmp_path / "split"
    shutil.copytree(world_split, copy)
    info = json.loads((copy / "version.json").read_text())
    (copy / "version.json").write_text(json.dumps({**info, "calibration": record}))
    document = evaluate(
        EvaluationRequest(model=unpublished_model.model_id, editor="none", limit=LIMIT, use_cache=False),
        progress=False,
        loaded=unpublished_model,
        private=read_private_split(copy),
    ).document
    gap = document["private"]["ifr_gap"]
    assert gap["calibration"] == {
        "source": "the private split's calibration record",
        "runs": 3,
        "mean": pytest.approx(0.01 / 3),
        "sd": pytest.approx(float(np.std([-0.02, 0.0, 0.03], ddof=1))),
    }
    assert gap["flagged"] is False and check_results(document) == []
    # The same record read for a run of another ranking (all edits, not the first three) does not apply.
    from knowgic.measure.gap import split_calibration

    other = split_calibration(record, "0" * 12, split_sha(rome), "ifr_per_edit")
    assert other == (
        "not calibrated: 0 reference runs (the private split's calibration is of another ranking); the flag "
        "needs the gaps of at least 3 built-in editors' runs on the same public edits and private split"
    )


def split_sha(document: dict[str, Any]) -> str:
    return str(document["private"]["dataset"]["sha256"])


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


def test_the_leaderboard_shows_prefixes_and_both_ifrs_and_the_flag(split_run: dict[str, Any]) -> None:
    from knowgic.leaderboard import views
    from knowgic.leaderboard.table import FLAG_MARK, MetricCell, Row, private_ifr_html
    from knowgic.measure.gap import calibration, recalibrated

    document = split_run["document"]
    frame = views.metrics_frame(_row(document), document)
    assert list(frame.columns)[-3:] == ["Private", "Private n", "Private interval"]
    ifr = frame[frame["Metric"] == "IFR (paper)"].iloc[0]  # the paper's pooled IFR, beside its per-edit form
    assert ifr["Private"] == f"{document['private']['metrics']['ifr']['value']:.4f}"
    note = views.private_note(document)
    assert "Private split knowgic-private 1.1.0" in note
    assert "not decided: the split is a drill (chains of the public edits): no flag" in note
    assert FLAG_MARK not in note

    gap = document["private"]["ifr_gap"]
    flagged = recalibrated(gap, calibration([gap["gap"] - 1.0, gap["gap"] - 1.1, gap["gap"] - 0.9], "three"))
    assert flagged["flagged"] is True
    assert "⚑ The public IFR is below the private one" in views.private_note(document, flagged)
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
        private_check=flagged,
    )
    assert FLAG_MARK in private_ifr_html(row) and "t = " in private_ifr_html(row)
    assert FLAG_MARK not in private_ifr_html(Row(**{**row.__dict__, "private_check": gap}))

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
