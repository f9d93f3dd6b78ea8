"""Dataset tracks: growth-1.0.0 (the graph grown for knowgic-tiny) loads, validates, is chosen by name
everywhere a version is, and is cut from its build by family so that no fact is shared with the reserved part.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

import knowgic
from knowgic.dataset.derive import fact_rows
from knowgic.dataset.folder import open_dataset
from knowgic.dataset.loading import load_rows
from knowgic.dataset.tracks import (
    check_disjoint,
    fact_entities,
    fact_families,
    row_facts,
    split_track,
    write_track,
)
from knowgic.dataset.validate import validate_folder
from knowgic.dataset.versions import content_sha256, version_dir, version_info
from knowgic.errors import KnowgicError
from knowgic.paths import PACKAGE_DIR, spec_dir
from knowgic.spec import benchmark_spec

GROWTH = "growth-1.0.0"


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from knowgic.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def _facts(rows) -> set[tuple[str, str, str]]:
    return set().union(*(row_facts(r) for r in rows))


# --- the shipped version ----------------------------------------------------------------------------------


def test_growth_loads_with_datasets_offline_in_every_config() -> None:
    import datasets

    info = version_info(GROWTH)
    declared = benchmark_spec().versions[GROWTH]
    for config in ("chains", "edits", "facts"):
        ds = datasets.load_dataset(str(version_dir(GROWTH)), config, split="test")
        assert len(ds) == info["configs"][config]["rows"] == declared.rows[config]
    chains = knowgic.load_dataset("chains", version="growth")  # the track's name is its latest version
    assert len(chains) == 2288 and {"flags", "edit_id"} <= set(chains.column_names)
    restating = sum(bool(f["chain_restates_edit"]) for f in chains["flags"])
    assert restating == info["track"]["parts"]["public"]["chains_restating_edit"] == 109
    assert len(set(chains["edit_id"])) == info["track"]["parts"]["public"]["edits"] == 161


def test_growth_validates_and_its_hash_is_the_declared_one() -> None:
    report = validate_folder(version_dir(GROWTH))
    assert report.ok and not report.errors, report.render_text()
    assert content_sha256(version_dir(GROWTH)) == version_info(GROWTH)["sha256"]
    assert benchmark_spec().versions[GROWTH].sha256 == version_info(GROWTH)["sha256"]
    assert benchmark_spec().versions[GROWTH].based_on == "1.1.0"


def test_growth_carries_the_builders_record_and_its_card_says_what_it_is() -> None:
    info = version_info(GROWTH)
    assert info["name"] == "knowgic" and info["version"] == GROWTH
    assert info["source"]["model"]["id"] == "knowgic-tiny"
    assert info["source"]["protocol"]["params"]["known_rule"] == "greedy_contains"
    public, reserved = info["track"]["parts"]["public"], info["track"]["parts"]["reserved"]
    assert public["phrasing_duplicate_chains"] == 0 and info["source"]["phrasings_merged"] == 2
    assert info["track"]["reserve"] == {
        "unit": "family",
        "rule": info["track"]["reserve"]["rule"],
        "share": 0.2,
        "seed": 0,
    }
    # the two parts are the whole build: 201 edits and 2,647 chains in 17 families
    assert (public["edits"] + reserved["edits"], public["chains"] + reserved["chains"]) == (201, 2647)
    assert public["families"] + reserved["families"] == 17
    assert reserved["edits"] <= round(0.2 * 201) and len(reserved["sha256"]) == 64
    card = (version_dir(GROWTH) / "README.md").read_text(encoding="utf-8")
    for text in (
        "## The growth track",
        "`knowgic-tiny`",
        "not comparable with 1.1.0's",
        "| edits | 161 | 40 |",
        "| chains | 2288 | 359 |",
        reserved["sha256"],
        'revision="growth-v1.0.0"',
    ):
        assert text in card, text


def test_growth_never_trains_knowgic_tiny() -> None:
    from knowgic.models.tiny.facts import load_training_facts

    assert load_training_facts().versions == ("1.0.0", "1.1.0")


# --- cutting a build by family ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "share", "seed"), [(GROWTH, 0.3, 0), (GROWTH, 0.5, 7), ("1.1.0", 0.3, 1)]
)
def test_a_split_by_family_shares_no_fact_and_keeps_every_row(version: str, share: float, seed: int) -> None:
    rows = load_rows("chains", version)
    aliases = open_dataset(version).aliases()
    split = split_track(rows, aliases, share, seed)
    public, reserved = split.public.rows, split.reserved.rows
    assert public and reserved
    assert not _facts(public) & _facts(reserved)
    assert not fact_entities(_facts(public)) & fact_entities(_facts(reserved))
    steps = {
        (s, p, a)
        for r in public
        for s, p, a in zip(*(r["chain"][k] for k in ("subjects", "prompts", "answers")), strict=True)
    }
    assert not steps & _facts(reserved)
    # every row in exactly one part, unchanged
    assert sorted(public + reserved, key=lambda r: r["case_id"]) == sorted(rows, key=lambda r: r["case_id"])
    # a family is whole in one part, and the reserved edits stay within the declared share
    family_of = fact_families(rows)
    assert not {family_of[r["requested_rewrite"][0]["subject"]] for r in public} & {
        family_of[r["requested_rewrite"][0]["subject"]] for r in reserved
    }
    assert len({r["edit_id"] for r in reserved}) <= round(share * len({r["edit_id"] for r in rows}))
    # each fact keeps its gold-answer count (n_gold: the known rule's m) and its aliases
    whole = {f["fact_id"]: f for f in fact_rows(rows, aliases)}
    for part in (split.public, split.reserved):
        for fact in fact_rows(part.rows, part.aliases):
            assert (fact["n_gold"], fact["aliases"]) == (
                whole[fact["fact_id"]]["n_gold"],
                whole[fact["fact_id"]]["aliases"],
            )


def test_the_reserve_is_seeded_not_chosen() -> None:
    rows = load_rows("chains", GROWTH)
    aliases = open_dataset(GROWTH).aliases()
    first = split_track(rows, aliases, 0.3, 3)
    assert split_track(rows, aliases, 0.3, 3).reserved.rows == first.reserved.rows
    others = {tuple(r["case_id"] for r in split_track(rows, aliases, 0.3, s).reserved.rows) for s in range(6)}
    assert len(others) > 1


def test_a_shared_fact_is_refused_with_the_fact_named() -> None:
    rows = load_rows("chains", GROWTH)
    split = split_track(rows, open_dataset(GROWTH).aliases(), 0.3, 0)
    leaked = split.reserved.rows[0]
    with pytest.raises(KnowgicError, match=r"^the public and reserved parts share \d+ facts, e\.g\. "):
        check_disjoint([*split.public.rows, leaked], split.reserved.rows)


def _fake_build(tmp_path: Path) -> Path:
    """growth-1.0.0 as a build output folder, with the build record the builder writes beside it (its
    families counted with the builder's own graph code)."""
    from knowgic.builder.graph import build_graph, families

    folder = tmp_path / "build-out"
    shutil.copytree(version_dir(GROWTH), folder)
    rows = load_rows("chains", GROWTH)
    facts = [
        {"fact_id": f"{i}", "subject": s, "answer": a, "graphs": ["g"]}
        for i, (s, _p, a) in enumerate(sorted(_facts(rows)))
    ]
    family_of = families(build_graph(facts))
    chains = Counter(family_of[r["requested_rewrite"][0]["subject"]] for r in rows)
    info = version_info(GROWTH)
    record = {
        "build_key": "ab" * 32,
        "model": info["source"]["model"],
        "protocol": info["source"]["protocol"],
        "seeds": {"source": "KnowGIC 1.1.0", "version": "1.1.0"},
        "expand": False,
        "edits": "all",
        "settings": {"max_chain_steps": 5, "max_chains_per_edit": 200, "max_chains_per_family": 1000},
        "counts": {"phrasings_merged": 2},
        "families": {"chains": dict(chains)},
    }
    (folder / "build").mkdir()
    (folder / "build" / "build.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


def test_write_track_writes_both_parts_and_declares_the_public_one(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    spec = tmp_path / "benchmark.yaml"
    shutil.copy(spec_dir() / "benchmark.yaml", spec)
    key, public, reserved, split = write_track(
        build, "alpha", "2.0.0", tmp_path / "reserved", 0.3, 0, hub_dir=tmp_path / "hub", spec_path=spec
    )
    assert key == "alpha-2.0.0" and public == tmp_path / "hub" / "alpha-2.0.0"
    for folder in (public, reserved):
        report = validate_folder(folder)
        assert report.ok and not report.errors, report.render_text()
    pub, res = open_dataset(public), open_dataset(reserved)
    assert (pub.info["name"], res.info["name"]) == ("knowgic", "knowgic-reserved")
    assert not _facts(pub.rows("chains")) & _facts(res.rows("chains"))
    assert not {f["fact_id"] for f in pub.rows("facts")} & {f["fact_id"] for f in res.rows("facts")}
    assert pub.info["track"]["parts"]["reserved"]["sha256"] == res.sha256 == split.reserved.sha256()
    assert "family" not in pub.info["track"]["parts"]["reserved"]["largest_family"]
    assert len(pub.rows("chains")) + len(res.rows("chains")) == 2288
    text = spec.read_text(encoding="utf-8")
    assert (
        f'"alpha-2.0.0":\n      path: knowgic/dataset/hub/alpha-2.0.0\n      sha256: {pub.sha256}\n' in text
    )
    assert '"growth-1.0.0":' in text and '"1.1.0":' in text  # the other versions stay declared
    # written again: nothing changes in the public folder; the reserved folder is never overwritten
    with pytest.raises(KnowgicError, match="already exists and is not an empty folder"):
        write_track(build, "alpha", "2.0.0", reserved, 0.3, 0, hub_dir=tmp_path / "hub", spec_path=spec)


def test_write_track_refuses_bad_input_before_writing(tmp_path: Path) -> None:
    build = _fake_build(tmp_path)
    hub, spec = tmp_path / "hub", tmp_path / "benchmark.yaml"
    shutil.copy(spec_dir() / "benchmark.yaml", spec)

    def attempt(*args, **kwargs) -> None:
        kwargs.setdefault("hub_dir", hub)
        kwargs.setdefault("spec_path", spec)
        write_track(*args, **kwargs)

    with pytest.raises(KnowgicError, match=r"is inside .*: the reserved part is never shipped"):
        attempt(build, "alpha", "1.0.0", PACKAGE_DIR / "dataset" / "hub" / "reserved-here")
    with pytest.raises(
        KnowgicError, match=r"main track's versions are made by python -m knowgic\.dataset\.build"
    ):
        attempt(build, "knowgic", "1.0.0", tmp_path / "r1")
    with pytest.raises(KnowgicError, match="not a dataset version key"):
        attempt(build, "Alpha", "1.0.0", tmp_path / "r2")
    with pytest.raises(KnowgicError, match="reserves every family"):
        attempt(build, "alpha", "1.0.0", tmp_path / "r3", share=0.999)
    record = json.loads((build / "build" / "build.json").read_text(encoding="utf-8"))
    record["families"]["chains"]["Benjamin Keough"] += 1
    (build / "build" / "build.json").write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"differ from those build/build\.json records"):
        attempt(build, "alpha", "1.0.0", tmp_path / "r4")
    (build / "data" / "facts-test.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(KnowgicError, match="content hash mismatch"):
        attempt(build, "alpha", "1.0.0", tmp_path / "r5")
    assert not hub.exists() and not any((tmp_path / f"r{i}").exists() for i in range(1, 6))
    assert spec.read_text(encoding="utf-8") == (spec_dir() / "benchmark.yaml").read_text(encoding="utf-8")


def test_the_track_command_prints_both_parts(tmp_path: Path, capsys, monkeypatch) -> None:
    import knowgic.dataset.tracks as tracks

    build = _fake_build(tmp_path)
    shutil.copy(spec_dir() / "benchmark.yaml", tmp_path / "benchmark.yaml")
    monkeypatch.setattr(tracks, "HUB_DIR", tmp_path / "hub")
    monkeypatch.setattr(tracks, "spec_file", lambda: tmp_path / "benchmark.yaml")
    code, out, _ = _cli(
        capsys, "dataset", "track", "--from", str(build), "--track", "alpha", "--version", "1.0.0",
        "--reserved-out", str(tmp_path / "reserved"), "--reserve-share", "0.3",
    )  # fmt: skip
    assert code == 0
    assert out.splitlines()[0].startswith("public: ") and out.splitlines()[1].startswith("reserved: ")
    assert (tmp_path / "hub" / "alpha-1.0.0" / "version.json").is_file()
    assert '"alpha-1.0.0":' in (tmp_path / "benchmark.yaml").read_text(encoding="utf-8")
    from knowgic.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["dataset", "track", "--from", str(build), "--track", "alpha", "--version", "1.0.0",
              "--reserved-out", str(tmp_path / "r2"), "--reserve-share", "1.5"])  # fmt: skip
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "error: argument --reserve-share: '1.5' must lie strictly between 0 and 1"


# --- chosen by name ----------------------------------------------------------------------------------------


def test_evaluate_runs_on_growth_by_name(capsys) -> None:
    code, out, _ = _cli(
        capsys, "evaluate", "--editor", "none", "--dataset", "growth", "--limit", "2", "--json"
    )
    assert code == 0
    document = json.loads(out)
    assert document["dataset"]["version"] == GROWTH
    assert document["dataset"]["sha256"] == version_info(GROWTH)["sha256"]
    assert document["config"]["limit"] == 2 and len(document["per_edit"]) == 2
    assert document["counts"]["chains"] == document["counts"]["active_chains"] > 0
    # a run on the track is never compared (nor ranked) with a run on the paper's edits
    from knowgic.measure.compare import compare_results

    code, out, _ = _cli(
        capsys, "evaluate", "--editor", "none", "--dataset", "1.1.0", "--limit", "2", "--json"
    )
    assert code == 0
    with pytest.raises(KnowgicError, match=r"^cannot compare the runs: .*dataset"):
        compare_results(document, json.loads(out))


def test_a_misspelt_version_fails_in_one_line_before_any_work(capsys, tmp_path: Path) -> None:
    for command in ("evaluate", "sweep"):
        extra = ["--out", str(tmp_path / "sweep")] if command == "sweep" else []
        code, _out, err = _cli(capsys, command, "--editor" + ("s" if command == "sweep" else ""), "none",
                               "--dataset", "growht-1.0.0", *extra)  # fmt: skip
        assert code == 2, command
        assert err == (
            "error: unknown dataset version 'growht-1.0.0'; did you mean 'growth-1.0.0'? known versions: "
            "1.0.0, 1.1.0, growth-1.0.0\n"
        ), command


def test_sweep_runs_on_growth_by_name(capsys, tmp_path: Path) -> None:
    code, _out, _ = _cli(
        capsys,
        "sweep",
        "--editors",
        "none",
        "--dataset-version",
        GROWTH,
        "--limit",
        "1",
        "--out",
        str(tmp_path),
    )
    assert code == 0
    document = json.loads((tmp_path / "none" / "results.json").read_text(encoding="utf-8"))
    assert document["dataset"]["version"] == GROWTH


def test_runner_submit_queues_jobs_on_growth(tmp_path: Path, capsys) -> None:
    from knowgic.runner.intake.submission import submit
    from knowgic.runner.queue.queue import JobQueue
    from knowgic.runner.store.store import ResultsStore
    from tests.test_submission import MANIFEST, make_submission

    store = ResultsStore(tmp_path / "store")
    queue = JobQueue(store.queue_url())

    folder = make_submission(tmp_path / "sub", {**MANIFEST, "dataset_version": "growth"})
    _sub, jobs = submit(folder, store, queue)
    assert {job.dataset_version for job in jobs} == {GROWTH}  # the track's name resolves to its latest
    plain = make_submission(tmp_path / "sub2", {**MANIFEST, "name": "other"})
    _sub, jobs = submit(plain, store, queue, dataset_version="growth-1.0.0")
    assert {job.dataset_version for job in jobs} == {GROWTH}
    with pytest.raises(KnowgicError, match=r"did you mean 'growth-1\.0\.0'"):
        submit(plain, store, queue, dataset_version="growth-1.0")
    code, out, _err = _cli(
        capsys, "runner", "submit", str(plain), "--dataset-version", "1.1.0", "--store", str(tmp_path / "store"),
        "--db", store.queue_url(),
    )  # fmt: skip
    assert code == 0 and "dataset 1.1.0" in out


@pytest.mark.slow
def test_growth_is_the_declared_cut_of_knowgic_tinys_growth_build(tmp_path: Path) -> None:
    """The shipped growth-1.0.0 is what the declared rule cuts from the build its card names, byte for byte;
    the reserved part that build leaves shares no fact with it."""
    from knowgic.builder.pipeline import BuildConfig, run_build

    out = tmp_path / "growth"
    run_build(BuildConfig(model="knowgic-tiny", build_dir=tmp_path / "b", out=out, source="1.1.0", expand=False,
                          edits="all", progress=False))  # fmt: skip
    assert open_dataset(out).sha256 == version_info(GROWTH)["source"]["build_sha256"]
    spec = tmp_path / "benchmark.yaml"
    shutil.copy(spec_dir() / "benchmark.yaml", spec)
    share, seed = (version_info(GROWTH)["track"]["reserve"][k] for k in ("share", "seed"))
    _key, public, reserved, _split = write_track(
        out, "growth", "1.0.0", tmp_path / "reserved", share, seed, hub_dir=tmp_path / "hub", spec_path=spec
    )
    shipped = version_dir(GROWTH)
    files = sorted(p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(public) for p in public.rglob("*") if p.is_file())
    for rel in files:
        assert (public / rel).read_bytes() == (shipped / rel).read_bytes(), rel
    assert spec.read_text(encoding="utf-8") == (spec_dir() / "benchmark.yaml").read_text(encoding="utf-8")
    shipped_rows, reserved_rows = load_rows("chains", GROWTH), open_dataset(reserved).rows("chains")
    assert not _facts(shipped_rows) & _facts(reserved_rows)
    assert not fact_entities(_facts(shipped_rows)) & fact_entities(_facts(reserved_rows))
    assert open_dataset(reserved).sha256 == version_info(GROWTH)["track"]["parts"]["reserved"]["sha256"]
