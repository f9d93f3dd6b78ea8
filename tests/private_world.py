"""A model that knows facts no published chain shows, served as a hub model, and the dataset built from them.

``knowgic-tiny`` is trained on exactly the facts of the published main track, so every fact it knows lies on
a published chain and no private split of it can share no fact with the published data. The tests of the
private-split mechanism need a model that knows more; this module makes one from real parts:

    tests/data/private_world/seeds.csv ─┐  (three families of 1.1.0 renamed into invented people; make_world.py)
                                        ├─> training_facts(): knowgic-tiny's facts + the world's
    load_training_facts() ──────────────┘            │ build_tiny_model(RECIPE)   (once per cache, locked)
                                                      v
            $KNOWGIC_CACHE/test-models/tiny-unpublished-<recipe hash>/   (a transformers folder)
                                                      │ install_hub_entry()
                                                      v
            HF_HOME/hub/models--knowgic-tests--tiny-unpublished/{blobs,refs/main,snapshots/<commit>}
                                                      │ knowgic build --seeds ... --edits all --no-expand
                                                      v
            a dataset folder whose chains hold only world facts           (built_world())

Python::

    from tests.private_world import built_world, hub_env, unpublished_model
    hub_id = unpublished_model(hf_home)      # "knowgic-tests/tiny-unpublished": trains or reuses the build
    subprocess.run(["knowgic", "evaluate", "--model", hub_id, ...], env=hub_env(hf_home))
    folder = built_world(out, hf_home)       # runs `knowgic build` on the world's seeds

The hub cache folder is what ``KNOWGIC_MODEL_CACHE`` names for the runner (mounted as ``HF_HOME`` in its
containers). The editors pick their hparams by the hub id's last part, then by family (``gpt2``): no shipped
file is named ``tiny-unpublished`` or ``gpt2``, so :func:`hparams_file` names ``knowgic-tiny``'s, which fit
the model (same recipe, same architecture); pass it as ``--hparams`` (a runner submission keys its
manifest's ``hparams`` by the hub id). The session fixtures ``unpublished_hf_home`` and ``world_dataset``
(tests/conftest.py) call :func:`unpublished_model` and :func:`built_world`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from knowgic.models.tiny import (
    TINY_RECIPE,
    TrainingFacts,
    build_tiny_model,
    is_complete,
    load_training_facts,
    recipe_hash,
)
from knowgic.models.tiny.build import build_lock
from knowgic.models.tiny.facts import FactRecord
from knowgic.paths import cache_dir

REPO_ROOT = Path(__file__).resolve().parent.parent
WORLD_DIR = REPO_ROOT / "tests" / "data" / "private_world"
SEEDS = WORLD_DIR / "seeds.csv"
TEMPLATES = WORLD_DIR / "templates.yaml"
WORLD_VERSION = "private-world"
"""The key of the world's facts in the model's ``known_share_by_version``."""
PREBUILT = WORLD_DIR / "model"
"""The model as this recipe trains it (4 MB; the build is deterministic, as knowgic-tiny's prebuilt folder
is), so that the tests need not train it (8 minutes on a loaded 2-core machine): a change to the recipe or
to any training fact changes the hash, and the model is then trained into the user cache instead."""
WORLD_DATASET = WORLD_DIR / "dataset"
"""What :func:`built_world` makes (357 chains of 90 edits), shipped so that tests need not build it."""
HUB_ID = "knowgic-tests/tiny-unpublished"
MODEL_PREFIX = "tiny-unpublished"
RECIPE = TINY_RECIPE
"""``knowgic-tiny``'s own recipe: the model differs from it only in the facts it is trained on (465: its 360
and the world's 105). Measured under the spec's default known rule, it knows 102 of the world's 105 facts
and 337 of 1.1.0's 345 (``knowgic-tiny``: 332), trained in 173 s of CPU on one thread. A cheaper
``replace(steps=800)`` (123 s of CPU) knows 97 of the world's facts but only 320 of 1.1.0's, so it is not
used."""
CLI = "import sys; from knowgic.cli import main; sys.exit(main())"  # `knowgic`, with this interpreter
BUILD_TIMEOUT_SECONDS = 1800
MAX_CHAINS_PER_EDIT = 4
"""Chains kept per edit by :func:`built_world`: 357 chains of 90 edits (the spec's cap of 200 gives 2,471
chains, three families at the 1,000-chain family cap, and takes 2.7 times as long to build)."""


# ------------------------------------------------------------------------------------------------ the world


def world_seeds() -> Path:
    """The world's seed facts (``subject,relation,object,question``), as ``knowgic build --seeds`` reads them."""
    return SEEDS


def world_templates() -> Path:
    """The world's relation templates (1.1.0's own), as ``knowgic build --templates`` reads them."""
    return TEMPLATES


def world_facts() -> list[Any]:
    """The world's facts (:class:`knowgic.builder.seeds.SeedFact`), read as the builder reads them."""
    from knowgic.builder.seeds import read_templates, seeds_from_file

    return seeds_from_file(SEEDS, read_templates(TEMPLATES))


def world_entities() -> set[str]:
    """Every subject and object of the world."""
    return {name for f in world_facts() for name in (f.subject, f.answer)}


