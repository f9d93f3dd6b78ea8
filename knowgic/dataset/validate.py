"""``knowgic validate``: schema errors and semantic warnings for a file of rows or a dataset folder.

Input: a JSON file (an array of rows, one row, or an alias map), a JSON Lines file, a Parquet file, or a
Hugging Face dataset folder (``README.md`` card whose YAML ``configs`` name the data files). Rows are
checked against the config's JSON Schema (``chains`` -> ``case``, ``edits`` -> ``edit``, ``facts`` ->
``fact``); each error names the row (``case_id``, ``edit_id`` or ``fact_id`` when readable, else the row
index), the JSON pointer and what was expected. Schema-valid chains rows then get the semantic checks of
:mod:`knowgic.dataset.checks`, with the alias map found beside the rows (``aliases.json`` or the upstream
``attributes_with_aliases.json``) or given with ``--aliases``. A builder output's ``subject_aliases.json``
is checked against its schema and rebuilds the ``ripple`` config's Subject Aliasing queries. Errors make
the report fail (exit 1); warnings do not (exit 0).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowgic.clip import QUOTE_LIMIT, clip, clip_strings
from knowgic.dataset.checks import Finding, check_aliases, check_chains
from knowgic.dataset.derive import edit_id, edit_rows, fact_id, fact_rows, ripple_config
from knowgic.dataset.io import (
    ROW_SUFFIXES,
    UnreadableInput,
    alias_lists,
    canonical_json,
    file_sha256,
    is_alias_map,
    parse_json,
    path_inside,
    read_json,
    read_rows,
    read_text,
)
from knowgic.dataset.loading import dataset_label
from knowgic.dataset.schemas import ROW_SCHEMAS, validator, yaml_features
from knowgic.dataset.versions import SUBJECT_ALIASES_FILE
from knowgic.errors import EXIT_FAILED_CHECK, EXIT_OK, KnowgicError
from knowgic.ripple.relations import relation_table
from knowgic.schema_errors import explain, json_pointer, reportable, short
from knowgic.yamlfile import YamlError, parse_yaml

ALIAS_FILE_NAMES = ("aliases.json", "attributes_with_aliases.json")
MAX_ERRORS_TEXT = 25
MAX_ERRORS_JSON = 1000
LINE_LIMIT = 5 * QUOTE_LIMIT
"""Characters of one message of a report (an error with its place, a warning's message, a note)."""
LINES_LIMIT = 20 * QUOTE_LIMIT
"""Characters of one of a finding's complete sub-lines (lists of names, each name clipped to QUOTE_LIMIT)."""


@dataclass
class SchemaError:
    """One way a row (or a file) breaks the rules; ``pointer`` is a JSON pointer inside ``row``."""

    message: str
    file: str
    config: str | None = None
    row: str | None = None
    index: int | None = None
    pointer: str = ""

    def render(self) -> str:
        where = self.file
        if self.config:
            where += f" [{self.config}]"
        if self.row is not None:
            where += f" {self.row}"
        if self.pointer:
            where += f" at {self.pointer}"
        return f"{where}: {self.message}"


@dataclass
class ValidationReport:
    path: str
    kind: str = "rows"
    rows: dict[str, int] = field(default_factory=dict)
    aliases: str | None = None
    errors: list[SchemaError] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED_CHECK

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "ok": self.ok,
            "rows": dict(self.rows),
            "aliases": self.aliases,
            "n_errors": len(self.errors),
            # Every string a report quotes from its input is clipped (a 50 MB question stays a line).
            "errors": clip_strings([asdict(e) for e in self.errors[:MAX_ERRORS_JSON]], LINE_LIMIT),
            "n_warnings": len(self.warnings),
            "warnings": [_bounded_finding(w) for w in self.warnings],
            "notes": clip_strings(list(self.notes), LINE_LIMIT),
        }

    def render_text(self) -> str:
        counts = ", ".join(f"{n} {c} rows" for c, n in self.rows.items()) or "no rows"
        if self.kind == "results":
            lines = [f"Validated {self.path} (a results document, against results.schema.json)"]
        else:
            lines = [f"Validated {self.path} ({self.kind}: {counts}; alias map: {self.aliases or 'none'})"]
        lines += [f"note: {clip(n, LINE_LIMIT)}" for n in self.notes]
        if self.errors:
            lines.append(f"{len(self.errors)} errors:")
            lines += [f"  - {clip(e.render(), LINE_LIMIT)}" for e in self.errors[:MAX_ERRORS_TEXT]]
            if len(self.errors) > MAX_ERRORS_TEXT:
                lines.append(f"  ... and {len(self.errors) - MAX_ERRORS_TEXT} more (see --json)")
        if self.warnings:
            lines.append(f"{len(self.warnings)} warnings:")
            for w in self.warnings:
                lines.append(f"  - {w.code} ({w.count}): {clip(w.message, LINE_LIMIT)}")
                if w.lines:
                    lines += [f"      {clip(x, LINES_LIMIT)}" for x in w.lines]
                else:
                    lines += [f"      e.g. {clip(x)}" for x in w.examples[:3]]
        verdict = "FAILED" if self.errors else "OK"
        lines.append(f"{verdict}: {len(self.errors)} errors, {len(self.warnings)} warnings")
        return "\n".join(lines)


