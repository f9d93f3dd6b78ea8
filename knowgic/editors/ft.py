"""FT: constrained fine-tuning of chosen MLP weights on the rewrite prompt (FT-L).

The fine-tuning baseline of Meng et al. 2022 ("Locating and Editing Factual Associations in GPT", §3 and
Appendix, "FT-L"), with the norm constraint of Zhu et al. 2020 ("Modifying Memories in Transformer
Models", Eq. 3): for the chosen layers' weights θ (the MLP output projection by default; nothing else
trains),

    minimise_θ  L(θ) = -(1/N) Σ_j log P_θ(o*_j | p_j)        subject to  ||θ - θ_0||_∞ <= δ

where p_j is request j's rewrite prompt and o*_j its ``target_new``; log P is the teacher-forced log
probability of all target tokens (Meng et al.'s objective, summed over the target tokens). The constraint
is kept by projection after every Adam step (Zhu et al.'s constrained fine-tuning): θ <- clip(θ, θ_0 - δ,
θ_0 + δ), elementwise. θ_0 is the weights when ``apply`` is called, so in sequential use each edit is
bounded relative to the weights it started from, and its restore returns exactly to them.

No term keeps other facts in place (Meng et al.'s FT-L has none either: ``kl_factor`` = 0 in their
hparams), so the update moves the model's answer for *every* subject under the same prompt template;
Specificity measures that leak and nothing here tries to hide it.

Weights in half precision are optimised through a float32 master copy (the projection and Adam's small
steps would otherwise round away), written back in the model's dtype after each step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from knowgic.editors.arch import ArchSpec, arch_for, get_parameter, num_layers
from knowgic.editors.base import EditHandle, Editor, snapshot_restore
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest
from knowgic.scoring.tokenize import split_many

MODULE_ROLES = ("mlp_out", "mlp_in", "attn_out")
"""Which module of each layer is trained, named by its role in :class:`~knowgic.editors.arch.ArchSpec`."""


@dataclass(frozen=True)
class RewriteBatch:
    """Rewrite prompts with their ``target_new`` tokens, right-padded into one batch.

    ``labels`` is ``-100`` everywhere except at the target tokens, so the NLL counts only those.
    """

    input_ids: torch.Tensor  # (N, T) long
    attention_mask: torch.Tensor  # (N, T) long
    labels: torch.Tensor  # (N, T) long

    @property
    def n_target_tokens(self) -> int:
        return int((self.labels != -100).sum())


def rewrite_batch(
    tokenizer: Any, requests: Sequence[EditRequest], device: torch.device | str, leading_space: str = "auto"
) -> RewriteBatch:
    """Tokenize ``rewrite_text + ' ' + target_new`` per request the way the scorer does (one tokenization
    of the full text, split where the answer starts; see :mod:`knowgic.scoring.tokenize`)."""
    if not requests:
        raise KnowgicError("no edit requests given: an editor needs at least one request")
    splits = split_many(
        tokenizer, [r.rewrite_text for r in requests], [r.target_new for r in requests], leading_space
    )
    length = max(len(s.context) + len(s.answer) for s in splits)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    ids = torch.full((len(splits), length), int(pad), dtype=torch.long)
    mask = torch.zeros((len(splits), length), dtype=torch.long)
    labels = torch.full((len(splits), length), -100, dtype=torch.long)
    for i, s in enumerate(splits):
        full = list(s.context) + list(s.answer)
        ids[i, : len(full)] = torch.tensor(full)
        mask[i, : len(full)] = 1
        labels[i, len(s.context) : len(full)] = torch.tensor(s.answer)
    return RewriteBatch(ids.to(device), mask.to(device), labels.to(device))


def rewrite_nll(model: torch.nn.Module, batch: RewriteBatch) -> torch.Tensor:
    """L = -(1/N) Σ_j Σ_t log P(o*_{j,t} | p_j, o*_{j,<t}): target-token NLL summed per request, mean over
    requests (Meng et al. 2022, FT-L objective; all requests of a batch in one loss)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    # position t predicts token t + 1
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = batch.labels[:, 1:]
    keep = targets != -100
    token_logp = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1) * keep
    return -(token_logp.sum(dim=1)).mean()


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def resolve_layers(model: torch.nn.Module, layers: Sequence[int], where: str) -> list[int]:
    """Validate layer indices against the model (negative indices count from the last layer)."""
    n = num_layers(model)
    out = []
    for layer in layers:
        index = layer + n if layer < 0 else layer
        if not 0 <= index < n:
            raise KnowgicError(f"{where}: layer {layer} is out of range for a model with {n} layers")
        out.append(index)
    return sorted(set(out))


def module_name(arch: ArchSpec, role: str, layer: int) -> str:
    if role not in MODULE_ROLES:
        raise KnowgicError(f"unknown module role {role!r}; expected one of {', '.join(MODULE_ROLES)}")
    template: str = getattr(arch, role)
    return template.format(layer)


