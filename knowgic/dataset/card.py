"""The dataset card (``README.md`` with YAML metadata) and ``CHANGELOG.md`` of a version folder.

The card's ``dataset_info`` features and its field tables are generated from the JSON Schemas; the
numbers in it come from the data, so nothing in it is written by hand twice.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from knowgic.dataset.checks import Finding
from knowgic.dataset.schemas import ROW_SCHEMAS, features_from_schema, field_docs, yaml_features
from knowgic.dataset.versions import version_sort_key, version_tag

PRETTY_NAME = "KnowGIC"
SOURCE_REPO = "manitbaser/KnowGIC"
SOURCE_COMMIT = "bd157255f0d48b032a92afbb4e72a23db8a3daab"
PAPER_URL = "https://arxiv.org/abs/2506.01386"

CITATION = """@article{baser2026thinkeval,
  title   = {ThinkEval: Practical Evaluation of Knowledge Leakage in {LLM} Editing using Thought-based
             Knowledge Graphs},
  author  = {Baser, Manit and Divakaran, Dinil Mon and Gurusamy, Mohan},
  journal = {Transactions on Machine Learning Research},
  year    = {2026},
  url     = {https://openreview.net/forum?id=IR2GAw90BB},
  note    = {arXiv:2506.01386}
}
"""

CONFIG_BLURBS = {
    "chains": "one row per implication chain, with its edit request and broader context (the upstream shape)",
    "edits": "one row per distinct edit request, with all its chains and the union of their broader contexts",
    "facts": "one row per distinct atomic fact (subject, prompt, answer), with its questions and the answer's aliases",
    "ripple": "one row per test query of an edit under one of RippleEdits' six criteria (LG, CI, CII, SA, PV, RS), "
    "with its condition facts, target and aliases; built with `spec/relations.yaml`, outside the content hash",
}


@dataclass(frozen=True)
class ChangelogEntry:
    version: str
    summary: str
    lines: tuple[str, ...]


def size_category(n: int) -> str:
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < bound:
            return label
    return "100K<n<1M"


def metadata(configs: Mapping[str, str], rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The card's YAML header: configs with data files, license, features from the schemas."""
    from datasets import Dataset

    config_list = []
    infos = []
    for config, path in configs.items():
        entry: dict[str, Any] = {"config_name": config}
        if config == "chains":
            entry["default"] = True
        entry["data_files"] = [{"split": "test", "path": path}]
        config_list.append(entry)
        present = set().union(*(set(r) for r in rows[config])) if rows[config] else None
        features = features_from_schema(ROW_SCHEMAS[config], present=present)
        info: dict[str, Any] = {
            "config_name": config,
            "features": yaml_features(ROW_SCHEMAS[config], present),
        }
        # num_bytes as the Hub reports it: the size of the split's Arrow table.
        num_bytes = Dataset.from_list(list(rows[config]), features=features).data.nbytes
        info["splits"] = [{"name": "test", "num_bytes": num_bytes, "num_examples": len(rows[config])}]
        infos.append(info)
    return {
        "pretty_name": PRETTY_NAME,
        "license": "mit",
        "language": ["en"],
        "task_categories": ["question-answering", "text-generation"],
        "size_categories": [size_category(len(rows["chains"]))],
        "tags": ["knowledge-editing", "model-editing", "multi-hop", "knowledge-graph", "benchmark"],
        "configs": config_list,
        "dataset_info": infos,
    }


def _table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in body]
    return "\n".join(lines)


