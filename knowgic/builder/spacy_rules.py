"""Stage 3c without a language model: triplets read off spaCy's dependency parse (``--extractor spacy``).

    sentence --spaCy pipeline (spec: extraction.spacy.model, pinned version)--> dependency parse
             --rules--> (subject, relation, object) triplets

Deterministic: the same sentences give the same triplets. The rules, for a verb or copula with a nominal
subject (pronouns are skipped: there is no coreference):

    subject  verb  direct object              "Steve Ballmer led Microsoft"          -> (S, led, O)
    subject  verb  preposition  object        "Harry Potter studied at Hogwarts"     -> (S, studied at, O)
    subject  passive verb  by  agent          "Overwatch was developed by Blizzard"  -> (S, was developed by, O)
    subject  be  attribute  of  object        "Bill is the father of Chelsea"        -> (S, is the father of, O)
    subject  be  attribute                    "Paris is the capital"                 -> (S, is, the capital)

Coordinated objects ("... Harry and Ron") give one triplet each. A name is its token with the compound
and flat words before it (or the named entity it lies in). At most ``max_triplets_per_sentence`` per
sentence, names and phrases within the spec's character limits, as for the model extractor.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from knowgic.builder.spec import BuilderSpec
from knowgic.builder.template_rules import rule_row
from knowgic.errors import KnowgicError

SUBJECTS = ("nsubj", "nsubjpass")
OBJECTS = ("dobj", "obj")
NOMINAL = ("NOUN", "PROPN", "NUM")


def model_install_hint(spec: BuilderSpec) -> str:
    cfg = spec.extraction["spacy"]
    name, version = cfg["model"], cfg["version"]
    return (
        f"pip install https://github.com/explosion/spacy-models/releases/download/{name}-{version}/"
        f"{name}-{version}-py3-none-any.whl"
    )


def require_spacy(spec: BuilderSpec) -> None:
    """spaCy and the spec's pipeline at its pinned version, or one line saying what to install."""
    import importlib.metadata

    from knowgic.extras import install_hint

    cfg = spec.extraction["spacy"]
    name, version = str(cfg["model"]), str(cfg["version"])
    try:
        importlib.import_module("spacy")
    except ImportError:
        raise KnowgicError(f"--extractor spacy needs spacy: {install_hint('build')}") from None
    try:
        found = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise KnowgicError(
            f"--extractor spacy needs the spaCy pipeline {name} {version}: {model_install_hint(spec)}"
        ) from None
    if found != version:
        raise KnowgicError(
            f"--extractor spacy needs the spaCy pipeline {name} {version}, found {found}: "
            f"{model_install_hint(spec)}"
        )


def spacy_config(spec: BuilderSpec) -> dict[str, Any]:
    """What the extraction stage's output depends on with this extractor (its stage key)."""
    import importlib.metadata

    d = spec.defaults
    return {
        "spacy": importlib.metadata.version("spacy"),
        "pipeline": dict(spec.extraction["spacy"]),
        "limits": [d[k] for k in ("max_triplets_per_sentence", "max_entity_chars", "max_relation_chars")],
    }


def load_pipeline(spec: BuilderSpec) -> Any:
    import spacy

    require_spacy(spec)
    return spacy.load(str(spec.extraction["spacy"]["model"]))


def _name(token: Any) -> str:
    """The name a token heads: its named entity, or the token with the compound/flat words before it."""
    if token.ent_type_:
        for ent in token.doc.ents:
            if ent.start <= token.i < ent.end:
                return ent.text
    start = token.i
    while (
        start > 0
        and token.doc[start - 1].head.i in range(start, token.i + 1)
        and (token.doc[start - 1].dep_ in ("compound", "flat", "amod", "nmod", "poss"))
    ):
        start -= 1
    return token.doc[start : token.i + 1].text


def _with_conj(token: Any) -> Iterator[Any]:
    yield token
    for child in token.children:
        if child.dep_ == "conj":
            yield from _with_conj(child)


def _verb_words(verb: Any) -> list[Any]:
    """The verb with its auxiliaries and negation, in sentence order ("was developed", "did not win")."""
    words = [c for c in verb.children if c.dep_ in ("aux", "auxpass", "neg")] + [verb]
    return sorted(words, key=lambda t: t.i)


def _phrase(tokens: Sequence[Any]) -> str:
    return " ".join(t.text for t in sorted(tokens, key=lambda t: t.i))


def sentence_triplets(sent: Any) -> Iterator[tuple[str, str, str]]:
    for verb in sent:
        if verb.pos_ not in ("VERB", "AUX"):
            continue
        subjects = [c for c in verb.children if c.dep_ in SUBJECTS and c.pos_ in NOMINAL]
        if not subjects:
            continue
        words = _verb_words(verb)
        pairs: list[tuple[list[Any], Any]] = []
        for child in verb.children:
            if child.dep_ in OBJECTS:
                pairs.append((words, child))
            elif child.dep_ in ("prep", "agent"):
                pairs += [([*words, child], o) for o in child.children if o.dep_ == "pobj"]
            elif child.dep_ in ("attr", "acomp") and child.pos_ in NOMINAL:
                preps = [p for p in child.children if p.dep_ == "prep"]
                objects = [(p, o) for p in preps for o in p.children if o.dep_ == "pobj"]
                if objects:
                    dets = [d for d in child.children if d.dep_ in ("det", "amod", "compound")]
                    pairs += [([*words, *dets, child, p], o) for p, o in objects]
                else:
                    pairs.append((words, child))
        for subject in subjects:
            for relation, obj in pairs:
                for o in _with_conj(obj):
                    if o.pos_ in NOMINAL:
                        yield _name(subject), _phrase(relation), _name(o)


def extract_spacy(
    sentences: Sequence[dict[str, Any]], spec: BuilderSpec, nlp: Any | None = None
) -> list[dict[str, Any]]:
    """The extraction rows of the model extractor's shape ({sentence_id, triplets, ...}), by rule."""
    from knowgic.builder.extract import clean_triplets

    d = spec.defaults
    nlp = nlp if nlp is not None else load_pipeline(spec)
    cap = int(d["max_triplets_per_sentence"])
    entity, relation = int(d["max_entity_chars"]), int(d["max_relation_chars"])
    rows = []
    for sent, doc in zip(sentences, nlp.pipe([s["text"] for s in sentences]), strict=True):
        found = []
        for s, r, o in dict.fromkeys(t for span in doc.sents for t in sentence_triplets(span)):
            if len(s) <= entity and len(o) <= entity and len(r) <= relation:
                found.append({"subject": s, "relation": r, "object": o})
        triplets, _ = clean_triplets({"triplets": found[:cap]})
        rows.append(rule_row(sent["sentence_id"], triplets))
    return rows
