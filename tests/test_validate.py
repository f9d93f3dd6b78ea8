"""``knowgic validate``: finds the upstream problems by itself, and handles bad input without a traceback."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.dataset.validate import validate_path
from knowgic.dataset.versions import version_dir

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "knowgic" / "dataset" / "upstream"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def upstream_rows() -> list[dict]:
    return json.loads((UPSTREAM / "chains.json").read_text(encoding="utf-8"))


@pytest.fixture
def good_rows(upstream_rows: list[dict]) -> list[dict]:
    return copy.deepcopy(upstream_rows[:3])


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# --- the upstream problems -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream_report() -> dict:
    return validate_path(UPSTREAM / "chains.json").to_dict()


def _warning(report: dict, code: str) -> dict:
    found = [w for w in report["warnings"] if w["code"] == code]
    assert found, f"no {code} warning; got {[w['code'] for w in report['warnings']]}"
    return found[0]


def test_upstream_rows_are_schema_valid(upstream_report: dict) -> None:
    assert upstream_report["ok"] and upstream_report["n_errors"] == 0
    assert upstream_report["rows"] == {"chains": 1406}
    assert upstream_report["aliases"].endswith("attributes_with_aliases.json")


def test_finds_the_baseball_chain_ends(upstream_report: dict) -> None:
    w = _warning(upstream_report, "chain_end_case")
    assert w["count"] == 9
    assert w["details"]["case_ids"] == [32, 72, 111, 460, 804, 941, 1181, 1194, 1257]
    assert "'Baseball' vs 'baseball'" in w["message"]
    assert not [x for x in upstream_report["warnings"] if x["code"] == "chain_end_target"]
    assert _warning(upstream_report, "inconsistent_case")["examples"] == ["'Baseball' / 'baseball'"]


def test_finds_the_empty_broader_contexts(upstream_report: dict) -> None:
    w = _warning(upstream_report, "empty_broader_context")
    assert (w["count"], w["details"]["restating_edit"]) == (24, 23)


def test_finds_answers_inside_their_question(upstream_report: dict) -> None:
    d = _warning(upstream_report, "answer_in_question")["details"]
    assert (d["chain_steps"], d["chain_final_steps"]) == (38, 24)
    assert any("Cruz David Beckham" in e for e in _warning(upstream_report, "answer_in_question")["examples"])


def test_finds_questions_that_do_not_name_their_subject(upstream_report: dict) -> None:
    w = _warning(upstream_report, "subject_not_in_question")
    assert w["details"]["distinct_questions"] == 5
    text = " ".join(w["examples"])
    assert "'Who did Steve Balmer succeed?' (subject 'Steve Ballmer', 1x)" in text
    assert "Dresden Files" in text


def test_finds_alias_gaps_and_risky_aliases(upstream_report: dict) -> None:
    missing = _warning(upstream_report, "alias_missing")["details"]
    assert len(missing["target_new"]) == 23
    assert "23 of 24 distinct target_new values" in _warning(upstream_report, "alias_missing")["message"]
    assert "Suffect Consul" in missing["answers"]
    risky = {a for _e, a in _warning(upstream_report, "risky_alias")["details"]["aliases"]}
    assert {"US", "MS", "Ron", "Tex", "MP"} <= risky
    assert "NBA" not in risky and "Hogwarts" not in risky


def test_finds_duplicated_broader_context_entries(upstream_report: dict) -> None:
    d = _warning(upstream_report, "duplicate_broader_entries")["details"]
    assert (d["entries"], d["rows"]) == (150, 75)


def test_finds_more_than_the_listed_problems(upstream_report: dict) -> None:
    assert _warning(upstream_report, "malformed_question")["count"] == 22
    assert _warning(upstream_report, "one_to_many_facts")["details"]["pairs"] == 55
    misplaced = _warning(upstream_report, "alias_other_entity")["examples"]
    assert any("Storm Front" in m and "Steve Ballmer" in m for m in misplaced)


def test_the_1_0_0_folder_reports_the_same_and_1_1_0_only_flagged_ones(upstream_report: dict, capsys) -> None:
    code, out, _ = run(capsys, "validate", str(version_dir("1.0.0")), "--json")
    report = json.loads(out)
    assert code == 0 and report["kind"] == "folder"
    assert report["rows"] == {"chains": 1406, "edits": 26, "facts": 345}
    codes = {w["code"]: w["count"] for w in report["warnings"]}
    assert codes == {w["code"]: w["count"] for w in upstream_report["warnings"]}
    code, out, _ = run(capsys, "validate", str(version_dir("1.1.0")))
    assert code == 0
    assert "OK: 0 errors, 3 warnings" in out


def test_text_report(capsys) -> None:
    code, out, _ = run(capsys, "validate", str(UPSTREAM / "chains.json"))
    assert code == 0
    assert "chain_end_case (9)" in out and "duplicate_broader_entries (150)" in out
    assert out.rstrip().endswith("warnings")


def test_text_report_names_every_missing_alias_entry_by_category(capsys, upstream_report: dict) -> None:
    code, out, _ = run(capsys, "validate", str(UPSTREAM / "chains.json"))
    assert code == 0
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  - alias_missing (24): "))
    block = lines[start + 1 : start + 4]
    missing = _warning(upstream_report, "alias_missing")["details"]
    labels = {
        "target_true": "target_true values",
        "target_new": "target_new values",
        "answers": "chain and broader-context answers",
    }
    for line, (key, label) in zip(block, labels.items(), strict=True):
        head = f"      {label} without an entry ({len(missing[key])}): "
        assert line.startswith(head), line
        assert line.removeprefix(head).split(", ") == [repr(name) for name in sorted(missing[key])]
    assert (len(missing["target_true"]), len(missing["target_new"]), len(missing["answers"])) == (2, 23, 2)
    assert "'Suffect Consul'" in block[2] and "'Valve Corporation'" in block[1]
    assert not any(line.startswith("      e.g.") for line in lines[start + 1 : start + 4])


# --- the chain checks, on crafted rows -----------------------------------------------------------


def _codes(capsys, path: Path) -> dict[str, dict]:
    code, out, _ = run(capsys, "validate", str(path), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"], report["errors"]
    return {w["code"]: w for w in report["warnings"]}


CHAIN_CODES = ("chain_continuity", "chain_start", "chain_end_target", "chain_end_case")


def test_chain_continuity_start_and_end_checks_fire_on_crafted_rows(
    capsys, tmp_path: Path, upstream_rows: list[dict]
) -> None:
    rows = copy.deepcopy(upstream_rows[:5])
    clean = _codes(capsys, write_json(tmp_path / "clean.json", rows))
    assert not set(CHAIN_CODES) & set(clean), "the unmodified rows must not trigger the chain checks"

    rows[0]["chain"]["subjects"][2] = "Somebody Else"  # answers[1] != subjects[2]
    rows[0]["chain"]["subjects"][3] = "Somebody Else Again"  # answers[2] != subjects[3]
    rows[1]["chain"]["subjects"][0] = "Draco Malfoy"  # not the edited subject, Ron Weasley
    rows[2]["chain"]["answers"][-1] = "Graceland"  # not target_true 'Lisa Marie Presley', even ignoring case
    rows[4]["chain"]["answers"][-1] = "LISA MARIE PRESLEY"  # target_true with other capitals only
    found = _codes(capsys, write_json(tmp_path / "rows.json", rows))

    assert found["chain_continuity"]["count"] == 2
    assert found["chain_continuity"]["examples"] == ["case_id 0 step 1", "case_id 0 step 2"]
    assert found["chain_start"]["count"] == 1
    assert found["chain_start"]["examples"] == ["case_id 1"]
    assert found["chain_end_target"]["count"] == 1
    assert found["chain_end_target"]["details"]["case_ids"] == [2]
    assert "'Graceland'" in found["chain_end_target"]["examples"][0]
    assert found["chain_end_case"]["details"]["case_ids"] == [4]  # a case-only difference is not "elsewhere"

    # the untouched row (case_id 3) alone fires none of them
    only_clean = _codes(capsys, write_json(tmp_path / "row3.json", [rows[3]]))
    assert not set(CHAIN_CODES) & set(only_clean)


# --- crafted bad input ---------------------------------------------------------------------------


def _errors(capsys, path: Path, *extra: str) -> tuple[int, list[dict]]:
    code, out, _ = run(capsys, "validate", str(path), "--json", *extra)
    report = json.loads(out)
    assert report["ok"] is (code == 0)
    return code, report["errors"]


def test_wrong_type(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    good_rows[1]["chain"]["answers"][0] = 7
    code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert code == 1
    (e,) = errors
    assert e["row"] == "case_id 1" and e["pointer"] == "/chain/answers/0"
    assert "expected a string, got integer 7" in e["message"]


def test_wrong_type_of_case_id_falls_back_to_the_row_index(
    capsys, tmp_path: Path, good_rows: list[dict]
) -> None:
    good_rows[2]["case_id"] = "2"
    _code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert errors[0]["row"] == "row 2" and errors[0]["pointer"] == "/case_id"


def test_row_labels_stay_short_and_on_one_line(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    good_rows[0]["case_id"] = -(10**60)
    facts = [{"fact_id": "line one\nline two", "subject": 1}]
    _code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert errors[0]["row"] == "case_id -" + "1".ljust(36, "0") + "..."  # 40 characters in all
    _code, errors = _errors(capsys, write_json(tmp_path / "facts.json", facts))
    assert errors[0]["row"] == "fact_id 'line one\\nline two'"
    code, out, _ = run(capsys, "validate", str(tmp_path / "facts.json"))
    assert code == 1 and "fact_id 'line one\\nline two' at /subject: expected a string" in out


def test_missing_field(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    del good_rows[0]["broader_context"]
    del good_rows[1]["requested_rewrite"][0]["target_true"]
    code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert code == 1
    assert {(e["row"], e["pointer"], e["message"]) for e in errors} == {
        ("case_id 0", "", "missing required field 'broader_context'"),
        ("case_id 1", "/requested_rewrite/0", "missing required field 'target_true'"),
    }


def test_unequal_list_lengths(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    good_rows[0]["broader_context"]["prompts"].pop()
    _code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    (e,) = errors
    assert e["pointer"] == "/broader_context" and "equal length" in e["message"]


@pytest.mark.parametrize("prompt", ["{}'s child is {}", "The child is", "{0} is", "{}}"])
def test_prompt_without_or_with_two_placeholders(
    capsys, tmp_path: Path, good_rows: list[dict], prompt: str
) -> None:
    good_rows[0]["chain"]["prompts"][1] = prompt
    code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert code == 1
    (e,) = errors
    assert e["pointer"] == "/chain/prompts/1"
    assert "exactly one {} placeholder" in e["message"]


@pytest.mark.parametrize("value", ["", "   ", " Paris"])
def test_empty_or_padded_strings(capsys, tmp_path: Path, good_rows: list[dict], value: str) -> None:
    good_rows[0]["chain"]["subjects"][0] = value
    _code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert [e["pointer"] for e in errors] == ["/chain/subjects/0"]
    assert "non-empty" in errors[0]["message"]


def test_unknown_fields(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    good_rows[0]["notes"] = "x"
    good_rows[1]["chain"]["answer"] = []
    _code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert {(e["pointer"], e["message"].split(" (")[0]) for e in errors} == {
        ("", "unknown field 'notes'"),
        ("/chain", "unknown field 'answer'"),
    }


def test_two_requests_in_one_row_and_duplicate_ids(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    good_rows[0]["requested_rewrite"].append(good_rows[0]["requested_rewrite"][0])
    good_rows[2]["case_id"] = 1
    _code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    messages = {e["message"] for e in errors}
    assert "expected at most 1 item, got 2" in messages
    assert "case_id 1 is used by 2 rows; it must be unique" in messages


def test_row_that_is_not_an_object(capsys, tmp_path: Path) -> None:
    _code, errors = _errors(capsys, write_json(tmp_path / "rows.json", [["a", "b"]]))
    assert errors[0]["row"] == "row 0" and "expected an object, got array" in errors[0]["message"]


def test_non_utf8_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_bytes(b'[{"case_id": 0, "x": "caf\xe9"}]')
    code, errors = _errors(capsys, path)
    assert code == 1 and "not valid UTF-8 (byte 0xe9 at offset 25)" in errors[0]["message"]


def test_truncated_json_file(capsys, tmp_path: Path) -> None:
    text = (UPSTREAM / "chains.json").read_text(encoding="utf-8")[:5000]
    path = tmp_path / "chains.json"
    path.write_text(text, encoding="utf-8")
    code, errors = _errors(capsys, path)
    assert code == 1 and "invalid JSON at line" in errors[0]["message"]


def test_truncated_jsonl_file(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    lines = [json.dumps(r) for r in good_rows]
    lines[-1] = lines[-1][:40]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    code, errors = _errors(capsys, path)
    assert code == 1 and errors[0]["message"].startswith("line 3 is not valid JSON")


def test_empty_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text("  \n", encoding="utf-8")
    code, errors = _errors(capsys, path)
    assert code == 1 and "empty" in errors[0]["message"]


def test_corrupt_parquet(capsys, tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    path.write_bytes(b"PAR1 definitely not parquet")
    code, errors = _errors(capsys, path)
    assert code == 1 and "not a readable Parquet file" in errors[0]["message"]


# JSON that is well-formed but beyond what the parser can hold: deep nesting (RecursionError), integer
# literals past Python's 4300-digit limit (ValueError), strings that are not text (lone surrogates).
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a": ' * 3000 + "1" + "}" * 3000
LONG_INTEGER = '[{"case_id": ' + "9" * 5000 + "}]"
LONE_SURROGATE = '[{"case_id": 0, "note": "caf\\ud800"}]'
BEYOND_LIMITS = [
    pytest.param(DEEP_ARRAY, "arrays or objects are nested too deeply to read", id="deep-array"),
    pytest.param(DEEP_OBJECT, "arrays or objects are nested too deeply to read", id="deep-object"),
    pytest.param(LONG_INTEGER, "an integer literal has 5000 digits (at most 4300", id="long-integer"),
    pytest.param(LONE_SURROGATE, "unpaired UTF-16 surrogate escape", id="lone-surrogate"),
]


@pytest.mark.parametrize(("text", "expected"), BEYOND_LIMITS)
def test_json_beyond_the_parser_limits(capsys, tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "rows.json"
    path.write_text(text, encoding="utf-8")
    code, errors = _errors(capsys, path)
    assert code == 1
    (e,) = errors
    assert e["file"] == str(path)
    assert e["message"].startswith("unreadable JSON: ") and expected in e["message"]
    code, out, _ = run(capsys, "validate", str(path))
    assert code == 1 and f"{path}: unreadable JSON: " in out


@pytest.mark.parametrize(("text", "expected"), BEYOND_LIMITS)
def test_json_lines_beyond_the_parser_limits_name_the_line(
    capsys, tmp_path: Path, good_rows: list[dict], text: str, expected: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good_rows[0]) + "\n\n" + text + "\n", encoding="utf-8")
    code, errors = _errors(capsys, path)
    assert code == 1
    (e,) = errors
    assert e["file"] == str(path)
    assert e["message"].startswith("line 3 is unreadable JSON: ") and expected in e["message"]


@pytest.mark.parametrize(("text", "expected"), BEYOND_LIMITS)
def test_alias_map_beyond_the_parser_limits(
    capsys, tmp_path: Path, good_rows: list[dict], text: str, expected: str
) -> None:
    rows = write_json(tmp_path / "rows.json", good_rows)
    aliases = tmp_path / "my-aliases.json"
    aliases.write_text(text.replace('"case_id"', '"USA"'), encoding="utf-8")
    code, errors = _errors(capsys, rows, "--aliases", str(aliases))
    assert code == 1
    (e,) = errors
    assert (e["file"], e["config"]) == (str(aliases), "aliases")
    assert e["message"].startswith("unreadable JSON: ") and expected in e["message"]


def _timestamp_out_of_python_range(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"case_id": [0], "when": pa.array([2**62], type=pa.timestamp("ms"))}), path)


def _truncated_parquet(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = json.loads((UPSTREAM / "chains.json").read_text(encoding="utf-8"))[:20]
    pq.write_table(pa.Table.from_pylist(rows), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + data[-8:])  # a footer length pointing into the cut


@pytest.mark.parametrize("make", [_timestamp_out_of_python_range, _truncated_parquet])
def test_unreadable_parquet_is_one_error_naming_the_file(capsys, tmp_path: Path, make) -> None:
    path = tmp_path / "rows.parquet"
    make(path)
    code, errors = _errors(capsys, path)
    assert code == 1
    (e,) = errors
    assert e["file"] == str(path) and e["message"].startswith("not a readable Parquet file (")
    assert "\n" not in e["message"]


def test_good_parquet_and_jsonl_are_accepted(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(good_rows), tmp_path / "rows.parquet")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good_rows), encoding="utf-8")
    for name in ("rows.parquet", "rows.jsonl"):
        code, out, _ = run(capsys, "validate", str(tmp_path / name))
        assert code == 0 and "OK: 0 errors" in out
        assert "alias checks skipped" in out


def test_unsupported_file_and_missing_path(capsys, tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("a,b\n", encoding="utf-8")
    code, _out, err = run(capsys, "validate", str(path))
    assert code == 2 and err.startswith("error: ") and "unsupported file type .csv" in err
    code, _out, err = run(capsys, "validate", str(tmp_path / "nope.json"))
    assert code == 2 and "does not exist" in err


def test_alias_map_with_bad_entries(capsys, tmp_path: Path) -> None:
    path = write_json(tmp_path / "aliases.json", {"USA": ["US", ""], "Paris": {"answer_alias": "Paris"}})
    code, out, _ = run(capsys, "validate", str(path), "--json")
    report = json.loads(out)
    assert code == 1 and report["kind"] == "aliases"
    assert {(e["row"], e["pointer"]) for e in report["errors"]} == {
        ("entity 'USA'", "/USA/1"),
        ("entity 'Paris'", "/Paris/answer_alias"),
    }


def test_bad_alias_map_beside_rows(capsys, tmp_path: Path, good_rows: list[dict]) -> None:
    write_json(tmp_path / "aliases.json", {"USA": "United States"})
    code, errors = _errors(capsys, write_json(tmp_path / "rows.json", good_rows))
    assert code == 1 and errors[0]["config"] == "aliases" and errors[0]["pointer"] == "/USA"


def test_derived_configs_are_detected(capsys, tmp_path: Path) -> None:
    edits = [
        json.loads(line)
        for line in (version_dir("1.0.0") / "data/edits-test.jsonl").read_text().splitlines()[:2]
    ]
    edits[1]["case_ids"] = edits[1]["case_ids"][:-1]
    path = tmp_path / "edits.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in edits), encoding="utf-8")
    code, errors = _errors(capsys, path)
    assert code == 1
    assert errors[0]["config"] == "edits" and errors[0]["row"] == f"edit_id {edits[1]['edit_id']}"
    assert "equal length" in errors[0]["message"]


# --- folders -------------------------------------------------------------------------------------


def test_folder_without_card(capsys, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    code, errors = _errors(capsys, tmp_path)
    assert code == 1 and "no dataset card README.md" in errors[0]["message"]


def test_card_without_metadata_or_configs(capsys, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Just a title\n", encoding="utf-8")
    _code, errors = _errors(capsys, tmp_path)
    assert "no YAML metadata block" in errors[0]["message"]
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n# x\n", encoding="utf-8")
    _code, errors = _errors(capsys, tmp_path)
    assert "no `configs` list" in errors[0]["message"]
    (tmp_path / "README.md").write_text("---\nlicense: [mit\n---\n", encoding="utf-8")
    _code, errors = _errors(capsys, tmp_path)
    assert "not valid YAML" in errors[0]["message"]


def test_card_naming_a_missing_data_file(capsys, tmp_path: Path) -> None:
    card = "---\nconfigs:\n- config_name: chains\n  data_files:\n  - split: test\n    path: data/nope.jsonl\n---\n"
    (tmp_path / "README.md").write_text(card, encoding="utf-8")
    code, errors = _errors(capsys, tmp_path)
    assert code == 1 and "data file nope.jsonl named by the card is missing" in errors[0]["message"]


@pytest.fixture
def folder_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "1.0.0"
    shutil.copytree(version_dir("1.0.0"), dest)
    return dest


def test_tampered_folder_fails_its_hash(capsys, folder_copy: Path) -> None:
    path = folder_copy / "data" / "chains-test.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    row = json.loads(lines[5])
    row["chain"]["answers"][-1] = "Somewhere Else"
    lines[5] = json.dumps(row) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(folder_copy))
    assert code == 1
    assert "content hash mismatch" in out and "chains-test.jsonl differs from its recorded sha256" in out
    assert "derived_mismatch" in out  # the edits config no longer matches the chains


@pytest.fixture
def small_folder(tmp_path: Path) -> Path:
    """A copy of 1.0.0 cut to a few rows, without version.json (so no hash to check): fast to validate."""
    dest = tmp_path / "small"
    shutil.copytree(version_dir("1.0.0"), dest)
    for name, keep in (("chains", 3), ("edits", 1), ("facts", 5)):
        path = dest / "data" / f"{name}-test.jsonl"
        path.write_text(
            "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:keep]), encoding="utf-8"
        )
    (dest / "version.json").unlink()
    return dest


def test_small_folder_is_valid_apart_from_derived_configs(capsys, small_folder: Path) -> None:
    code, out, _ = run(capsys, "validate", str(small_folder), "--json")
    report = json.loads(out)
    assert code == 0 and report["rows"] == {"chains": 3, "edits": 1, "facts": 5}
    assert "no version.json: content hash not checked" in report["notes"]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("README.md", "---\n- a list\n---\n", "the YAML metadata must be a mapping"),
        ("README.md", "---\nconfigs:\n- 5\n---\n", "every entry of `configs` needs a `config_name`"),
        ("version.json", "[]", "cannot check the content hash"),
        (
            "version.json",
            '{"configs": {"chains": {"path": "data/chains-test.jsonl"}}}',
            "cannot check the content",
        ),
        ("aliases.json", "[]", "expected an object, got array"),
        ("data/chains-test.jsonl", "null\n", "row 0: expected an object, got null"),
        ("data/chains-test.jsonl", "\n", "[chains]: no rows"),
        (
            "data/facts-test.jsonl",
            '{"fact_id": "abc", "subject": 1}\n',
            "fact_id abc at /subject: expected a string",
        ),
        pytest.param(
            "data/chains-test.jsonl",
            "[" * 100_000 + "]" * 100_000 + "\n",
            "chains-test.jsonl [chains]: line 1 is unreadable JSON: arrays or objects are nested too deeply",
            id="deep-jsonl-line",
        ),
        pytest.param(
            "aliases.json",
            '{"USA": [' + "1" * 5000 + "]}",
            "aliases.json [aliases]: unreadable JSON: an integer literal has 5000 digits",
            id="long-integer-alias",
        ),
        pytest.param(
            "README.md",
            "---\nconfigs: " + "[" * 5000 + "]" * 5000 + "\n---\n",
            "the YAML metadata is nested too deeply to read",
            id="deep-yaml",
        ),
        pytest.param(
            "README.md",
            "---\nconfigs: " + "9" * 5000 + "\n---\n",
            "the YAML metadata cannot be read (ValueError: ",
            id="long-integer-yaml",
        ),
        pytest.param(
            "README.md",
            "---\ncreated: 2020-02-30\n---\n",
            "the YAML metadata cannot be read (ValueError: day is out of range for month)",
            id="impossible-date-yaml",
        ),
    ],
)
def test_corrupt_folder_files(capsys, small_folder: Path, name: str, content: str, expected: str) -> None:
    (small_folder / name).write_text(content, encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(small_folder))
    assert code == 1 and expected in out


def test_folder_with_a_corrupt_parquet_data_file(capsys, tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    (folder / "data").mkdir(parents=True)
    _truncated_parquet(folder / "data" / "chains.parquet")
    (folder / "README.md").write_text(_card("data/chains.parquet"), encoding="utf-8")
    code, errors = _errors(capsys, folder)
    assert code == 1
    assert errors[0]["file"] == str(folder / "data" / "chains.parquet")
    assert errors[0]["message"].startswith("not a readable Parquet file (")


# --- data files outside the folder ---------------------------------------------------------------


def _card(*paths: str) -> str:
    files = "".join(f"  - split: test\n    path: {json.dumps(p)}\n" for p in paths)
    return f"---\nconfigs:\n- config_name: chains\n  data_files:\n{files}---\n# rows\n"


@pytest.fixture
def dataset_beside_rows(tmp_path: Path, good_rows: list[dict]) -> Path:
    """A folder ``ds`` with ``data/``, next to a valid rows file ``outside.jsonl`` that it must not read."""
    text = "".join(json.dumps(r) + "\n" for r in good_rows)
    (tmp_path / "outside.jsonl").write_text(text, encoding="utf-8")
    folder = tmp_path / "ds"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "inside.jsonl").write_text(text, encoding="utf-8")
    return folder


def test_data_files_inside_the_folder_are_read(capsys, dataset_beside_rows: Path) -> None:
    (dataset_beside_rows / "README.md").write_text(_card("data/inside.jsonl"), encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(dataset_beside_rows), "--json")
    assert code == 0 and json.loads(out)["rows"] == {"chains": 3}


@pytest.mark.parametrize(
    "pattern", ["../outside.jsonl", "data/../../outside.jsonl", "../*.jsonl", "ABSOLUTE", "data/link.jsonl"]
)
def test_data_files_outside_the_folder_are_refused(capsys, dataset_beside_rows: Path, pattern: str) -> None:
    outside = dataset_beside_rows.parent / "outside.jsonl"
    if pattern == "ABSOLUTE":
        pattern = str(outside)
    if pattern == "data/link.jsonl":
        (dataset_beside_rows / "data" / "link.jsonl").symlink_to(outside)
    (dataset_beside_rows / "README.md").write_text(_card("data/inside.jsonl", pattern), encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(dataset_beside_rows), "--json")
    report = json.loads(out)
    assert code == 1 and report["rows"] == {}, "nothing may be read"
    (e,) = report["errors"]
    assert e["message"] == (
        f"{dataset_beside_rows / 'README.md'}: config 'chains' names data file {pattern!r}, which is outside "
        "the dataset folder; data files must be relative paths inside it"
    )


@pytest.mark.parametrize("where", ["configs", "files"])
def test_version_record_naming_files_outside_the_folder(capsys, folder_copy: Path, where: str) -> None:
    (folder_copy.parent / "outside.jsonl").write_text("{}\n", encoding="utf-8")
    record_path = folder_copy / "version.json"
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if where == "configs":
        record["configs"]["chains"]["path"] = "../outside.jsonl"
        expected = "names data file '../outside.jsonl' for config 'chains', which is outside the folder"
    else:
        record["files"]["../outside.jsonl"] = {"size": 3, "sha256": "0" * 64}
        expected = "version.json lists '../outside.jsonl', which is outside the folder"
    record_path.write_text(json.dumps(record), encoding="utf-8")
    code, out, _ = run(capsys, "validate", str(folder_copy), "--json")
    report = json.loads(out)
    assert code == 1
    assert [e["message"] for e in report["errors"] if expected in e["message"]], report["errors"]


# --- bounded output ------------------------------------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_huge_field_is_quoted_briefly(capsys, tmp_path: Path, good_rows: list[dict], as_json: bool) -> None:
    """A 2 MB question (named by two warnings), a 2 MB unknown field and a 2 MB string where a number
    belongs: the report stays a few kilobytes, in text and in JSON, and says how much it left out."""
    huge = "y" * 2_000_000
    good_rows[0]["chain"]["questions"][0] = huge
    good_rows[1][huge] = 1
    good_rows[2]["case_id"] = huge
    path = write_json(tmp_path / "huge.json", good_rows)
    code, out, _ = run(capsys, "validate", str(path), *(["--json"] if as_json else []))
    assert code == 1
    assert len(out) < 8_000
    if as_json:
        report = json.loads(out)
        assert report["n_errors"] == 2
        assert {w["code"] for w in report["warnings"]} >= {"subject_not_in_question", "malformed_question"}
        quoted = [e for w in report["warnings"] for e in w["examples"] if "yyy" in e]
        assert len(quoted) == 2 and all("chars]…" in e for e in quoted)
    else:
        assert out.count("chars]…") >= 3
        assert "(subject " in out  # the end of a clipped example is kept: it says what the value was
