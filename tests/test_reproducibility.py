"""Two runs of ``knowgic evaluate`` with the same arguments give the same metrics to the last bit on the CPU.

Each side is a separate Python process (with its own hash seed, so no set or dict order can hide in the
results) that runs ``knowgic evaluate`` through the CLI's ``main`` once per configuration; the two
processes run at the same time. Pre-edit scores are recomputed (``--no-cache``), so both sides score
everything themselves. ``metrics`` and ``counts`` are compared exactly (floats by their JSON text, which
is their full binary value), and so is every chain's post-edit reliability.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# (label, extra evaluate arguments): every protocol, and the two editors of the default suite.
FAST_RUNS = (
    ("rome-logprob", ["--editor", "rome", "--limit", "2"]),
    ("ice-logprob", ["--editor", "ice", "--limit", "2"]),
    ("ice-generate", ["--editor", "ice", "--limit", "1", "--protocol", "generate"]),
    ("rome-greedy", ["--editor", "rome", "--limit", "1", "--protocol", "greedy"]),
)
BUILT_IN_EDITORS = ("none", "ice", "rome", "memit", "alphaedit", "prune", "rect", "ft", "lora")

_DRIVER = """
import json, sys
from knowgic.cli import main
for label, argv in json.loads(sys.argv[1]):
    code = main(argv)
    if code != 0:
        sys.exit(f"{label}: exit {code}")
"""


def _start(runs: list[tuple[str, list[str]]], out: Path, hash_seed: str) -> subprocess.Popen[str]:
    argv = [
        (label, ["evaluate", "--model", "knowgic-tiny", *extra, "--no-cache", "--out", str(out / label)])
        for label, extra in runs
    ]
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", _DRIVER, json.dumps(argv)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _reproduced(doc: dict[str, Any]) -> dict[str, Any]:
    """What must repeat bit for bit: every metric with its interval, the counts, every chain's R and R'."""
    return {
        "metrics": doc["metrics"],
        "counts": doc["counts"],
        "chains": [(c["case_id"], c["r_pre"], c["r_post"], c["known_post"]) for c in doc["chains"]],
        "per_edit": [
            {k: v for k, v in record.items() if k not in ("seconds", "info")} for record in doc["per_edit"]
        ],
    }


def _run_twice(runs: list[tuple[str, list[str]]], tmp_path: Path, timeout: int) -> None:
    first = _start(runs, tmp_path / "first", "1")
    second = _start(runs, tmp_path / "second", "2")
    for proc in (first, second):
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-2000:]
    for label, _ in runs:
        a = json.loads((tmp_path / "first" / label / "results.json").read_text(encoding="utf-8"))
        b = json.loads((tmp_path / "second" / label / "results.json").read_text(encoding="utf-8"))
        assert a["environment"]["bitwise_reproducible"] is True  # CPU runs promise it...
        # ... and keep it: the JSON text of a float is its exact binary value.
        assert json.dumps(_reproduced(a)) == json.dumps(_reproduced(b)), label
        assert a["config"]["protocol_params"] == b["config"]["protocol_params"]


def test_each_protocol_and_default_editor_repeats_bit_for_bit(knowgic_tiny, tmp_path) -> None:
    # knowgic_tiny: the model is built (and cached) before two processes would race to build it.
    _run_twice(list(FAST_RUNS), tmp_path, timeout=600)


@pytest.mark.slow
def test_every_built_in_editor_repeats_bit_for_bit(knowgic_tiny, tmp_path) -> None:
    runs = [(editor, ["--editor", editor, "--limit", "3"]) for editor in BUILT_IN_EDITORS]
    runs.append(("memit-sequential", ["--editor", "memit", "--limit", "3", "--mode", "sequential"]))
    _run_twice(runs, tmp_path, timeout=1800)


def test_a_gpu_run_does_not_claim_bitwise_reproducibility() -> None:
    from knowgic.evaluation.reproducibility import reproducibility

    assert reproducibility("cpu")["bitwise_reproducible"] is True
    gpu = reproducibility("cuda:0")
    assert gpu["bitwise_reproducible"] is False and "not bitwise" in gpu["reproducibility"]
