"""The JSON Schemas in spec/schemas: valid draft 2020-12, linked by $ref, and the source of the card features."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml

from knowgic.dataset.schemas import (
    SCHEMA_BASE,
    features_from_schema,
    field_docs,
    load_schema,
    schema_registry,
    schemas_dir,
    validator,
    yaml_features,
)
from knowgic.errors import KnowgicError

MINE = ("edit_request", "chain", "case", "edit", "fact", "aliases", "submission")

CASE = {
    "case_id": 0,
    "requested_rewrite": [
        {
            "prompt": "{} studied at",
            "target_new": {"str": "Ilvermorny School of Witchcraft and Wizardry"},
            "target_true": {"str": "Hogwarts School of Witchcraft and Wizardry"},
            "subject": "Harry Potter",
        }
    ],
    "chain": {
        "questions": ["Who all were Harry Potter's schoolmates?", "Which house is Ron Weasley in?"],
        "answers": ["Ron Weasley", "Gryffindor"],
        "prompts": ["{}'s schoolmate is", "{} belongs to"],
        "subjects": ["Harry Potter", "Ron Weasley"],
    },
    "broader_context": {"questions": [], "answers": [], "prompts": [], "subjects": []},
}

SUBMISSION = {
    "name": "my-editor",
    "version": "0.1.0",
    "authors": ["A. Author", {"name": "B. Author", "email": "b@example.org"}],
    "license": "MIT",
    "editor": "my_editor.editor:MyEditor",
    "hparams": {"gpt2": "hparams/gpt2.yaml", "llama": {"layers": [4, 5]}},
    "requirements": ["numpy>=1.26"],
    "models": ["gpt2-xl"],
    "protocols": ["logprob", "generate"],
}


@pytest.mark.parametrize("name", MINE)
def test_schema_is_valid_draft_2020_12_with_id(name: str) -> None:
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"{SCHEMA_BASE}{name}.schema.json"
    assert schema.get("description")


def test_every_ref_resolves_through_the_registry() -> None:
    registry = schema_registry()

    def refs(node: object, base: str) -> list[tuple[str, str]]:
        if isinstance(node, dict):
            out = [(base, node["$ref"])] if "$ref" in node else []
            return out + [r for v in node.values() for r in refs(v, base)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v, base)]
        return []

    found = [r for name in MINE for r in refs(load_schema(name), load_schema(name)["$id"])]
    assert any(not ref.startswith("#") for _b, ref in found), "schemas should reference each other"
    for base, ref in found:
        registry.resolver(base_uri=base).lookup(ref)  # raises when unresolvable


def test_a_good_case_validates_and_each_rule_is_enforced_through_refs() -> None:
    v = validator("case")
    assert list(v.iter_errors(CASE)) == []
    bad = copy.deepcopy(CASE)
    bad["chain"]["prompts"][1] = "{} belongs to {}"
    bad["requested_rewrite"][0]["target_new"]["str"] = ""
    bad["broader_context"]["answers"] = ["x"]
    kinds = {(e.validator, tuple(e.absolute_path)) for e in v.iter_errors(bad)}
    assert ("pattern", ("chain", "prompts", 1)) in kinds
    assert ("minLength", ("requested_rewrite", 0, "target_new", "str")) in kinds
    # x-equalLength is a keyword of ours: it must survive the $ref into chain.schema.json
    assert ("x-equalLength", ("broader_context",)) in kinds


def test_chain_must_be_non_empty_but_broader_context_may_be_empty() -> None:
    bad = copy.deepcopy(CASE)
    bad["chain"] = {"questions": [], "answers": [], "prompts": [], "subjects": []}
    assert [e.validator for e in validator("case").iter_errors(bad)] == ["minItems"]


def test_flags_are_optional_but_complete_when_present() -> None:
    row = copy.deepcopy(CASE)
    row["flags"] = {"chain_answer_in_question": [0]}
    errors = list(validator("case").iter_errors(row))
    assert [e.validator for e in errors] == ["required"] * 3  # one per missing flag
    row["flags"].update(broader_answer_in_question=[], empty_broader_context=True, chain_restates_edit=False)
    assert list(validator("case").iter_errors(row)) == []


def test_alias_schema_accepts_both_forms_and_rejects_other_shapes() -> None:
    v = validator("aliases")
    assert v.is_valid({"USA": ["United States"], "Paris": []})
    assert v.is_valid({"USA": {"answer_alias": ["United States"]}})
    assert not v.is_valid({"USA": "United States"})
    assert not v.is_valid({"USA": [""]})
    assert not v.is_valid({"USA": {"aliases": []}})


def test_submission_schema() -> None:
    v = validator("submission")
    assert list(v.iter_errors(SUBMISSION)) == []
    for field, value in [
        ("editor", "not an entry point"),
        ("version", "1.0"),
        ("protocols", ["beam"]),
        ("name", "Has Spaces"),
        ("models", []),
        ("hparams", {}),  # every model needs an entry, so an empty mapping can never be right
    ]:
        bad = {**SUBMISSION, field: value}
        assert not v.is_valid(bad), field
    missing = {k: v_ for k, v_ in SUBMISSION.items() if k != "license"}
    assert not v.is_valid(missing)


def test_submission_protocols_and_modes_match_the_benchmark_spec() -> None:
    spec = yaml.safe_load((schemas_dir().parent / "benchmark.yaml").read_text(encoding="utf-8"))
    props = load_schema("submission")["properties"]
    assert set(props["protocols"]["items"]["enum"]) == set(spec["protocols"])
    assert set(props["modes"]["items"]["enum"]) == set(spec["modes"])


@pytest.mark.parametrize(
    ("name", "present"),
    [
        ("case", None),
        ("case", {"case_id", "requested_rewrite", "chain", "broader_context", "edit_id", "flags"}),
        ("edit", None),
        ("fact", None),
    ],
)
def test_yaml_features_equal_the_datasets_conversion(name: str, present: set[str] | None) -> None:
    import datasets

    features = features_from_schema(name, present)
    assert isinstance(features, datasets.Features)
    assert datasets.Features._from_yaml_list(yaml_features(name, present)) == features


def test_features_follow_the_schema() -> None:
    import datasets

    f = features_from_schema("case")
    assert list(f) == ["case_id", "requested_rewrite", "chain", "broader_context"]
    assert f["case_id"] == datasets.Value("int64")
    assert f["chain"]["prompts"] == datasets.List(datasets.Value("string"))
    assert f["requested_rewrite"].feature["target_true"] == {"str": datasets.Value("string")}
    with pytest.raises(KnowgicError, match="no properties"):
        features_from_schema("case", {"nope"})


def test_field_docs_come_from_descriptions() -> None:
    docs = {d.name: d for d in field_docs("fact")}
    assert docs["n_gold"].type == "integer"
    assert "distinct answers" in docs["n_gold"].description
    nested = {d.name for d in field_docs("edit")}
    assert "chains[].prompts" in nested and "requested_rewrite[].target_new.str" in nested


def test_schema_files_are_plain_json() -> None:
    for name in MINE:
        json.loads((schemas_dir() / f"{name}.schema.json").read_text(encoding="utf-8"))
