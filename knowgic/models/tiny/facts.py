"""The facts ``knowgic-tiny`` is trained on: every distinct atomic fact of every shipped version of the main
dataset track (the paper's edits; another track, such as the graph grown from what ``knowgic-tiny`` knows,
is made from the model and never trains it).

A fact is ``(subject, prompt, answer)``; it comes from a chain step, a broader-context entry, or an edit
request's ``target_true`` (the rewrite fact as it is *before* the edit). The edit requests themselves are
kept so that the corpus can give every ``target_new`` string a trained output embedding through facts about
made-up subjects, never through the edited subject.

Facts come from the dataset API (``knowgic.dataset.versions`` / ``knowgic.dataset.loading``). When that
API is not importable, :func:`upstream_fallback_facts` reads the vendored upstream rows (the content of
version 1.0.0) instead, and the record says so in ``source``.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowgic.errors import KnowgicError
from knowgic.records import AliasMap, Case, EditRequest, Fact

UPSTREAM_DIR = Path(__file__).resolve().parent.parent.parent / "dataset" / "upstream"

FactKey = tuple[str, str, str]


@dataclass(frozen=True)
class FactRecord:
    """One distinct fact with every question text any version asks it with."""

    subject: str
    prompt: str
    answer: str
    questions: tuple[str, ...] = ()

    @property
    def key(self) -> FactKey:
        return (self.subject, self.prompt, self.answer)

    @property
    def cloze(self) -> str:
        return self.prompt.format(self.subject)

    def as_fact(self) -> Fact:
        return Fact(self.subject, self.prompt, self.answer, self.questions[0] if self.questions else "")


@dataclass(frozen=True)
class TrainingFacts:
    """The union over dataset versions of facts, edit requests and aliases.

    ``version_facts`` maps each version to the keys of its own distinct facts (for per-version checks).
    ``dropped`` lists facts left out of training because another version spells the same answer to the
    same (subject, prompt) with different letter case (one of the two could never be the top-1 token);
    the spelling of the newest version wins.
    """

    facts: tuple[FactRecord, ...]
    requests: tuple[EditRequest, ...]
    aliases: Mapping[str, tuple[str, ...]]
    versions: tuple[str, ...]
    source: str
    version_facts: Mapping[str, tuple[FactKey, ...]] = field(default_factory=dict)
    dropped: tuple[FactKey, ...] = ()

    def fingerprint(self) -> str:
        """sha256 of everything the corpus is built from (order-independent)."""
        payload = {
            "facts": sorted([f.subject, f.prompt, f.answer, sorted(f.questions)] for f in self.facts),
            "requests": sorted([r.prompt, r.subject, r.target_true, r.target_new] for r in self.requests),
            "aliases": {k: list(v) for k, v in sorted(self.aliases.items())},
        }
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def gold_counts(self) -> dict[tuple[str, str], int]:
        """Number of distinct gold answers per (subject, prompt): the ``m`` of the logprob known rule."""
        return gold_counts(f.as_fact() for f in self.facts)

    def all_strings(self) -> list[str]:
        """Every benchmark string a tokenizer must represent: subjects, answers, targets, aliases, questions."""
        out: list[str] = []
        for f in self.facts:
            out += [f.subject, f.answer, f.cloze, *f.questions]
        for r in self.requests:
            out += [r.subject, r.rewrite_text, r.target_true, r.target_new]
        for name, aliases in self.aliases.items():
            out += [name, *aliases]
        return list(dict.fromkeys(out))


def gold_counts(facts: Iterable[Fact]) -> dict[tuple[str, str], int]:
    answers: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in facts:
        answers[(f.subject, f.prompt)].add(f.answer)
    return {k: len(v) for k, v in answers.items()}


def case_facts(case: Case) -> list[Fact]:
    """The atomic facts of one case: chain steps, broader context, and the edit's ``target_true`` fact."""
    r = case.request
    return [*case.chain.facts, *case.broader_context.facts, Fact(r.subject, r.prompt, r.target_true, "")]


