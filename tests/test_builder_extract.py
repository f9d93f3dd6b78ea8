"""Segmentation and triplet extraction of ``knowgic build``: the subject put back with its space, a
few-shot prompt whose answers cannot be copied as the answer, copies dropped, the spaCy rules and the
template rules."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from knowgic.builder.extract import clean_triplets, example_triplets, extract, extraction_prompt
from knowgic.builder.generation import Generator
from knowgic.builder.pipeline import BuildConfig, run_build
from knowgic.builder.segment import segment, with_lead
from knowgic.builder.spacy_rules import require_spacy, sentence_triplets
from knowgic.builder.spec import load_builder_spec
from knowgic.builder.store import BuildStore, Journal, stage_key
from knowgic.builder.template_rules import TemplateReader, extract_templates, nested_phrase, templates_config
from knowgic.errors import KnowgicError

SPEC = load_builder_spec()
HUB = Path(__file__).resolve().parent.parent / "knowgic" / "dataset" / "hub" / "1.1.0"
COT = "Question: Who is a sibling of Charlotte Clinton Mezvinsky?\nAnswer: Aidan Clinton Mezvinsky.\n"


def _cot(output: str) -> dict:
    return {
        "cot_id": "c",
        "subject": "Aidan Clinton Mezvinsky",
        "prompt": COT + "Aidan Clinton Mezvinsky",
        "output": output,
    }


def test_the_subject_is_put_back_with_a_space() -> None:
    glued = "is a sibling of Charlotte Clinton Mezvinsky."
    rows = segment([_cot(glued)], lead_from_prompt=True)
    assert rows[0]["text"] == "Aidan Clinton Mezvinsky is a sibling of Charlotte Clinton Mezvinsky."
    assert with_lead("Aidan Clinton Mezvinsky", " is a sibling.") == "Aidan Clinton Mezvinsky is a sibling."
    assert with_lead("Bill Clinton", "'s daughter is Chelsea.") == "Bill Clinton's daughter is Chelsea."
    assert with_lead("", "is") == "is"


def test_the_subject_is_put_back_on_knowgic_tiny_output(knowgic_tiny) -> None:
    prompt = SPEC.cot["base"].format(
        question="Who is a sibling of Charlotte Clinton Mezvinsky?",
        answer="Aidan Clinton Mezvinsky",
        subject="Aidan Clinton Mezvinsky",
    )
    output = Generator(knowgic_tiny).generate([prompt], 24)[0]
    assert output[:1].isalpha()  # the model's first word comes without its space
    cot = {"cot_id": "c", "subject": "Aidan Clinton Mezvinsky", "prompt": prompt, "output": output}
    first = segment([cot], lead_from_prompt=True)[0]
    assert first["text"].startswith("Aidan Clinton Mezvinsky " + output.split()[0])


def test_the_few_shot_order_has_no_answer_to_copy() -> None:
    examples = SPEC.extraction["examples"]
    for sentence in ["Bill Clinton is the father of Chelsea Clinton.", *[e["sentence"] for e in examples]]:
        prompt = extraction_prompt(SPEC, sentence)
        assert prompt.rstrip().endswith(f"Sentence: {sentence}\nJSON:")
        block = prompt[: prompt.rindex(f"Sentence: {sentence}\nJSON:")]
        shown = [e for e in examples if f"Sentence: {e['sentence']}\n" in block]
        assert len(shown) >= 2 and all(e["sentence"] != sentence for e in shown)
        last = max(shown, key=lambda e: block.index(f"Sentence: {e['sentence']}\n"))
        assert last["triplets"], "the empty example is never the last one shown"


def test_triplets_that_copy_an_example_are_dropped() -> None:
    shots = example_triplets(SPEC)
    value = {
        "triplets": [
            {"subject": "Harry Potter", "relation": "studied at", "object": "Hogwarts"},
            {"subject": "france", "relation": "capital", "object": "Paris"},
            {"subject": "Aidan", "relation": "is a sibling of", "object": "Charlotte"},
        ]
    }
    kept, copied = clean_triplets(value, "Aidan is a sibling of Charlotte.", shots)
    assert (kept, copied) == ([value["triplets"][2]], 2)
    # a sentence that does say it keeps it
    kept, copied = clean_triplets(value, "Paris is the capital of France.", shots)
    assert copied == 1 and value["triplets"][1] in kept


def test_knowgic_tiny_extraction_keeps_no_copy(knowgic_tiny, tmp_path: Path) -> None:
    sentences = [
        {"sentence_id": str(i), "text": t}
        for i, t in enumerate(
            [
                "Aidan Clinton Mezvinsky is a sibling of Charlotte Clinton Mezvinsky.",
                "Bill Clinton is the father of Chelsea Clinton.",
            ]
        )
    ]
    rows = extract(sentences, Generator(knowgic_tiny), SPEC, Journal(tmp_path / "j", "k"), 96, False)
    shots = example_triplets(SPEC)
    for row in rows:
        assert '"triplets": []' not in row["prompt"].rsplit("Sentence:", 2)[-2]
        for t in row["triplets"]:
            folded = tuple(" ".join(t[k].split()).casefold() for k in ("subject", "relation", "object"))
            assert folded not in shots


# --- the spaCy rules ------------------------------------------------------------------------------


def _doc(words: list[str], heads: list[int], deps: list[str], pos: list[str], ents=None):
    spacy = pytest.importorskip("spacy")
    from spacy.tokens import Doc

    starts = [True] + [False] * (len(words) - 1)
    return Doc(
        spacy.blank("en").vocab, words=words, heads=heads, deps=deps, pos=pos, ents=ents, sent_starts=starts
    )


def test_spacy_rules_on_parses() -> None:
    """The rules on dependency parses in spaCy's own Doc (the parses en_core_web_sm gives these)."""
    doc = _doc(
        ["Harry", "Potter", "studied", "at", "Hogwarts", "and", "Durmstrang", "."],
        [1, 2, 2, 2, 3, 4, 4, 2],
        ["compound", "nsubj", "ROOT", "prep", "pobj", "cc", "conj", "punct"],
        ["PROPN", "PROPN", "VERB", "ADP", "PROPN", "CCONJ", "PROPN", "PUNCT"],
        ["B-PERSON", "I-PERSON", "O", "O", "B-ORG", "O", "B-ORG", "O"],
    )
    assert list(sentence_triplets(doc[:])) == [
        ("Harry Potter", "studied at", "Hogwarts"),
        ("Harry Potter", "studied at", "Durmstrang"),
    ]
    doc = _doc(
        ["Bill", "Clinton", "is", "the", "father", "of", "Chelsea", "Clinton", "."],
        [1, 2, 2, 4, 2, 4, 7, 5, 2],
        ["compound", "nsubj", "ROOT", "det", "attr", "prep", "compound", "pobj", "punct"],
        ["PROPN", "PROPN", "AUX", "DET", "NOUN", "ADP", "PROPN", "PROPN", "PUNCT"],
    )
    assert list(sentence_triplets(doc[:])) == [("Bill Clinton", "is the father of", "Chelsea Clinton")]
    doc = _doc(
        ["Overwatch", "was", "developed", "by", "Blizzard", "Entertainment", "."],
        [2, 2, 2, 2, 5, 3, 2],
        ["nsubjpass", "auxpass", "ROOT", "agent", "compound", "pobj", "punct"],
        ["PROPN", "AUX", "VERB", "ADP", "PROPN", "PROPN", "PUNCT"],
    )
    assert list(sentence_triplets(doc[:])) == [("Overwatch", "was developed by", "Blizzard Entertainment")]
    doc = _doc(["He", "led", "Microsoft", "."], [1, 1, 1, 1], ["nsubj", "ROOT", "dobj", "punct"],
               ["PRON", "VERB", "PROPN", "PUNCT"])  # fmt: skip
    assert list(sentence_triplets(doc[:])) == []  # a pronoun is no name