def _bounded_finding(finding: Finding) -> dict[str, Any]:
    """A finding as JSON with its quoted values clipped as the text report clips them."""
    data = clip_strings(finding.to_dict(), LINE_LIMIT)
    data["examples"] = clip_strings(finding.examples, QUOTE_LIMIT)
    data["lines"] = clip_strings(finding.lines, LINES_LIMIT)
    return data


# --- schema errors -------------------------------------------------------------------------------


def _row_label(config: str, row: Any, index: int) -> str:
    key = {"chains": "case_id", "edits": "edit_id", "facts": "fact_id", "ripple": "query_id"}.get(config, "")
    if isinstance(row, dict):
        value = row.get(key)
        usable = isinstance(value, int) and not isinstance(value, bool) if config == "chains" else bool(value)
        if usable and isinstance(value, int | str):
            text = str(value)
            return f"{key} {text if len(text) <= 40 and text.isprintable() else short(value, 40)}"
    return f"row {index}"


def schema_errors(config: str, rows: Sequence[Any], file: str) -> tuple[list[SchemaError], list[int]]:
    """Every schema error of every row; returns them and the indices of the valid rows."""
    v = validator(ROW_SCHEMAS[config])
    errors: list[SchemaError] = []
    valid: list[int] = []
    for index, row in enumerate(rows):
        row_errors = reportable(v.iter_errors(row))
        if not row_errors:
            valid.append(index)
        for e in row_errors:
            errors.append(
                SchemaError(
                    explain(e),
                    file,
                    config,
                    _row_label(config, row, index),
                    index,
                    json_pointer(e.absolute_path),
                )
            )
    return errors, valid


def _duplicate_ids(config: str, rows: Sequence[Any], file: str) -> list[SchemaError]:
    key = {"chains": "case_id", "edits": "edit_id", "facts": "fact_id", "ripple": "query_id"}[config]
    seen: Counter[Any] = Counter(
        row[key] for row in rows if isinstance(row, dict) and isinstance(row.get(key), int | str)
    )
    return [
        SchemaError(
            f"{key} {value!r} is used by {n} rows; it must be unique",
            file,
            config,
            f"{key} {value}",
            None,
            f"/{key}",
        )
        for value, n in seen.items()
        if n > 1
    ]


def alias_errors(raw: Any, file: str, schema: str = "aliases") -> list[SchemaError]:
    """The schema errors of an alias map (``schema``: ``aliases``, or ``subject_aliases`` for a builder
    output's ``subject_aliases.json``)."""
    v = validator(schema)
    return [
        SchemaError(
            explain(e),
            file,
            schema,
            f"entity {e.absolute_path[0]!r}" if e.absolute_path else None,
            None,
            json_pointer(e.absolute_path),
        )
        for e in reportable(v.iter_errors(raw))
    ]


