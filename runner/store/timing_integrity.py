"""What hashing on read costs: a store of N signed runs (distinct results files and archives), listed the
ways readers list it, each timed as the median of ``--repeats`` runs::

    warm listing       one reader, listing again: a stat per file, no hashing (the leaderboard's timer)
    hash every list    the same reader made to hash every results file and archive on every listing
                       (what "hash whatever is listed, every time" would cost)
    fresh reader       a new reader with the summary cache warm (`knowgic store list`, a new process):
                       every file hashed once, no results file verified again
    serve an archive   one archive hashed in full (the result page's download, a worker's run)
    serve a document   one results file hashed and verified in full (the result page)

It prints the times and each listing's ratio to the warm listing::

    python -m knowgic.runner.store.timing_integrity [--runs 100] [--archive-kib 256] [--results FILE] [--repeats 5]

``--results``: a results.json to copy (default: ``knowgic evaluate --editor none`` on knowgic-tiny, every
edit, made in a temporary folder); each copy differs in one timing field, so that every file is its own
content. Building the store verifies each copy once (about 0.4 s each for a full knowgic-tiny run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from knowgic.argtypes import positive_int
from knowgic.results import content_sha256
from knowgic.runner.store.signing import TrustedKeys, generate_key
from knowgic.runner.store.store import RACY_SECONDS, ResultsStore


def _default_results(folder: Path) -> Path:
    out = folder / "run"
    command = [sys.executable, "-m", "knowgic.cli", "evaluate", "--model", "knowgic-tiny", "--editor", "none"]
    subprocess.run([*command, "--out", str(out)], check=True, capture_output=True)
    return out / "results.json"


def _archive(folder: Path, index: int, kib: int) -> Path:
    """A submission archive of about ``kib`` KiB (random bytes do not compress)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission.yaml").write_text(f"name: run-{index}\n", encoding="utf-8")
    (folder / "weights.bin").write_bytes(os.urandom(kib * 1024))
    archive = folder / "submission.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("submission.yaml", "weights.bin"):
            tar.add(folder / name, arcname=name)
    return archive


def build_store(root: Path, results: Path, runs: int, archive_kib: int, log: Callable[[str], None]) -> Path:
    """A store of ``runs`` signed runs; returns the trusted keys file."""
    document = json.loads(results.read_text(encoding="utf-8"))
    signer = generate_key(root.parent / "signing-key")
    keys = root.parent / "trusted-keys"
    keys.write_text(signer.public_line + "\n", encoding="utf-8")
    store = ResultsStore(root, verified_cache=root.parent / "cache")
    started = time.monotonic()
    for index in range(runs):
        copy = json.loads(json.dumps(document))
        copy["timing"]["total_seconds"] = document["timing"]["total_seconds"] + index * 1e-3
        copy["sha256"] = content_sha256(copy)
        store.add_verified(
            copy,
            archive_path=_archive(root.parent / "archives" / str(index), index, archive_kib),
            manifest={"name": f"run-{index}"},
            job={"job_id": f"job-{index}"},
            signer=signer,
        )
        if (index + 1) % 20 == 0:
            log(f"  {index + 1}/{runs} runs stored ({time.monotonic() - started:.0f} s)")
    return keys


def _median(repeats: int, work: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(root: Path, keys: Path, repeats: int) -> dict[str, float]:
    trusted = TrustedKeys.load(keys)
    cache = root.parent / "cache"
    reader = ResultsStore(root, verified_cache=cache, trusted_keys=trusted)
    time.sleep(RACY_SECONDS + 0.5)  # every file older than the racy window: hashes are remembered
    scan = reader.scan()
    assert all(e.source == "verified" for e in scan.entries) and not scan.skipped
    entry = scan.entries[0]
    assert entry.submission_sha256 is not None

    def hash_every_list() -> None:
        reader._digests.clear()
        reader.scan()

    return {
        "warm listing": _median(repeats, reader.scan),
        "hash every list": _median(repeats, hash_every_list),
        "fresh reader": _median(
            repeats, lambda: ResultsStore(root, verified_cache=cache, trusted_keys=trusted).scan()
        ),
        "serve an archive": _median(repeats, lambda: reader.submission_path(entry.submission_sha256)),
        "serve a document": _median(repeats, lambda: entry.document),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowgic.runner.store.timing_integrity", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=positive_int, default=100, help="signed runs in the store (100)")
    parser.add_argument("--archive-kib", type=positive_int, default=256, help="size of each archive (256)")
    parser.add_argument("--results", type=Path, default=None, help="results.json to copy (default: made)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed repeats, median (5)")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="knowgic-integrity-") as folder:
        work = Path(folder)
        results = args.results or _default_results(work)
        size = results.stat().st_size
        log(
            f"building a store of {args.runs} signed runs ({size / 1e3:.0f} kB results, {args.archive_kib} KiB archives)"
        )
        keys = build_store(work / "store", results, args.runs, args.archive_kib, log)
        times = measure(work / "store", keys, args.repeats)
    base = times["warm listing"]
    per_run = 1e3 / args.runs
    print(
        f"{args.runs} runs, results {size / 1e3:.0f} kB, archives {args.archive_kib} KiB, median of {args.repeats}"
    )
    for name, seconds in times.items():
        listing = name not in ("serve an archive", "serve a document")
        extra = (
            f"  {seconds * per_run:7.3f} ms/run  x{seconds / base:.1f} the warm listing" if listing else ""
        )
        print(f"{name:18s} {seconds * 1e3:9.1f} ms{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
