"""Build every dataset version folder from the vendored upstream files: ``python -m knowgic.dataset.build``.

Deterministic and idempotent: the same inputs give the same bytes, and a file whose content is unchanged
is not rewritten. For each version it writes ``knowgic/dataset/hub/<version>/`` (data files, alias map,
card, CHANGELOG, LICENSE, citation, ``version.json``) and records the version in the ``dataset.versions``
section of ``spec/benchmark.yaml``, keeping the versions of other tracks declared there
(:mod:`knowgic.dataset.tracks` writes those, with :func:`folder_files` and :func:`update_spec`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from knowgic.dataset.card import (
    CITATION,
    SOURCE_COMMIT,
    SOURCE_REPO,
    ChangelogEntry,
    render_card,
    render_changelog,
)
from knowgic.dataset.checks import check_aliases, check_chains
from knowgic.dataset.corrections import STEPS_1_1_0, Change, Step, apply_steps
from knowgic.dataset.derive import edit_rows, fact_rows, ripple_record, ripple_rows
from knowgic.dataset.io import (
    alias_lists,
    aliases_text,
    atomic_write_text,
    canonical_json,
    file_sha256,
    jsonl_text,
    read_json,
    report_rebuild,
    sha256_text,
)
from knowgic.dataset.schemas import ROW_SCHEMAS, validator
from knowgic.dataset.versions import ALIASES_FILE, HUB_DIR, VERSION_FILE, version_sort_key
from knowgic.errors import KnowgicError
from knowgic.paths import PACKAGE_DIR, spec_dir
from knowgic.ripple.relations import RelationTable, relation_table
from knowgic.schema_errors import first_error_line
from knowgic.yamlfile import read_yaml

UPSTREAM_DIR = PACKAGE_DIR / "dataset" / "upstream"
DATA_FILES = {config: f"data/{config}-test.jsonl" for config in ROW_SCHEMAS}


@dataclass(frozen=True)
class VersionDef:
    """How a version is made: from ``base`` (None: the upstream files) by ``steps``; ``ripple``: whether it
    ships the ``ripple`` config (1.0.0 reproduces the upstream files and stays as published)."""

    version: str
    summary: str
    base: str | None
    steps: tuple[Step, ...]
    ripple: bool = False


VERSIONS: tuple[VersionDef, ...] = (
    VersionDef(
        "1.0.0",
        "Version 1.0.0 reproduces the upstream data exactly: the chains config holds the upstream rows "
        "unchanged, row for row, and the alias map holds the upstream entries (in list form).",
        None,
        (),
    ),
    VersionDef(
        "1.1.0",
        "Version 1.1.0 corrects the known problems of 1.0.0 (each change is listed below with its "
        "count): chain ends spelled differently from `target_true`, questions misspelling their subject, "
        "duplicated broader-context entries, alias-map gaps and risky aliases; answers contained in their "
        "own question and empty broader contexts are flagged in a per-row `flags` field. Row count and "
        "`case_id`s are those of 1.0.0.",
        "1.0.0",
        STEPS_1_1_0,
        ripple=True,
    ),
)


@dataclass
class BuiltVersion:
    version: str
    summary: str
    chains: list[dict[str, Any]]
    aliases: dict[str, list[str]]
    changes: list[Change]


def upstream_inputs() -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    rows = read_json(UPSTREAM_DIR / "chains.json")
    raw_aliases = read_json(UPSTREAM_DIR / "attributes_with_aliases.json")
    if not isinstance(rows, list) or not isinstance(raw_aliases, dict):
        raise KnowgicError(f"unexpected shape of the upstream files in {UPSTREAM_DIR}")
    return rows, alias_lists(raw_aliases)


def _check_rows(version: str, config: str, rows: Sequence[Mapping[str, Any]]) -> None:
    v = validator(ROW_SCHEMAS[config])
    for index, row in enumerate(rows):
        problem = first_error_line(v.iter_errors(row))
        if problem is not None:
            raise KnowgicError(f"build of {version}: {config} row {index} breaks its schema at {problem}")


def derived_change(
    base: BuiltVersion, rows: Sequence[Mapping[str, Any]], aliases: Mapping[str, Sequence[str]]
) -> Change:
    """The CHANGELOG line for the derived configs, counted against the base version's."""
    old_edits, new_edits = edit_rows(base.chains), edit_rows(rows)
    old_bc = sum(len(e["broader_context"]["answers"]) for e in old_edits)
    new_bc = sum(len(e["broader_context"]["answers"]) for e in new_edits)
    old_facts = {f["fact_id"]: f for f in fact_rows(base.chains, base.aliases)}
    new_facts = {f["fact_id"]: f for f in fact_rows(rows, aliases)}
    added, removed = len(new_facts.keys() - old_facts.keys()), len(old_facts.keys() - new_facts.keys())
    changed = sum(1 for k in new_facts.keys() & old_facts.keys() if new_facts[k] != old_facts[k])
    return Change(
        f"Derived configs rebuilt from the corrected rows and alias map: edits {len(new_edits)} rows "
        f"({old_bc} -> {new_bc} broader-context entries in all); facts {len(new_facts)} rows ({added} added, "
        f"{removed} removed, {changed} with changed questions, aliases or counts).",
        added + removed + changed,
    )


