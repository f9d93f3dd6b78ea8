"""Stage 5, review: a person (review file or page) or an LLM judge accepts, rejects or edits each new
triplet and each proposed relation template, and a person can add a fact the model's chain of thought
missed (``kind: added``; validated on the model like any other); every decision records who made it and
when.

    candidates + proposed templates --merge--> BUILD/review.jsonl (pending rows added, decisions kept)
        person: knowgic review BUILD (page) | the file itself | a CSV round trip (export/import)
        judge:  --judge MODEL: the spec's few-shot prompt, output constrained to {"verdict": ...}
    review.jsonl --accepted()--> the facts and templates the graph may use

The review file is the one place decisions live: a rerun of the build merges new candidates into it and
never drops or overwrites a decision (rows whose candidate disappeared stay, marked ``active: false``).
A judge never overrides a person.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from knowgic.dataset.derive import fact_id
from knowgic.dataset.io import atomic_write_text, jsonl_text, read_jsonl, read_text
from knowgic.errors import KnowgicError

REVIEW_FILE = "review.jsonl"
DECISIONS = ("pending", "accept", "reject", "edit")
EDITABLE = ("subject", "answer", "prompt", "question")
CSV_COLUMNS = ("id", "kind", "subject", "relation", "prompt", "question", "answer", "p", "decision", "by")


def now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def template_id(relation: str) -> str:
    return f"template:{relation}"


def read_review(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = read_jsonl(path)
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or "id" not in row or row.get("decision") not in DECISIONS:
            raise KnowgicError(
                f"{path}: line {i}: a review row needs an id and a decision among {', '.join(DECISIONS)}"
            )
    return rows


def write_review(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    atomic_write_text(path, jsonl_text(rows))


def merge_review(
    existing: Sequence[dict[str, Any]],
    candidates: Sequence[dict[str, Any]],
    templates: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The review rows for these candidates and proposed templates, decisions already made kept."""
    by_id = {r["id"]: dict(r) for r in existing}
    active: list[str] = []
    for t in templates:
        rid = template_id(t["relation"])
        active.append(rid)
        row = by_id.get(rid, {"decision": "pending", "by": None, "at": None})
        row.update({"id": rid, "kind": "template", "relation": t["relation"]})
        row.setdefault("prompt", t["prompt"])
        row.setdefault("question", t["question"])
        by_id[rid] = row
    for c in candidates:
        rid = c["fact_id"]
        active.append(rid)
        row = by_id.get(rid, {"decision": "pending", "by": None, "at": None})
        row.update(
            {
                "id": rid,
                "kind": "fact",
                "relation": c["relation"],
                "subject": c["subject"],
                "prompt": c["prompt"],
                "question": c["question"],
                "answer": c["answer"],
                "p": c["validation"]["p"],
                "sentence": c["sources"][0].get("sentence", ""),
            }
        )
        by_id[rid] = row
    keep = set(active) | {i for i, r in by_id.items() if r.get("kind") == "added"}
    active += [i for i, r in by_id.items() if r.get("kind") == "added" and i not in active]
    rows = [by_id[i] for i in dict.fromkeys(active)]
    rows += [{**r, "active": False} for i, r in by_id.items() if i not in keep]
    for r in rows[: len(keep)]:
        r["active"] = True
    return rows


