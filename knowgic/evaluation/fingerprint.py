"""Parameter fingerprints: proof that an editor's restore put the model back exactly.

A fingerprint is a stamp per parameter and buffer: shape, dtype, device and a digest of the raw bits. The
check after every restore re-digests *every* tensor: PyTorch's in-place version counter and the tensor's
identity do not see writes through ``param.data.add_()``, ``param.data = other`` or a NumPy view, so they
cannot decide what to skip. Tied tensors (one storage under several names) are digested once per check.

Digests:

- CPU tensors: xxh3-128 of the tensor's bytes (about 0.1 s per GB), exact for any change up to hash
  collisions.
- Tensors on an accelerator are digested where they are, so an edit does not copy the whole model to the
  host (a 7B model in bf16 is 14 GB over PCIe per edit). The raw bits are viewed as integers of the
  element's width, x_i, split into chunks of C elements (i = kC + j), and each of two lanes computes

      S = sum_k m_k sum_j b_j x_{kC+j}  (mod 2^64),

  in int64 wrap-around arithmetic, with pseudo-random odd weights b_j (per position in a chunk) and m_k
  (per chunk) from splitmix64. The weight of element i, m_k b_j, is odd, hence invertible modulo 2^64,
  and two different bit patterns of one element differ by a non-zero integer below 2^64: changing any
  single element always changes S. A change of many elements is missed only if both lanes' 64-bit sums
  coincide by chance. The cost is one multiply and one sum per element and lane, on the device.
  Should a backend lack these integer kernels, the tensor is copied to the host and hashed with xxh3.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import xxhash

from knowgic.errors import RestoreError

# Elements per chunk of the on-device checksum: bounds its int64 temporaries (32 MiB each).
CHECKSUM_CHUNK = 1 << 22
_LANE_SEEDS = (0x243F6A8885A308D3, 0x13198A2E03707344)
_MASK64 = (1 << 64) - 1
_INT_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class TensorStamp:
    digest: str
    shape: tuple[int, ...]
    dtype: str
    device: str


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 PyTorch stores."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (PyTorch's ``>>`` is arithmetic: mask off the copied sign bits)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _odd_weights(count: int, seed: int, device: torch.device) -> torch.Tensor:
    """splitmix64 of ``seed`` and the positions ``0 .. count-1``, forced odd (int64, wrapping)."""
    z = torch.arange(count, dtype=torch.int64, device=device)
    z = z * _signed(0x9E3779B97F4A7C15) + _signed(seed)
    z = (z ^ _shift_right(z, 30)) * _signed(0xBF58476D1CE4E5B9)
    z = (z ^ _shift_right(z, 27)) * _signed(0x94D049BB133111EB)
    return (z ^ _shift_right(z, 31)) | 1


def _as_integers(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as a flat integer tensor with one integer per element (where widths allow)."""
    flat = tensor.detach().contiguous().reshape(-1)  # reshape first: a 0-dim tensor has no byte view
    width = flat.element_size()
    if width in _INT_OF_WIDTH:
        return flat.view(_INT_OF_WIDTH[width])
    return flat.view(torch.int64)  # wider elements (complex128): several integers each


def checksum(tensor: torch.Tensor, chunk: int = CHECKSUM_CHUNK) -> str:
    """The on-device digest of the module docstring, as 32 hex digits (two 64-bit lanes)."""
    bits = _as_integers(tensor)
    n, device = bits.numel(), bits.device
    if n == 0:
        return "0" * 32
    n_chunks = -(-n // chunk)
    within = torch.stack([_odd_weights(min(chunk, n), seed, device) for seed in _LANE_SEEDS])
    across = torch.stack([_odd_weights(n_chunks, ~seed, device) for seed in _LANE_SEEDS])
    sums = torch.empty(len(_LANE_SEEDS), n_chunks, dtype=torch.int64, device=device)
    for k in range(n_chunks):
        part = bits[k * chunk : (k + 1) * chunk]
        # int16/int32 bits times int64 weights compute in int64 (type promotion), wrapping on overflow.
        sums[:, k] = (part * within[:, : part.numel()]).sum(-1)
    lanes = (sums * across).sum(-1).tolist()
    return "".join(f"{lane & _MASK64:016x}" for lane in lanes)


def _xxh3(tensor: torch.Tensor) -> str:
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    flat = data.contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy() if flat.numel() else b""
    return xxhash.xxh3_128_hexdigest(memoryview(raw) if not isinstance(raw, bytes) else raw)


def _digest(tensor: torch.Tensor) -> str:
    device = tensor.device.type
    if device == "cpu":
        return "xxh3:" + _xxh3(tensor)
    if device == "meta":  # no content to compare (offloaded placeholder); shape and dtype still are
        return "meta"
    try:
        return "sum:" + checksum(tensor)
    except (RuntimeError, NotImplementedError):  # a backend without int64 kernels: hash on the host
        return "xxh3:" + _xxh3(tensor)


def named_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, tied aliases included, by its fingerprint name (``param:``/``buffer:``)."""
    named: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        named[f"param:{name}"] = param
    for name, buf in model.named_buffers(remove_duplicate=False):
        named[f"buffer:{name}"] = buf
    return named


def _stamps(model: torch.nn.Module) -> dict[str, TensorStamp]:
    digests: dict[tuple[object, ...], str] = {}
    stamps = {}
    for name, tensor in named_tensors(model).items():
        # Tied weights share one storage: digest it once.
        alias = (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
        if alias not in digests:
            digests[alias] = _digest(tensor)
        stamps[name] = TensorStamp(
            digest=digests[alias],
            shape=tuple(tensor.shape),
            dtype=str(tensor.dtype),
            device=str(tensor.device),
        )
    return stamps


def fingerprint(model: torch.nn.Module) -> dict[str, TensorStamp]:
    """Stamp every parameter and buffer of ``model``."""
    return _stamps(model)


def changed_since(model: torch.nn.Module, before: dict[str, TensorStamp]) -> list[str]:
    """Names of tensors that differ from ``before`` (content, shape, dtype, device), or were added/removed."""
    now = _stamps(model)
    changed = set(before) ^ set(now)
    changed.update(name for name in set(before) & set(now) if before[name] != now[name])
    return sorted(changed)


def assert_restored(
    model: torch.nn.Module, before: dict[str, TensorStamp], editor: str
) -> dict[str, TensorStamp]:
    """Raise :class:`RestoreError` naming what changed; return ``before`` when all is restored."""
    changed = changed_since(model, before)
    if changed:
        shown = ", ".join(n.split(":", 1)[1] for n in changed[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        raise RestoreError(
            f"editor {editor!r} did not restore the model exactly: {len(changed)} tensor(s) differ "
            f"({shown}{more}); results would be contaminated, stopping"
        )
    return before
