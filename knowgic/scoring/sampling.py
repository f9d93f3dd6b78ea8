"""Reproducible sampling for the ``generate`` protocol.

Each (question, sample index) gets its own random stream, seeded from a hash of (seed, question, index),
and draws one uniform u_t per decoding step up front. The token at step t is then read off the
distribution by inverse-CDF sampling, x_t = min{ i : F(i) > u_t }, with F the cumulative distribution of
softmax(z / T) restricted to the top-p nucleus (Holtzman et al. 2020, "The Curious Case of Neural Text
Degeneration", §3.1). A sample therefore depends only on its own question and index, never on batch size,
batch composition or the query's position in the list; and since the prefix is not part of the seed, the
edited model (weights or in-context prefix) is sampled with the same uniforms as the unedited one, which
lowers the variance of pre/post comparisons (common random numbers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch


def sample_seed(seed: int, key: str, sample: int) -> int:
    """A 63-bit seed for sample ``sample`` of the question ``key``."""
    digest = hashlib.sha256(f"{seed}\x1f{sample}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def step_uniforms(seeds: Sequence[int], steps: int) -> torch.Tensor:
    """(len(seeds), steps) float64 uniforms in [0, 1), row i drawn from a generator seeded with seeds[i]."""
    out = torch.empty(len(seeds), steps, dtype=torch.float64)
    gen = torch.Generator(device="cpu")
    for i, s in enumerate(seeds):
        gen.manual_seed(s)
        out[i] = torch.rand(steps, generator=gen, dtype=torch.float64)
    return out


def inverse_cdf_sample(
    logits: torch.Tensor, u: torch.Tensor, temperature: float, top_p: float
) -> torch.Tensor:
    """Token ids (B,) drawn from softmax(logits / temperature) within the top-p nucleus, using uniforms u (B,).

    With ``top_p < 1`` tokens are ordered by probability (stable sort) and the smallest prefix whose mass
    reaches ``top_p`` is kept; with ``top_p == 1`` the vocabulary order is used (no sort needed).
    Zero-probability tokens are never drawn.
    """
    if logits.device.type == "mps":  # no float64 there
        logits = logits.cpu()
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        probs, order = probs.sort(dim=-1, descending=True, stable=True)
        before = probs.cumsum(dim=-1) - probs  # mass strictly above each token
        probs = probs.masked_fill(before >= top_p, 0.0)
    else:
        order = None
    cdf = probs.cumsum(dim=-1)
    target = u.to(device=cdf.device, dtype=cdf.dtype).unsqueeze(-1) * cdf[:, -1:]
    pick = torch.searchsorted(cdf, target, right=True)
    # Rounding could put u * total at the very top of the CDF: fall back to the last drawable token.
    last = (probs > 0).long().cumsum(dim=-1).argmax(dim=-1, keepdim=True)
    pick = torch.minimum(pick, last)
    if order is not None:
        pick = order.gather(-1, pick)
    return pick.squeeze(-1)
