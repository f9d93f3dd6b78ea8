"""Shared fixtures.

``random_gpt2``: a 2-layer GPT-2 with random weights and a byte-level BPE tokenizer trained in-process on the
benchmark's own strings; built in about a second, for tests of mechanics (shapes, batching, restore,
invariants of the edit math) that need no knowledge in the model.
``knowgic_tiny``: the project's offline default model, trained on KnowGIC's facts (built once and cached).
``unpublished_hf_home``: an ``HF_HOME`` folder serving ``knowgic-tests/tiny-unpublished``, a model that also
knows facts no published chain shows; ``world_dataset``: what ``knowgic build`` makes of those facts on it
(``tests/private_world.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

# The tests marked `container` get the Docker engine and the runner images from here, those marked `slurm`
# a one-node Slurm cluster.
pytest_plugins = ["tests.container_fixtures", "tests.slurm_cluster"]

REPO_ROOT = Path(__file__).resolve().parent.parent
UPSTREAM_CHAINS = REPO_ROOT / "knowgic" / "dataset" / "upstream" / "chains.json"

# Tests never touch the network: hub ids must fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _benchmark_texts() -> list[str]:
    rows = json.loads(UPSTREAM_CHAINS.read_text(encoding="utf-8"))
    texts: list[str] = []
    for row in rows[:200]:
        rw = row["requested_rewrite"][0]
        texts.append(rw["prompt"].format(rw["subject"]) + " " + rw["target_true"]["str"])
        texts.append(rw["target_new"]["str"])
        for block in (row["chain"], row["broader_context"]):
            for q, a, p, s in zip(
                block["questions"], block["answers"], block["prompts"], block["subjects"], strict=True
            ):
                texts.append(p.format(s) + " " + a)
                texts.append(q + " " + a)
    return texts


@pytest.fixture(scope="session")
def random_gpt2() -> tuple[torch.nn.Module, object]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_benchmark_texts(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config).eval()
    return model, tokenizer


@pytest.fixture(scope="module")
def gpt2_3layer(random_gpt2) -> tuple[torch.nn.Module, object]:
    """The random fixture's tokenizer with 3 random layers, so that z at layer 1 reaches the prediction.

    Module-scoped: a module's edits are restored, but each module starts from its own copy."""
    from transformers import GPT2Config, GPT2LMHeadModel

    _, tok = random_gpt2
    torch.manual_seed(1)
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=128,
        n_embd=64,
        n_layer=3,
        n_head=4,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return GPT2LMHeadModel(config).eval(), tok


@pytest.fixture(scope="session")
def knowgic_tiny():
    """The offline default model (a :class:`knowgic.models.base.LoadedModel`), built once per cache."""
    from knowgic.models.loading import load_model

    return load_model("knowgic-tiny")


@pytest.fixture(scope="session")
def unpublished_hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``HF_HOME`` folder holding ``knowgic-tests/tiny-unpublished``, the model that knows facts no
    published chain shows (``tests/private_world.py``; trained once per cache, a few minutes)."""
    from tests.private_world import unpublished_model

    hf_home = tmp_path_factory.mktemp("hf-home")
    unpublished_model(hf_home)
    return hf_home


@pytest.fixture(scope="session")
def world_dataset() -> Path:
    """What ``knowgic build`` makes of the unpublished world on that model: the folder shipped in
    tests/data/private_world/dataset (``test_private_world.py`` builds it again and compares)."""
    from tests.private_world import WORLD_DATASET

    return WORLD_DATASET


@pytest.fixture(scope="session")
def world_split(tmp_path_factory: pytest.TempPathFactory, world_dataset: Path) -> Path:
    """A private split of 10 new edits drawn from the world's build (``knowgic dataset holdout --from``)."""
    from knowgic.dataset.private import write_disjoint

    return write_disjoint(world_dataset, tmp_path_factory.mktemp("world-split") / "split", max_edits=10).out


@pytest.fixture(scope="session")
def unpublished_model():
    """The unpublished-world model loaded in this process, from its prebuilt folder."""
    from knowgic.models.loading import load_model
    from tests.private_world import PREBUILT

    return load_model(str(PREBUILT), device="cpu", progress=False)


@pytest.fixture(scope="session")
def evaluated_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real results.json: ``knowgic evaluate`` of ``ft`` on knowgic-tiny, first edit only (the runner's
    worker tests hand it back from their executors)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("evaluate")
    subprocess.run(
        [
            *(sys.executable, "-m", "knowgic.cli", "evaluate", "--model", "knowgic-tiny", "--editor", "ft"),
            *("--limit", "1", "--protocol", "logprob", "--mode", "independent", "--out", str(out)),
        ],
        check=True,
        capture_output=True,
    )
    return out / "results.json"


@pytest.fixture(scope="session", autouse=True)
def worker_signing_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real Ed25519 worker key for the whole session, trusted through the default-path variables, so
    that workers (in this process and in subprocesses) sign what they store and readers believe it.

    Nothing is read from or written to the user's own ~/.config."""
    from knowgic.runner.store.signing import SIGNING_KEY_ENV, TRUSTED_KEYS_ENV, generate_key

    folder = tmp_path_factory.mktemp("keys")
    key = folder / "worker-key"
    signer = generate_key(key, "test-worker")
    (folder / "trusted-keys").write_text(f"{signer.public_line} test-worker\n", encoding="utf-8")
    saved = {name: os.environ.get(name) for name in (SIGNING_KEY_ENV, TRUSTED_KEYS_ENV)}
    os.environ[SIGNING_KEY_ENV] = str(key)
    os.environ[TRUSTED_KEYS_ENV] = str(folder / "trusted-keys")
    yield key
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def use_spec(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """``use_spec(path)``: the process reads ``path`` as its benchmark spec until the test ends (the spec is
    read once per process, so the cached one is dropped before and after)."""
    from knowgic import spec

    def use(path: Path) -> None:
        monkeypatch.setattr(spec, "spec_file", lambda: path)
        spec.benchmark_spec.cache_clear()

    yield use
    spec.benchmark_spec.cache_clear()
