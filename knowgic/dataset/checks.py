"""Semantic checks of schema-valid rows and alias maps: findings are warnings with counts and examples.

These find, on their own, every known problem of the upstream rows (see the dataset card of 1.1.0 for
what was corrected): chain ends that differ from ``target_true`` only in case, empty broader contexts,
answers inside their own question, questions that do not name their subject, alias gaps and risky
aliases, broader-context entries repeated with reworded prompts. A finding never stops validation.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from knowgic.clip import clip
from knowgic.dataset.text import alias_risk, is_name_variant, mentions, words

MAX_EXAMPLES = 5

Row = Mapping[str, Any]


@dataclass
class Finding:
    """One kind of semantic problem: ``count`` occurrences, a few ``examples``, and numbers in ``details``.

    ``lines``, when given, are complete sub-lines (never cut short) that text reports show under the
    message instead of the examples.
    """

    code: str
    message: str
    count: int
    examples: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _request(row: Row) -> Mapping[str, Any]:
    return row["requested_rewrite"][0]


def _steps(block: Mapping[str, Sequence[str]]) -> Iterable[tuple[int, str, str, str, str]]:
    for i, (q, a, p, s) in enumerate(
        zip(block["questions"], block["answers"], block["prompts"], block["subjects"], strict=True)
    ):
        yield i, q, a, p, s


def _fmt_ids(ids: Sequence[Any], limit: int = 12) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > limit else "")


# --- per-row properties (also written into the 1.1.0 rows as ``flags``) ---------------------------


def answer_in_question_steps(block: Mapping[str, Sequence[str]]) -> list[int]:
    """Indices of the steps whose question names their own answer (case-insensitive, whole word)."""
    return [i for i, q, a, _p, _s in _steps(block) if mentions(q, a)]


def restates_edit(row: Row) -> bool:
    """A one-step chain that asks the edited fact itself: (request subject) -> target_true."""
    chain, req = row["chain"], _request(row)
    return (
        len(chain["answers"]) == 1
        and chain["subjects"][0] == req["subject"]
        and chain["answers"][0] == req["target_true"]["str"]
    )


def row_flags(row: Row) -> dict[str, Any]:
    """The ``flags`` object of a chains row (see ``spec/schemas/case.schema.json``)."""
    return {
        "chain_answer_in_question": answer_in_question_steps(row["chain"]),
        "broader_answer_in_question": answer_in_question_steps(row["broader_context"]),
        "empty_broader_context": len(row["broader_context"]["answers"]) == 0,
        "chain_restates_edit": restates_edit(row),
    }


def duplicate_broader_entries(block: Mapping[str, Sequence[str]]) -> list[int]:
    """Indices of broader-context entries repeating an earlier (subject, question, answer) of the block."""
    seen: set[tuple[str, str, str]] = set()
    dups: list[int] = []
    for i, q, a, _p, s in _steps(block):
        key = (s, q, a)
        if key in seen:
            dups.append(i)
        seen.add(key)
    return dups


# --- checks of chains rows ---------------------------------------------------------------------------


def _check_continuity(rows: Sequence[Row]) -> list[Finding]:
    out: list[Finding] = []
    breaks = [
        (row["case_id"], i)
        for row in rows
        for i in range(len(row["chain"]["answers"]) - 1)
        if row["chain"]["answers"][i] != row["chain"]["subjects"][i + 1]
    ]
    if breaks:
        out.append(
            Finding(
                "chain_continuity",
                f"{len(breaks)} chain steps do not continue the chain (answers[i] != subjects[i+1])",
                len(breaks),
                [f"case_id {c} step {i}" for c, i in breaks[:MAX_EXAMPLES]],
            )
        )
    starts = [row["case_id"] for row in rows if row["chain"]["subjects"][0] != _request(row)["subject"]]
    if starts:
        out.append(
            Finding(
                "chain_start",
                f"{len(starts)} chains do not start at the edited subject",
                len(starts),
                [f"case_id {c}" for c in starts[:MAX_EXAMPLES]],
            )
        )
    return out


def _check_chain_end(rows: Sequence[Row]) -> list[Finding]:
    out: list[Finding] = []
    case_only: list[tuple[int, str, str]] = []
    elsewhere: list[tuple[int, str, str]] = []
    for row in rows:
        end, true = row["chain"]["answers"][-1], _request(row)["target_true"]["str"]
        if end == true:
            continue
        (case_only if end.casefold() == true.casefold() else elsewhere).append((row["case_id"], end, true))
    if case_only:
        pairs = Counter((end, true) for _c, end, true in case_only)
        spell = ", ".join(f"{e!r} vs {t!r}" for (e, t) in pairs)
        out.append(
            Finding(
                "chain_end_case",
                f"{len(case_only)} rows end their chain on target_true spelled with other capitals ({spell}); "
                f"case_id {_fmt_ids([c for c, _e, _t in case_only])}",
                len(case_only),
                [f"case_id {c}: {e!r} vs target_true {t!r}" for c, e, t in case_only[:MAX_EXAMPLES]],
                {"case_ids": [c for c, _e, _t in case_only]},
            )
        )
    if elsewhere:
        out.append(
            Finding(
                "chain_end_target",
                f"{len(elsewhere)} chains do not end at target_true (not even ignoring case)",
                len(elsewhere),
                [f"case_id {c}: ends {e!r}, target_true {t!r}" for c, e, t in elsewhere[:MAX_EXAMPLES]],
                {"case_ids": [c for c, _e, _t in elsewhere]},
            )
        )
    return out


def _check_answer_in_question(rows: Sequence[Row]) -> list[Finding]:
    chain_hits: list[tuple[int, int, str, str]] = []
    final = 0
    broader_hits: list[tuple[int, int, str, str]] = []
    flagged_rows = 0
    for row in rows:
        chain = row["chain"]
        steps = answer_in_question_steps(chain)
        for i in steps:
            chain_hits.append((row["case_id"], i, chain["questions"][i], chain["answers"][i]))
            final += i == len(chain["answers"]) - 1
        bsteps = answer_in_question_steps(row["broader_context"])
        for i in bsteps:
            b = row["broader_context"]
            broader_hits.append((row["case_id"], i, b["questions"][i], b["answers"][i]))
        flags = row.get("flags")
        if (steps or bsteps) and isinstance(flags, Mapping):
            flagged_rows += (
                flags.get("chain_answer_in_question") == steps
                and flags.get("broader_answer_in_question") == bsteps
            )
    if not chain_hits and not broader_hits:
        return []
    rows_hit = len({c for c, *_ in chain_hits} | {c for c, *_ in broader_hits})
    distinct = Counter((q, a) for _c, _i, q, a in chain_hits + broader_hits)
    examples = [f"{q!r} -> {a!r} ({n}x)" for (q, a), n in distinct.most_common(MAX_EXAMPLES)]
    note = f"; {flagged_rows} of the {rows_hit} rows flag them in `flags`" if flagged_rows else ""
    return [
        Finding(
            "answer_in_question",
            f"{len(chain_hits)} chain steps ({final} of them final steps) and {len(broader_hits)} "
            f"broader-context entries contain their own answer in the question "
            f"({len(distinct)} distinct questions){note}",
            len(chain_hits) + len(broader_hits),
            examples,
            {
                "chain_steps": len(chain_hits),
                "chain_final_steps": final,
                "broader_entries": len(broader_hits),
                "distinct_questions": len(distinct),
                "rows": rows_hit,
                "rows_flagged": flagged_rows,
            },
        )
    ]


def _check_subject_in_question(rows: Sequence[Row]) -> list[Finding]:
    occurrences: Counter[tuple[str, str]] = Counter()
    per_block: Counter[str] = Counter()
    for row in rows:
        for name in ("chain", "broader_context"):
            for _i, q, _a, _p, s in _steps(row[name]):
                if not mentions(q, s):
                    occurrences[(q, s)] += 1
                    per_block[name] += 1
    if not occurrences:
        return []
    return [
        Finding(
            "subject_not_in_question",
            f"{len(occurrences)} distinct questions do not name their subject as spelled in `subjects` "
            f"({per_block['chain']} chain steps, {per_block['broader_context']} broader-context entries)",
            len(occurrences),
            [f"{q!r} (subject {s!r}, {n}x)" for (q, s), n in occurrences.most_common(MAX_EXAMPLES)],
            {
                "distinct_questions": len(occurrences),
                "chain_steps": per_block["chain"],
                "broader_entries": per_block["broader_context"],
            },
        )
    ]


def _check_question_form(rows: Sequence[Row]) -> list[Finding]:
    bad: Counter[str] = Counter()
    for row in rows:
        for name in ("chain", "broader_context"):
            for q in row[name]["questions"]:
                if q.count("?") != 1 or not q.endswith("?"):
                    bad[q] += 1
    if not bad:
        return []
    total = sum(bad.values())
    return [
        Finding(
            "malformed_question",
            f"{total} questions ({len(bad)} distinct) are not one question ending in '?' "
            "(e.g. two questions glued together)",
            total,
            [f"{q!r} ({n}x)" for q, n in bad.most_common(MAX_EXAMPLES)],
            {"distinct_questions": len(bad)},
        )
    ]


def _check_broader(rows: Sequence[Row]) -> list[Finding]:
    out: list[Finding] = []
    empty = [row for row in rows if len(row["broader_context"]["answers"]) == 0]
    if empty:
        restating = [row["case_id"] for row in empty if restates_edit(row)]
        flagged = sum(
            1
            for row in empty
            if isinstance(row.get("flags"), Mapping) and row["flags"].get("empty_broader_context") is True
        )
        note = f"; {flagged} flagged in `flags`" if flagged else ""
        out.append(
            Finding(
                "empty_broader_context",
                f"{len(empty)} rows have an empty broader_context; {len(restating)} of them are one-step "
                f"chains restating the edited fact itself{note}",
                len(empty),
                [f"case_id {row['case_id']}" for row in empty[:MAX_EXAMPLES]],
                {
                    "case_ids": [row["case_id"] for row in empty],
                    "restating_edit": len(restating),
                    "flagged": flagged,
                },
            )
        )
    dup_rows = [(row["case_id"], duplicate_broader_entries(row["broader_context"])) for row in rows]
    dup_rows = [(c, d) for c, d in dup_rows if d]
    if dup_rows:
        n = sum(len(d) for _c, d in dup_rows)
        by_id = {row["case_id"]: row for row in rows}
        examples = []
        for c, d in dup_rows[:MAX_EXAMPLES]:
            b = by_id[c]["broader_context"]
            i = d[0]
            first = next(
                j
                for j in range(i)
                if (b["subjects"][j], b["questions"][j], b["answers"][j])
                == (b["subjects"][i], b["questions"][i], b["answers"][i])
            )
            examples.append(
                f"case_id {c}: {b['prompts'][first]!r} and {b['prompts'][i]!r} both ask {b['questions'][i]!r}"
            )
        out.append(
            Finding(
                "duplicate_broader_entries",
                f"{n} broader-context entries in {len(dup_rows)} rows repeat an earlier entry's subject, "
                "question and answer (with a reworded prompt)",
                n,
                examples,
                {"rows": len(dup_rows), "entries": n},
            )
        )
    return out


def _check_facts(rows: Sequence[Row]) -> list[Finding]:
    answers: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in rows:
        for name in ("chain", "broader_context"):
            for _i, _q, a, p, s in _steps(row[name]):
                answers[(s, p)].add(a)
    many = {k: v for k, v in answers.items() if len(v) > 1}
    out: list[Finding] = []
    if many:
        facts = sum(len(v) for v in many.values())
        ranked = sorted(many.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        out.append(
            Finding(
                "one_to_many_facts",
                f"{len(many)} (subject, prompt) pairs have several gold answers ({facts} facts); scorers "
                "must not treat the other answers as wrong (n_gold in the facts config)",
                len(many),
                [f"{p.format(s)!r}: {len(v)} answers" for (s, p), v in ranked[:MAX_EXAMPLES]],
                {"pairs": len(many), "facts": facts},
            )
        )
    spellings: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        req = _request(row)
        for name in (req["subject"], req["target_true"]["str"], req["target_new"]["str"]):
            spellings[name.casefold()].add(name)
        for block in ("chain", "broader_context"):
            for name in (*row[block]["answers"], *row[block]["subjects"]):
                spellings[name.casefold()].add(name)
    mixed = sorted(sorted(v) for v in spellings.values() if len(v) > 1)
    if mixed:
        out.append(
            Finding(
                "inconsistent_case",
                f"{len(mixed)} entities are spelled with different capitals in different places",
                len(mixed),
                [" / ".join(repr(x) for x in v) for v in mixed[:MAX_EXAMPLES]],
            )
        )
    same = [
        row["case_id"]
        for row in rows
        if _request(row)["target_true"]["str"] == _request(row)["target_new"]["str"]
    ]
    if same:
        out.append(
            Finding(
                "target_unchanged",
                f"{len(same)} edit requests ask for target_new equal to target_true",
                len(same),
                [f"case_id {c}" for c in same[:MAX_EXAMPLES]],
            )
        )
    return out


def _check_flags(rows: Sequence[Row]) -> list[Finding]:
    wrong = [row["case_id"] for row in rows if "flags" in row and row["flags"] != row_flags(row)]
    if not wrong:
        return []
    return [
        Finding(
            "flags_mismatch",
            f"{len(wrong)} rows carry `flags` that differ from what their content implies",
            len(wrong),
            [f"case_id {c}" for c in wrong[:MAX_EXAMPLES]],
        )
    ]


def check_chains(rows: Sequence[Row]) -> list[Finding]:
    """Every semantic check of (schema-valid) chains rows."""
    findings: list[Finding] = []
    for check in (
        _check_continuity,
        _check_chain_end,
        _check_answer_in_question,
        _check_subject_in_question,
        _check_question_form,
        _check_broader,
        _check_facts,
        _check_flags,
    ):
        findings.extend(check(rows))
    return findings


# --- checks of the alias map ---------------------------------------------------------------------


def check_aliases(aliases: Mapping[str, Sequence[str]], rows: Sequence[Row] | None = None) -> list[Finding]:
    """Gaps (answers and targets without an entry), risky, repeated, self, shared and misplaced aliases."""
    out: list[Finding] = []
    if rows:
        groups = {
            "target_true": {_request(r)["target_true"]["str"] for r in rows},
            "target_new": {_request(r)["target_new"]["str"] for r in rows},
            "answers": {a for r in rows for b in ("chain", "broader_context") for a in r[b]["answers"]},
        }
        labels = {
            "target_true": "target_true values",
            "target_new": "target_new values",
            "answers": "chain and broader-context answers",
        }
        missing = {k: sorted(v - set(aliases)) for k, v in groups.items()}
        every = sorted(set().union(*missing.values()))
        if every:
            parts = [f"{len(missing[k])} of {len(groups[k])} distinct {labels[k]}" for k in groups]
            out.append(
                Finding(
                    "alias_missing",
                    f"no alias-map entry (exact spelling) for {', '.join(parts)}; "
                    f"{len(every)} distinct names in all",
                    len(every),
                    [repr(x) for x in every[:MAX_EXAMPLES]],
                    {k: v for k, v in missing.items()},
                    [
                        f"{labels[k]} without an entry ({len(v)}): "
                        + (", ".join(repr(clip(x)) for x in v) if v else "none")
                        for k, v in missing.items()
                    ],
                )
            )
    risky = [(e, a, why) for e, names in aliases.items() for a in names if (why := alias_risk(a))]
    if risky:
        out.append(
            Finding(
                "risky_alias",
                f"{len(risky)} aliases are short or common words and would match unrelated text by accident: "
                + ", ".join(f"{a!r} ({e})" for e, a, _w in risky[:12]),
                len(risky),
                [f"{a!r} of {e!r}: {why}" for e, a, why in risky[:MAX_EXAMPLES]],
                {"aliases": [[e, a] for e, a, _w in risky]},
            )
        )
    repeated = [(e, a) for e, names in aliases.items() for a, n in Counter(names).items() if n > 1]
    if repeated:
        out.append(
            Finding(
                "alias_repeated",
                f"{len(repeated)} aliases are listed twice for the same entity",
                len(repeated),
                [f"{a!r} under {e!r}" for e, a in repeated[:MAX_EXAMPLES]],
            )
        )
    self_listed = [e for e, names in aliases.items() if e in names]
    if self_listed:
        out.append(
            Finding(
                "alias_self",
                f"{len(self_listed)} entities list themselves among their aliases (harmless, redundant)",
                len(self_listed),
                [repr(e) for e in self_listed[:MAX_EXAMPLES]],
            )
        )
    owners: dict[str, set[str]] = defaultdict(set)
    for e, names in aliases.items():
        for a in names:
            if a != e:
                owners[a.casefold()].add(e)
    shared = sorted((a, sorted(es)) for a, es in owners.items() if len(es) > 1)
    if shared:
        out.append(
            Finding(
                "alias_shared",
                f"{len(shared)} aliases belong to several entities (ambiguous matches)",
                len(shared),
                [f"{a!r}: {', '.join(es)}" for a, es in shared[:MAX_EXAMPLES]],
            )
        )
    misplaced = []
    for e, names in aliases.items():
        own = set(words(e))
        for a in names:
            if own & set(words(a)):
                continue
            for other in aliases:
                if other != e and is_name_variant(a, other):
                    misplaced.append((e, a, other))
    if misplaced:
        out.append(
            Finding(
                "alias_other_entity",
                f"{len(misplaced)} aliases share no word with their entity but look like another entity's name",
                len(misplaced),
                [f"{a!r} under {e!r} looks like {o!r}" for e, a, o in misplaced[:MAX_EXAMPLES]],
            )
        )
    return out
