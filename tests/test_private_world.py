"""The unpublished world and the model that knows it (tests/private_world.py): the world shares no entity
and no fact with any shipped dataset version; the model, served from a Hugging Face cache folder offline,
knows the world and still knows 1.1.0; ROME edits it; ``knowgic build`` makes chains over world facts only.

The fast tests read files; the slow ones train the model once per cache (a few minutes on a 2-core CPU) and
build the world's dataset on it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from knowgic.dataset.folder import open_dataset
from knowgic.dataset.versions import HUB_DIR
from knowgic.models.tiny import load_training_facts
from knowgic.models.tiny.facts import case_facts
from tests.private_world import (
    CLI,
    HUB_ID,
    WORLD_DIR,
    WORLD_VERSION,
    built_world,
    hparams_file,
    hub_env,
    install_hub_entry,
    model_folder,
    snapshot_commit,
    training_facts,
    world_entities,
    world_facts,
)

UPSTREAM_DIR = HUB_DIR.parent / "upstream"
SHIPPED_VERSIONS = sorted(p.name for p in HUB_DIR.iterdir() if (p / "version.json").is_file())
# Measured under the spec's default known rule (logprob, greedy_contains): the model of RECIPE knows 102 of
# the world's 105 facts and 337 of 1.1.0's 345 (knowgic-tiny: 0 and 332); its build keeps 90 edits and 357
# chains (tests/private_world.py, MAX_CHAINS_PER_EDIT).
MIN_WORLD_KNOWN = 0.9
MAX_PUBLISHED_LOSS = 3  # facts of 1.1.0 that knowgic-tiny knows and this model may not
MAX_TINY_WORLD_KNOWN = 0.05  # knowgic-tiny never saw the world
MIN_CHAINS = 20


def _make_world():
    spec = importlib.util.spec_from_file_location("make_world", WORLD_DIR / "make_world.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shipped_texts() -> dict[Path, str]:
    files = [p for root in (HUB_DIR, UPSTREAM_DIR) for p in sorted(root.rglob("*")) if p.is_file()]
    return {p: p.read_text(encoding="utf-8", errors="replace") for p in files}


def _triples(folder_or_version: str | Path) -> tuple[set[tuple[str, str, str]], set[str], set[str]]:
    """Every (subject, prompt, answer) of a dataset's cases, its edit subjects, and every entity."""
    cases = open_dataset(folder_or_version).cases()
    facts = {f.key for case in cases for f in case_facts(case)}
    subjects = {case.request.subject for case in cases}
    entities = {x for s, _, a in facts for x in (s, a)} | {case.request.target_new for case in cases}
    return facts, subjects, entities


# ------------------------------------------------------------------------------------------ fast: the world


def test_world_files_are_the_scripts_output() -> None:
    for name, text in _make_world().render().items():
        assert (WORLD_DIR / name).read_text(encoding="utf-8") == text, f"{name}: rerun make_world.py"


def test_world_is_three_renamed_families_read_as_builder_seeds() -> None:
    facts = world_facts()
    assert len(facts) == 105 and len(world_entities()) == 20
    assert len({(f.subject, f.prompt, f.answer) for f in facts}) == len(facts)
    published_prompts = {row["prompt"] for row in open_dataset("1.1.0").rows("facts")}
    assert {f.prompt for f in facts} <= published_prompts  # the renaming keeps 1.1.0's relations
    assert all(f.question and f.subject in f.question for f in facts)
    # every family member is renamed through one word table; each invented name is a new name
    words = _make_world().WORDS
    assert {w for name in world_entities() for w in name.split()} == set(words.values())


@pytest.mark.parametrize("version", SHIPPED_VERSIONS)
def test_world_shares_no_fact_or_subject_with_a_shipped_version(version: str) -> None:
    world = {(f.subject, f.prompt, f.answer) for f in world_facts()}
    facts, subjects, entities = _triples(version)
    assert facts and not world & facts
    assert not world_entities() & (subjects | entities)


def test_no_invented_word_occurs_in_any_shipped_file() -> None:
    invented = {w.casefold() for w in _make_world().WORDS.values()}
    for path, text in _shipped_texts().items():
        found = invented & {w.casefold() for w in re.findall(r"\w+", text)}
        assert not found, f"{path} names {sorted(found)}"


def test_training_facts_are_knowgic_tinys_plus_the_world() -> None:
    base, facts = load_training_facts(), training_facts()
    world = {(f.subject, f.prompt, f.answer) for f in world_facts()}
    assert {f.key for f in facts.facts} == {f.key for f in base.facts} | world
    assert set(facts.version_facts[WORLD_VERSION]) == world
    assert facts.requests == base.requests and facts.fingerprint() != base.fingerprint()