def training_facts() -> TrainingFacts:
    """``knowgic-tiny``'s training facts (every shipped version of the main track) plus the world's."""
    base = load_training_facts()
    world = [
        FactRecord(f.subject, f.prompt, f.answer, (f.question,) if f.question else ()) for f in world_facts()
    ]
    known = {f.key for f in base.facts}
    clash = [f.key for f in world if f.key in known]
    if clash:
        raise ValueError(f"world fact {clash[0]} is one of knowgic-tiny's training facts")
    return dataclasses.replace(
        base,
        facts=(*base.facts, *world),
        version_facts={**base.version_facts, WORLD_VERSION: tuple(f.key for f in world)},
        source=f"{base.source}+{WORLD_VERSION}",
    )


# ------------------------------------------------------------------------------------------------ the model


def model_folder(recipe: Any = RECIPE, progress: bool = False) -> Path:
    """The trained folder: :data:`PREBUILT` when its recorded recipe hash (over recipe and training facts) is
    this one's, else the user cache's, built first when missing or incomplete (into a temporary folder renamed
    into place, under a file lock)."""
    facts = training_facts()
    digest = recipe_hash(recipe, facts.fingerprint())
    if is_complete(PREBUILT, digest):
        return PREBUILT
    root = cache_dir() / "test-models"
    final = root / f"{MODEL_PREFIX}-{digest}"
    if is_complete(final, digest):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with build_lock(root / f".{final.name}.lock"):
        if is_complete(final, digest):
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.build-", dir=root))
        try:
            build_tiny_model(tmp, recipe, progress=progress, facts=facts)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def snapshot_commit(folder: Path) -> str:
    """A 40-hex revision for the folder's files: sha1 over their names and sha256s (stable across copies)."""
    digest = hashlib.sha1()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        digest.update(f"{path.name}\0{_sha256(path)}\n".encode())
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install_hub_entry(folder: Path, hf_home: Path, hub_id: str = HUB_ID) -> str:
    """Lay ``folder`` out as ``hub_id``'s entry of the Hugging Face cache under ``hf_home`` (what ``HF_HOME``
    names): ``hub/models--OWNER--NAME/blobs/<sha256>``, ``snapshots/<commit>/<file>`` as relative links to
    the blobs, ``refs/main`` holding the commit, as ``huggingface_hub`` writes it. Returns the commit.

    Everything is readable by every user (folders 0755, files 0644): the runner's containers mount the folder
    and run as their own unprivileged user."""
    commit = snapshot_commit(folder)
    hf_home = Path(hf_home)
    repo = hf_home / "hub" / ("models--" + hub_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    for path in (hf_home, hf_home / "hub", repo, repo / "blobs", repo / "snapshots", snapshot, repo / "refs"):
        path.mkdir(exist_ok=True)
        path.chmod(0o755)
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        blob = repo / "blobs" / _sha256(path)
        if not blob.exists():  # copied beside it, then renamed: a killed copy never leaves a short blob
            part = blob.with_name(blob.name + ".part")
            shutil.copyfile(path, part)
            part.chmod(0o644)
            os.replace(part, blob)
        link = snapshot / path.name
        if not link.is_symlink():
            link.symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    (repo / "refs" / "main").chmod(0o644)
    return commit


def unpublished_model(hf_home: Path, recipe: Any = RECIPE) -> str:
    """The hub id of the model that knows the world, installed in ``hf_home`` (trained or reused first)."""
    install_hub_entry(model_folder(recipe), hf_home)
    return HUB_ID


def hub_env(hf_home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that loads :data:`HUB_ID` from ``hf_home``, never from the network."""
    env = dict(os.environ if base is None else base)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE"):
        env.pop(name, None)
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def hparams_file(method: str) -> Path:
    """The shipped hparams for ``method`` on ``knowgic-tiny``, which fit this model (same recipe)."""
    from knowgic.editors.hparams import HPARAMS_DIR

    return HPARAMS_DIR / method / "knowgic-tiny.yaml"


# ------------------------------------------------------------------------------------------------ the build


def build_command(model: str, out: Path, build_dir: Path, *extra: str) -> list[str]:
    """``knowgic build`` of the world's seeds: docs/builder.md's small recipe (``--edits all --no-expand``),
    run from the repository's root (:data:`REPO_ROOT`), which its seed paths are relative to: the build's
    record then names them as they are in any checkout."""
    seeds, templates = (str(p.relative_to(REPO_ROOT)) for p in (SEEDS, TEMPLATES))
    return [
        *(sys.executable, "-c", CLI, "build", "--model", model),
        *("--seeds", seeds, "--templates", templates),
        *("--edits", "all", "--no-expand", "--build-dir", str(build_dir), "--out", str(out)),
        *extra,
    ]


def built_world(
    out: Path,
    hf_home: Path,
    build_dir: Path | None = None,
    max_chains_per_edit: int = MAX_CHAINS_PER_EDIT,
    *extra: str,
) -> Path:
    """Build the world's dataset folder into ``out`` with the unpublished model served from ``hf_home``
    (``build_dir``: the build's stage cache, default ``<out>-build``; ``extra``: more ``knowgic build``
    options). Returns ``out``."""
    model = unpublished_model(hf_home)
    build_dir = build_dir if build_dir is not None else Path(str(out) + "-build")
    options = ("--max-chains-per-edit", str(max_chains_per_edit), "--device", "cpu", *extra)
    done = subprocess.run(
        build_command(model, Path(out).resolve(), Path(build_dir).resolve(), *options),
        cwd=REPO_ROOT,
        env=hub_env(hf_home),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        raise RuntimeError(f"knowgic build failed (exit {done.returncode}): {done.stderr[-3000:]}")
    return out