def _semver_key(version: str) -> tuple[int, ...]:
    parts = version.lstrip("v").split(".")
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        return (0,)


def collect_facts(versions: Mapping[str, tuple[Sequence[Case], AliasMap]], source: str) -> TrainingFacts:
    """Merge the facts, requests and aliases of several dataset versions (oldest first)."""
    if not versions:
        raise KnowgicError("no dataset versions to train knowgic-tiny on")
    order = sorted(versions, key=_semver_key)
    questions: dict[FactKey, list[str]] = {}
    last_seen: dict[FactKey, int] = {}
    requests: dict[tuple[str, str, str, str], EditRequest] = {}
    aliases: dict[str, list[str]] = defaultdict(list)
    version_facts: dict[str, tuple[FactKey, ...]] = {}
    for vi, version in enumerate(order):
        cases, alias_map = versions[version]
        keys: dict[FactKey, None] = {}
        for case in cases:
            r = case.request
            requests.setdefault((r.prompt, r.subject, r.target_true, r.target_new), r)
            for f in case_facts(case):
                if not (f.subject and f.prompt and f.answer):
                    raise KnowgicError(
                        f"dataset {version}, case {case.case_id}: empty subject, prompt or answer in {f}"
                    )
                qs = questions.setdefault(f.key, [])
                if f.question and f.question not in qs:
                    qs.append(f.question)
                last_seen[f.key] = vi
                keys[f.key] = None
        version_facts[version] = tuple(keys)
        for name, names in alias_map.items():
            for a in names:
                if a and a != name and a not in aliases[name]:
                    aliases[name].append(a)
    dropped = _case_variants_to_drop(last_seen)
    facts = tuple(
        FactRecord(s, p, a, tuple(questions[(s, p, a)]))
        for (s, p, a) in questions
        if (s, p, a) not in dropped
    )
    return TrainingFacts(
        facts=facts,
        requests=tuple(requests.values()),
        aliases={k: tuple(v) for k, v in aliases.items()},
        versions=tuple(order),
        source=source,
        version_facts=version_facts,
        dropped=tuple(sorted(dropped)),
    )


def _case_variants_to_drop(last_seen: Mapping[FactKey, int]) -> set[FactKey]:
    """Answers to one (subject, prompt) that differ only in letter case: keep the newest spelling(s)."""
    groups: dict[tuple[str, str, str], list[FactKey]] = defaultdict(list)
    for key in last_seen:
        s, p, a = key
        groups[(s, p, a.casefold())].append(key)
    drop: set[FactKey] = set()
    for keys in groups.values():
        if len(keys) > 1:
            newest = max(last_seen[k] for k in keys)
            drop.update(k for k in keys if last_seen[k] < newest)
    return drop


def upstream_fallback_facts() -> TrainingFacts:
    """Facts of the vendored upstream rows (dataset 1.0.0), for when the dataset API is not importable."""
    try:
        rows = json.loads((UPSTREAM_DIR / "chains.json").read_text(encoding="utf-8"))
        raw_aliases = json.loads((UPSTREAM_DIR / "attributes_with_aliases.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KnowgicError(f"cannot read the vendored upstream data in {UPSTREAM_DIR}: {exc}") from None
    cases = [Case.from_row(row) for row in rows]
    alias_map: AliasMap = {name: tuple(entry.get("answer_alias", [])) for name, entry in raw_aliases.items()}
    return collect_facts({"1.0.0": (cases, alias_map)}, source="upstream-fallback")


def load_training_facts() -> TrainingFacts:
    """The main track's shipped versions through the dataset API, else the vendored upstream rows."""
    try:
        from knowgic.dataset.loading import load_aliases, load_cases
        from knowgic.dataset.versions import track_versions
    except ImportError:
        return upstream_fallback_facts()
    versions = {str(v): (list(load_cases(v)), dict(load_aliases(v))) for v in track_versions()}
    return collect_facts(versions, source="dataset-api")
