"""What the edit image takes out of the runner image: every benchmark text (the edit stage sees no test set).

Run as the first step of every edit image's build (runner/host/images.py), as root, before anything of the
submission enters the image, so the layer is shared by all submissions of one runner image::

    questions = every question of every installed dataset version (read before anything goes)
    remove    knowgic/dataset/hub/ and upstream/ (the rows, aliases, cards), knowgic/dataset/corrections.py
              (rows it rewrites), the source copy the runner image was built from (/opt/knowgic)
    strip     descriptions and examples from the JSON Schemas (they quote rows; validation is unchanged),
              the long description (the README) from the package's METADATA
    verify    no question is left in the package, its metadata, /opt or the home folders; else the build fails

The files stay in the runner image's lower layers, which nothing inside a container can read: a removed
file is hidden by the overlay file system. The score stage runs from the runner image itself, dataset and all.

Command line: ``python3 -m knowgic.runner.host.edit_base``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from knowgic.dataset.loading import load_cases
from knowgic.dataset.versions import available_versions, dataset_installed
from knowgic.paths import PACKAGE_DIR, spec_dir

SOURCE_COPY = Path("/opt/knowgic")
SCANNED = (Path("/opt"), Path("/home"), Path("/root"), Path("/cache"), Path("/results"))


def benchmark_questions() -> set[str]:
    """Every chain and broader-context question of every installed dataset version."""
    if not dataset_installed():
        raise SystemExit("error: no dataset installed here: nothing to check the edit image against")
    questions: set[str] = set()
    for version in available_versions():
        for case in load_cases(version):
            for block in (case.chain, case.broader_context):
                questions.update(q for q in block.questions if q)
    return questions


_ANNOTATIONS = ("description", "examples", "title", "$comment")
_NAME_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _without_annotations(node: Any, names: bool = False) -> Any:
    """A schema without its prose and examples (they quote rows); validation is unchanged. ``names``: the
    node maps property names to schemas, whose keys are names, not keywords."""
    if isinstance(node, dict):
        return {
            k: _without_annotations(v, names=not names and k in _NAME_MAPS)
            for k, v in node.items()
            if names or k not in _ANNOTATIONS
        }
    if isinstance(node, list):
        return [_without_annotations(v) for v in node]
    return node


def _strip_metadata() -> Path | None:
    """The package's METADATA without its long description (the README, which quotes a question)."""
    try:
        distribution = importlib.metadata.distribution("knowgic")
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [
        f for f in distribution.files or [] if f.name == "METADATA" and f.parent.name.endswith(".dist-info")
    ]
    if not found:
        return None
    path = Path(str(found[0].locate()))
    text = path.read_text(encoding="utf-8")
    headers = text.split("\n\n", 1)[0]
    path.write_text(headers + "\n", encoding="utf-8")
    return path.parent


def strip() -> list[Path]:
    """Remove and strip what the module docstring lists; returns the folders to verify."""
    dataset = PACKAGE_DIR / "dataset"
    for folder in (dataset / "hub", dataset / "upstream", SOURCE_COPY):
        shutil.rmtree(folder, ignore_errors=True)
    for path in [dataset / "corrections.py", *dataset.glob("__pycache__/corrections.*.pyc")]:
        path.unlink(missing_ok=True)
    for path in sorted((spec_dir() / "schemas").rglob("*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(_without_annotations(schema), indent=2, ensure_ascii=False) + "\n")
    metadata = _strip_metadata()
    return [PACKAGE_DIR, *([metadata] if metadata is not None else []), *SCANNED]


def _files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
        for parent, _dirs, names in os.walk(root):
            for name in names:
                path = Path(parent) / name
                if path.is_file() and not path.is_symlink():
                    yield path


def leftovers(questions: set[str], roots: Iterable[Path]) -> list[tuple[Path, str]]:
    """(file, question) for every file under ``roots`` that still holds a question."""
    pattern = re.compile(
        b"|".join(re.escape(q.encode("utf-8")) for q in sorted(questions, key=len, reverse=True))
    )
    found = []
    for path in _files(roots):
        try:
            match = pattern.search(path.read_bytes())
        except OSError:
            continue
        if match:
            found.append((path, match.group().decode("utf-8")))
    return found


def main() -> int:
    questions = benchmark_questions()
    roots = strip()
    found = leftovers(questions, roots)
    if found:
        path, question = found[0]
        print(f"error: {path} still holds the benchmark question {question!r}", file=sys.stderr)
        return 1
    print(f"edit base: the dataset removed, {len(questions)} questions checked absent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
