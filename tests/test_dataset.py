"""The shipped dataset versions: loading (real ``datasets``, offline), content, hashes, records."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

import knowgic
from knowgic.dataset.io import read_rows
from knowgic.dataset.loading import DatasetRef, dataset_ref, load_aliases, load_cases, load_rows
from knowgic.dataset.versions import (
    HUB_DIR,
    MAIN_TRACK,
    available_versions,
    content_sha256,
    latest_version,
    load_version_dataset,
    parse_semver,
    parse_version_key,
    track_versions,
    version_dir,
    version_info,
    version_sha256,
    version_sort_key,
    version_tag,
)
from knowgic.errors import KnowgicError
from knowgic.records import Case, EditRequest

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "knowgic" / "dataset" / "upstream"


@pytest.fixture(scope="module")
def upstream_rows() -> list[dict]:
    return json.loads((UPSTREAM / "chains.json").read_text(encoding="utf-8"))


def test_versions_are_declared_sorted_and_on_disk() -> None:
    versions = available_versions()
    assert versions == ["1.0.0", "1.1.0", "growth-1.0.0"]
    main = track_versions()
    assert main == ["1.0.0", "1.1.0"] == sorted(main, key=parse_semver)
    assert track_versions("growth") == ["growth-1.0.0"]
    assert latest_version() == main[-1]  # a run without --dataset-version stays on the paper's edits
    assert latest_version("growth") == "growth-1.0.0"
    assert version_dir() == version_dir(latest_version())
    assert version_dir("1.0.0") == HUB_DIR / "1.0.0"
    assert version_dir("v1.0.0") == HUB_DIR / "1.0.0"
    assert version_dir("growth") == version_dir("growth-1.0.0") == HUB_DIR / "growth-1.0.0"
    assert sorted(p.name for p in HUB_DIR.iterdir() if p.is_dir()) == sorted(versions)


def test_version_keys_name_a_track_and_a_semver() -> None:
    assert parse_version_key("1.1.0") == (MAIN_TRACK, (1, 1, 0))
    assert parse_version_key("growth-1.10.0") == ("growth", (1, 10, 0))
    assert parse_version_key("tiny-growth-2.0.1") == ("tiny-growth", (2, 0, 1))
    for bad in ("growth", "Growth-1.0.0", "growth-1.0", "-1.0.0", "growth--1.0.0", "knowgic-1.0.0"):
        with pytest.raises(KnowgicError, match="not a dataset version key"):
            parse_version_key(bad)
    keys = ["growth-1.10.0", "1.1.0", "alpha-1.0.0", "growth-1.9.0", "1.0.0"]
    assert sorted(keys, key=version_sort_key) == [
        "1.0.0",
        "1.1.0",
        "alpha-1.0.0",
        "growth-1.9.0",
        "growth-1.10.0",
    ]
    assert version_tag("1.1.0") == "v1.1.0" and version_tag("growth-1.0.0") == "growth-v1.0.0"


def test_unknown_version_names_the_known_ones() -> None:
    known = r"known versions: 1\.0\.0, 1\.1\.0, growth-1\.0\.0"
    with pytest.raises(KnowgicError, match=rf"^unknown dataset version '2\.0\.0'; {known}$"):
        version_dir("2.0.0")
    with pytest.raises(KnowgicError, match=rf"^unknown dataset version 'growth-2\.0\.0'; {known}$"):
        version_dir("growth-2.0.0")
    with pytest.raises(KnowgicError, match="not a version"):
        parse_semver("1.0")


@pytest.mark.parametrize("typo", ["growht-1.0.0", "grwoth", "growth-1.0", "Growth"])
def test_a_misspelt_version_gets_a_guess(typo: str) -> None:
    with pytest.raises(
        KnowgicError, match=rf"^unknown dataset version '{typo}'; did you mean 'growth(-1\.0\.0)?'\? "
    ):
        version_dir(typo)


def test_semver_order_is_numeric() -> None:
    assert sorted(["1.10.0", "1.9.0", "1.1.0"], key=parse_semver) == ["1.1.0", "1.9.0", "1.10.0"]


def test_1_0_0_equals_upstream_row_for_row_through_datasets(upstream_rows: list[dict]) -> None:
    import datasets

    ds = datasets.load_dataset(str(version_dir("1.0.0")), "chains", split="test")
    assert len(ds) == len(upstream_rows) == 1406
    for i, row in enumerate(ds):
        assert row == upstream_rows[i], f"row {i} differs from upstream"
    assert set(ds.column_names) == {"case_id", "requested_rewrite", "chain", "broader_context"}


def test_1_0_0_aliases_equal_upstream() -> None:
    upstream = json.loads((UPSTREAM / "attributes_with_aliases.json").read_text(encoding="utf-8"))
    stored = json.loads((version_dir("1.0.0") / "aliases.json").read_text(encoding="utf-8"))
    assert list(stored) == list(upstream)
    assert stored == {k: v["answer_alias"] for k, v in upstream.items()}


def test_every_config_of_every_version_loads_offline() -> None:
    expected = {"chains": 1406, "edits": 26}
    for version in ("1.0.0", "1.1.0"):
        for config, n in expected.items():
            ds = knowgic.load_dataset(config, version=version)
            assert len(ds) == n
        facts = load_version_dataset("facts", version)
        assert len(facts) == version_info(version)["configs"]["facts"]["rows"]
    latest = knowgic.load_dataset()
    assert "flags" in latest.column_names and "edit_id" in latest.column_names


def test_load_dataset_rejects_unknown_config_and_split() -> None:
    with pytest.raises(KnowgicError, match="unknown config 'triples'"):
        knowgic.load_dataset("triples")
    with pytest.raises(KnowgicError, match="one split, 'test'"):
        knowgic.load_dataset("chains", split="train")


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0", "growth-1.0.0"])
def test_recorded_hash_matches_content_and_spec(version: str) -> None:
    folder = version_dir(version)
    assert content_sha256(folder) == version_sha256(version)
    spec = yaml.safe_load((REPO / "spec" / "benchmark.yaml").read_text(encoding="utf-8"))
    assert spec["dataset"]["versions"][version]["sha256"] == version_sha256(version)
    assert spec["dataset"]["versions"][version]["path"] == f"knowgic/dataset/hub/{version}"


# 1.0.0 is published: its content (rows, derived configs, alias map) may never change again.
PUBLISHED_SHA256 = {"1.0.0": "9ab943b564971ac40eb42f95024d0e28e02d4f97aa7dd6f833569ce249cfe7fb"}


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0", "growth-1.0.0"])
def test_recorded_hash_is_the_sha256_of_the_canonical_content_of_the_files(version: str) -> None:
    """Recomputed from the files with hashlib and json only, as version.json's `canonical_content` says."""
    folder = version_dir(version)
    record = json.loads((folder / "version.json").read_text(encoding="utf-8"))
    content: dict = {"aliases": json.loads((folder / "aliases.json").read_text(encoding="utf-8"))}
    for config in ("chains", "edits", "facts"):
        text = (folder / record["configs"][config]["path"]).read_text(encoding="utf-8")
        content[config] = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert record["configs"][config]["rows"] == len(content[config])
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert record["sha256"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert record["sha256"] == PUBLISHED_SHA256.get(version, record["sha256"])
    for rel, meta in record["files"].items():
        data = (folder / rel).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (meta["size"], meta["sha256"]), rel


def test_versions_differ_in_content() -> None:
    assert version_sha256("1.0.0") != version_sha256("1.1.0")


def test_load_cases_gives_records_with_extra_fields() -> None:
    cases = load_cases("1.1.0")
    assert len(cases) == 1406 and all(isinstance(c, Case) for c in cases)
    assert [c.case_id for c in cases] == sorted(c.case_id for c in cases)
    first = cases[0]
    assert first.extra["edit_id"] == first.request.edit_id
    assert set(first.extra["flags"]) == {
        "chain_answer_in_question",
        "broader_answer_in_question",
        "empty_broader_context",
        "chain_restates_edit",
    }
    assert load_cases("1.0.0")[0].extra == {}


def test_load_aliases_excludes_the_entity_itself() -> None:
    old = load_aliases("1.0.0")
    assert "USA" in old and "USA" not in old["USA"] and "US" in old["USA"]
    assert old["Bill Clinton"].count("William Jefferson Clinton") == 1
    new = load_aliases("1.1.0")
    assert "US" not in new["USA"] and "Suffect Consul" in new
    assert all(isinstance(v, tuple) for v in new.values())


def test_dataset_ref() -> None:
    ref = dataset_ref()
    assert ref == DatasetRef("knowgic", latest_version(), "chains", version_sha256())
    assert dataset_ref("1.0.0", "facts").sha256 == version_sha256("1.0.0")
    with pytest.raises(KnowgicError, match="unknown config"):
        dataset_ref(config="nope")


def test_edits_config() -> None:
    for version in ("1.0.0", "1.1.0"):
        chains = load_rows("chains", version)
        edits = load_rows("edits", version)
        assert len(edits) == 26
        assert sorted(c for e in edits for c in e["case_ids"]) == [r["case_id"] for r in chains]
        by_case = {r["case_id"]: r for r in chains}
        for edit in edits:
            request = EditRequest.from_upstream(edit["requested_rewrite"][0])
            assert edit["edit_id"] == request.edit_id
            assert [by_case[c]["chain"] for c in edit["case_ids"]] == edit["chains"]
            keys = list(
                zip(
                    edit["broader_context"]["subjects"],
                    edit["broader_context"]["prompts"],
                    edit["broader_context"]["answers"],
                    strict=True,
                )
            )
            assert len(keys) == len(set(keys)), "broader context union must be deduplicated"
            union = {
                (s, p, a)
                for c in edit["case_ids"]
                for s, p, a in zip(
                    by_case[c]["broader_context"]["subjects"],
                    by_case[c]["broader_context"]["prompts"],
                    by_case[c]["broader_context"]["answers"],
                    strict=True,
                )
            }
            assert set(keys) == union


def test_facts_config_counts_gold_answers_per_subject_and_prompt() -> None:
    facts = load_rows("facts", "1.1.0")
    keys = [(f["subject"], f["prompt"], f["answer"]) for f in facts]
    assert len(keys) == len(set(keys))
    per_pair: dict[tuple[str, str], int] = {}
    for s, p, _a in keys:
        per_pair[(s, p)] = per_pair.get((s, p), 0) + 1
    assert all(f["n_gold"] == per_pair[(f["subject"], f["prompt"])] for f in facts)
    schoolmates = [f for f in facts if f["subject"] == "Harry Potter" and f["prompt"] == "{}'s schoolmate is"]
    assert len(schoolmates) == 10 and {f["n_gold"] for f in schoolmates} == {10}
    usa = next(f for f in facts if f["answer"] == "USA")
    assert "United States" in usa["aliases"] and "USA" not in usa["aliases"]


def test_data_files_are_json_lines_with_one_row_per_line() -> None:
    for version in ("1.0.0", "1.1.0"):
        folder = version_dir(version)
        for config, meta in version_info(version)["configs"].items():
            path = folder / meta["path"]
            lines = path.read_text(encoding="utf-8").splitlines()
            assert len(lines) == meta["rows"] == len(read_rows(path)), config


def test_card_metadata() -> None:
    for version in ("1.0.0", "1.1.0"):
        text = (version_dir(version) / "README.md").read_text(encoding="utf-8")
        meta = yaml.safe_load(re.match(r"---\n(.*?)\n---\n", text, re.S).group(1))
        assert meta["license"] == "mit" and meta["pretty_name"] == "KnowGIC"
        assert meta["language"] == ["en"] and meta["size_categories"] == ["1K<n<10K"]
        assert "question-answering" in meta["task_categories"]
        configs = {c["config_name"]: c for c in meta["configs"]}
        extra = {"ripple"} if version != "1.0.0" else set()  # 1.0.0 stays as published
        assert (
            set(configs) == {"chains", "edits", "facts"} | extra and configs["chains"].get("default") is True
        )
        assert all(c["data_files"][0]["split"] == "test" for c in configs.values())
        assert {i["config_name"] for i in meta["dataset_info"]} == set(configs)
        for name in ("CHANGELOG.md", "LICENSE", "CITATION.bib", "aliases.json", "version.json"):
            assert (version_dir(version) / name).is_file(), name
        assert "MIT License" in (version_dir(version) / "LICENSE").read_text(encoding="utf-8")
        assert version_sha256(version) in text


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from knowgic.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def test_cli_dataset_path(capsys) -> None:
    code, out, _ = _cli(capsys, "dataset", "path", "--version", "1.0.0")
    assert code == 0 and out.strip() == str(version_dir("1.0.0"))
    code, out, _ = _cli(capsys, "dataset", "path")
    assert out.strip() == str(version_dir(latest_version()))
    code, _out, err = _cli(capsys, "dataset", "path", "--version", "0.9.0")
    assert code == 2
    assert err == "error: unknown dataset version '0.9.0'; known versions: 1.0.0, 1.1.0, growth-1.0.0\n"


def test_cli_dataset_summary(capsys) -> None:
    code, out, _ = _cli(capsys, "dataset", "summary", "--version", "1.0.0")
    assert code == 0
    assert "1406 chains, 26 distinct edits, 345 facts" in out
    assert "chain lengths: 1: 24, 2: 108, 3: 227, 4: 428, 5: 619" in out
    assert "chain_end_case (9)" in out and "duplicate_broader_entries (150)" in out
    code, out, _ = _cli(capsys, "dataset", "summary", "--json")
    summary = json.loads(out)
    assert summary["version"] == latest_version() and summary["rows"] == 1406 and summary["edits"] == 26
    assert summary["warnings"] == {
        "answer_in_question": 62,
        "empty_broader_context": 24,
        "one_to_many_facts": 55,
    }
