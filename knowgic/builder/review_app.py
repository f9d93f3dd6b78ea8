"""The review page: one triplet or template at a time, decided with the keyboard, saved at once.

    review.jsonl --first pending row--> page (a accept · r reject · e save edits · n/p next/previous ·
        + add the fields as a new fact) --decide() / add_fact()--> review.jsonl rewritten atomically

Closing the page loses nothing: it opens again at the first row still pending. The same functions are
the page's API (``show``, ``decide``), so ``gradio_client`` drives it as a person does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from knowgic.builder import review as rv
from knowgic.builder.generation import require
from knowgic.errors import KnowgicError

KEYS = """
() => {
  document.addEventListener('keydown', (ev) => {
    const tag = (ev.target && ev.target.tagName) || '';
    if (tag === 'INPUT' || tag === 'TEXTAREA') { if (!(ev.key === 'Enter' && ev.ctrlKey)) return; }
    const ids = {a: 'rv-accept', r: 'rv-reject', e: 'rv-edit', n: 'rv-next', p: 'rv-prev', '+': 'rv-add',
                 Enter: 'rv-edit'};
    const id = ids[ev.key];
    if (id) { const b = document.getElementById(id); if (b) { ev.preventDefault(); b.click(); } }
  });
}
"""

FIELDS = (
    "id",
    "kind",
    "subject",
    "relation",
    "prompt",
    "question",
    "answer",
    "p",
    "sentence",
    "decision",
    "by",
)


def _view(rows: list[dict[str, Any]], index: int) -> tuple[Any, ...]:
    active = [r for r in rows if r.get("active", True)]
    left = len(rv.pending(rows))
    if not active:
        return (0, "nothing to review", "", "", "", "", "")
    index = max(0, min(index, len(active) - 1))
    r = active[index]
    shown = {**r, **r.get("edited", {})}
    status = (
        f"{index + 1} / {len(active)} · {left} pending · this row: {r['decision']}"
        + (f" by {r['by']}" if r.get("by") else "")
        + (f" · p = {r['p']:.3g}" if isinstance(r.get("p"), float) else "")
        + (f"\n\nfrom: “{r['sentence']}”" if r.get("sentence") else "")
    )
    return (
        index,
        status,
        r["id"],
        shown.get("subject", ""),
        shown.get("prompt", ""),
        shown.get("answer", ""),
        shown.get("question", ""),
    )


def _first_pending(rows: list[dict[str, Any]]) -> int:
    active = [r for r in rows if r.get("active", True)]
    return next((i for i, r in enumerate(active) if r["decision"] == "pending"), 0)


def make_app(path: Path, reviewer: str) -> Any:
    """The page's Blocks; launch it with ``js=KEYS`` for the keyboard shortcuts."""
    gr = require("gradio")

    def show(index: float | None = None) -> tuple[Any, ...]:
        rows = rv.read_review(path)
        return _view(rows, _first_pending(rows) if index is None or index < 0 else int(index))

    def decide(index: float, rid: str, decision: str, subject: str, prompt: str, answer: str, question: str):
        rows = rv.read_review(path)
        row = next((r for r in rows if r["id"] == rid), None)
        if row is None:
            return _view(rows, int(index))
        edited = None
        if decision == "edit":
            fields = {"subject": subject, "prompt": prompt, "answer": answer, "question": question}
            edited = {k: v for k, v in fields.items() if v and v != row.get(k)}
            if not edited:
                decision = "accept"
        try:
            rv.decide(rows, rid, decision, reviewer, edited)
        except KnowgicError as exc:  # e.g. an edited template without {}: said on the page, nothing saved
            raise gr.Error(str(exc)) from None
        rv.write_review(path, rows)
        active = [r for r in rows if r.get("active", True)]
        later = next(
            (i for i in range(int(index) + 1, len(active)) if active[i]["decision"] == "pending"), None
        )
        return _view(rows, later if later is not None else _first_pending(rows))

    def add(index: float, subject: str, prompt: str, answer: str, question: str):
        """A fact the reviewer adds from the fields (prompt and question with {} for the subject)."""
        rows = rv.read_review(path)
        try:
            rv.add_fact(rows, subject, prompt, answer, question, reviewer)
        except KnowgicError as exc:
            raise gr.Error(str(exc)) from None
        rv.write_review(path, rows)
        active = [r for r in rows if r.get("active", True)]
        return _view(rows, len(active) - 1)

    with gr.Blocks(title="KnowGIC build review") as app:
        gr.Markdown(f"### Review of `{path.parent.name}` · decisions by `{reviewer}`")
        index = gr.Number(value=-1, visible=False, precision=0)
        status = gr.Markdown()
        rid = gr.Textbox(label="id", interactive=False)
        with gr.Row():
            subject = gr.Textbox(label="subject")
            prompt = gr.Textbox(label="template ({} = subject)")
            answer = gr.Textbox(label="answer")
        question = gr.Textbox(label="question")
        with gr.Row():
            accept = gr.Button("Accept (a)", variant="primary", elem_id="rv-accept")
            reject = gr.Button("Reject (r)", variant="stop", elem_id="rv-reject")
            edit = gr.Button("Save edits (e)", elem_id="rv-edit")
            prev = gr.Button("Previous (p)", elem_id="rv-prev")
            nxt = gr.Button("Next (n)", elem_id="rv-next")
            plus = gr.Button("Add as a new fact (+)", elem_id="rv-add")
        outputs = [index, status, rid, subject, prompt, answer, question]
        plus.click(add, [index, subject, prompt, answer, question], outputs, api_name="add_row")
        for button, decision in ((accept, "accept"), (reject, "reject"), (edit, "edit")):
            state = gr.State(decision)
            button.click(
                decide,
                [index, rid, state, subject, prompt, answer, question],
                outputs,
                api_name=f"{decision}_row" if decision != "edit" else "edit_row",
            )
        prev.click(lambda i: show(max(0, int(i) - 1)), [index], outputs, api_name="previous")
        nxt.click(lambda i: show(int(i) + 1), [index], outputs, api_name="next")
        load_in = gr.Number(value=-1, visible=False, precision=0)
        app.load(show, [load_in], outputs, api_name="show")
    return app
