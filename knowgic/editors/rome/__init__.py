"""ROME (Meng et al. 2022): rank-one update of one MLP output projection.

One module per piece of the method: :mod:`.context_templates` (random prefixes), :mod:`.compute_u` (k* and
C⁻¹k*), :mod:`.compute_v` (the δ/v* optimisation, shared with MEMIT), :mod:`.rome_main` (Eq. 2 and the
editor), :mod:`.weights` (W in (d_out, d_in) orientation), :mod:`.hparams`.
"""

from knowgic.editors.rome.rome_main import ROMEEditor, RomeUpdate, compute_rome_update, rank_one_update

__all__ = ["ROMEEditor", "RomeUpdate", "compute_rome_update", "rank_one_update"]
