"""Stage 7, output: the chains as a dataset version folder in the project's schemas.

    edits with chains --rows (case_id, requested_rewrite, chain, broader_context, edit_id, flags)-->
    data/{chains,edits,facts}-test.jsonl + aliases.json + README.md (card) + CHANGELOG.md + version.json
    + data/ripple-test.jsonl (RippleEdits' queries with spec/relations.yaml, outside the content hash)
    + subject_aliases.json (the names the model knows each subject by, validated; outside the content hash;
      the ripple config's Subject Aliasing asks under them)
    + build/build.json (model, revision, prompts, seeds, review, counts)
    + build/provenance.jsonl (per fact: prompt, model output, sentence, extraction, validation, decision)
    + build/relations-proposed.yaml (only when spec/relations.yaml lacks a template: the relations proposed
      for them, with default semantics, for review to accept into the table)

The folder is written next to its final place and renamed over it, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from knowgic.dataset.build import DATA_FILES
from knowgic.dataset.card import CITATION, ChangelogEntry, render_card, render_changelog
from knowgic.dataset.checks import check_aliases, check_chains, row_flags
from knowgic.dataset.derive import edit_rows, fact_rows, ripple_config
from knowgic.dataset.io import aliases_text, atomic_write_text, canonical_json, jsonl_text, sha256_text
from knowgic.dataset.schemas import ROW_SCHEMAS, validator
from knowgic.dataset.versions import ALIASES_FILE, SUBJECT_ALIASES_FILE, VERSION_FILE
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest
from knowgic.ripple.relations import proposals_text, relation_table
from knowgic.schema_errors import first_error_line

BUILD_RECORD = "build/build.json"
PROVENANCE = "build/provenance.jsonl"
CHAIN_QUESTIONS = "build/chain_questions.jsonl"
RELATIONS_PROPOSED = "build/relations-proposed.yaml"


def _block(facts: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    return {
        "questions": [f["question"] for f in facts],
        "answers": [f["answer"] for f in facts],
        "prompts": [f["prompt"] for f in facts],
        "subjects": [f["subject"] for f in facts],
    }


def chain_rows(graph_out: Mapping[str, Any], facts: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for entry in graph_out["edits"]:
        e = entry["edit"]
        request = EditRequest(
            prompt=e["prompt"], subject=e["subject"], target_true=e["target_true"], target_new=e["target_new"]
        )
        for path in entry["chains"]:
            steps = [facts[fid] for fid in path]
            broader = [f for f in steps if f["subject"] != e["subject"]]
            row = {
                "case_id": len(rows),
                "requested_rewrite": [request.to_upstream()],
                "chain": _block(steps),
                "broader_context": _block(broader),
                "edit_id": request.edit_id,
            }
            row["flags"] = row_flags(row)
            rows.append(row)
    return rows


def _check(config: str, rows: Sequence[Mapping[str, Any]]) -> None:
    v = validator(ROW_SCHEMAS[config])
    for i, row in enumerate(rows):
        problem = first_error_line(v.iter_errors(row))
        if problem is not None:
            raise KnowgicError(f"built {config} row {i} breaks its schema at {problem}")


def _build_section(record: Mapping[str, Any]) -> str:
    c = record["counts"]
    lines = [
        "## How this version was built\n",
        f"Built by `knowgic build` from the model `{record['model']['id']}` (revision "
        f"`{record['model']['revision']}`), seeded from {record['seeds']['source']}. Every fact was asked "
        f"to the model through the `{record['protocol']['name']}` protocol and kept only when the model knows "
        "it by the metrics' own rule; new facts come from the model's own chain of thought, extracted as "
        "triplets under a JSON constraint, validated the same way and reviewed "
        f"({', '.join(record['review']['by']) or 'no new facts to review'}).\n",
        "| stage | count |",
        "| --- | --- |",
    ]
    lines += [f"| {k.replace('_', ' ')} | {v} |" for k, v in c.items()]
    largest = record.get("families", {}).get("largest", {})
    if largest.get("share") is not None:
        lines.append(
            f"\nThe largest family (connected component of the graph, here the one of "
            f"{largest['family']}) holds {largest['chains']} of the {c['chains']} chains "
            f"({100 * largest['share']:.1f}%); each family is capped at "
            f"{record['settings']['max_chains_per_family'] or 'no limit'} chains."
        )
    if record.get("rounds"):
        grown = ", ".join(
            f"round {r['round']}: {r['expanded']} facts expanded, {r['new_facts']} new"
            for r in record["rounds"]
        )
        lines.append(f"\nGrowth rounds ({grown}).")
    lines.append(
        f"\nPrompts, seeds and settings are in `{BUILD_RECORD}`; every fact's origin (the prompt, the "
        f"model's output, the sentence, the extraction, its validation score and the review decision) is "
        f"in `{PROVENANCE}`; one chain-based question per chain, with whether the model answers it, in "
        f"`{CHAIN_QUESTIONS}`.\n"
    )
    return "\n".join(lines)


def version_files(
    name: str,
    version: str,
    rows: list[dict[str, Any]],
    aliases: Mapping[str, Sequence[str]],
    record: Mapping[str, Any],
    provenance: Sequence[Mapping[str, Any]],
    license_text: str | None,
    chain_questions: Sequence[Mapping[str, Any]] = (),
    subject_aliases: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, str]:
    """Every file of the version folder by its path. ``subject_aliases``: the names the model knows each
    subject by (:mod:`knowgic.builder.aliases`), written to ``subject_aliases.json`` (the subjects of the
    version's facts only) and used by the ``ripple`` config's Subject Aliasing."""
    if not rows:
        raise KnowgicError("the build found no chains: nothing to write (see the counts in the build folder)")
    configs = {"chains": rows, "edits": edit_rows(rows), "facts": fact_rows(rows, aliases)}
    for config, config_rows in configs.items():
        _check(config, config_rows)
    # only the aliases of entities the version uses (smaller, and the alias checks stay meaningful)
    used = {f["answer"] for f in configs["facts"]} | {f["subject"] for f in configs["facts"]}
    aliases = {k: list(v) for k, v in sorted(aliases.items()) if k in used}
    sha256 = sha256_text(canonical_json({"aliases": aliases, **configs}))
    # derived from the hashed configs, outside the hash; a template the table lacks gets a proposed relation
    named = None
    if subject_aliases is not None:
        subjects = {f["subject"] for f in configs["facts"]}
        named = {k: list(v) for k, v in sorted(subject_aliases.items()) if k in subjects and v}
        problem = first_error_line(validator("subject_aliases").iter_errors(named))
        if problem is not None:
            raise KnowgicError(f"built {SUBJECT_ALIASES_FILE} breaks its schema at {problem}")
    ripple = ripple_config(rows, aliases, relation_table(), named)
    configs["ripple"] = ripple.rows
    _check("ripple", ripple.rows)
    findings = check_chains(rows) + check_aliases(aliases, rows)
    summary = (
        f"A model-specific KnowGIC graph: {len(configs['edits'])} edits, {len(rows)} chains over "
        f"{len(configs['facts'])} facts that `{record['model']['id']}` knows."
    )
    entry = ChangelogEntry(version, summary, (f"Built by `knowgic build` ({record['build_key'][:12]}).",))
    files = {DATA_FILES[c]: jsonl_text(r) for c, r in configs.items()}
    files[ALIASES_FILE] = aliases_text(aliases) if aliases else "{}\n"
    if named is not None:
        files[SUBJECT_ALIASES_FILE] = aliases_text(named) if named else "{}\n"
    card = render_card(
        version, summary, sha256, {c: DATA_FILES[c] for c in configs}, configs, aliases, findings, entry
    )
    files["README.md"] = card.rstrip("\n") + "\n\n" + _build_section(record)
    files["CHANGELOG.md"] = render_changelog([entry])
    if license_text:
        files["LICENSE"] = license_text
    files["CITATION.bib"] = CITATION
    files[BUILD_RECORD] = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
    files[PROVENANCE] = jsonl_text(provenance)
    if chain_questions:
        files[CHAIN_QUESTIONS] = jsonl_text(chain_questions)
    if ripple.proposals:
        files[RELATIONS_PROPOSED] = proposals_text(ripple.table, ripple.proposals)
    info = {
        "name": name,
        "version": version,
        "sha256": sha256,
        "canonical_content": (
            'sha256 of the UTF-8 JSON {"aliases": <aliases.json>, "chains": [rows], "edits": [rows], '
            '"facts": [rows]} with sorted keys, no whitespace, non-ASCII characters kept; rows in file order'
        ),
        "source": {"builder": "knowgic build", "model": record["model"], "seeds": record["seeds"]["source"]},
        "based_on": record["seeds"].get("version"),
        "configs": {c: {"path": DATA_FILES[c], "split": "test", "rows": len(r)} for c, r in configs.items()},
        "aliases": {"path": ALIASES_FILE, "entities": len(aliases)},
        "ripple": ripple.record,
        **(
            {"subject_aliases": {"path": SUBJECT_ALIASES_FILE, "entities": len(named)}}
            if named is not None
            else {}
        ),
        "files": {
            path: {"size": len(text.encode("utf-8")), "sha256": sha256_text(text)}
            for path, text in sorted(files.items())
        },
    }
    files[VERSION_FILE] = json.dumps(info, indent=2, ensure_ascii=False) + "\n"
    return files


def out_problem(out: Path, overwrite: bool) -> str | None:
    """Why the dataset folder cannot be written to ``out`` (None when it can): a file, a folder that is no
    dataset folder, or a dataset folder without ``overwrite``."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file; choose a folder"
    if out.exists() and any(out.iterdir()):
        if not (out / VERSION_FILE).is_file():
            return f"{out} exists and is not a dataset folder; choose another --out"
        if not overwrite:
            return f"{out} already holds a dataset version; pass --overwrite to replace it"
    return None


def write_folder(out: Path, files: Mapping[str, str], overwrite: bool) -> None:
    problem = out_problem(out, overwrite)
    if problem is not None:
        raise KnowgicError(problem)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a dataset folder is an ordinary one
    try:
        for rel, text in files.items():
            atomic_write_text(tmp / rel, text)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
