"""Residual targets through a norm on the MLP output (Gemma 2/3's ``post_feedforward_layernorm``).

MEMIT (Eq. 20) assumes the MLP output m^l = W k is added to the residual unchanged, so the residual r the
layer must supply is also the change of W k. Gemma 3 adds RMSNorm(m) = g ⊙ m / rms(m) instead; writing r
into W k would be rescaled by g / rms(m) (≈ 10-1000× here) and wreck the model. This module turns the residual
target r into the change Δm of the projection's output that gives RMSNorm(m + Δm) ≈ RMSNorm(m) + r:

    v = m / rms(m),   w = r / g − (⟨r / g, v⟩ / ⟨v, v⟩) v,   m' = rms(m) · (v + w),   Δm = m' − m,

so that RMSNorm(m') = g ⊙ (v + w) / rms(v + w) = RMSNorm(m) + g ⊙ w to first order in r. RMSNorm's output
has a fixed scale, so the part g ⊙ (⟨r / g, v⟩ / ⟨v, v⟩) v of r (its radial part, measured in units of g)
cannot be written and is dropped; output dimensions with g ≈ 0 are left as they are. The gain g is read off the module itself as RMSNorm(1)·sqrt(1 + ε), which
covers both the ``weight`` and Gemma's ``1 + weight`` conventions.
"""

from __future__ import annotations

import math

import torch


def norm_gain(norm: torch.nn.Module, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """g of an RMSNorm module (float64)."""
    eps = float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6)))
    with torch.no_grad():
        ones = torch.ones((1, dim), device=device, dtype=dtype)
        return norm(ones)[0].to(torch.float64) * math.sqrt(1.0 + eps)


def residual_to_mlp_output(norm: torch.nn.Module, m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Δm (n, d) float64 for MLP outputs ``m`` (n, d, model dtype) and residual targets ``r`` (n, d)."""
    eps = float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6)))
    g = norm_gain(norm, m.shape[-1], m.device, m.dtype)
    m64 = m.to(torch.float64)
    rms = torch.sqrt(m64.pow(2).mean(-1, keepdim=True) + eps)
    # Output dims the norm switches off (g ≈ 0, e.g. Gemma's 1 + weight ≈ 0) cannot be written: leave them.
    live = g.abs() > 1e-4 * float(g.abs().max())
    g_safe = torch.where(live, g, torch.ones_like(g))
    v = m64 / rms  # RMSNorm's input direction, rms(v) = 1, y = g ⊙ v
    w = torch.where(live, r.to(torch.float64) / g_safe, torch.zeros_like(v))
    # Only changes of v that keep rms(v) = 1 to first order are reachable: drop w's component along v.
    w = w - (w * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True) * v
    return rms * (v + w) - m64
