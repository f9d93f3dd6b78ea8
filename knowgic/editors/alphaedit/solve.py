"""AlphaEdit's closed-form update at one layer (Fang et al., ICLR 2025, Sec. 3.2).

Notation of the paper: K₁ (d₀×u) and R = V₁ − W K₁ (d₁×u) are the keys and residuals of the facts edited
now, K_p the keys of the facts edited earlier in a sequential run, P the null-space projector of the
preserved knowledge (:mod:`knowgic.editors.alphaedit.projection`). The perturbation is searched as Δ P, so
that the preserved knowledge is untouched by construction, and the paper's objective is

    min_Δ  ‖(W + Δ P) K₁ − V₁‖² + α ‖Δ P‖² + ‖Δ P K_p‖²,

(α weighs the norm term; the reference code calls it ``L2``). Setting the gradient to zero gives the
paper's closed form

    Δ_AlphaEdit = R K₁ᵀ P (K_p K_pᵀ P + K₁ K₁ᵀ P + α I)⁻¹.

The solution already lies in the null space: with M = K_p K_pᵀ + K₁ K₁ᵀ and P_⊥ = I − P, one has
(M P + α I) P_⊥ = α P_⊥, hence Δ P_⊥ = R K₁ᵀ P P_⊥ / α = 0 and Δ P = Δ. We solve the transposed system
(P M + α I) Δᵀ = P K₁ Rᵀ in float64, as the reference implementation does.
"""

from __future__ import annotations

import torch


def alphaedit_delta(
    keys: torch.Tensor,
    residuals: torch.Tensor,
    projector: torch.Tensor,
    l2: float,
    prior_gram: torch.Tensor | None = None,
) -> torch.Tensor:
    """Δ = R K₁ᵀ P (K_p K_pᵀ P + K₁ K₁ᵀ P + α I)⁻¹, shape (d_out, d_in), float64.

    ``keys`` K₁: (d_in, u); ``residuals`` R: (d_out, u); ``projector`` P: (d_in, d_in), symmetric and
    idempotent; ``l2`` α > 0; ``prior_gram`` K_p K_pᵀ: (d_in, d_in), the summed key Gram matrices of
    earlier edits (``None`` for the first edit after a reset).
    """
    if keys.ndim != 2 or residuals.ndim != 2 or keys.shape[1] != residuals.shape[1]:
        raise ValueError(
            f"keys (d_in, u) and residuals (d_out, u) must share u; got {tuple(keys.shape)}, "
            f"{tuple(residuals.shape)}"
        )
    d_in = keys.shape[0]
    if projector.shape != (d_in, d_in):
        raise ValueError(f"projector must be ({d_in}, {d_in}), got {tuple(projector.shape)}")
    if prior_gram is not None and prior_gram.shape != (d_in, d_in):
        raise ValueError(f"prior_gram must be ({d_in}, {d_in}), got {tuple(prior_gram.shape)}")
    if not l2 > 0:
        raise ValueError(f"l2 (alpha) must be > 0, got {l2!r}")
    device = keys.device
    k = keys.to(torch.float64)
    r = residuals.to(device=device, dtype=torch.float64)
    p = projector.to(device=device, dtype=torch.float64)
    gram = k @ k.T
    if prior_gram is not None:
        gram = gram + prior_gram.to(device=device, dtype=torch.float64)
    lhs = p @ gram
    lhs.diagonal().add_(l2)
    rhs = p @ (k @ r.T)
    return torch.linalg.solve(lhs, rhs).T
