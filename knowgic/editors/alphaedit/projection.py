"""The null-space projector of AlphaEdit (Fang et al., ICLR 2025, Sec. 3.1).

Notation of the paper: K₀ ∈ R^{d₀×n} are the keys of the knowledge to preserve at the edited layer. A
perturbation Δ leaves their outputs unchanged when Δ K₀ = 0. Because K₀ is far too large to hold, the paper
works with the d₀×d₀ matrix K₀K₀ᵀ, which has the same null space: with {U, Λ, Uᵀ} = SVD(K₀K₀ᵀ), Û collects
the eigenvectors whose eigenvalues are (numerically) zero, and

    P = Û Ûᵀ

projects any row vector onto the null space of K₀ᵀ, so that (Δ P) K₀ = 0. Like the reference implementation,
we estimate K₀K₀ᵀ by the second moment C = E[k kᵀ] of keys over a text corpus (the same statistic MEMIT
uses) and count an eigenvalue as zero when it is below ``threshold`` (an absolute value on the scale of C).
C is symmetric positive semi-definite, so its SVD and its eigendecomposition coincide; we use ``eigh``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from knowgic.errors import KnowgicError


@dataclass(frozen=True)
class NullSpace:
    """P = Û Ûᵀ for the eigenvectors of C with eigenvalue below ``threshold``.

    ``dim`` is the number of such eigenvectors (the rank of P) out of ``total``; ``largest_kept`` is the
    largest eigenvalue inside the null space and ``smallest_dropped`` the smallest one outside it (``nan``
    when there is none), which shows how close the threshold sits to the spectrum's gap.
    """

    projector: torch.Tensor
    dim: int
    total: int
    threshold: float
    largest_kept: float
    smallest_dropped: float

    @property
    def complement(self) -> torch.Tensor:
        """P_⊥ = I − P: the projector onto the preserved-knowledge subspace."""
        eye = torch.eye(self.total, dtype=self.projector.dtype, device=self.projector.device)
        return eye - self.projector


def _check_second_moment(cov: torch.Tensor) -> None:
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"second moment must be a square matrix, got shape {tuple(cov.shape)}")
    if not bool(torch.isfinite(cov).all()):
        raise KnowgicError(
            "AlphaEdit: the key second-moment matrix C has non-finite entries; rebuild the stats"
        )


def null_space(cov: torch.Tensor, threshold: float) -> NullSpace:
    """The projector onto the span of C's eigenvectors with eigenvalue < ``threshold`` (float64).

    ``cov`` is C = E[k kᵀ] (or K₀K₀ᵀ itself; only the scale of ``threshold`` changes). The eigenvectors
    are computed in float64 on ``cov``'s device.
    """
    _check_second_moment(cov)
    if not threshold > 0:
        raise KnowgicError(f"AlphaEdit: nullspace_threshold must be > 0, got {threshold!r}")
    c = cov.to(torch.float64)
    c = 0.5 * (c + c.T)  # symmetrise: accumulated statistics are symmetric only up to rounding
    eigenvalues, eigenvectors = torch.linalg.eigh(c)
    small = eigenvalues < threshold
    basis = eigenvectors[:, small]
    projector = basis @ basis.T
    kept = eigenvalues[small]
    dropped = eigenvalues[~small]
    return NullSpace(
        projector=projector,
        dim=int(small.sum()),
        total=int(c.shape[0]),
        threshold=float(threshold),
        largest_kept=float(kept.max()) if kept.numel() else float("nan"),
        smallest_dropped=float(dropped.min()) if dropped.numel() else float("nan"),
    )


def null_space_projector(cov: torch.Tensor, threshold: float) -> torch.Tensor:
    """Just P (see :func:`null_space`)."""
    return null_space(cov, threshold).projector