# --- semantic checks -----------------------------------------------------------------------------


def _id_findings(config: str, rows: Sequence[Mapping[str, Any]]) -> list[Finding]:
    wrong: list[str] = []
    for row in rows:
        if config == "chains" and "edit_id" in row and row["edit_id"] != edit_id(row):
            wrong.append(f"case_id {row['case_id']}: edit_id {row['edit_id']!r}, expected {edit_id(row)!r}")
        elif config == "edits" and row["edit_id"] != edit_id(row):
            wrong.append(f"edit_id {row['edit_id']!r}, expected {edit_id(row)!r}")
        elif config == "facts" and row["fact_id"] != fact_id(row["subject"], row["prompt"], row["answer"]):
            wrong.append(f"fact_id {row['fact_id']!r}")
    if not wrong:
        return []
    return [
        Finding(
            "id_mismatch",
            f"{len(wrong)} {config} rows carry an id that is not the hash of their content",
            len(wrong),
            wrong[:5],
        )
    ]


def _derived_findings(
    chains: Sequence[Mapping[str, Any]],
    aliases: Mapping[str, Sequence[str]] | None,
    loaded: Mapping[str, Sequence[Mapping[str, Any]]],
    subject_aliases: Mapping[str, Sequence[str]] | None = None,
) -> list[Finding]:
    out: list[Finding] = []
    expected: dict[str, list[dict[str, Any]]] = {"edits": edit_rows(chains)}
    if aliases is not None:
        expected["facts"] = fact_rows(chains, aliases)
    if aliases is not None and "ripple" in loaded:
        try:
            # a template spec/relations.yaml lacks is rebuilt with the proposal the builder made for it
            # and Subject Aliasing with the build's subject aliases, where the folder has them
            expected["ripple"] = ripple_config(chains, aliases, relation_table(), subject_aliases).rows
        except KnowgicError as exc:
            out.append(Finding("ripple_unbuildable", f"the ripple config cannot be rebuilt: {exc}", 1))
    for config, rows in expected.items():
        if config not in loaded:
            continue
        have = {canonical_json(r) for r in loaded[config]}
        want = {canonical_json(r) for r in rows}
        if have != want:
            out.append(
                Finding(
                    "derived_mismatch",
                    f"the {config} config differs from the one derived from the chains rows: "
                    f"{len(have - want)} rows not derivable, {len(want - have)} derived rows missing",
                    len(have ^ want),
                )
            )
    return out


def semantic_findings(
    config: str, rows: Sequence[Mapping[str, Any]], aliases: Mapping[str, Sequence[str]] | None
) -> list[Finding]:
    findings = _id_findings(config, rows)
    if config == "chains":
        findings = check_chains(rows) + findings
        if aliases is not None:
            findings += check_aliases(aliases, rows)
    return findings


# --- inputs --------------------------------------------------------------------------------------


def detect_config(rows: Sequence[Any]) -> str:
    first = next((r for r in rows if isinstance(r, dict)), {})
    if "chains" in first or "case_ids" in first:
        return "edits"
    if "fact_id" in first or {"subject", "prompt", "answer"} <= set(first):
        return "facts"
    return "chains"


def _find_aliases(folder: Path) -> Path | None:
    return next((folder / n for n in ALIAS_FILE_NAMES if (folder / n).is_file()), None)


def _load_aliases(path: Path, report: ValidationReport) -> dict[str, list[str]] | None:
    report.aliases = str(path)
    try:
        raw = read_json(path)
    except UnreadableInput as exc:
        report.errors.append(SchemaError(str(exc).removeprefix(f"{path}: "), str(path), "aliases"))
        return None
    errs = alias_errors(raw, str(path))
    report.errors.extend(errs)
    if errs:
        return None
    return alias_lists(raw)


