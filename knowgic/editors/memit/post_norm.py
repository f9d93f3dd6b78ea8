"""Residual targets through a norm on the MLP output (Gemma 2/3's ``post_feedforward_layernorm``).

MEMIT (Eq. 20) assumes the MLP output m^l = W k is added to the residual unchanged, so the residual r the
layer must supply is also the change of W k. Gemma 3 adds y = RMSNorm(m) = g ⊙ m / rms(m) instead; writing
r into W k would be rescaled by g / rms(m) (≈ 10-1000× here) and wreck the model. This module turns the
residual target r into the change Δm of the projection's output with RMSNorm(m + Δm) = y + r whenever y + r
is an output the norm can give at all, i.e. rms((y + r) / g) = 1:

    u = m / rms(m) + r / g,   m' = κ · rms(m) · u / rms(u),   Δm = m' − m,

since RMSNorm(c u) = g ⊙ u / rms(u) for every c > 0. Otherwise the norm gives (y + r) / rms(u): the
direction of y + r at the only scale it allows. The norm leaves the scale of m' free; κ fixes it. MEMIT
passes κ = ‖m^L + δ‖ / ‖m^L‖, the scale its optimisation of δ chose at the z layer L (compute_z.py), so that
at L, before the layers below have changed anything, m' is exactly ROME's v* = m^L + δ; a partly written Δm
(λC keeps W k* from reaching m' fully) then still turns m towards the target as far as δ did. Output
dimensions with g ≈ 0 are left as they are. The gain g is read off the module itself as
RMSNorm(1)·sqrt(1 + ε), which covers both the ``weight`` and Gemma's ``1 + weight`` conventions.
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


def residual_to_mlp_output(
    norm: torch.nn.Module, m: torch.Tensor, r: torch.Tensor, scale: torch.Tensor | float = 1.0
) -> torch.Tensor:
    """Δm (n, d) float64 for MLP outputs ``m`` (n, d, model dtype), residual targets ``r`` (n, d) and κ
    (``scale``, a number or (n,) per row)."""
    g = norm_gain(norm, m.shape[-1], m.device, m.dtype)
    m64 = m.to(torch.float64)
    # Without the norm's ε (negligible against rms(m) of a real MLP output), so that r = 0 gives Δm = 0.
    rms = torch.sqrt(m64.pow(2).mean(-1, keepdim=True)).clamp_min(1e-30)
    # Output dims the norm switches off (g ≈ 0, e.g. Gemma's 1 + weight ≈ 0) cannot be written: leave them.
    live = g.abs() > 1e-4 * float(g.abs().max())
    g_safe = torch.where(live, g, torch.ones_like(g))
    v = m64 / rms  # RMSNorm's input direction, rms(v) = 1, y = g ⊙ v
    u = v + torch.where(live, r.to(torch.float64) / g_safe, torch.zeros_like(v))
    kappa = torch.as_tensor(scale, dtype=torch.float64, device=m64.device).reshape(-1, 1)
    return kappa * rms * u / torch.sqrt(u.pow(2).mean(-1, keepdim=True)) - m64