@dataclass(frozen=True)
class FTHparams:
    """FT hparams (schema: ``spec/schemas/hparams/ft.schema.json``).

    ``norm_constraint`` is δ of the L∞ bound (None: unconstrained fine-tuning, "FT" without "-L").
    Optimisation stops early when the loss falls below ``early_stop_loss`` (Meng et al.'s FT code stops at
    1e-2); None runs all ``num_steps``.
    """

    layers: tuple[int, ...]
    module: str = "mlp_out"
    num_steps: int = 25
    lr: float = 5e-4
    weight_decay: float = 0.0
    norm_constraint: float | None = 5e-4
    include_bias: bool = False
    early_stop_loss: float | None = 1e-2

    @classmethod
    def from_dict(cls, hparams: Mapping[str, Any]) -> FTHparams:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(hparams) - known)
        if unknown:
            raise KnowgicError(f"FT hparams: unknown key(s) {unknown}; known: {sorted(known)}")
        if "layers" not in hparams:
            raise KnowgicError("FT hparams: 'layers' is required (list of layer indices to fine-tune)")
        values = dict(hparams)
        values["layers"] = tuple(int(x) for x in values["layers"])
        if not values["layers"]:
            raise KnowgicError("FT hparams: 'layers' must name at least one layer")
        if values.get("module", "mlp_out") not in MODULE_ROLES:
            raise KnowgicError(f"FT hparams: 'module' must be one of {', '.join(MODULE_ROLES)}")
        return cls(**values)


class FTEditor(Editor):
    """Constrained fine-tuning (FT-L); see the module docstring for the objective and the projection."""

    name = "ft"

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        hp = FTHparams.from_dict(self.hparams)
        arch = arch_for(model)
        layers = resolve_layers(model, hp.layers, "FT hparams 'layers'")
        names = []
        for layer in layers:
            prefix = module_name(arch, hp.module, layer)
            names.append(prefix + ".weight")
            bias = prefix + ".bias"
            if hp.include_bias and bias in dict(model.named_parameters()):
                names.append(bias)
        params = {n: get_parameter(model, n) for n in names}
        restore = snapshot_restore(model, names)
        start = time.perf_counter()
        try:
            info = self._train(model, tokenizer, requests, hp, params)
        except BaseException:
            restore()  # never leave a half-trained model behind
            raise
        info["seconds"] = time.perf_counter() - start
        info["trained_parameters"] = names
        return EditHandle(restore_fn=restore, info=info)

    @staticmethod
    def _train(
        model: torch.nn.Module,
        tokenizer: Any,
        requests: Sequence[EditRequest],
        hp: FTHparams,
        params: dict[str, torch.nn.Parameter],
    ) -> dict[str, Any]:
        batch = rewrite_batch(tokenizer, requests, model_device(model))
        # θ_0 and the float32 master copies that Adam updates
        theta0 = {n: p.detach().float().clone() for n, p in params.items()}
        master = {n: t.clone().requires_grad_(True) for n, t in theta0.items()}
        opt = torch.optim.Adam(list(master.values()), lr=hp.lr, weight_decay=hp.weight_decay)
        flags = {n: p.requires_grad for n, p in model.named_parameters()}
        losses: list[float] = []
        try:
            for p in model.parameters():
                p.requires_grad_(False)
            for p in params.values():
                p.requires_grad_(True)
            with torch.enable_grad():
                for _ in tqdm(range(hp.num_steps), desc="FT", leave=False, disable=None):
                    for p in params.values():
                        p.grad = None
                    loss = rewrite_nll(model, batch)
                    losses.append(float(loss.detach()))
                    if hp.early_stop_loss is not None and losses[-1] < hp.early_stop_loss:
                        break
                    loss.backward()
                    for n, p in params.items():
                        master[n].grad = p.grad.detach().float() if p.grad is not None else None
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    with torch.no_grad():
                        for n, p in params.items():
                            if hp.norm_constraint is not None:
                                # projection onto the L∞ ball around θ_0 (Zhu et al. 2020, Eq. 3)
                                delta = hp.norm_constraint
                                master[n].copy_(torch.clamp(master[n], theta0[n] - delta, theta0[n] + delta))
                            p.copy_(master[n].to(p.dtype))
        finally:
            with torch.no_grad():
                for p in params.values():
                    p.grad = None
            for n, p in model.named_parameters():
                p.requires_grad_(flags[n])
        with torch.no_grad():
            max_delta = max(float((p.detach().float() - theta0[n]).abs().max()) for n, p in params.items())
            loss_final = float(rewrite_nll(model, batch))
        return {
            "loss_first": losses[0] if losses else None,
            "loss_final": loss_final,
            "steps": len(losses),
            "max_abs_delta": max_delta,
            "norm_constraint": hp.norm_constraint,
        }
