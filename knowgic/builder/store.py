"""The build folder: each stage's output written atomically with the key of its inputs, and journals.

    BUILD/
      manifest.json            stage -> {key, output, sha256}: the record a rerun compares against
      stages/<stage>.json      a finished stage's output (written through a temporary file)
      stages/<stage>.journal.jsonl   per-item results of a long stage, appended and flushed as they come
      review.jsonl             the review file: a person's (or the judge's) decisions, never recomputed

A stage's key is the sha256 of its name, its configuration and the sha256 of every output it reads, so
a rerun skips a stage whose inputs did not change and redoes one (and all after it) whose inputs did.
A journal line carries the stage key too: an interrupted stage resumes from the items already done under
the same key, and items done under another key are ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from knowgic.dataset.io import atomic_write_text, canonical_json, parse_json, read_json, sha256_text
from knowgic.errors import KnowgicError

MANIFEST = "manifest.json"
STAGE_FORMAT = 3
"""Part of every stage key: raised when a change of the builder changes what a stage computes."""


def stage_key(stage: str, config: Mapping[str, Any], inputs: Mapping[str, str]) -> str:
    """sha256 of the stage's name, its configuration and its inputs' sha256 (canonical JSON)."""
    return sha256_text(
        canonical_json({"stage": stage, "format": STAGE_FORMAT, "config": config, "inputs": dict(inputs)})
    )


class Journal:
    """Per-item records of one stage run (key), appended one JSON line at a time and flushed."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key
        self.done: dict[str, dict[str, Any]] = {}
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            if text and not text.endswith("\n"):
                # a killed run may leave its last line cut short: drop it (that item runs again), so
                # the next line appended starts on a line of its own
                text = text[: text.rfind("\n") + 1]
                atomic_write_text(path, text)
            for lineno, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise KnowgicError(f"{path}: line {lineno} is not valid JSON") from None
                if row.get("key") == key:
                    self.done[row["item"]] = row["record"]

    def add(self, item: str, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"key": self.key, "item": item, "record": record}, ensure_ascii=False) + "\n"
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.done[item] = dict(record)


class BuildStore:
    """Stage outputs and the manifest of one build folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        if root.exists() and not root.is_dir():
            raise KnowgicError(f"build folder {root} is a file")
        root.mkdir(parents=True, exist_ok=True)

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def manifest(self) -> dict[str, dict[str, Any]]:
        if not self.manifest_path.is_file():
            return {}
        data = read_json(self.manifest_path)
        if not isinstance(data, dict):
            raise KnowgicError(f"{self.manifest_path}: not a build manifest")
        return data

    def output_path(self, stage: str) -> Path:
        return self.root / "stages" / f"{stage}.json"

    def journal(self, stage: str, key: str) -> Journal:
        return Journal(self.root / "stages" / f"{stage}.journal.jsonl", key)

    def cached(self, stage: str, key: str) -> Any | None:
        """The stage's output when it was made under ``key`` and is intact, else None."""
        entry = self.manifest().get(stage)
        path = self.output_path(stage)
        if not entry or entry.get("key") != key or not path.is_file():
            return None
        text = path.read_text(encoding="utf-8")
        if sha256_text(text) != entry.get("sha256"):
            return None
        return parse_json(text, str(path))

    def save(self, stage: str, key: str, output: Any) -> str:
        """Write the output, then record it in the manifest; returns the output's sha256."""
        text = json.dumps(output, ensure_ascii=False, indent=1) + "\n"
        atomic_write_text(self.output_path(stage), text)
        digest = sha256_text(text)
        manifest = self.manifest()
        manifest[stage] = {"key": key, "output": f"stages/{stage}.json", "sha256": digest}
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        return digest

    def digest(self, stage: str) -> str:
        entry = self.manifest().get(stage)
        if not entry:
            raise KnowgicError(f"stage {stage!r} has not run in {self.root}")
        return str(entry["sha256"])

    def log_timing(self, stage: str, seconds: float) -> None:
        """Append how long a stage ran to ``timings.jsonl`` (kept out of the outputs: they stay
        byte-identical between runs)."""
        with (self.root / "timings.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"stage": stage, "seconds": seconds}) + "\n")

    def stages(self) -> Iterator[str]:
        yield from self.manifest()
