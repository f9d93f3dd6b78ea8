"""The private split and the score stage's limits on a real Docker engine (marker ``container``).

The jobs run on ``knowgic-tests/tiny-unpublished`` (tests/private_world.py: a knowgic-tiny that also knows
facts no published version shows, served from a hub cache folder), because a private split of new edits
sharing no fact with the published data exists only for a model that knows more than the published data.
``knowgic dataset holdout --from`` draws one from the build of those facts, and one worker started with it
as ``--private-dataset`` runs:

- the README's custom editor: FINISHED, its results carry the private figures beside the public ones, equal
  to an in-process evaluate with the same split, and the leaderboard row shows both;
- the memorised-chains cheat (tests/data/submissions/memorised_chains: the published chains, gzip and
  base64, unlearned after the README's edit): its public IFR is far below the honest run's, its private IFR
  is the honest run's, and the ranking, taken from the private split, does not put it ahead;
- an editor looking for the split where submitted code runs: it finds nothing (the job finishes);
- a 100,000-character prefix, weights set to 3e38, a second delta for an edit already scored: each FAILED
  with its one-line reason (the first one used to end with the score container killed for memory).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from knowgic.recompute import check_results
from knowgic.runner.queue.queue import JobQueue, JobState
from knowgic.runner.store.store import ResultsStore
from tests.private_world import HUB_ID, PREBUILT, hub_env

pytestmark = pytest.mark.container

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "custom_editor"
SUBMISSIONS = Path(__file__).resolve().parent / "data" / "submissions"
LIMIT = 4
PRIVATE_EDITS = 10
SANDBOX_ENV = {
    "KNOWGIC_SANDBOX_MEMORY": "3G",
    "KNOWGIC_SANDBOX_PIDS": "256",
    "KNOWGIC_SANDBOX_CPUS": "2",
    "KNOWGIC_SANDBOX_TIMEOUT": "300",
}
CASES = {
    "probe": "ProbePrivate",
    "long-prefix": "LongPrefix",
    "overflow": "Overflow",
    "early-delta": "EarlyDelta",
}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from knowgic.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, **(env or {})},
    )


def _package(folder: Path) -> None:
    folder.mkdir(parents=True)
    shutil.copytree(EXAMPLE / "knowgic_rank_one", folder / "knowgic_rank_one")
    shutil.copy(EXAMPLE / "rank_one_ft.yaml", folder / "rank_one_ft.yaml")


def _submit(store: Path, folder: Path, env: dict[str, str]) -> str:
    done = _cli("runner", "submit", str(folder), "--store", str(store), "--limit", str(LIMIT), env=env)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "\tPENDING\t" in line]
    return line.split("\t")[0]


def _manifest(name: str, editor: str, hparams: Any) -> dict[str, Any]:
    return {
        "name": name,
        "version": "0.0.1",
        "authors": ["A tester"],
        "license": "MIT",
        "editor": editor,
        "hparams": {HUB_ID: hparams},
        "models": [HUB_ID],
        "protocols": ["logprob"],
    }


@pytest.fixture(scope="module")
def private_run(
    runner_image: str,
    unpublished_hf_home: Path,
    world_dataset: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("private-run")
    env = hub_env(unpublished_hf_home)
    split = root / "private-split"
    made = _cli(
        "dataset",
        "holdout",
        "--from",
        str(world_dataset),
        "--out",
        str(split),
        "--max-edits",
        str(PRIVATE_EDITS),
    )
    assert made.returncode == 0, made.stderr
    store = root / "store"
    honest = root / "rank-one"
    _package(honest)
    manifest = _manifest("rank-one-ft", "knowgic_rank_one.editor:RankOneFT", "rank_one_ft.yaml")
    (honest / "submission.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    jobs = {"honest": _submit(store, honest, env)}
    cheat = root / "memorised"
    _package(cheat)
    shutil.copytree(SUBMISSIONS / "memorised_chains" / "knowgic_memorised", cheat / "knowgic_memorised")
    manifest = _manifest("memorised-chains", "knowgic_memorised.editor:MemorisedChains", "rank_one_ft.yaml")
    (cheat / "submission.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    jobs["cheat"] = _submit(store, cheat, env)
    for case, editor_class in CASES.items():
        folder = root / case
        _package(folder)
        shutil.copy(SUBMISSIONS / "hostile" / "score_limits.py", folder / "score_limits.py")
        manifest = _manifest(f"hostile-{case}", f"score_limits:{editor_class}", {})
        (folder / "submission.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        jobs[case] = _submit(store, folder, env)
    args = ["runner", "worker", "--store", str(store), "--gpus", "none", "--poll", "0.5"]
    worker = _cli(
        *args,
        "--max-jobs",
        str(len(jobs)),
        "--private-dataset",
        str(split),
        env={**env, **SANDBOX_ENV, "KNOWGIC_MODEL_CACHE": str(unpublished_hf_home)},
    )
    assert worker.returncode == 0, worker.stdout[-3000:] + worker.stderr[-3000:]
    queue = JobQueue(ResultsStore(store).queue_url())
    return {
        "split": split,
        "store": store,
        "hf_home": unpublished_hf_home,
        "honest_folder": honest,
        "worker": worker.stdout,
        "jobs": {case: queue.get(job_id) for case, job_id in jobs.items()},
        "logs": {case: queue.logs(job_id) for case, job_id in jobs.items()},
    }


def _entry(private_run: dict[str, Any], case: str) -> Any:
    job = private_run["jobs"][case]
    assert job.state == JobState.FINISHED, (case, job.reason, private_run["logs"][case][-3000:])
    return ResultsStore(private_run["store"]).load_entry(
        ResultsStore(private_run["store"]).entry_path(job.job_id)
    )


def _reason(private_run: dict[str, Any], case: str) -> str:
    job = private_run["jobs"][case]
    assert job.state == JobState.FAILED, (case, job.state, private_run["logs"][case][-3000:])
    assert job.reason and "\n" not in job.reason
    return str(job.reason)


def test_the_worker_names_its_private_split(private_run: dict[str, Any]) -> None:
    assert f"private split {private_run['split']} (" in private_run["worker"]
    assert (
        f"{PRIVATE_EDITS} new edits disjoint from every shipped version, built for {HUB_ID}"
        in (private_run["worker"])
    )
    assert f"scored with jobs on {HUB_ID}" in private_run["worker"]


def test_an_honest_run_carries_public_and_private_figures(private_run: dict[str, Any]) -> None:
    from knowgic.dataset.private import read_private_split
    from knowgic.editors.hparams import read_hparams_file
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
    from knowgic.leaderboard.table import FLAG_MARK, Board, private_ifr_html

    entry = _entry(private_run, "honest")
    document = entry.document
    private = document["private"]
    assert private["kind"] == "disjoint" and "chains" not in private
    assert private["counts"]["edits"] == PRIVATE_EDITS and len(private["edits"]) == PRIVATE_EDITS
    assert check_results(document) == []  # the private block's figures too, from its per-edit sums
    assert private["ifr_gap"]["flagged"] is not True
    # The same editor and split in this process give the same private figures.
    folder = private_run["honest_folder"]
    sys.path.insert(0, str(folder))
    try:
        local = evaluate(
            EvaluationRequest(
                model=str(PREBUILT),  # the very files the hub cache entry serves
                editor="knowgic_rank_one.editor:RankOneFT",
                hparams_path=str(folder / "rank_one_ft.yaml"),
                limit=LIMIT,
                use_cache=False,
            ),
            progress=False,
            private=read_private_split(private_run["split"]),
        ).document
    finally:
        sys.path.remove(str(folder))
    assert read_hparams_file(folder / "rank_one_ft.yaml") == document["config"]["hparams"]
    for name in ("ifr", "preservation", "efficacy", "specificity"):
        for block, expected in ((document, local), (private, local["private"])):
            found, wanted = block["metrics"][name]["value"], expected["metrics"][name]["value"]
            assert (found is None and wanted is None) or math.isclose(found, wanted, abs_tol=1e-9), name
    (row,) = [r for r in Board(ResultsStore(private_run["store"]).scan()).rows if r.row_id == entry.entry_id]
    assert row.private_ifr is not None and row.private_ifr.value == private["metrics"]["ifr"]["value"]
    assert FLAG_MARK not in private_ifr_html(row)


def test_submitted_code_cannot_see_the_private_split(private_run: dict[str, Any]) -> None:
    document = _entry(private_run, "probe").document
    assert all(r["info"]["private_visible"] is False for r in document["per_edit"])
    assert document["private"]["counts"]["edits"] == PRIVATE_EDITS


def test_a_huge_prefix_is_refused_in_tokens_not_killed_for_memory(private_run: dict[str, Any]) -> None:
    reason = _reason(private_run, "long-prefix")
    from transformers import AutoTokenizer

    assert reason.startswith("the score stage rejected the run: edit 1 (")
    prefix = ("Paris is lovely. " * 10_000)[:100_000]  # score_limits.LongPrefix's
    tokens = len(AutoTokenizer.from_pretrained(str(PREBUILT))(prefix)["input_ids"])
    assert reason.endswith(
        f"in-context prefix (100000 characters): {tokens} tokens exceed the model's 1024 positions"
    )


def test_overflowing_weights_are_named_with_the_dtype_used(private_run: dict[str, Any]) -> None:
    reason = _reason(private_run, "overflow")
    assert "the edited model returned non-finite logits (NaN/inf) in float32" in reason
    assert "float16" not in reason


def test_a_second_delta_for_a_scored_edit_fails_the_job(private_run: dict[str, Any]) -> None:
    reason = _reason(private_run, "early-delta")
    assert reason.startswith(
        "the score stage rejected the run: the edit stage wrote a second delta for edit 1 ("
    )
    assert reason.endswith(") after that edit was scored; each edit's delta is written once")


def test_a_memorised_copy_of_the_public_chains_buys_no_private_rank(private_run: dict[str, Any]) -> None:
    """The cheat's public IFR is far below the honest run's; on the private split's new edits it knows no
    chain, so it is the README's edit alone, and the ranking, taken from the private split, is the same."""
    from knowgic.measure.ranks import rank_runs

    honest, cheat = (_entry(private_run, case).document for case in ("honest", "cheat"))
    assert check_results(cheat) == []
    ifr = "ifr_per_edit"
    assert cheat["metrics"]["efficacy"]["value"] == honest["metrics"]["efficacy"]["value"] == 1.0
    assert cheat["metrics"][ifr]["value"] < honest["metrics"][ifr]["value"] - 0.1
    assert all(r["info"]["forgotten_steps"] > 0 for r in cheat["per_edit"])
    assert cheat["private"]["edits"] == honest["private"]["edits"]
    for name in (ifr, "preservation_macro", "efficacy", "specificity"):
        found, wanted = (
            cheat["private"]["metrics"][name]["value"],
            honest["private"]["metrics"][name]["value"],
        )
        assert math.isclose(found, wanted, abs_tol=1e-6), name
    ranks = rank_runs([honest, cheat])
    for path, ranking in ranks.items():
        assert ranking.private and ranking.basis.startswith("ranked on the private split"), path
        best = ranking.order()[0]
        assert best == 0 or ranking.ranges[0] == ranking.ranges[1], (path, ranking)
    public = rank_runs([honest, cheat], private=False)[ifr]
    assert public.order()[0] == 1, "on the public data alone the cheat ranks first on IFR"
