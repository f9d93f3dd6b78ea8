"""The value objective: a vector δ added at the subject's last token so that the model says ``target_new``.

ROME §3 (Eq. 4) chooses v* by minimising, over the output m of the edited MLP at the last subject token,

    L(z) = 1/N Σ_j −log P_{G(m := z)}[o* | x_j + p]  +  D_KL(P_{G(m := z)}[x | p′] ‖ P_G[x | p′]),

with random prefixes x_j, the rewrite prompt p, the new object o* and the essence prompt p′ = "{s} is a".
MEMIT (Eq. 16) optimises the residual h^L of the last edited layer L the same way: z_i = h_i^L + δ_i.
Both are written as one additive delta, as in the reference implementations: z = m + δ at every prompt's
lookup token (each prompt keeps its own m), optimised with Adam on

    loss = NLL + kl_factor · KL + v_weight_decay · ‖δ‖ / ‖v_init‖²,

where NLL is the mean over prompts of the per-token mean −log p of the target tokens (teacher-forced after
the prompt), v_init is the module's output at the lookup token of the unprefixed prompt, and ‖δ‖ is
projected back to ``clamp_norm_factor`` · ‖v_init‖ after every step. The KL term is taken, as in the paper's
equation, on the next-token distribution after the whole essence prompt (the reference code reads it at the
subject's last token instead); P_G is recorded in the first step, where δ = 0.

:func:`optimize_delta` serves ROME (``module`` = the MLP output projection of layer l*) and MEMIT
(``module`` = the decoder layer L, whose output is the residual stream).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from knowgic.editors.nethook import Trace, frozen_parameters, logits_only_at, model_device
from knowgic.editors.repr_tools import make_batch, token_index
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest
from knowgic.scoring.tokenize import Split, split_many

KL_PROMPT = "{} is a"


@dataclass(frozen=True)
class DeltaObjective:
    """Hparams of :func:`optimize_delta` (see :class:`knowgic.editors.rome.hparams.LocateEditHParams`)."""

    num_grad_steps: int
    lr: float
    weight_decay: float
    clamp_norm_factor: float
    kl_factor: float
    fact_token: str = "subject_last"
    early_stop_loss: float = 0.05
    kl_prompts: tuple[str, ...] = (KL_PROMPT,)


@dataclass
class DeltaResult:
    """δ (float32, on the model's device), v_init (module output at the unprefixed prompt's lookup token)."""

    delta: torch.Tensor
    init: torch.Tensor
    steps: int
    nll: float
    nll_init: float
    kl: float
    prob_new: float  # mean over the prompts of p(target_new) per token (geometric), at the last step
    prob_new_plain: float  # the same on the unprefixed prompt alone
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def info(self) -> dict[str, Any]:
        return {
            "delta_norm": float(self.delta.norm()),
            "init_norm": float(self.init.norm()),
            "steps": self.steps,
            "nll_init": round(self.nll_init, 6),
            "nll": round(self.nll, 6),
            "kl": round(self.kl, 6),
            "prob_new": round(self.prob_new, 6),
            "prob_new_plain": round(self.prob_new_plain, 6),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class _Prompts:
    batch_ids: list[list[int]]
    lookup: list[int]
    splits: list[Split]  # one per rewrite row: its context and the target's tokens in that context

    @property
    def n_rewrite(self) -> int:
        return len(self.splits)


def _build_prompts(
    tokenizer: Any, request: EditRequest, templates: Sequence[str], objective: DeltaObjective
) -> _Prompts:
    """Rewrite prompts (template ∘ prompt, filled with the subject, + target tokens but the last) and KL
    prompts; ``lookup[i]``: the token of row i where δ is added."""
    if not templates or templates[0] != "{}":
        raise ValueError("context templates must start with the bare '{}'")
    prompt_templates = [t.replace("{}", request.prompt, 1) for t in templates]
    texts = [p.replace("{}", request.subject, 1) for p in prompt_templates]
    splits = split_many(tokenizer, texts, [request.target_new] * len(texts), mode="auto")
    rows: list[list[int]] = []
    lookup: list[int] = []
    for tpl, split in zip(prompt_templates, splits, strict=True):
        idx = token_index(tokenizer, tpl, request.subject, objective.fact_token)
        if idx >= len(split.context):
            raise KnowgicError(f"subject {request.subject!r} was not found in prompt {tpl!r}")
        # Teacher forcing: the row holds the context and all target tokens but the last.
        rows.append(list(split.context) + list(split.answer[:-1]))
        lookup.append(idx)
    for kl_prompt in objective.kl_prompts:
        text = kl_prompt.replace("{}", request.subject, 1)
        rows.append(list(tokenizer(text, add_special_tokens=True)["input_ids"]))
        lookup.append(token_index(tokenizer, kl_prompt, request.subject, objective.fact_token))
    return _Prompts(rows, lookup, splits)


def optimize_delta(
    model: torch.nn.Module,
    tokenizer: Any,
    request: EditRequest,
    module_name: str,
    templates: Sequence[str],
    objective: DeltaObjective,
    *,
    progress: bool = True,
) -> DeltaResult:
    """Optimise δ at the output of ``module_name`` (module docstring); the model is left unchanged."""
    started = time.perf_counter()
    device = model_device(model)
    prompts = _build_prompts(tokenizer, request, templates, objective)
    n_rw = prompts.n_rewrite
    batch = make_batch(tokenizer, prompts.batch_ids).to(device)
    rows = torch.arange(len(prompts.lookup), device=device)
    lookup = torch.tensor(prompts.lookup, device=device)

    # Target positions: row r predicts answer token j at position len(context_r) - 1 + j.
    tgt_rows, tgt_pos, tgt_ids, tgt_weight = [], [], [], []
    for r, split in enumerate(prompts.splits):
        for j, tid in enumerate(split.answer):
            tgt_rows.append(r)
            tgt_pos.append(len(split.context) - 1 + j)
            tgt_ids.append(tid)
            tgt_weight.append(1.0 / len(split.answer))
    tgt_rows_t = torch.tensor(tgt_rows, device=device)
    tgt_pos_t = torch.tensor(tgt_pos, device=device)
    tgt_ids_t = torch.tensor(tgt_ids, device=device)
    tgt_w = torch.tensor(tgt_weight, device=device, dtype=torch.float32)
    kl_rows = torch.arange(n_rw, len(prompts.lookup), device=device)
    kl_pos = torch.tensor([batch.lengths[int(r)] - 1 for r in kl_rows.tolist()], device=device)
    # The loss reads the logits at these positions only: the target tokens', then the essence prompts' last.
    keep_rows = torch.cat([tgt_rows_t, kl_rows])
    keep_pos = torch.cat([tgt_pos_t, kl_pos])
    n_tgt = len(tgt_ids)

    # Probe pass: the module's output width and v_init.
    with torch.no_grad(), Trace(model, [module_name], retain_output=True, stop=True) as tr:
        model(**batch.model_inputs())
    out0 = tr[module_name].output
    assert out0 is not None
    init = out0[0, prompts.lookup[0]].detach().float().clone()
    delta = torch.zeros(init.shape[-1], device=device, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=objective.lr)
    max_norm = objective.clamp_norm_factor * float(init.norm())
    init_sq = float(init.norm()) ** 2 or 1.0

    def add_delta(_name: str, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[rows, lookup] = out[rows, lookup] + delta.to(out.dtype)
        return out

    kl_init: torch.Tensor | None = None
    nll_init = float("nan")
    losses: list[float] = []
    nll_v = kl_v = 0.0
    prob_new = prob_new_plain = 0.0
    steps = 0
    bar = tqdm(
        range(objective.num_grad_steps),
        desc=f"optimise δ @ {module_name}",
        leave=False,
        disable=not progress or not sys.stderr.isatty(),
    )
    with frozen_parameters(model):
        for it in bar:
            opt.zero_grad()
            with (
                Trace(model, [module_name], retain_output=False, edit_output=add_delta),
                logits_only_at(model, keep_rows, keep_pos) as gathered,
            ):
                logits = model(**batch.model_inputs()).logits
            if gathered:
                if tuple(logits.shape[:2]) != (1, len(keep_pos)):
                    raise KnowgicError(
                        f"the model's forward reshaped the gathered logits to {tuple(logits.shape)}; "
                        "its LM head cannot be evaluated at selected positions only"
                    )
                tgt_logits, kl_logits = logits[0, :n_tgt], logits[0, n_tgt:]
            else:
                tgt_logits, kl_logits = logits[tgt_rows_t, tgt_pos_t], logits[kl_rows, kl_pos]
            log_probs = torch.log_softmax(tgt_logits.float(), dim=-1)
            token_lp = log_probs.gather(1, tgt_ids_t.unsqueeze(1)).squeeze(1)
            per_row = torch.zeros(n_rw, device=device).index_add(0, tgt_rows_t, token_lp * tgt_w)
            nll = -per_row.mean()
            kl_lp = torch.log_softmax(kl_logits.float(), dim=-1)
            if kl_init is None:
                kl_init = kl_lp.detach().clone()
                nll_init = nll.item()
            # D_KL(P_edited ‖ P_G), batch mean over essence prompts.
            kl = (kl_lp.exp() * (kl_lp - kl_init)).sum(-1).mean()
            decay = objective.weight_decay * delta.norm() / init_sq
            loss = nll + objective.kl_factor * kl + decay
            steps = it + 1
            nll_v, kl_v, loss_v = nll.item(), kl.item(), loss.item()
            prob_new = per_row.detach().exp().mean().item()
            prob_new_plain = per_row[0].detach().exp().item()
            losses.append(loss_v)
            bar.set_postfix(loss=f"{loss_v:.3f}", p_new=f"{prob_new:.3f}")
            if loss_v < objective.early_stop_loss or it == objective.num_grad_steps - 1:
                break
            loss.backward()
            opt.step()
            with torch.no_grad():
                norm = float(delta.norm())
                if norm > max_norm:
                    delta.mul_(max_norm / norm)
    bar.close()
    return DeltaResult(
        delta=delta.detach().clone(),
        init=init,
        steps=steps,
        nll=nll_v,
        nll_init=nll_init,
        kl=kl_v,
        prob_new=prob_new,
        prob_new_plain=prob_new_plain,
        losses=losses,
        seconds=time.perf_counter() - started,
    )
