"""Question refinement and chain-based questions (the ThinkEval paper's first component).

    fact unknown under its prompt --spec refine.prompts (reworded forms, at most refine_attempts)-->
        scored again; the first form the model knows becomes the fact's prompt (the old one recorded)
    chain (s -r1-> x1 -r2-> ... -> o) --spec chain_question.step, nested question templates-->
        one question asking for o through the chain, scored as a question ("Q: ...\\nA:")

Reworded forms are generic (built from the fact's question template and relation phrase), so refinement
needs no person; the review can still edit a fact's prompt or question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from knowgic.builder.seeds import question_template
from knowgic.builder.spec import BuilderSpec
from knowgic.builder.validate import score_facts
from knowgic.dataset.derive import fact_id
from knowgic.scoring.base import Query

QUESTION_CLOZE = "Q: {}\nA:"
"""How a chain question is posed under ``logprob`` (the evaluation's form for an edit's question)."""


def relation_phrase(prompt: str) -> str:
    return " ".join(prompt.replace("{}", " ").split())


def reworded(spec: BuilderSpec, fact: Mapping[str, Any], attempts: int) -> list[str]:
    """The reworded prompts of ``fact`` (each with one ``{}``), in the spec's order, at most ``attempts``,
    none equal to its own prompt."""
    template = question_template(fact["subject"], fact.get("question") or "")
    out: list[str] = []
    for form in spec.refine.get("prompts", []):
        if len(out) >= attempts:
            break
        if "{question}" in form and template is None:
            continue
        prompt = form.format(question=template or "", relation=relation_phrase(fact["prompt"]))
        if prompt.count("{}") == 1 and prompt != fact["prompt"] and prompt not in out:
            out.append(prompt)
    return out


def refine_facts(
    facts: Sequence[dict[str, Any]],
    spec: BuilderSpec,
    attempts: int,
    loaded: Any,
    scorer: Any,
    gold_from: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """``facts`` (scored) with each unknown one asked again in its reworded forms, one attempt at a time;
    a fact known under a form takes it as its prompt (``refined``: the attempt, the old prompt and id)."""
    out = [dict(f) for f in facts]
    forms = {i: reworded(spec, f, attempts) for i, f in enumerate(out) if not f["validation"]["known"]}
    for attempt in range(attempts):
        todo = [i for i, fs in forms.items() if attempt < len(fs) and not out[i]["validation"]["known"]]
        if not todo:
            break
        trial = [{**out[i], "prompt": forms[i][attempt]} for i in todo]
        scored = score_facts(trial, loaded, scorer, gold_from=list(gold_from) + trial)
        for i, f in zip(todo, scored, strict=True):
            tried = out[i].setdefault("refine_tried", [])
            tried.append({"prompt": f["prompt"], "p": f["validation"]["p"]})
            if f["validation"]["known"]:
                old = out[i]
                out[i] = {
                    **f,
                    "fact_id": fact_id(f["subject"], f["prompt"], f["answer"]),
                    "refined": {
                        "attempt": attempt + 1,
                        "from_prompt": old["prompt"],
                        "from_fact_id": old["fact_id"],
                    },
                    "refine_tried": tried,
                }
    return out


def chain_question(spec: BuilderSpec, steps: Sequence[Mapping[str, Any]]) -> str:
    """One question asking for the chain's final answer through its steps: each step's question template
    with the previous step's question as its subject (the spec's ``chain_question.step``)."""
    question = steps[0]["question"]
    for step in steps[1:]:
        template = question_template(step["subject"], step["question"])
        ref = spec.chain_question["step"].format(question=question)
        if template is None:  # a question that does not name its subject once: say which one it is
            question = f"{step['question']} ({step['subject']} being {ref})"
        else:
            question = template.replace("{}", ref, 1)
    return question


def chain_questions(
    spec: BuilderSpec,
    rows: Sequence[Mapping[str, Any]],
    aliases: Mapping[str, Sequence[str]],
    loaded: Any,
    scorer: Any,
) -> list[dict[str, Any]]:
    """Per chains row: its chain question and whether the model answers it (its final answer among the
    top ``n_gold`` = 1 tokens under ``logprob``), validated as the paper validates chains."""
    questions, queries = [], []
    for row in rows:
        c = row["chain"]
        steps = [{"subject": s, "question": q} for s, q in zip(c["subjects"], c["questions"], strict=True)]
        text = chain_question(spec, steps)
        answer = c["answers"][-1]
        questions.append((row, text, answer))
        queries.append(
            Query(
                QUESTION_CLOZE, text, (answer, *[a for a in aliases.get(answer, ()) if a != answer]), text, 1
            )
        )
    scores = scorer.score(loaded.model, loaded.tokenizer, queries) if queries else None
    return [
        {
            "case_id": row["case_id"],
            "edit_id": row["edit_id"],
            "length": len(row["chain"]["answers"]),
            "question": text,
            "answer": answer,
            "p": float(scores.p[i]),
            "known": bool(scores.known[i]),
        }
        for i, (row, text, answer) in enumerate(questions)
    ]
