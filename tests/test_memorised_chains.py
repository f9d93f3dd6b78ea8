"""The memorised-chains cheat of tests/data/submissions: it carries the published chains where no scan of
its files finds them, and it buys a low public IFR (tests/test_containers_private.py shows what a private
split of new edits makes of it)."""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from knowgic.dataset.loading import load_rows

SUBMISSION = Path(__file__).resolve().parent / "data" / "submissions" / "memorised_chains"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom_editor"


def _make_blob():
    spec = importlib.util.spec_from_file_location("make_blob", SUBMISSION / "make_blob.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_blob_is_the_published_chains_and_is_current() -> None:
    make_blob = _make_blob()
    assert (SUBMISSION / "knowgic_memorised" / "blob.py").read_text(encoding="utf-8") == make_blob.blob_text()
    namespace: dict = {}
    exec((SUBMISSION / "knowgic_memorised" / "blob.py").read_text(encoding="utf-8"), namespace)
    carried = json.loads(gzip.decompress(base64.b64decode(namespace["BLOB"])))
    rows = load_rows("chains", "1.1.0")
    chain = [r["chain"] for r in rows]
    steps = {s for c in chain for s in zip(c["subjects"], c["prompts"], c["answers"], strict=True)}
    assert {tuple(f) for facts in carried["chains"].values() for f in facts} == steps
    assert len(carried["chains"]) == len({json.dumps(r["requested_rewrite"][0]) for r in rows}) == 26


def test_no_text_of_the_dataset_appears_in_its_files() -> None:
    names = {r["requested_rewrite"][0]["subject"] for r in load_rows("chains", "1.1.0")}
    names |= {a for r in load_rows("chains", "1.1.0") for a in r["chain"]["answers"]}
    texts = {p: p.read_text(encoding="utf-8") for p in SUBMISSION.rglob("*.py") if p.name != "make_blob.py"}
    for path, text in texts.items():
        found = sorted(n for n in names if len(n) > 4 and n in text)
        assert not found, f"{path} shows {found[:3]}"


@pytest.mark.slow
def test_the_cheat_buys_a_low_public_ifr(knowgic_tiny, tmp_path: Path) -> None:
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

    hparams = yaml.safe_load((EXAMPLE / "rank_one_ft.yaml").read_text())
    path = tmp_path / "hparams.yaml"
    path.write_text(yaml.safe_dump(hparams))
    sys.path[:0] = [str(SUBMISSION), str(EXAMPLE)]
    try:
        runs = {
            editor: evaluate(
                EvaluationRequest(model="knowgic-tiny", editor=editor, hparams_path=str(path), limit=4),
                progress=False,
                loaded=knowgic_tiny,
            ).document["metrics"]
            for editor in ("knowgic_rank_one.editor:RankOneFT", "knowgic_memorised.editor:MemorisedChains")
        }
    finally:
        del sys.path[:2]
    honest, cheat = runs.values()
    assert cheat["efficacy"]["value"] == honest["efficacy"]["value"] == 1.0
    assert cheat["ifr_per_edit"]["value"] < 0.1 < honest["ifr_per_edit"]["value"] - 0.1