def build_versions() -> list[BuiltVersion]:
    """Every version's chains rows, alias map and changes, in order."""
    upstream_rows, upstream_aliases = upstream_inputs()
    built: dict[str, BuiltVersion] = {}
    for vdef in VERSIONS:
        if vdef.base is None:
            rows, aliases, changes = apply_steps(upstream_rows, upstream_aliases, vdef.steps)
            changes = [
                Change(
                    f"Initial release: the {len(rows)} upstream rows of `{SOURCE_REPO}` at commit "
                    f"`{SOURCE_COMMIT[:7]}` (`chains.json`, sha256 {file_sha256(UPSTREAM_DIR / 'chains.json')}), "
                    "unchanged.",
                    len(rows),
                ),
                Change(
                    f"Alias map: the {len(aliases)} upstream entries of `attributes_with_aliases.json` "
                    f"(sha256 {file_sha256(UPSTREAM_DIR / 'attributes_with_aliases.json')}), unchanged, "
                    'in list form (`{"entity": [aliases]}` instead of `{"entity": {"answer_alias": [...]}}`).',
                    len(aliases),
                ),
                Change(
                    f"Derived configs: `edits` ({len(edit_rows(rows))} rows, one per distinct edit request) and "
                    f"`facts` ({len(fact_rows(rows, aliases))} rows, one per distinct (subject, prompt, answer)).",
                    2,
                ),
            ]
        else:
            base = built[vdef.base]
            rows, aliases, changes = apply_steps(base.chains, base.aliases, vdef.steps)
            changes.append(derived_change(base, rows, aliases))
        _check_rows(vdef.version, "chains", rows)
        built[vdef.version] = BuiltVersion(vdef.version, vdef.summary, rows, aliases, changes)
    return list(built.values())


def version_files(built: BuiltVersion, history: Sequence[BuiltVersion]) -> dict[str, str]:
    """Every file of the version folder (relative path -> text), ``version.json`` last."""
    entries = [ChangelogEntry(b.version, b.summary, tuple(f"{c.text}" for c in b.changes)) for b in history]
    return folder_files(
        built.version,
        built.summary,
        built.chains,
        built.aliases,
        entries,
        head={
            "name": "knowgic",
            "version": built.version,
            "source": {"repository": SOURCE_REPO, "commit": SOURCE_COMMIT},
            "based_on": next((v.base for v in VERSIONS if v.version == built.version), None),
        },
        ripple=relation_table() if any(v.ripple for v in VERSIONS if v.version == built.version) else None,
    )


def folder_files(
    version: str,
    summary: str,
    chains: Sequence[Mapping[str, Any]],
    aliases: Mapping[str, Sequence[str]],
    entries: Sequence[ChangelogEntry],
    head: Mapping[str, Any],
    tail: Mapping[str, Any] | None = None,
    card_extra: str = "",
    card_source: str | None = None,
    ripple: RelationTable | None = None,
) -> dict[str, str]:
    """The files of a dataset folder from its chains rows and alias map, ``version.json`` last: the derived
    configs, the card (``card_source``: where the rows come from, default the upstream repository;
    ``card_extra`` appended), the CHANGELOG of ``entries`` (the last one this version's), LICENSE and
    citation. ``version.json`` holds ``head`` (name, version, ...), the content hash, the configs
    and the alias map, then ``tail``, then every file's size and sha256. With ``ripple`` (a relation table)
    the folder also holds the ``ripple`` config, outside the content hash: ``version.json`` records its rows'
    sha256 and the table's under ``ripple``, so adding it leaves the content hash as it was."""
    configs: dict[str, list[dict[str, Any]]] = {
        "chains": [dict(r) for r in chains],
        "edits": edit_rows(chains),
        "facts": fact_rows(chains, aliases),
    }
    for config in ("edits", "facts"):
        _check_rows(version, config, configs[config])
    content = {"aliases": aliases, **configs}
    sha256 = sha256_text(canonical_json(content))
    derived: dict[str, Any] = {}
    if ripple is not None:
        configs["ripple"] = ripple_rows(chains, aliases, ripple)
        _check_rows(version, "ripple", configs["ripple"])
        derived["ripple"] = ripple_record(configs["ripple"], ripple)
    findings = check_chains(configs["chains"]) + check_aliases(aliases, configs["chains"])
    files: dict[str, str] = {DATA_FILES[c]: jsonl_text(rows) for c, rows in configs.items()}
    files[ALIASES_FILE] = aliases_text(aliases)
    card = render_card(
        version,
        summary,
        sha256,
        {c: DATA_FILES[c] for c in configs},
        configs,
        aliases,
        findings,
        entries[-1],
        source=card_source,
    )
    files["README.md"] = card.rstrip("\n") + "\n\n" + card_extra if card_extra else card
    files["CHANGELOG.md"] = render_changelog(entries)
    files["LICENSE"] = (UPSTREAM_DIR / "LICENSE").read_text(encoding="utf-8")
    files["CITATION.bib"] = CITATION
    head = dict(head)
    record = {
        "name": head.pop("name"),
        "version": head.pop("version"),
        "sha256": sha256,
        "canonical_content": (
            'sha256 of the UTF-8 JSON {"aliases": <aliases.json>, "chains": [rows], "edits": [rows], '
            '"facts": [rows]} with sorted keys, no whitespace, non-ASCII characters kept; rows in file order'
        ),
        **head,
        "configs": {c: {"path": DATA_FILES[c], "split": "test", "rows": len(r)} for c, r in configs.items()},
        "aliases": {"path": ALIASES_FILE, "entities": len(aliases)},
        **derived,
        **(tail or {}),
        "files": {
            path: {"size": len(text.encode("utf-8")), "sha256": sha256_text(text)}
            for path, text in sorted(files.items())
        },
    }
    files[VERSION_FILE] = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    return files