def load_subject_aliases(path: Path, report: ValidationReport) -> dict[str, list[str]] | None:
    """A builder output's ``subject_aliases.json`` (the one reader of the format), checked against
    ``subject_aliases.schema.json``; None, with the errors in ``report``, when unreadable or invalid."""
    try:
        raw = read_json(path)
    except UnreadableInput as exc:
        report.errors.append(SchemaError(str(exc).removeprefix(f"{path}: "), str(path), "subject_aliases"))
        return None
    errs = alias_errors(raw, str(path), "subject_aliases")
    report.errors.extend(errs)
    return None if errs else alias_lists(raw)


def _validate_rows(
    report: ValidationReport, config: str, rows: Sequence[Any], file: str
) -> list[Mapping[str, Any]]:
    report.rows[config] = len(rows)
    if not rows:
        report.errors.append(SchemaError("no rows", file, config))
        return []
    errors, valid = schema_errors(config, rows, file)
    report.errors.extend(errors)
    report.errors.extend(_duplicate_ids(config, rows, file))
    return [rows[i] for i in valid]


def validate_file(
    path: Path, aliases_path: Path | None = None, config: str | None = None
) -> ValidationReport:
    report = ValidationReport(path=str(path), kind="rows")
    if path.suffix.lower() not in ROW_SUFFIXES:
        raise KnowgicError(
            f"{path}: unsupported file type {path.suffix or '(none)'}; expected one of "
            f"{', '.join(ROW_SUFFIXES)} or a dataset folder"
        )
    try:
        if path.suffix.lower() == ".json":
            text = read_text(path)
            if not text.strip():
                raise UnreadableInput(f"{path}: the file is empty")
            data = parse_json(text, str(path))
            if config is None and is_results_document(data):
                return _validate_results(path, data)
            if config is None and path.name == SUBJECT_ALIASES_FILE:
                report.kind = "subject aliases"
                report.errors.extend(alias_errors(data, str(path), "subject_aliases"))
                return report
            if config is None and is_alias_map(data):
                report.kind = "aliases"
                errs = alias_errors(data, str(path))
                report.errors.extend(errs)
                report.aliases = str(path)
                if not errs:
                    report.warnings.extend(check_aliases(alias_lists(data)))
                return report
            rows = data if isinstance(data, list) else [data]
        else:
            rows = read_rows(path)
    except UnreadableInput as exc:
        report.errors.append(SchemaError(str(exc).removeprefix(f"{path}: "), str(path)))
        return report
    config = config or detect_config(rows)
    valid = _validate_rows(report, config, rows, str(path))
    aliases: dict[str, list[str]] | None = None
    alias_file = aliases_path or (_find_aliases(path.parent) if config == "chains" else None)
    if alias_file is not None:
        aliases = _load_aliases(alias_file, report)
    elif config == "chains":
        report.notes.append("no alias map given or found beside the file: alias checks skipped")
    if valid:
        report.warnings.extend(semantic_findings(config, valid, aliases))
    return report


def is_results_document(data: Any) -> bool:
    """A results document of ``knowgic evaluate`` (results.schema.json), not rows: its top-level keys say so."""
    return isinstance(data, dict) and {"schema_version", "config", "metrics", "dataset"} <= data.keys()


def _validate_results(path: Path, document: dict[str, Any]) -> ValidationReport:
    """Check a results document against spec/schemas/results.schema.json and its own content hash."""
    from knowgic.results import content_sha256, validation_errors

    report = ValidationReport(path=str(path), kind="results")
    for line in validation_errors(document):
        pointer, _, message = line.partition(": ")
        report.errors.append(SchemaError(message, str(path), config="results", pointer=pointer))
    if not report.errors and document.get("sha256") != content_sha256(document):
        report.errors.append(
            SchemaError(
                "the recorded sha256 does not match the content (edited after it was written?)",
                str(path),
                config="results",
                pointer="/sha256",
            )
        )
    if not report.errors:
        c = document["config"]
        report.notes.append(
            f"{c['editor']} on {c['model']}, {dataset_label(document['dataset'])}, {c['protocol']}, "
            f"{c['mode']}; schema and sha256 verified"
        )
    return report


