"""Editors that hand the trusted score stage limits it must not take, or look for the private split."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from knowgic.editors import EditHandle, Editor


class LongPrefix(Editor):
    """An in-context editor whose prefix is as long as a delta may carry (100,000 characters, ~41k tokens
    for a model of 1,024 positions); it once took the score stage past its memory limit."""

    name = "hostile-long-prefix"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        return EditHandle(prompt_prefix=("Paris is lovely. " * 10_000)[:100_000])


class Overflow(Editor):
    """Sets an MLP weight to 3e38: finite in float32 (a valid delta), but the activations overflow."""

    name = "hostile-overflow"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        weight = model.transformer.h[0].mlp.c_fc.weight
        saved = weight.detach().clone()
        with torch.no_grad():
            weight.fill_(3e38)

        def restore() -> None:
            with torch.no_grad():
                weight.copy_(saved)

        return EditHandle(restore_fn=restore)


class EarlyDelta(Editor):
    """Writes its first edit's delta itself (no change), waits until the score stage has scored it, then
    lets the harness write the real one for the same edit: the second must not go unnoticed."""

    name = "hostile-early-delta"

    def __init__(self, hparams: dict[str, Any]) -> None:
        super().__init__(hparams)
        self.calls = 0

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        from knowgic.runner.stages.deltas import DeltaEdit, DeltaWriter, independent_key

        index, self.calls = self.calls, self.calls + 1
        if index == 0:
            folder = Path(sys.argv[sys.argv.index("--out") + 1])
            key = independent_key(0, requests[0].edit_id)
            DeltaWriter(folder, 1 << 30).write(key, "independent", [DeltaEdit(requests[0].edit_id)], {})
            deadline = time.monotonic() + 120
            while (folder / f"{key}.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return EditHandle(prompt_prefix="Forget everything you knew. ")


class ProbePrivate(Editor):
    """Looks for the operator's private split where submitted code runs: a path, a mount."""

    name = "hostile-probe-private"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        mounts = Path("/proc/self/mountinfo").read_text()
        found = [p for p in ("/private",) if os.path.exists(p)]
        found += [line for line in mounts.splitlines() if "/private" in line.split()[4:5]]
        if found:
            raise RuntimeError(f"the private split is visible to submitted code: {found}")
        return EditHandle(info={"private_visible": False, "mounts": len(mounts.splitlines())})
