"""LoRA: a low-rank adapter trained on the rewrite prompts, removed again on restore.

Hu et al. 2022 ("LoRA: Low-Rank Adaptation of Large Language Models", Eq. 3): each targeted linear map
W_0 ∈ R^{d×k} is augmented as

    h = W_0 x + (α / r) B A x,        B ∈ R^{d×r} (initialised to 0),  A ∈ R^{r×k} (random),

and only A and B train, here on the same objective as FT (the teacher-forced NLL of ``target_new`` after
each rewrite prompt, all requests in one loss; :func:`knowgic.editors.ft.rewrite_nll`). W_0 never
changes: the adapter is injected into the model object in place with ``peft`` (the model handed back is
the same plain ``transformers`` model, not a ``PeftModel``) and stays active while the edited model is
scored. ``restore`` deletes the adapter and, where a layer has no adapter left, puts the original module
back, so the parameters are bitwise those of before (they were never written).

Sequential use stacks adapters: each ``apply`` injects its own uniquely named adapter next to the earlier
ones (all stay active, only the new one trains), and its restore removes only that adapter.

Target modules come from the architecture table (:mod:`knowgic.editors.arch`) by role (``mlp_out``,
``mlp_in``, ``attn_out``) in the chosen layers; ``target_modules`` (module-name suffixes such as
``q_proj``) reaches modules the table has no role for, as the reference configurations do.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from knowgic.editors.arch import arch_for, num_layers
from knowgic.editors.base import EditHandle, Editor
from knowgic.editors.ft import (
    MODULE_ROLES,
    model_device,
    module_name,
    resolve_layers,
    rewrite_batch,
    rewrite_nll,
)
from knowgic.errors import KnowgicError
from knowgic.records import EditRequest

ADAPTER_PREFIX = "knowgic_edit_"


@dataclass(frozen=True)
class LoRAHparams:
    """LoRA hparams (schema: ``spec/schemas/hparams/lora.schema.json``).

    ``layers`` empty: every layer. ``modules``: roles from the architecture table; ``target_modules``:
    extra module-name suffixes (matched inside the chosen layers). ``seed`` fixes A's random init.
    """

    layers: tuple[int, ...] = ()
    modules: tuple[str, ...] = ("mlp_out",)
    target_modules: tuple[str, ...] = ()
    rank: int = 8
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    num_steps: int = 30
    lr: float = 5e-3
    weight_decay: float = 0.0
    early_stop_loss: float | None = None
    seed: int = 0

    @classmethod
    def from_dict(cls, hparams: Mapping[str, Any]) -> LoRAHparams:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(hparams) - known)
        if unknown:
            raise KnowgicError(f"LoRA hparams: unknown key(s) {unknown}; known: {sorted(known)}")
        values = dict(hparams)
        for key in ("layers", "modules", "target_modules"):
            if key in values:
                values[key] = tuple(values[key] or ())
        bad = [m for m in values.get("modules", ()) if m not in MODULE_ROLES]
        if bad:
            raise KnowgicError(
                f"LoRA hparams: unknown module role(s) {bad}; expected {', '.join(MODULE_ROLES)}"
            )
        if not values.get("modules", cls.modules) and not values.get("target_modules"):
            raise KnowgicError(
                "LoRA hparams: 'modules' and 'target_modules' are both empty: nothing to adapt"
            )
        return cls(**values)


def target_module_names(model: torch.nn.Module, hp: LoRAHparams) -> list[str]:
    """Full names of the modules that get an adapter (peft matches a full name exactly)."""
    arch = arch_for(model)
    layers = (
        resolve_layers(model, hp.layers, "LoRA hparams 'layers'") if hp.layers else range(num_layers(model))
    )
    all_names = {name for name, _ in model.named_modules()}
    names: list[str] = []
    for layer in layers:
        for role in hp.modules:
            name = module_name(arch, role, layer)
            if name not in all_names:
                raise KnowgicError(f"LoRA: model has no module {name!r} (role {role!r}, layer {layer})")
            names.append(name)
        prefix = arch.layer(layer) + "."
        for suffix in hp.target_modules:
            found = [n for n in all_names if n.startswith(prefix) and n.endswith("." + suffix)]
            if not found:
                raise KnowgicError(f"LoRA: no module named '*.{suffix}' in layer {layer} ({prefix}*)")
            names.extend(sorted(found))
    return list(dict.fromkeys(names))


def _tuner_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [(n, m) for n, m in model.named_modules() if isinstance(m, BaseTunerLayer)]


def _knowgic_adapters(layer: torch.nn.Module) -> list[str]:
    return [a for a in layer._all_available_adapter_names() if a.startswith(ADAPTER_PREFIX)]


def _freeze_adapters(layer: torch.nn.Module, adapters: Sequence[str]) -> None:
    for name in adapters:
        for p in list(layer.lora_A[name].parameters()) + list(layer.lora_B[name].parameters()):
            p.requires_grad_(False)


@contextmanager
def _quiet_peft():
    # peft warns when a model already carries adapters; stacking them is exactly what sequential mode does
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*peft_config.*")
        warnings.filterwarnings("ignore", message=".*Adapter .* was active which is now deleted.*")
        warnings.filterwarnings("ignore", message=".*fan_in_fan_out.*")
        yield


def remove_adapter(model: torch.nn.Module, adapter: str) -> None:
    """Delete ``adapter`` everywhere; a layer left without adapters is replaced by its original module."""
    with _quiet_peft():
        for name, layer in _tuner_layers(model):
            if adapter in layer._all_available_adapter_names():
                layer.delete_adapter(adapter)
            remaining = layer._all_available_adapter_names()
            if remaining:
                layer.set_adapter(remaining)  # the earlier edits stay active ...
                _freeze_adapters(layer, remaining)  # ... and frozen, as they were
                continue
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, layer.get_base_layer())
    config = getattr(model, "peft_config", None)
    if isinstance(config, dict):
        config.pop(adapter, None)
        if not config:
            del model.peft_config


class LoRAEditor(Editor):
    """LoRA through ``peft``, injected in place and removed on restore (see the module docstring)."""

    name = "lora"

    def apply(self, model: torch.nn.Module, tokenizer: Any, requests: Sequence[EditRequest]) -> EditHandle:
        from peft import LoraConfig
        from peft.functional import cast_adapter_dtype, inject_adapter_in_model

        hp = LoRAHparams.from_dict(self.hparams)
        targets = target_module_names(model, hp)
        batch = rewrite_batch(tokenizer, requests, model_device(model))
        existing = set(getattr(model, "peft_config", {}) or {})
        adapter = next(
            f"{ADAPTER_PREFIX}{i}" for i in range(len(existing) + 1) if f"{ADAPTER_PREFIX}{i}" not in existing
        )
        flags = {n: p.requires_grad for n, p in model.named_parameters()}
        config = LoraConfig(
            r=hp.rank,
            lora_alpha=hp.lora_alpha,
            lora_dropout=hp.lora_dropout,
            target_modules=targets,
            bias="none",
            fan_in_fan_out=arch_for(model).weight_transposed,
        )
        start = time.perf_counter()
        device = model_device(model)
        with _quiet_peft(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(hp.seed)
            returned = inject_adapter_in_model(config, model, adapter_name=adapter)
            if returned is not model:  # peft's functional API works in place; anything else would be a bug
                raise RuntimeError("peft returned a different model object from inject_adapter_in_model")
            cast_adapter_dtype(model, adapter_name=adapter)  # train the adapter in float32

        def restore() -> None:
            remove_adapter(model, adapter)
            for n, p in model.named_parameters():
                if n in flags:
                    p.requires_grad_(flags[n])

        try:
            info = self._train(model, adapter, batch, hp)
        except BaseException:
            restore()
            raise
        info["seconds"] = time.perf_counter() - start
        info["adapter"] = adapter
        info["target_modules"] = targets
        return EditHandle(restore_fn=restore, info=info)

    @staticmethod
    def _train(model: torch.nn.Module, adapter: str, batch: Any, hp: LoRAHparams) -> dict[str, Any]:
        trainable: list[torch.nn.Parameter] = []
        dropouts: list[torch.nn.Module] = []
        for _, layer in _tuner_layers(model):
            ours = _knowgic_adapters(layer)
            if not ours:
                continue
            layer.set_adapter(ours)  # every stacked edit stays active (set_adapter unfreezes them all)
            _freeze_adapters(layer, [a for a in ours if a != adapter])
            if adapter in ours:
                trainable.extend(
                    list(layer.lora_A[adapter].parameters()) + list(layer.lora_B[adapter].parameters())
                )
                dropouts.append(layer.lora_dropout[adapter])
        for n, p in model.named_parameters():
            if "lora_" not in n:
                p.requires_grad_(False)
        opt = torch.optim.Adam(trainable, lr=hp.lr, weight_decay=hp.weight_decay)
        losses: list[float] = []
        for d in dropouts:  # the base model stays in eval mode; only the adapter's dropout is active
            d.train()
        try:
            with torch.enable_grad():
                for _ in tqdm(range(hp.num_steps), desc="LoRA", leave=False, disable=None):
                    opt.zero_grad(set_to_none=True)
                    loss = rewrite_nll(model, batch)
                    losses.append(float(loss.detach()))
                    if hp.early_stop_loss is not None and losses[-1] < hp.early_stop_loss:
                        break
                    loss.backward()
                    opt.step()
        finally:
            for d in dropouts:
                d.eval()
            for p in trainable:
                p.requires_grad_(False)
                p.grad = None
        with torch.no_grad():
            loss_final = float(rewrite_nll(model, batch))
        return {
            "loss_first": losses[0] if losses else None,
            "loss_final": loss_final,
            "steps": len(losses),
            "rank": hp.rank,
            "trainable_parameters": sum(p.numel() for p in trainable),
        }