_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def read_card(folder: Path) -> dict[str, Any]:
    """The YAML metadata of ``folder/README.md``; raises :class:`UnreadableInput` when absent or broken."""
    card = folder / "README.md"
    if not card.is_file():
        raise UnreadableInput(f"{folder}: no dataset card README.md (a dataset folder needs one)")
    match = _FRONT_MATTER.match(read_text(card))
    if match is None:
        raise UnreadableInput(f"{card}: no YAML metadata block (--- ... ---) at the top of the card")
    try:  # the metadata starts on the card's second line
        meta = parse_yaml(match.group(1), f"{card}: the YAML metadata", line_offset=1)
    except YamlError as exc:
        raise UnreadableInput(str(exc)) from None
    if not isinstance(meta, dict):
        raise UnreadableInput(f"{card}: the YAML metadata must be a mapping")
    return meta


def _data_files(folder: Path, config: str, pattern: str) -> list[Path]:
    """The files a ``data_files`` pattern names; refuses any that lies outside ``folder``."""

    def outside() -> UnreadableInput:
        return UnreadableInput(
            f"{folder / 'README.md'}: config {config!r} names data file {pattern!r}, which is outside the "
            "dataset folder; data files must be relative paths inside it"
        )

    if path_inside(folder, pattern) is None:
        raise outside()
    if not any(c in pattern for c in "*?["):
        return [folder / pattern]
    try:
        matches = sorted(folder.glob(pattern))
    except ValueError as exc:  # e.g. "**" inside a path component
        raise UnreadableInput(
            f"{folder / 'README.md'}: config {config!r} has a malformed data_files pattern {pattern!r} "
            f"({exc})"
        ) from None
    if any(path_inside(folder, p.relative_to(folder).as_posix()) is None for p in matches):
        raise outside()  # a match that is a symbolic link leading out of the folder
    return matches


def card_data_files(folder: Path, meta: Mapping[str, Any]) -> dict[str, list[Path]]:
    """Config -> its ``test`` data files, from the card's ``configs``."""
    card = folder / "README.md"
    configs = meta.get("configs")
    if not isinstance(configs, list) or not configs:
        raise UnreadableInput(f"{card}: the metadata has no `configs` list naming the data files")
    out: dict[str, list[Path]] = {}
    for entry in configs:
        if not isinstance(entry, dict) or not isinstance(entry.get("config_name"), str):
            raise UnreadableInput(f"{card}: every entry of `configs` needs a `config_name`")
        files = entry.get("data_files")
        specs: list[Any] = files if isinstance(files, list) else [files]
        paths: list[Path] = []
        for spec in specs:
            if isinstance(spec, dict):
                if spec.get("split", "test") != "test":
                    continue
                spec = spec.get("path")
            for pattern in spec if isinstance(spec, list) else [spec]:
                if not isinstance(pattern, str) or not pattern:
                    raise UnreadableInput(
                        f"{card}: config {entry['config_name']!r} has a malformed data_files entry"
                    )
                paths.extend(_data_files(folder, entry["config_name"], pattern))
        out[entry["config_name"]] = paths
    return out


def _check_version_record(folder: Path, report: ValidationReport) -> None:
    from knowgic.dataset.versions import VERSION_FILE, content_sha256

    record_path = folder / VERSION_FILE
    if not record_path.is_file():
        report.notes.append(f"no {VERSION_FILE}: content hash not checked")
        return
    try:
        record = read_json(record_path)
        computed = content_sha256(folder)
    except KnowgicError as exc:
        report.errors.append(SchemaError(f"cannot check the content hash: {exc}", str(record_path)))
        return
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(files, dict):
        report.errors.append(
            SchemaError("not a KnowGIC version file (no `sha256` and `files`)", str(record_path))
        )
        return
    if record.get("sha256") != computed:
        report.errors.append(
            SchemaError(
                f"content hash mismatch: recorded {record.get('sha256')}, computed {computed}",
                str(record_path),
            )
        )
    for rel, meta in sorted(files.items()):
        path = path_inside(folder, str(rel))
        if path is None:
            report.errors.append(
                SchemaError(f"{VERSION_FILE} lists {rel!r}, which is outside the folder", str(record_path))
            )
        elif not isinstance(meta, dict):
            report.errors.append(
                SchemaError(f"malformed entry for {rel} in {VERSION_FILE}", str(record_path))
            )
        elif not path.is_file():
            report.errors.append(
                SchemaError(f"file {rel} listed in {VERSION_FILE} is missing", str(record_path))
            )
        elif file_sha256(path) != meta.get("sha256"):
            report.errors.append(
                SchemaError(f"file {rel} differs from its recorded sha256", str(record_path))
            )


