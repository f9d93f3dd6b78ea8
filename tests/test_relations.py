"""The relation table (``spec/relations.yaml``): it covers every template the shipped data uses, and it is
checked by its schema and its references."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowgic.dataset.versions import version_dir
from knowgic.errors import KnowgicError
from knowgic.ripple.relations import read_relations, relation_table, relations_file
from knowgic.yamlfile import read_yaml

REPO = Path(__file__).resolve().parent.parent


def _templates_of_version(version: str) -> set[str]:
    templates: set[str] = set()
    for line in (
        (version_dir(version) / "data" / "chains-test.jsonl").read_text(encoding="utf-8").splitlines()
    ):
        row = json.loads(line)
        templates.update(row["chain"]["prompts"], row["broader_context"]["prompts"])
        templates.update(r["prompt"] for r in row["requested_rewrite"])
    return templates


def test_every_template_of_1_1_0_growth_and_the_private_world_has_a_relation() -> None:
    table = relation_table()
    used = _templates_of_version("1.1.0") | _templates_of_version("growth-1.0.0")
    world = read_yaml(REPO / "tests" / "data" / "private_world" / "templates.yaml")
    used |= set(world) | {entry["prompt"] for entry in world.values()}
    assert len(used) > 100
    assert table.undeclared(used) == []
    # and nothing declared that no data uses (a stale entry is a stub)
    assert {t for r in table.relations.values() for t in r.templates} == used


def test_the_shipped_table_holds_its_references() -> None:
    table = relation_table()
    for rel in table.relations.values():
        if rel.inverse is not None:
            assert table.relations[rel.inverse].inverse == rel.name
        assert rel.dependents <= set(table.relations)
        assert rel.noun_phrase.count("{}") == 1 and all(t.count("{}") == 1 for t in rel.templates)
    assert table.relations["sibling"].symmetric and table.relations["located_in"].transitive
    assert table.relations["child"].inverse == "parent" and table.relations["child"].one_to_many


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    text = relations_file().read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "relations.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "    inverse: parent\n",
            "    inverse: parnet\n",
            "/relations/child/inverse: 'parnet' is not a declared",
        ),
        ("    inverse: parent\n", "    inverse: sibling\n", "'sibling' must name 'child' as its inverse"),
        (
            "dependents: [grandchild, son_in_law]",
            "dependents: [grandchild, in_law]",
            "'in_law' is not a declared",
        ),
        (
            "cardinality: one-to-many\n    inverse: parent",
            "cardinality: many\n    inverse: parent",
            "/relations/child/cardinality",
        ),
        ('noun_phrase: "a child of {}"', 'noun_phrase: "a child"', "/relations/child/noun_phrase"),
        ('"{} is father of"]', '"{} is father of", "{} is the child of"]', "already phrases"),
    ],
)
def test_a_broken_table_gets_one_line_naming_the_field(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    with pytest.raises(KnowgicError) as info:
        read_relations(_broken(tmp_path, old, new))
    assert message in str(info.value) and "\n" not in str(info.value)
