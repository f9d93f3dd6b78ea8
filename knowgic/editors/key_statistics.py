"""Which key statistics an editor's hparams name, and computing them once into a folder, ahead of the runs.

The ROME/MEMIT conventions (ROME, MEMIT, AlphaEdit, PRUNE, RECT): ``layers`` and ``mom2_*`` settings name
C = E[k kᵀ] at the MLP output projection of each layer (:mod:`knowgic.editors.layer_stats`). Two callers
compute them before the runs that read them::

    hparams --> key_statistics --> KeyStatistics --> compute_key_statistics(loaded, root) --> root/...
      the runner's prepare stage (the edit stage reads root, holding no benchmark text)
      a Slurm sweep's statistics job (the editors' jobs read root through $KNOWGIC_STATS_DIR)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.editors.arch import arch_for
from knowgic.editors.layer_stats import model_identity, model_revision, second_moments
from knowgic.editors.rome.hparams import ROMEHyperParams
from knowgic.editors.rome.weights import resolve_layers
from knowgic.errors import KnowgicError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class KeyStatistics:
    """The second moments hparams name: C = E[k kᵀ] at the MLP output projection of each of ``layers``,
    over ``sample_count`` documents of ``corpus``."""

    layers: tuple[int, ...]
    corpus: str
    sample_count: int
    dtype: str
    batch_tokens: int


def key_statistics(hparams: dict[str, Any]) -> KeyStatistics | None:
    """What ``hparams`` name: None unless they name ``layers`` and a ``mom2_*`` setting with
    ``mom2_adjustment`` left on; missing settings take ROME's defaults."""
    layers = hparams.get("layers")
    named = any(key.startswith("mom2_") for key in hparams)
    if not named or hparams.get("mom2_adjustment", True) is False or not isinstance(layers, list):
        return None
    if not layers or not all(isinstance(x, int) and not isinstance(x, bool) for x in layers):
        return None
    defaults = {f.name: f.default for f in fields(ROMEHyperParams)}

    def value(name: str, kind: type) -> Any:
        found = hparams.get(name, defaults[name])
        if not isinstance(found, kind) or isinstance(found, bool):
            raise KnowgicError(f"hparams {name}: expected {kind.__name__}, got {found!r}")
        return found

    return KeyStatistics(
        layers=tuple(layers),
        corpus=value("mom2_dataset", str),
        sample_count=value("mom2_n_samples", int),
        dtype=value("mom2_dtype", str),
        batch_tokens=value("mom2_batch_tokens", int),
    )


def compute_key_statistics(
    model: torch.nn.Module, tokenizer: Any, needed: KeyStatistics, root: Path, *, progress: bool = False
) -> list[str]:
    """Compute (or find already there) the statistics ``needed`` names into ``root``; the projections'
    names."""
    modules = [arch_for(model).mlp_out.format(layer) for layer in resolve_layers(model, needed.layers, "job")]
    second_moments(
        model,
        tokenizer,
        modules,
        model_id=model_identity(model),
        model_revision=model_revision(model),
        corpus=needed.corpus,
        sample_count=needed.sample_count,
        dtype=needed.dtype,
        batch_tokens=needed.batch_tokens,
        progress=progress,
        root=Path(root),
    )
    return modules