def test_hub_entry_has_the_hub_cache_layout(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    (folder / "model.safetensors").write_bytes(b"weights")
    commit = install_hub_entry(folder, tmp_path / "hf")
    repo = tmp_path / "hf" / "hub" / "models--knowgic-tests--tiny-unpublished"
    assert commit == snapshot_commit(folder) and re.fullmatch(r"[0-9a-f]{40}", commit)
    assert (repo / "refs" / "main").read_text() == commit
    assert (tmp_path / "hf").stat().st_mode & 0o777 == 0o755  # readable by a container's own user
    assert all(p.stat().st_mode & 0o777 in (0o755, 0o644) for p in (tmp_path / "hf").rglob("*"))
    for name in ("config.json", "model.safetensors"):
        link = repo / "snapshots" / commit / name
        assert link.is_symlink() and not Path(link.readlink()).is_absolute()  # survives a mount elsewhere
        assert link.read_bytes() == (folder / name).read_bytes()
    assert install_hub_entry(folder, tmp_path / "hf") == commit  # idempotent


# ------------------------------------------------------------------------------------------ slow: the model


@pytest.fixture(scope="module")
def hub_model(unpublished_hf_home: Path, monkeypatch_module: pytest.MonkeyPatch):
    """The model loaded in this process through the hub path, from the cache folder only."""
    import huggingface_hub.constants

    from knowgic.models.loading import load_model

    monkeypatch_module.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(unpublished_hf_home / "hub"))
    return load_model(HUB_ID, device="cpu", progress=False)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _known(loaded, queries) -> int:
    from knowgic.scoring.factory import make_scorer

    return int(make_scorer("logprob").score(loaded.model, loaded.tokenizer, queries).known.sum())


def _world_queries():
    from collections import Counter

    from knowgic.scoring.base import Query

    facts = world_facts()
    n_gold = Counter((f.subject, f.prompt) for f in facts)
    return [Query(f.prompt, f.subject, (f.answer,), f.question, n_gold[(f.subject, f.prompt)]) for f in facts]


@pytest.mark.slow
def test_model_loads_offline_from_the_hub_cache(hub_model, unpublished_hf_home: Path) -> None:
    assert hub_model.info["source"] == "hub" and hub_model.family == "gpt2"
    assert hub_model.revision == snapshot_commit(model_folder())
    stats = json.loads((model_folder() / "knowgic_tiny.json").read_text())
    assert WORLD_VERSION in stats["known_share_by_version"]


@pytest.mark.slow
def test_model_knows_the_world_and_still_knows_the_published_facts(hub_model, knowgic_tiny) -> None:
    from knowgic.evaluation.known_rates import fact_queries

    world = _world_queries()
    assert _known(hub_model, world) >= MIN_WORLD_KNOWN * len(world)
    assert _known(knowgic_tiny, world) <= MAX_TINY_WORLD_KNOWN * len(world)
    _, published = fact_queries("1.1.0")
    assert _known(hub_model, published) >= _known(knowgic_tiny, published) - MAX_PUBLISHED_LOSS


@pytest.mark.slow
def test_rome_edits_the_hub_model(unpublished_hf_home: Path, tmp_path: Path) -> None:
    env = hub_env(unpublished_hf_home)
    base = [*(sys.executable, "-c", CLI, "evaluate", "--model", HUB_ID, "--editor", "rome", "--limit", "2")]
    done = subprocess.run([*base, "--out", str(tmp_path / "a")], env=env, capture_output=True, text=True)
    # no shipped hparams are named after the hub id's last part nor the gpt2 family: one line, no run
    assert done.returncode != 0 and "pass --hparams FILE" in done.stderr
    out = tmp_path / "rome"
    hparams = ("--hparams", str(hparams_file("rome")), "--device", "cpu")
    done = subprocess.run([*base, *hparams, "--out", str(out)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    config = results["config"]
    assert (config["model"], config["model_family"]) == (HUB_ID, "gpt2")
    assert config["model_revision"] == snapshot_commit(model_folder())
    assert config["hparams_source"].endswith("rome/knowgic-tiny.yaml")


# ------------------------------------------------------------------------------------------ slow: the build


def test_build_makes_chains_over_world_facts_only(world_dataset: Path) -> None:
    world = {(f.subject, f.prompt, f.answer) for f in world_facts()}
    facts, subjects, entities = _triples(world_dataset)
    cases = open_dataset(world_dataset).cases()
    assert len(cases) >= MIN_CHAINS and len(subjects) > 1
    build = json.loads((world_dataset / "build" / "build.json").read_text())
    assert build["model"]["id"] == HUB_ID and build["seeds"]["facts"] == len(world_facts())
    assert facts <= world and entities <= world_entities() and subjects <= world_entities()
    for version in SHIPPED_VERSIONS:
        published, published_subjects, _ = _triples(version)
        assert not facts & published and not subjects & published_subjects


@pytest.mark.slow
def test_the_shipped_build_is_what_the_build_makes(
    unpublished_hf_home: Path, world_dataset: Path, tmp_path: Path
) -> None:
    built = built_world(tmp_path / "dataset", unpublished_hf_home, tmp_path / "build")
    sha = [json.loads((f / "version.json").read_text())["sha256"] for f in (built, world_dataset)]
    assert sha[0] == sha[1]