def _check_card_features(
    meta: Mapping[str, Any], loaded: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[Finding]:
    infos = meta.get("dataset_info")
    if not isinstance(infos, list):
        return []
    wrong: list[str] = []
    for info in infos:
        config = info.get("config_name") if isinstance(info, dict) else None
        if config not in ROW_SCHEMAS or not loaded.get(config):
            continue
        present = set().union(*(set(r) for r in loaded[config]))
        if info.get("features") != yaml_features(ROW_SCHEMAS[config], present):
            wrong.append(config)
    if not wrong:
        return []
    return [
        Finding(
            "card_features",
            f"the card's dataset_info features of {', '.join(wrong)} differ from those the JSON Schemas give",
            len(wrong),
        )
    ]


def validate_folder(folder: Path, aliases_path: Path | None = None) -> ValidationReport:
    report = ValidationReport(path=str(folder), kind="folder")
    try:
        meta = read_card(folder)
        files = card_data_files(folder, meta)
    except UnreadableInput as exc:
        report.errors.append(SchemaError(str(exc).removeprefix(f"{folder}: "), str(folder)))
        return report
    if "chains" not in files:
        report.errors.append(SchemaError("the card declares no `chains` config", str(folder / "README.md")))
    loaded: dict[str, list[Mapping[str, Any]]] = {}
    for config, paths in files.items():
        if config not in ROW_SCHEMAS:
            report.notes.append(f"config {config!r} is not a KnowGIC config: not validated")
            continue
        rows: list[Any] = []
        for path in paths:
            if not path.is_file():
                report.errors.append(
                    SchemaError(f"data file {path.name} named by the card is missing", str(path), config)
                )
                continue
            try:
                rows.extend(read_rows(path))
            except UnreadableInput as exc:
                report.errors.append(SchemaError(str(exc).removeprefix(f"{path}: "), str(path), config))
        loaded[config] = _validate_rows(report, config, rows, ", ".join(p.name for p in paths) or config)
    alias_file = aliases_path or _find_aliases(folder)
    aliases = _load_aliases(alias_file, report) if alias_file is not None else None
    if alias_file is None:
        report.notes.append("no alias map in the folder: alias checks skipped")
    subject_file = folder / SUBJECT_ALIASES_FILE
    subject_aliases = load_subject_aliases(subject_file, report) if subject_file.is_file() else None
    for config, rows in loaded.items():
        if rows:
            report.warnings.extend(semantic_findings(config, rows, aliases))
    if loaded.get("chains") and report.ok:
        report.warnings.extend(_derived_findings(loaded["chains"], aliases, loaded, subject_aliases))
    report.warnings.extend(_check_card_features(meta, loaded))
    _check_version_record(folder, report)
    return report


def validate_path(
    path: Path, aliases_path: Path | None = None, config: str | None = None
) -> ValidationReport:
    """Validate a rows file, an alias map, or a dataset folder."""
    if config is not None and config not in ROW_SCHEMAS:
        raise KnowgicError(f"unknown config {config!r}; known: {', '.join(ROW_SCHEMAS)}")
    if not path.exists():
        raise KnowgicError(f"{path} does not exist")
    if aliases_path is not None and not aliases_path.is_file():
        raise KnowgicError(f"alias map {aliases_path} does not exist")
    if path.is_dir():
        run_file = path / "results.json"
        if config is None and run_file.is_file() and not (path / "README.md").exists():
            return validate_file(run_file, aliases_path)  # a run folder, not a dataset folder
        return validate_folder(path, aliases_path)
    return validate_file(path, aliases_path, config)
