"""The ``ripple`` config of a ``knowgic build`` output: the builder's folder writer adds it (outside the
content hash), ``datasets.load_dataset(folder, "ripple")`` loads it and ``knowgic validate`` rebuilds it; a
template ``spec/relations.yaml`` lacks gets a proposed relation instead of failing the build.

The builder's writer (:func:`knowgic.builder.output.version_files`) is run on the rows of the unpublished
world's build (tests/data/private_world/dataset, left as it is) into a fresh folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

from knowgic.builder.output import RELATIONS_PROPOSED, version_files, write_folder
from knowgic.dataset.io import alias_lists, read_json, read_rows
from knowgic.dataset.validate import validate_path
from knowgic.dataset.versions import content_sha256
from knowgic.ripple.queries import CRITERIA
from knowgic.ripple.relations import PROPOSED_DEFAULTS, read_relations, relation_table
from tests.private_world import WORLD_DATASET

NEW_TEMPLATE = "{} is a kinsman of"
"""A phrasing no relation of spec/relations.yaml declares."""


def _record(info: dict[str, Any]) -> dict[str, Any]:
    """What the writer reads of a build record (the world's own is not shipped: build/ is not committed)."""
    source = info["source"]
    return {"model": source["model"], "seeds": {"source": source["seeds"]}, "protocol": {"name": "logprob"},
            "review": {"by": []}, "counts": {"chains": info["configs"]["chains"]["rows"]},
            "build_key": "0" * 64}  # fmt: skip


def _write(out: Path, rows: list[dict[str, Any]]) -> Path:
    info = read_json(WORLD_DATASET / "version.json")
    aliases = alias_lists(read_json(WORLD_DATASET / "aliases.json"))
    files = version_files(info["name"], info["version"], rows, aliases, _record(info), [], None)
    write_folder(out, files, overwrite=False)
    return out


def _assert_valid(out: Path) -> None:
    """``knowgic validate`` passes and rebuilds the derived configs, ripple included, as written."""
    report = validate_path(out)
    assert report.ok, report.render_text()
    codes = {w.code for w in report.warnings}
    assert not codes & {"derived_mismatch", "ripple_unbuildable"}, report.render_text()
    assert report.rows.get("ripple", 0) > 0


def _world_rows() -> list[dict[str, Any]]:
    return [dict(r) for r in read_rows(WORLD_DATASET / "data" / "chains-test.jsonl")]


def test_a_build_of_the_world_gets_a_ripple_config_that_loads_and_validates(tmp_path: Path) -> None:
    out = _write(tmp_path / "world", _world_rows())
    info = read_json(out / "version.json")
    assert info["sha256"] == read_json(WORLD_DATASET / "version.json")["sha256"] == content_sha256(out)
    ds = datasets.load_dataset(str(out), "ripple", split="test")
    assert len(ds) == info["configs"]["ripple"]["rows"] > 0
    assert set(ds["criterion"]) <= set(CRITERIA) and "RS" in set(ds["criterion"])
    edits = {r["edit_id"] for r in read_rows(WORLD_DATASET / "data" / "edits-test.jsonl")}
    assert set(ds["edit_id"]) <= edits
    # every template is declared: the shipped table, no proposal
    assert info["ripple"]["relations"] == {
        "version": relation_table().version,
        "sha256": relation_table().sha256,
    }
    assert not (out / RELATIONS_PROPOSED).exists()
    _assert_valid(out)


def test_a_template_the_table_lacks_gets_a_proposed_relation(tmp_path: Path) -> None:
    """The world's rows with one sibling phrasing renamed: the build writes a proposal for it with the
    declared defaults, its edits get queries through it, and the folder still loads and validates."""
    text = json.dumps(_world_rows(), ensure_ascii=False).replace(
        '"{} is a sibling of"', json.dumps(NEW_TEMPLATE)
    )
    rows = json.loads(text)
    out = _write(tmp_path / "renamed", rows)
    proposed = read_relations(out / RELATIONS_PROPOSED)  # a relation table of its own, schema-checked
    assert [r.templates for r in proposed.relations.values()] == [(NEW_TEMPLATE,)]
    (name, relation), = proposed.relations.items()  # fmt: skip
    assert relation.proposed and name == "is_a_kinsman_of" and relation.noun_phrase == "what " + NEW_TEMPLATE
    assert relation.cardinality == PROPOSED_DEFAULTS["cardinality"] and relation.dependents == frozenset()
    assert not relation.symmetric and relation.inverse is None and not relation.transitive
    info = read_json(out / "version.json")
    assert info["ripple"]["relations"]["proposed"] == [name]
    assert info["ripple"]["relations"]["sha256"] != relation_table().sha256
    ds = datasets.load_dataset(str(out), "ripple", split="test")
    through = [r for r in ds if name in r["relations"]]
    # an edit of the renamed relation: one-to-many, so Preservation asks about its other objects
    assert {r["criterion"] for r in through} >= {"PV", "RS"}
    _assert_valid(out)


def test_the_shipped_table_holds_no_proposal() -> None:
    assert not [r.name for r in relation_table().relations.values() if r.proposed]