HAS_PIPELINE = importlib.util.find_spec(str(SPEC.extraction["spacy"]["model"])) is not None


@pytest.mark.skipif(HAS_PIPELINE, reason="the spaCy pipeline is installed")
def test_a_missing_spacy_pipeline_is_one_line_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(KnowgicError, match=r"needs the spaCy pipeline en_core_web_sm 3\.8\.0: pip install"):
        require_spacy(SPEC)
    build = tmp_path / "build"
    proc = subprocess.run(
        [sys.executable, "-m", "knowgic.cli", "build", "--model", "knowgic-tiny", "--from", "1.1.0",
         "--extractor", "spacy", "--build-dir", str(build)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "en_core_web_sm 3.8.0" in proc.stderr
    assert not (build / "manifest.json").exists()


@pytest.mark.skipif(not HAS_PIPELINE, reason="the spaCy pipeline en_core_web_sm is not installed")
def test_spacy_extractor_on_real_sentences() -> None:
    from knowgic.builder.spacy_rules import extract_spacy

    sentences = [
        {"sentence_id": "a", "text": "Harry Potter studied at Hogwarts."},
        {"sentence_id": "b", "text": "Overwatch was developed by Blizzard Entertainment."},
    ]
    rows = extract_spacy(sentences, SPEC)
    assert {"subject": "Harry Potter", "relation": "studied at", "object": "Hogwarts"} in rows[0]["triplets"]
    assert rows == extract_spacy(sentences, SPEC)  # deterministic


# --- the template rules ---------------------------------------------------------------------------

PROMPTS_110 = sorted(
    {json.loads(line)["prompt"] for line in (HUB / "data" / "facts-test.jsonl").read_text().splitlines()}
)


def test_template_rules_read_a_sentence_in_a_templates_phrasing() -> None:
    reader = TemplateReader(PROMPTS_110, int(SPEC.defaults["max_entity_chars"]))
    read = reader.read
    assert read("Aidan Clinton Mezvinsky is a sibling of Charlotte Clinton Mezvinsky.") == (
        "Aidan Clinton Mezvinsky", "{} is a sibling of", "Charlotte Clinton Mezvinsky"
    )  # fmt: skip
    assert read("Harry Potter's schoolmate is Ron Weasley!") == (
        "Harry Potter",
        "{}'s schoolmate is",
        "Ron Weasley",
    )
    # the longest template that fits wins
    assert (
        read("Mark Teixeira is associated with the sport of baseball.")[1]
        == "{} is associated with the sport of"
    )
    # an object that describes a node through another relation is no name
    assert read("Aidan Clinton Mezvinsky is a sibling of the CEO of Madameron Dward.") is None
    assert (
        read("Charlotte Clinton Mezvinsky is a sibling of the child of the child of Chelsea Clinton.") is None
    )
    # a clause or a question marker inside a name, a question, no object, no template, a self-loop
    for text in ["Kern County is sebreix worked in Texas.", "Q: Who is the grandchild of Elvis Presley",
                 "Who is a sibling of Aidan Clinton Mezvinsky?", "Aidan Clinton Mezvinsky is a sibling of.",
                 "Professor Snape.", "Hufflepuff belongs to Hufflepuff."]:  # fmt: skip
        assert read(text) is None, text
    assert nested_phrase("{} was the CEO of") == "the ceo of" and nested_phrase("{} animated") is None
    # a sentence whose relation runs past the template: the rest opens with a preposition, no name
    short = TemplateReader(["{} is head of house"], int(SPEC.defaults["max_entity_chars"]))
    assert short.read("Professor Sprout is head of house for Ravenclaw.") is None
    assert short.read("Professor Sprout is head of house Hufflepuff.") == (
        "Professor Sprout", "{} is head of house", "Hufflepuff"
    )  # fmt: skip


def test_template_extractor_on_knowgic_tiny_chain_of_thought(tmp_path: Path) -> None:
    """A build on knowgic-tiny stopped after extraction: every triplet restates its sentence as the
    template filled with the subject, then the object; the stage key names the extractor."""
    cfg = BuildConfig(model="knowgic-tiny", build_dir=tmp_path / "b", source="1.1.0", max_seeds=16,
                      extractor="templates", stop_after="extract", progress=False)  # fmt: skip
    run_build(cfg)
    stages = tmp_path / "b" / "stages"
    sentences = {s["sentence_id"]: s["text"] for s in json.loads((stages / "segment.json").read_text())}
    rows = json.loads((stages / "extract.json").read_text())
    triplets = [(t, sentences[r["sentence_id"]]) for r in rows for t in r["triplets"]]
    assert {(t["subject"], t["template"], t["object"]) for t, _ in triplets} >= {
        ("Aidan Clinton Mezvinsky", "{} is the child of", "Chelsea Clinton"),
        ("Cedric Diggory", "{} belongs to", "Hufflepuff"),
    }
    for t, text in triplets:
        assert f"{t['template'].replace('{}', t['subject'])} {t['object']}" == text.rstrip(".")
    unread = [sentences[r["sentence_id"]] for r in rows if not r["triplets"]]
    assert "Ron Weasley was taught Herbo." in unread  # no template: "was taught Herbology by" has a "by"
    seeds = json.loads((stages / "seeds.json").read_text())
    prompts = [t["prompt"] for t in seeds["templates"].values()]
    texts = [{"sentence_id": k, "text": v} for k, v in sentences.items()]
    assert rows == extract_templates(texts, prompts, SPEC)  # deterministic
    # the stage key names the extractor: no other extractor's output is ever reused
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    inputs = {"segment": BuildStore(tmp_path / "b").digest("segment")}
    assert manifest["extract"]["key"] == stage_key("extract", templates_config(prompts, SPEC), inputs)
    assert templates_config(prompts, SPEC)["extractor"] == "templates"
