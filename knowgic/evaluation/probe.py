"""``knowgic probe``: apply one benchmark edit and show how chosen facts move, hop by hop.

The metrics aggregate; when a number needs explaining (did the edit reach the question form? is the old
answer still reachable through an intermediate entity?) one looks at single facts before and after the
edit. A probe scores, with the ``logprob`` protocol and the version's aliases, the rewrite prompt with
``target_true`` and ``target_new``, the first step of each of the edit's chains (the subject's other
facts, where collateral damage shows first), and any fact the user names, then restores the model and
checks the restore like the evaluation harness does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.dataset.loading import dataset_ref, load_aliases, load_cases
from knowgic.errors import KnowgicError
from knowgic.evaluation.plan import QUESTION_CLOZE, QueryMaker, question_form
from knowgic.records import Case, EditRequest, Fact
from knowgic.scoring.base import Query
from knowgic.yamlfile import read_yaml


@dataclass(frozen=True)
class RestoreCheck:
    """The model after ``restore()``: every parameter and buffer compared with its digest from before."""

    tensors: int
    identical: bool

    def line(self) -> str:
        verdict = "identical to" if self.identical else "DIFFERENT from"
        return f"restore check: all {self.tensors} parameters and buffers {verdict} before the edit (digests)"


@dataclass(frozen=True)
class ProbeRow:
    """One probed fact: ``P(answer | prompt.format(subject))`` (max over aliases) before and after."""

    role: str  # "rewrite", "question", "subject fact" or "user"
    text: str
    answer: str
    p_pre: float
    p_post: float
    known_pre: bool
    known_post: bool


def parse_fact(text: str, where: str) -> Fact:
    """``"PROMPT|SUBJECT|ANSWER"`` with exactly one ``{}`` in PROMPT, e.g. ``"{} belongs to|Gryffindor|Hogwarts"``."""
    parts = text.split("|")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise KnowgicError(f"{where}: expected PROMPT|SUBJECT|ANSWER (three non-empty fields), got {text!r}")
    prompt, subject, answer = (p.strip() for p in parts)
    if prompt.count("{}") != 1:
        raise KnowgicError(f"{where}: the prompt must hold exactly one {{}} for the subject, got {prompt!r}")
    return Fact(subject=subject, prompt=prompt, answer=answer)


def read_facts_file(path: Path) -> list[Fact]:
    """A YAML (or JSON) list of ``{prompt, subject, answer}`` mappings."""
    raw = read_yaml(path, "facts file")
    if not isinstance(raw, list):
        raise KnowgicError(f"{path}: expected a list of {{prompt, subject, answer}} mappings")
    facts = []
    for i, item in enumerate(raw):
        keys = {"prompt", "subject", "answer"}
        if not isinstance(item, dict) or set(item) != keys or not all(isinstance(item[k], str) for k in keys):
            raise KnowgicError(f"{path}: item {i} must map exactly prompt, subject and answer to strings")
        facts.append(parse_fact(f"{item['prompt']}|{item['subject']}|{item['answer']}", f"{path}: item {i}"))
    return facts


def find_edit(cases: Sequence[Case], subject: str | None, edit_id: str | None) -> EditRequest:
    """The one distinct edit request with that id or subject; an error lists the candidates otherwise."""
    requests = list(dict.fromkeys(c.request for c in cases))
    if edit_id is not None:
        chosen = [r for r in requests if r.edit_id == edit_id]
    elif subject is not None:
        chosen = [r for r in requests if r.subject.casefold() == subject.casefold()]
    else:
        raise KnowgicError("name the edit with --subject or --edit-id")
    if len(chosen) == 1:
        return chosen[0]
    listed = "; ".join(f"{r.edit_id} {r.subject!r} -> {r.target_new!r}" for r in (chosen or requests))
    what = f"edit id {edit_id!r}" if edit_id is not None else f"subject {subject!r}"
    if chosen:
        raise KnowgicError(f"{what} names {len(chosen)} edits, choose one with --edit-id: {listed}")
    raise KnowgicError(f"no edit has {what}; the edits: {listed}")


def probe_queries(
    request: EditRequest,
    cases: Sequence[Case],
    user_facts: Sequence[Fact],
    aliases: Mapping[str, Sequence[str]],
) -> list[tuple[str, Query]]:
    """(role, query) pairs: the rewrite prompt with both targets, the question form, subject facts, user facts."""
    query = QueryMaker(cases, aliases)
    rows = [c for c in cases if c.request == request]
    out = [
        ("rewrite", query(request.prompt, request.subject, request.target_true)),
        ("rewrite", query(request.prompt, request.subject, request.target_new)),
    ]
    question = question_form(request, rows)  # the same question Generalization uses
    if question:
        out += [
            ("question", query(QUESTION_CLOZE, question, request.target_true, question)),
            ("question", query(QUESTION_CLOZE, question, request.target_new, question)),
        ]
    seen = {(q.prompt, q.subject, q.answers[0]) for _, q in out}
    for case in rows:
        first = case.chain.facts[0]
        if first.subject == request.subject:
            key = (first.prompt, first.subject, first.answer)
            if key not in seen and first.prompt != request.prompt:
                seen.add(key)
                out.append(("subject fact", query(*key)))
    for fact in user_facts:
        out.append(("user", query(fact.prompt, fact.subject, fact.answer)))
    return out


def run_probe(
    model: str,
    editor: str,
    subject: str | None = None,
    edit_id: str | None = None,
    user_facts: Sequence[Fact] = (),
    hparams_path: Path | None = None,
    dataset_version: str | None = None,
    dtype: str = "float32",
    device: str = "auto",
    progress: bool = True,
) -> tuple[EditRequest, list[ProbeRow], dict[str, Any], RestoreCheck]:
    """Score the probe facts, apply the edit, score them again, restore (checked).

    Returns the edit, the rows, the editor's info and the restore check (a failed check raises).
    """
    from knowgic.evaluation.evaluate import EvaluationRequest, check_request, make_editor
    from knowgic.evaluation.fingerprint import assert_restored, fingerprint
    from knowgic.models.loading import load_model
    from knowgic.models.threads import cpu_threads
    from knowgic.scoring import make_scorer

    ref = dataset_ref(dataset_version)
    cases = load_cases(ref.version)
    request = find_edit(cases, subject, edit_id)
    queries = probe_queries(request, cases, user_facts, load_aliases(ref.version))
    eval_request = EvaluationRequest(
        model=model,
        editor=editor,
        hparams_path=None if hparams_path is None else str(hparams_path),
        dtype=dtype,
        device=device,
    )
    editor_cls = check_request(eval_request)
    loaded = load_model(model, dtype=dtype, device=device, progress=progress)
    edit_method, _, _ = make_editor(eval_request, editor_cls, loaded)
    scorer = make_scorer("logprob")
    plain = [q for _, q in queries]
    with cpu_threads(loaded.model, loaded.device):
        stamps = fingerprint(loaded.model)
        pre = scorer.score(loaded.model, loaded.tokenizer, plain)
        edit_method.reset()
        handle = edit_method.apply(loaded.model, loaded.tokenizer, [request])
        try:
            post = scorer.score(loaded.model, loaded.tokenizer, plain, handle.prompt_prefix)
        finally:
            handle.restore()
        assert_restored(loaded.model, stamps, edit_method.name)
    restore = RestoreCheck(tensors=len(stamps), identical=True)
    rows = [
        ProbeRow(role, q.text, q.answers[0], float(a), float(b), bool(ka), bool(kb))
        for (role, q), a, b, ka, kb in zip(queries, pre.p, post.p, pre.known, post.known, strict=True)
    ]
    return request, rows, dict(handle.info), restore
