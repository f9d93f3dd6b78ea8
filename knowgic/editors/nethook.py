"""Small activation-tracing helpers for locate-then-edit methods (forward hooks, no model surgery).

:class:`Trace` records the input and/or output of named submodules during a forward pass and can replace a
module's output (ROME adds δ to the MLP output, MEMIT to a layer's residual output). Hooks are always
removed on exit, also when the forward pass raises. :func:`frozen_parameters` switches ``requires_grad``
off for every parameter while a latent vector is optimised, and puts the flags back afterwards, so an
editor leaves the model as it found it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from knowgic.editors.arch import get_module

EditFn = Callable[[str, torch.Tensor], torch.Tensor]
"""``edit(module_name, output) -> new_output``; called on the module's primary output tensor."""


def primary_tensor(value: Any) -> torch.Tensor:
    """The hidden-state tensor of a module's input or output (first element of a tuple)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    raise TypeError(f"cannot find a tensor in a module input/output of type {type(value).__name__}")


def _replace_primary(value: Any, new: torch.Tensor) -> Any:
    if isinstance(value, torch.Tensor):
        return new
    if isinstance(value, tuple):
        return (new, *value[1:])
    if isinstance(value, list):
        return [new, *value[1:]]
    raise TypeError(f"cannot replace the tensor in a module output of type {type(value).__name__}")


@dataclass
class Record:
    """What a traced module saw in the last forward pass."""

    input: torch.Tensor | None = None
    output: torch.Tensor | None = None


class StopForward(Exception):
    """Raised by a :class:`Trace` with ``stop=True`` once every traced module has run; caught on exit."""


@dataclass
class Trace:
    """Context manager: trace (and optionally edit) named submodules of ``model``.

    ``retain_input``/``retain_output`` keep the primary tensors (not detached: gradients flow through
    them when the forward pass is differentiable). ``edit_output`` is applied to the outputs of the
    modules named in ``edit_modules`` (all traced modules when it is ``None``). ``stop=True`` ends the
    forward pass as soon as all traced modules have run (reading keys needs no logits, which for a large
    vocabulary cost more than the layers below); the model call then returns nothing.
    """

    model: torch.nn.Module
    names: Sequence[str]
    retain_input: bool = False
    retain_output: bool = True
    edit_output: EditFn | None = None
    edit_modules: Sequence[str] | None = None
    stop: bool = False
    records: dict[str, Record] = field(default_factory=dict)
    _handles: list[Any] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)

    def __getitem__(self, name: str) -> Record:
        return self.records[name]

    def __enter__(self) -> Trace:
        edit_set = set(self.names if self.edit_modules is None else self.edit_modules)
        for name in dict.fromkeys(self.names):
            module = get_module(self.model, name)
            self.records[name] = Record()
            self._handles.append(module.register_forward_hook(self._make_hook(name, name in edit_set)))
        return self

    def _make_hook(self, name: str, editable: bool) -> Callable[..., Any]:
        def hook(_module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
            record = self.records[name]
            if self.retain_input:
                record.input = primary_tensor(args)
            new_output = output
            if editable and self.edit_output is not None:
                new_output = _replace_primary(output, self.edit_output(name, primary_tensor(output)))
            if self.retain_output:
                record.output = primary_tensor(new_output)
            self._seen.add(name)
            if self.stop and len(self._seen) == len(self.records):
                raise StopForward
            return new_output if new_output is not output else None

        return hook

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return exc_type is not None and issubclass(exc_type, StopForward)


@contextmanager
def frozen_parameters(model: torch.nn.Module) -> Iterator[None]:
    """No parameter of ``model`` requires grad inside the block; the previous flags come back after."""
    saved = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in saved:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in saved:
            p.requires_grad_(flag)


@contextmanager
def logits_only_at(model: torch.nn.Module, rows: torch.Tensor, positions: torch.Tensor) -> Iterator[bool]:
    """Inside the block the LM head sees only ``hidden[rows, positions]``: logits come out as (1, K, vocab).

    An objective that reads a few positions per prompt need not pay for the vocabulary projection (and its
    backward pass) at every position: for a 262k-token vocabulary that projection costs more than the
    layers below. Yields ``False`` (and changes nothing) when the model exposes no output embeddings.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        yield False
        return

    def gather(_module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden = primary_tensor(args)
        return (hidden[rows, positions].unsqueeze(0), *args[1:])

    handle = head.register_forward_pre_hook(gather)
    try:
        yield True
    finally:
        handle.remove()


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype
