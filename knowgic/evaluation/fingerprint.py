"""Parameter fingerprints: proof that an editor's restore put the model back exactly.

A fingerprint is a digest per parameter and buffer (name, shape, dtype, device, content). Hashing every
tensor after every edit would cost as much as the edit on a large model, so :func:`changed_since` re-hashes
only tensors that PyTorch's in-place version counter says were written, plus any tensor that was replaced
or added; untouched tensors cannot have changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import xxhash

from knowgic.errors import RestoreError


@dataclass(frozen=True)
class TensorStamp:
    digest: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    version: int
    identity: int


def _digest(tensor: torch.Tensor) -> str:
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    # Flatten first: a 0-dim tensor (Gemma 3's embedding scale, say) cannot be viewed as bytes.
    data = data.contiguous().reshape(-1)
    # Reinterpret as bytes so every dtype (bf16 included) hashes its exact bits.
    raw = data.view(torch.uint8).numpy() if data.numel() else b""
    return xxhash.xxh3_128_hexdigest(memoryview(raw) if not isinstance(raw, bytes) else raw)


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    named: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        named[f"param:{name}"] = param
    for name, buf in model.named_buffers(remove_duplicate=False):
        named[f"buffer:{name}"] = buf
    return named


def _stamp(tensor: torch.Tensor) -> TensorStamp:
    return TensorStamp(
        digest=_digest(tensor),
        shape=tuple(tensor.shape),
        dtype=str(tensor.dtype),
        device=str(tensor.device),
        version=int(tensor._version),
        identity=id(tensor),
    )


def fingerprint(model: torch.nn.Module) -> dict[str, TensorStamp]:
    """Stamp every parameter and buffer of ``model``."""
    return {name: _stamp(t) for name, t in _tensors(model).items()}


def changed_since(model: torch.nn.Module, before: dict[str, TensorStamp]) -> list[str]:
    """Names of tensors that differ from ``before`` (content, shape, dtype, device), or were added/removed."""
    now = _tensors(model)
    changed = sorted(set(before) ^ set(now))
    for name in sorted(set(before) & set(now)):
        old, tensor = before[name], now[name]
        same_kind = (
            tuple(tensor.shape) == old.shape
            and str(tensor.dtype) == old.dtype
            and str(tensor.device) == old.device
        )
        touched = id(tensor) != old.identity or int(tensor._version) != old.version
        if not same_kind or (touched and _digest(tensor) != old.digest):
            changed.append(name)
    return changed


def refresh(model: torch.nn.Module, before: dict[str, TensorStamp]) -> dict[str, TensorStamp]:
    """Stamps with current version counters for tensors whose content is unchanged (cheap re-checks later)."""
    now = _tensors(model)
    return {
        name: (
            stamp
            if int(now[name]._version) == stamp.version and id(now[name]) == stamp.identity
            else TensorStamp(
                stamp.digest, stamp.shape, stamp.dtype, stamp.device, int(now[name]._version), id(now[name])
            )
        )
        for name, stamp in before.items()
        if name in now
    }


def assert_restored(
    model: torch.nn.Module, before: dict[str, TensorStamp], editor: str
) -> dict[str, TensorStamp]:
    """Raise :class:`RestoreError` naming what changed; return refreshed stamps when all is restored."""
    changed = changed_since(model, before)
    if changed:
        shown = ", ".join(n.split(":", 1)[1] for n in changed[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        raise RestoreError(
            f"editor {editor!r} did not restore the model exactly: {len(changed)} tensor(s) differ "
            f"({shown}{more}); results would be contaminated, stopping"
        )
    return refresh(model, before)