def write_version(folder: Path, files: Mapping[str, str]) -> list[str]:
    """Write the files, remove any other file in the folder; returns the paths that changed."""
    changed = [path for path, text in files.items() if atomic_write_text(folder / path, text)]
    for path in sorted(folder.rglob("*"), reverse=True):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in files:
            path.unlink()
            changed.append(f"removed {rel}")
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return changed


def spec_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``dataset.versions`` entry of a version from its ``version.json``."""
    return {
        "sha256": record["sha256"],
        "based_on": record.get("based_on"),
        "rows": {c: v["rows"] for c, v in record["configs"].items()},
    }


def versions_yaml(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """The ``versions:`` block of the benchmark spec (indented for the ``dataset:`` section), in
    :func:`~knowgic.dataset.versions.version_sort_key` order."""
    lines = ["  versions:"]
    for version in sorted(entries, key=version_sort_key):
        entry = entries[version]
        lines.append(f'    "{version}":')
        lines.append(f"      path: knowgic/dataset/hub/{version}")
        lines.append(f"      sha256: {entry['sha256']}")
        if entry.get("based_on"):
            lines.append(f'      based_on: "{entry["based_on"]}"')
        rows = ", ".join(f"{c}: {n}" for c, n in entry["rows"].items())
        lines.append(f"      rows: {{{rows}}}")
    return "\n".join(lines) + "\n"


_VERSIONS_BLOCK = re.compile(r"^  versions:.*\n(?:    .*\n)*", re.MULTILINE)


def update_spec(spec_path: Path, records: Mapping[str, Mapping[str, Any]]) -> bool:
    """Record the versions of ``records`` (each a ``version.json``) in the ``dataset.versions`` block of
    ``spec/benchmark.yaml``; every other version declared there (another track's) and every other line stay
    as they are."""
    text = spec_path.read_text(encoding="utf-8")
    match = _VERSIONS_BLOCK.search(text)
    if match is None:
        raise KnowgicError(f"{spec_path}: no `  versions:` line in the dataset section")
    declared = (read_yaml(spec_path).get("dataset") or {}).get("versions") or {}
    entries = {str(k): dict(v) for k, v in declared.items() if str(k) not in records}
    entries.update({k: spec_entry(r) for k, r in records.items()})
    new = text[: match.start()] + versions_yaml(entries) + text[match.end() :]
    return atomic_write_text(spec_path, new)


def build(
    hub_dir: Path = HUB_DIR, spec_path: Path | None = None, progress: bool = True
) -> dict[str, list[str]]:
    """Build every version into ``hub_dir`` and record them in the spec; returns the changed files."""
    built = build_versions()
    changed: dict[str, list[str]] = {}
    records: dict[str, dict[str, Any]] = {}
    for i, version in enumerate(
        tqdm(built, desc="building versions", disable=not progress or not sys.stderr.isatty())
    ):
        files = version_files(version, built[: i + 1])
        records[version.version] = json.loads(files[VERSION_FILE])
        changed[version.version] = write_version(hub_dir / version.version, files)
    spec = spec_path or spec_dir() / "benchmark.yaml"
    if update_spec(spec, records):
        changed["spec"] = [str(spec)]
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowgic.dataset.build", description=__doc__.splitlines()[0]
    )
    parser.parse_args(argv)
    return report_rebuild(build)


if __name__ == "__main__":
    sys.exit(main())