def render_card(
    version: str,
    summary: str,
    sha256: str,
    configs: Mapping[str, str],
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    aliases: Mapping[str, Sequence[str]],
    findings: Sequence[Finding],
    latest_changes: ChangelogEntry,
    source: str | None = None,
) -> str:
    """The card; ``source`` says where the rows come from (default: the upstream repository's rows, as
    corrected)."""
    meta = yaml.safe_dump(metadata(configs, rows), sort_keys=False, allow_unicode=True, width=110)
    chains = rows["chains"]
    lengths = Counter(len(r["chain"]["answers"]) for r in chains)
    n_edits = len(rows["edits"])
    n_broader = sum(len(r["broader_context"]["answers"]) for r in chains)
    has_flags = any("flags" in r for r in chains)

    parts: list[str] = [f"---\n{meta}---\n"]
    parts.append(f"# {PRETTY_NAME} {version}\n")
    parts.append(
        "KnowGIC (Knowledge Graph Implication Chains) measures *deep* knowledge editing: after an edit "
        'such as "Harry Potter studied at Ilvermorny" (instead of Hogwarts), can the old fact still be '
        "recovered through a chain of related facts the model knows (Harry Potter -> Ron Weasley -> "
        "Gryffindor -> Hogwarts), and are the surrounding facts (Gryffindor belongs to Hogwarts) preserved? "
        "Each row is an implication chain from the edited subject back to the original answer "
        "(`target_true`), scored by Indirect Fact Recovery (IFR, lower is better), with a broader context of "
        "related facts scored by Preservation (higher is better). It comes from the ThinkEval paper "
        f"([{PAPER_URL}]({PAPER_URL})).\n"
    )
    parts.append(f"{summary}\n")
    parts.append("## Loading\n")
    parts.append(
        "```python\n"
        "from datasets import load_dataset\n\n"
        f'chains = load_dataset("<this folder or ORG/NAME>", "chains", split="test")  # revision="{version_tag(version)}" on the hub\n'
        'edits = load_dataset("<this folder or ORG/NAME>", "edits", split="test")\n'
        "```\n\n"
        'With the `knowgic` package installed: `knowgic.load_dataset("chains", version="' + version + '")` '
        f"(offline) and `knowgic dataset path --version {version}` (this folder).\n"
    )
    parts.append("## Configs\n")
    parts.append(
        _table(
            ["config", "rows", "file", "what"],
            [[c, len(rows[c]), f"`{configs[c]}`", CONFIG_BLURBS[c]] for c in configs],
        )
        + "\n"
    )
    parts.append(
        f"\n{len(chains)} chains from {n_edits} distinct edit requests; chain lengths "
        + ", ".join(f"{n}: {lengths[n]}" for n in sorted(lengths))
        + f"; {n_broader} broader-context entries; {len(rows['facts'])} distinct facts; an alias map "
        f"(`aliases.json`) of {len(aliases)} entities. One split, `test`.\n"
    )
    parts.append(
        "\nA chain step `i` is asked either as the cloze `prompts[i].format(subjects[i])` "
        "(the `logprob` protocol) or as `questions[i]` (the `generate` and `greedy` protocols), with gold "
        "answer `answers[i]` or any of its aliases. In a chain, `answers[i] == subjects[i+1]`, the first "
        "subject is the edited subject, and the last answer is `target_true`. By design the last step of a "
        "chain often also appears in the broader context: an edge such as (Gryffindor, belongs to, Hogwarts) "
        "must be preserved, while a deep edit should cut the subject-tied first edge instead.\n"
    )
    parts.append("## Fields\n")
    for config, schema in ((c, ROW_SCHEMAS[c]) for c in configs):
        present = set().union(*(set(r) for r in rows[config])) if rows[config] else None
        docs = field_docs(schema, present=present)
        parts.append(f"### `{config}` (schema `spec/schemas/{schema}.schema.json`)\n")
        parts.append(
            _table(["field", "type", "description"], [[f"`{d.name}`", d.type, d.description] for d in docs])
        )
        parts.append("\n")
    parts.append(
        "`aliases.json` maps an entity name to its other names (`spec/schemas/aliases.schema.json`); "
        "scorers accept an answer or any alias.\n"
    )
    if has_flags:
        parts.append("## Flags\n")
        parts.append(
            "Some rows have properties that make a step easy or a row uninformative; they are kept, and "
            "flagged in `flags` so that analyses can filter them:\n"
        )
        flag_counts = {
            "chain_answer_in_question": sum(bool(r["flags"]["chain_answer_in_question"]) for r in chains),
            "broader_answer_in_question": sum(bool(r["flags"]["broader_answer_in_question"]) for r in chains),
            "empty_broader_context": sum(r["flags"]["empty_broader_context"] for r in chains),
            "chain_restates_edit": sum(r["flags"]["chain_restates_edit"] for r in chains),
        }
        flag_docs = {d.name.removeprefix("flags."): d.description for d in field_docs("case", {"flags"})}
        parts.append(
            _table(
                ["flag", "rows", "meaning"],
                [[f"`{k}`", v, flag_docs.get(k, "")] for k, v in flag_counts.items()],
            )
            + "\n"
        )
    parts.append("## Validation\n")
    parts.append(
        "`knowgic validate <this folder>` checks every row against the JSON Schemas and reports semantic "
        f"findings. On {version} it reports:\n\n"
    )
    if findings:
        parts.append(
            "\n".join(
                f"- `{f.code}` ({f.count}): {f.message}" + "".join(f"\n  - {line}" for line in f.lines)
                for f in findings
            )
            + "\n"
        )
    else:
        parts.append("- nothing.\n")
    parts.append(f"\n## What changed in {version}\n")
    parts.append("\n".join(f"- {line}" for line in latest_changes.lines) + "\n")
    parts.append("\nThe full history is in `CHANGELOG.md`.\n")
    parts.append("## Version and content hash\n")
    parts.append(
        f"Version `{version}`; sha256 of the canonical content `{sha256}`. The canonical content is the JSON "
        'object `{"aliases": <aliases.json>, "chains": [rows], "edits": [rows], "facts": [rows]}` (rows in '
        "file order) written with sorted keys, no whitespace and UTF-8 characters kept; `version.json` "
        "records it with the size and sha256 of every file.\n"
    )
    parts.append("## Source and license\n")
    parts.append(
        source
        or f"The rows come from the public repository `{SOURCE_REPO}` (commit `{SOURCE_COMMIT}`), MIT license, "
        "copyright 2025 manitbaser99; the notice is in `LICENSE`. The corrections and derived configs are "
        "released under the same license.\n"
    )
    parts.append("## Citation\n")
    parts.append(f"```bibtex\n{CITATION}```\n")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts))


def render_changelog(entries: Sequence[ChangelogEntry]) -> str:
    """Newest version first; one line per change, with its count."""
    out = ["# Changelog\n", "All changes of the KnowGIC dataset, newest first. Versions follow semver.\n"]
    for entry in sorted(entries, key=lambda e: version_sort_key(e.version), reverse=True):
        out.append(f"## {entry.version}\n")
        out.append(f"{entry.summary}\n")
        out.append("\n".join(f"- {line}" for line in entry.lines) + "\n")
    return "\n".join(out)