def decide(
    rows: list[dict[str, Any]], rid: str, decision: str, by: str, edited: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Record one decision in ``rows`` (in place); returns the row."""
    if decision not in DECISIONS[1:]:
        raise KnowgicError(f"decision must be one of {', '.join(DECISIONS[1:])}, got {decision!r}")
    row = next((r for r in rows if r["id"] == rid), None)
    if row is None:
        raise KnowgicError(f"no review row {rid!r}")
    unknown = set(edited or {}) - set(EDITABLE)
    if unknown:
        raise KnowgicError(
            f"review row {rid}: only {', '.join(EDITABLE)} can be edited, not {sorted(unknown)}"
        )
    if decision == "edit":
        if not edited:
            raise KnowgicError(f"review row {rid}: an edit needs the edited fields")
        for key, value in edited.items():
            if key in ("prompt", "question") and str(value).count("{}") != 1:
                raise KnowgicError(f"review row {rid}: {key} must hold one {{}}, got {value!r}")
        row["edited"] = dict(edited)
    row.update({"decision": decision, "by": by, "at": now()})
    return row


def add_fact(
    rows: list[dict[str, Any]], subject: str, prompt: str, answer: str, question: str, by: str
) -> dict[str, Any]:
    """A fact a reviewer adds (in place; returns its row): ``prompt`` and ``question`` hold one ``{}`` for
    the subject. It is accepted by whoever added it and validated on the model like any other fact."""
    subject, answer = " ".join(subject.split()), " ".join(answer.split())
    if not subject or not answer or subject.casefold() == answer.casefold():
        raise KnowgicError("an added fact needs a subject and an answer that differ")
    for key, value in (("prompt", prompt), ("question", question)):
        if value.count("{}") != 1:
            raise KnowgicError(f"an added fact's {key} must hold one {{}} for the subject, got {value!r}")
    rid = f"added:{fact_id(subject, prompt, answer)}"
    if any(r["id"] == rid for r in rows):
        raise KnowgicError(f"the fact {subject} | {prompt} | {answer} was already added ({rid})")
    row = {
        "id": rid,
        "kind": "added",
        "relation": " ".join(prompt.replace("{}", " ").split()),
        "subject": subject,
        "prompt": prompt,
        "question": question.replace("{}", subject, 1),
        "answer": answer,
        "decision": "accept",
        "by": by,
        "at": now(),
        "active": True,
    }
    rows.append(row)
    return row


def added(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The facts reviewers added and did not reject since, as candidate facts (to be validated)."""
    out = []
    for r in rows:
        if r.get("kind") != "added" or r["decision"] not in ("accept", "edit"):
            continue
        final = {k: r[k] for k in EDITABLE}
        final.update(r.get("edited", {}))
        if final["question"].count("{}") == 1:
            final["question"] = final["question"].replace("{}", final["subject"], 1)
        out.append(
            {
                **final,
                "fact_id": fact_id(final["subject"], final["prompt"], final["answer"]),
                "relation": r["relation"],
                "aliases": [],
                "graphs": [],
                "origin": "added",
                "sources": [],
                "review": {"decision": "added", "by": r["by"], "at": r["at"], "review_id": r["id"]},
            }
        )
    return out


def pending(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("active", True) and r["decision"] == "pending"]


def accepted(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(fact id -> final fact fields, relation -> final template) of the accepted active rows; a fact
    whose template was rejected is not accepted."""
    templates: dict[str, dict[str, Any]] = {}
    rejected_templates: set[str] = set()
    for r in rows:
        if r.get("kind") == "template" and r.get("active", True):
            final = {"prompt": r["prompt"], "question": r["question"], **r.get("edited", {})}
            if r["decision"] in ("accept", "edit"):
                templates[r["relation"]] = final
            elif r["decision"] == "reject":
                rejected_templates.add(r["relation"])
    facts: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("kind") != "fact" or not r.get("active", True) or r["decision"] not in ("accept", "edit"):
            continue
        if r["relation"] in rejected_templates:
            continue
        final = {k: r[k] for k in EDITABLE}
        if r["relation"] in templates:  # an edited template applies to its facts
            final["prompt"] = templates[r["relation"]]["prompt"]
            final["question"] = templates[r["relation"]]["question"].replace("{}", final["subject"], 1)
        final.update(r.get("edited", {}))
        facts[r["id"]] = {**final, "decision": r["decision"], "by": r["by"], "at": r["at"]}
    return facts, templates


def export_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        if r.get("active", True):
            writer.writerow({k: r.get(k, "") for k in CSV_COLUMNS})
    atomic_write_text(path, buf.getvalue())


def import_csv(rows: list[dict[str, Any]], path: Path, by: str) -> int:
    """Apply the decisions of a CSV export (its ``decision`` column; edited cells become an edit);
    returns how many rows changed."""
    table = list(csv.DictReader(io.StringIO(read_text(path))))
    missing = [c for c in ("id", "decision") if table and c not in table[0]]
    if missing:
        raise KnowgicError(f"{path}: missing column(s) {', '.join(missing)}")
    by_id = {r["id"]: r for r in rows}
    changed = 0
    for i, line in enumerate(table, start=2):
        if not (line.get("id") or "").strip() and (line.get("kind") or "added") == "added":
            try:  # a new line without an id: a fact the reviewer adds
                add_fact(rows, line.get("subject") or "", line.get("prompt") or "", line.get("answer") or "",
                         line.get("question") or "", line.get("by") or by)  # fmt: skip
            except KnowgicError as exc:
                raise KnowgicError(f"{path}: line {i}: {exc}") from None
            changed += 1
            continue
        row = by_id.get(line["id"])
        if row is None:
            raise KnowgicError(f"{path}: line {i}: no review row {line['id']!r}")
        decision = (line.get("decision") or "pending").strip()
        if decision == "pending" or (decision == row["decision"] and row.get("by")):
            continue
        edited = {k: line[k] for k in EDITABLE if k in line and line[k] and line[k] != row.get(k)}
        if edited and decision == "accept":
            decision = "edit"
        try:
            decide(rows, line["id"], decision, line.get("by") or by, edited or None)
        except KnowgicError as exc:
            raise KnowgicError(f"{path}: line {i}: {exc}") from None
        changed += 1
    return changed


def judge_prompt(spec: Any, row: Mapping[str, Any]) -> str:
    relation = " ".join(row["prompt"].replace("{}", " ").split())
    return spec.judge["prompt"].format(subject=row["subject"], relation=relation, answer=row["answer"])


def run_judge(
    rows: list[dict[str, Any]],
    generator: Any,
    spec: Any,
    journal: Any,
    progress: bool,
    controls: Sequence[Mapping[str, Any]] | None = None,
) -> int:
    """Decide every pending active fact with the judge (journaled), once it passed its control check
    (:mod:`knowgic.builder.judge`, ``controls`` mixed in); templates follow their facts."""
    from knowgic.builder.judge import judge_with_controls
    from knowgic.builder.spec import JUDGE_SCHEMA

    todo = [r for r in pending(rows) if r["kind"] == "fact" and r["id"] not in journal.done]
    tokens = int(spec.defaults["judge_max_new_tokens"])
    by = f"judge:{generator.label}"
    checked = judge_with_controls(
        todo,
        controls,
        lambda r: judge_prompt(spec, r),
        lambda prompts, record: generator.generate(prompts, tokens, JUDGE_SCHEMA, on_batch=record),
        journal,
        spec,
        generator.label,
    )
    n = 0
    for row in pending(rows):
        if row["kind"] == "fact" and row["id"] in journal.done:
            decide(rows, row["id"], journal.done[row["id"]]["verdict"], by)
            row["judge_output"] = journal.done[row["id"]]["output"]
            row["judge_check"] = checked
            n += 1
    used = {
        r["relation"] for r in rows if r["kind"] == "fact" and r["decision"] == "accept" and r.get("active")
    }
    for row in pending(rows):
        if row["kind"] == "template":
            decide(rows, row["id"], "accept" if row["relation"] in used else "reject", by)
    return n


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    active = [r for r in rows if r.get("active", True)]
    out: dict[str, Any] = {}
    for kind in ("fact", "template", "added"):
        mine = [r for r in active if r.get("kind") == kind]
        out[kind] = {d: sum(r["decision"] == d for r in mine) for d in DECISIONS}
        out[kind]["by"] = sorted({str(r["by"]).split("@")[0] for r in mine if r.get("by")})
    checks = {json.dumps(r["judge_check"], sort_keys=True) for r in active if r.get("judge_check")}
    out["judge_checks"] = [json.loads(c) for c in sorted(checks)]
    return out


def dumps(rows: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(rows), ensure_ascii=False)
