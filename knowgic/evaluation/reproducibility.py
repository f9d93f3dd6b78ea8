"""What a run can promise about repeating it: recorded in ``results.json`` under ``environment``."""

from __future__ import annotations

from typing import Any

import torch

CPU_NOTE = (
    "bitwise: on the CPU the same arguments, machine, package versions, thread count and dtype give the "
    "same metrics to the last bit (generate samples from a fixed seed)"
)
GPU_NOTE = (
    "not bitwise: GPU kernels (cuBLAS reductions, atomic adds in scatter and index operations, "
    "attention) may sum in a different order on each run, so metrics can differ in the last bits and, "
    "where a score sits on a decision boundary (known, p' > p), by more; torch's deterministic mode is not "
    "enabled because not every operation the editors use has a deterministic kernel"
)


def reproducibility(device: str) -> dict[str, Any]:
    """``bitwise_reproducible`` and a sentence saying why, for a run on ``device``."""
    on_cpu = torch.device(device).type == "cpu"
    return {"bitwise_reproducible": on_cpu, "reproducibility": CPU_NOTE if on_cpu else GPU_NOTE}
