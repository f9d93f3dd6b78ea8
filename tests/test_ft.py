"""FT (constrained fine-tuning, FT-L): mechanics on a random GPT-2, efficacy and leakage on knowgic-tiny."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from knowgic.editors.ft import FTEditor, FTHparams, rewrite_batch, rewrite_nll
from knowgic.editors.hparams import HPARAMS_DIR, load_hparams, validate_hparams
from knowgic.errors import KnowgicError
from knowgic.records import Case, EditRequest

REPO_ROOT = Path(__file__).resolve().parent.parent

REQ_A = EditRequest(
    "{} studied at", "Harry Potter", "Hogwarts School of Witchcraft and Wizardry", "Ilvermorny"
)
REQ_B = EditRequest("{} is married to", "Victoria Beckham", "David Beckham", "Diana Taurasi")

# ---- helpers shared with test_lora.py (names do not start with "test" so pytest does not collect them)


def state_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def states_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def load_all_cases() -> list[Case]:
    """The latest dataset version's rows (the package's loader), else the vendored upstream rows."""
    try:
        from knowgic.dataset.loading import load_cases
    except ImportError:
        rows = json.loads((REPO_ROOT / "knowgic/dataset/upstream/chains.json").read_text(encoding="utf-8"))
        return [Case.from_row(r) for r in rows]
    return list(load_cases())


def distinct_requests() -> list[EditRequest]:
    return list(dict.fromkeys(case.request for case in load_all_cases()))


def target_logprob(model: torch.nn.Module, tok, requests: list[EditRequest]) -> list[float]:
    """log P(target_new | rewrite prompt) per request (teacher-forced, full target)."""
    with torch.no_grad():
        return [-float(rewrite_nll(model, rewrite_batch(tok, [r], "cpu"))) for r in requests]


def efficacy(model: torch.nn.Module, tok, req: EditRequest) -> bool:
    """p(target_new) > p(target_true) on the rewrite prompt (the DESIGN's Efficacy, logprob protocol)."""
    swapped = EditRequest(req.prompt, req.subject, req.target_new, req.target_true)
    new, true = target_logprob(model, tok, [req, swapped])
    return new > true


def neighbours(req: EditRequest, cases: list[Case]) -> list[EditRequest]:
    """Other subjects under the same prompt template, as requests (answer -> target_new) to score.

    Facts come from every row's edit request, chain and broader context; a subject whose answer already is
    the target is not a neighbour."""
    facts: dict[tuple[str, str], str] = {}
    for case in cases:
        r = case.request
        facts.setdefault((r.subject, r.prompt), r.target_true)
        for block in (case.chain, case.broader_context):
            for f in block.facts:
                facts.setdefault((f.subject, f.prompt), f.answer)
    return [
        EditRequest(req.prompt, subject, answer, req.target_new)
        for (subject, prompt), answer in sorted(facts.items())
        if prompt == req.prompt and subject != req.subject and answer != req.target_new
    ]


def greedy_gives_target(model: torch.nn.Module, tok, reqs: list[EditRequest]) -> list[bool]:
    """Whether greedy decoding after each rewrite prompt produces exactly ``target_new``'s tokens (the
    top prediction is the new target): argmax at every teacher-forced target position equals the token."""
    if not reqs:
        return []
    batch = rewrite_batch(tok, reqs, "cpu")
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    pred = logits[:, :-1].argmax(-1)
    labels = batch.labels[:, 1:]
    keep = labels != -100
    return [bool(((pred[i] == labels[i]) | ~keep[i]).all()) for i in range(len(reqs))]


def leak_counts(
    model, tok, req: EditRequest, cases: list[Case], before: dict[int, list[bool]]
) -> tuple[int, int]:
    """(switched, total): neighbours whose top prediction becomes target_new after the edit, among those
    whose top prediction was not target_new before it (``before`` caches the pre-edit answer per edit)."""
    nbrs = neighbours(req, cases)
    key = hash(req)
    post = greedy_gives_target(model, tok, nbrs)
    pre = before[key]
    eligible = [i for i in range(len(nbrs)) if not pre[i]]
    return sum(post[i] for i in eligible), len(eligible)


MECH = {"layers": [0, 1], "num_steps": 6, "lr": 1e-2, "norm_constraint": 2e-3, "early_stop_loss": None}


def test_rewrite_batch_labels_only_target_tokens(random_gpt2):
    _, tok = random_gpt2
    batch = rewrite_batch(tok, [REQ_A, REQ_B], "cpu")
    for i, req in enumerate([REQ_A, REQ_B]):
        target = batch.labels[i][batch.labels[i] != -100].tolist()
        assert tok.decode(target).strip() == req.target_new
        # the target tokens sit right after the prompt in the input as well
        n = int(batch.attention_mask[i].sum())
        assert batch.input_ids[i, n - len(target) : n].tolist() == target
        assert tok.decode(batch.input_ids[i, : n - len(target)].tolist()) == req.rewrite_text


def test_rewrite_nll_matches_per_request_sum(random_gpt2):
    model, tok = random_gpt2
    with torch.no_grad():
        both = float(rewrite_nll(model, rewrite_batch(tok, [REQ_A, REQ_B], "cpu")))
        singles = [float(rewrite_nll(model, rewrite_batch(tok, [r], "cpu"))) for r in (REQ_A, REQ_B)]
    # padding must not change a request's loss: the batch loss is the mean of the single ones
    assert both == pytest.approx(sum(singles) / 2, rel=1e-5)


def test_ft_bound_holds_after_every_step_and_restore_is_bitwise(random_gpt2):
    model, tok = random_gpt2
    before = state_copy(model)
    names = ["transformer.h.0.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.weight"]
    params = dict(model.named_parameters())
    with torch.no_grad():
        loss_before = float(rewrite_nll(model, rewrite_batch(tok, [REQ_A], "cpu")))
    # every forward after the first sees the weights left by the previous (projected) step
    seen: list[float] = []
    hook = model.get_submodule("transformer.h.0.mlp.c_proj").register_forward_pre_hook(
        lambda m, a: seen.append(max(float((params[n].detach() - before[n]).abs().max()) for n in names))
    )
    try:
        handle = FTEditor(MECH).apply(model, tok, [REQ_A])
    finally:
        hook.remove()
    assert len(seen) == MECH["num_steps"] + 1  # one forward per step and the final loss
    assert max(seen) <= MECH["norm_constraint"] * (1 + 1e-5)
    assert seen[-1] > 0.5 * MECH["norm_constraint"]  # it did train, up to the bound
    assert handle.info["max_abs_delta"] == pytest.approx(seen[-1])
    assert handle.info["loss_final"] < loss_before
    # nothing but the chosen weights moved
    after = state_copy(model)
    assert {n for n in before if not torch.equal(before[n], after[n])} == set(names)
    handle.restore()
    assert states_equal(before, state_copy(model))
    assert all(p.requires_grad for p in model.parameters())


def test_ft_batched_and_sequential_restore(random_gpt2):
    model, tok = random_gpt2
    w0 = state_copy(model)
    editor = FTEditor(MECH)
    h1 = editor.apply(model, tok, [REQ_A, REQ_B])  # both rewrites in one loss
    w1 = state_copy(model)
    assert not states_equal(w0, w1)
    h2 = editor.apply(model, tok, [REQ_B])  # on top of the first edit
    w2 = state_copy(model)
    name = "transformer.h.1.mlp.c_proj.weight"
    # the second edit is bounded relative to the weights it started from, not the pristine ones
    assert float((w2[name] - w1[name]).abs().max()) <= MECH["norm_constraint"] * (1 + 1e-5)
    h2.restore()
    assert states_equal(w1, state_copy(model))
    h1.restore()
    assert states_equal(w0, state_copy(model))


def test_ft_unconstrained_and_bias(random_gpt2):
    model, tok = random_gpt2
    w0 = state_copy(model)
    hp = {"layers": [-1], "num_steps": 3, "lr": 1e-2, "norm_constraint": None, "include_bias": True}
    handle = FTEditor(hp).apply(model, tok, [REQ_A])
    assert handle.info["trained_parameters"] == [
        "transformer.h.1.mlp.c_proj.weight",
        "transformer.h.1.mlp.c_proj.bias",
    ]
    assert handle.info["max_abs_delta"] > 1e-3
    handle.restore()
    assert states_equal(w0, state_copy(model))


def test_ft_bad_hparams_are_one_line_errors(random_gpt2):
    model, tok = random_gpt2
    with pytest.raises(KnowgicError, match="out of range"):
        FTEditor({"layers": [7]}).apply(model, tok, [REQ_A])
    with pytest.raises(KnowgicError, match="unknown key"):
        FTHparams.from_dict({"layers": [0], "lr_typo": 1})
    with pytest.raises(KnowgicError, match="at least one request"):
        FTEditor({"layers": [0]}).apply(model, tok, [])
    with pytest.raises(KnowgicError, match="at /bogus: unknown key"):
        validate_hparams({"layers": [0], "bogus": 1}, "ft", "test")


@pytest.mark.parametrize("path", sorted((HPARAMS_DIR / "ft").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_ft_hparams_validate(path):
    hparams, _ = load_hparams("ft", "x", "x", path=path)
    FTHparams.from_dict(hparams)


def test_shipped_ft_hparams_cover_the_models():
    stems = {p.stem for p in (HPARAMS_DIR / "ft").glob("*.yaml")}
    assert {
        "knowgic-tiny",
        "gpt2-xl",
        "gpt-j-6b",
        "llama-3-8b",
        "qwen2.5-7b",
        "gemma3-270m",
        "smollm2-135m",
    } <= stems


@pytest.mark.slow
def test_ft_efficacy_and_leakage_on_knowgic_tiny(knowgic_tiny):
    """Efficacy >= 0.9 on the distinct edits, and the leak measured: the share of other subjects under the
    same prompt template whose top prediction switches to target_new. FT-L has no locality term, so a
    large share is expected; it is reported, never asserted small."""
    lm = knowgic_tiny
    hparams, _ = load_hparams("ft", lm.model_id, lm.family)
    editor = FTEditor(hparams)
    cases = load_all_cases()
    requests = distinct_requests()
    assert len(requests) == 26
    before = state_copy(lm.model)
    pre = {hash(r): greedy_gives_target(lm.model, lm.tokenizer, neighbours(r, cases)) for r in requests}
    wins, switched, total, seconds = 0, 0, 0, 0.0
    per_prompt: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for req in requests:
        start = time.perf_counter()
        handle = editor.apply(lm.model, lm.tokenizer, [req])
        seconds += time.perf_counter() - start
        wins += efficacy(lm.model, lm.tokenizer, req)
        s, n = leak_counts(lm.model, lm.tokenizer, req, cases, pre)
        switched, total = switched + s, total + n
        per_prompt[req.prompt][0] += s
        per_prompt[req.prompt][1] += n
        handle.restore()
    assert states_equal(before, state_copy(lm.model))
    eff = wins / len(requests)
    print(
        f"\nFT on knowgic-tiny: efficacy {eff:.3f} ({wins}/{len(requests)}), {seconds / len(requests):.2f} s/edit; "
        f"same-template neighbours whose top prediction became target_new: {switched}/{total}"
        f" = {switched / max(total, 1):.3f}"
    )
    for prompt, (s, n) in sorted(per_prompt.items()):
        print(f"  {prompt!r}: {s}/{n}")
    assert total > 0
    assert eff >= 0.9, f"FT efficacy {eff:.3f} < 0.9"


@pytest.mark.slow
def test_ft_leaks_more_than_rome_in_the_harness(knowgic_tiny):
    """FT-L has no locality term: through the harness (independent mode, the 26 edits, logprob), its
    Specificity on neighbours of the same relation is clearly below ROME's, whose update is confined to the
    edited subject's key. Nothing is tuned for this; the shipped hparams of both are used."""
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

    same_relation = {}
    for editor in ("ft", "rome"):
        run = evaluate(
            EvaluationRequest(model="knowgic-tiny", editor=editor), progress=False, loaded=knowgic_tiny
        )
        metric = run.document["metrics"]["specificity_same_relation"]
        assert metric["n"] > 20, metric
        same_relation[editor] = metric["value"]
    print(f"\nSpecificity, same relation: FT {same_relation['ft']:.3f}, ROME {same_relation['rome']:.3f}")
    assert same_relation["ft"] <= same_relation["rome"] - 0.1, same_relation
