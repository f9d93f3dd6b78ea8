"""The editor interface every method implements (baselines and user submissions alike).

An editor is constructed with its hparams (a plain dict, already validated) and applies a batch of edit
requests to a model in place. It returns an :class:`EditHandle` whose ``restore()`` puts the model back
exactly as it was; the harness fingerprints the parameters before and after and refuses to continue when a
restore leaves anything changed. In-context editors change no weights and return a ``prompt_prefix``
that the scorer puts before every query instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from knowgic.records import EditRequest


@dataclass
class EditHandle:
    """What an edit leaves behind: how to undo it, and an optional prompt prefix for in-context methods.

    ``restore`` must be idempotent-safe to call once; the harness calls it exactly once per handle.
    ``info`` carries method diagnostics (losses, norms) that end up in ``results.json`` per edit.
    """

    restore_fn: Callable[[], None] | None = None
    prompt_prefix: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def restore(self) -> None:
        if self.restore_fn is not None:
            self.restore_fn()
            self.restore_fn = None


class Editor:
    """Base class for editing methods.

    Subclasses set ``name`` and implement :meth:`apply`. ``hparams`` is the method's configuration,
    read from YAML; ``hparams_schema`` (optional) is a JSON Schema the harness validates it against.
    ``uses_key_statistics``: the method reads the second moment of keys (hparams ``mom2_dataset`` and
    ``mom2_n_samples``, see :mod:`knowgic.editors.layer_stats`), so ``--stats-corpus`` and
    ``--stats-samples`` apply to it.
    """

    name: ClassVar[str] = "editor"
    hparams_schema: ClassVar[Mapping[str, Any] | None] = None
    uses_key_statistics: ClassVar[bool] = False

    def __init__(self, hparams: Mapping[str, Any] | None = None) -> None:
        self.hparams: dict[str, Any] = dict(hparams or {})

    def apply(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        requests: Sequence[EditRequest],
    ) -> EditHandle:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget any state carried between calls (e.g. AlphaEdit's accumulated keys).

        The harness calls it before each independent edit and once before a sequential run.
        """


def snapshot_restore(model: torch.nn.Module, names: Sequence[str]) -> Callable[[], None]:
    """Copy the named parameters now; the returned function writes the copies back.

    Weight-editing methods call this before touching ``names`` so that restore is exact (bitwise).
    """
    params = dict(model.named_parameters())
    missing = [n for n in names if n not in params]
    if missing:
        raise KeyError(f"model has no parameter(s) {missing}")
    saved = {n: params[n].detach().clone() for n in names}

    def restore() -> None:
        with torch.no_grad():
            for n, value in saved.items():
                params[n].copy_(value)

    return restore
