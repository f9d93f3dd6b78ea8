"""MEMIT (Meng et al. 2023): many edits at once, spread over several MLP output projections.

:mod:`.compute_z` (target residuals, Eq. 16), :mod:`.compute_ks` (keys, Eq. 19), :mod:`.memit_main`
(Algorithm 1, :class:`LayerSystem`, :class:`MEMITEditor`), :mod:`.hparams`, :mod:`.schema` (extending the
hparams schema in subclasses).
"""

from knowgic.editors.memit.memit_main import LayerSystem, MEMITEditor, memit_solve

__all__ = ["LayerSystem", "MEMITEditor", "memit_solve"]
