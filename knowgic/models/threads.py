"""How many CPU threads a run's matrix products get.

PyTorch splits each operation over all cores by default. For a model whose matrices are small (knowgic-tiny
is 1M parameters, width 128) the split gains nothing on an idle machine and costs a great deal on a busy
one: the threads wait for each other at every operation, and with another process on the cores a forward
pass of knowgic-tiny was measured 40x slower with 2 threads than with 1 (10 ms either way when idle). So
small models run single-threaded on the CPU unless the user set ``OMP_NUM_THREADS`` themselves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Below this many parameters a model's operations are too small to share between threads.
SMALL_MODEL_PARAMETERS = 20_000_000


def threads_for(model: torch.nn.Module, device: str | torch.device) -> int:
    """The intra-op thread count for running ``model`` on ``device`` (the current count unless small on CPU)."""
    current = torch.get_num_threads()
    if torch.device(device).type != "cpu" or "OMP_NUM_THREADS" in os.environ:
        return current
    n_parameters = sum(p.numel() for p in model.parameters())
    return 1 if n_parameters < SMALL_MODEL_PARAMETERS else current


@contextmanager
def cpu_threads(model: torch.nn.Module, device: str | torch.device) -> Iterator[int]:
    """Run the block with :func:`threads_for`'s count; the previous count comes back afterwards."""
    previous = torch.get_num_threads()
    chosen = threads_for(model, device)
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(previous)
