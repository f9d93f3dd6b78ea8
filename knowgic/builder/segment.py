"""Stage 3b, segmentation: each chain of thought split into sentences by ``pysbd`` (rule-based, English).

    {cot_id, output} --pysbd.Segmenter--> distinct sentences --> [{sentence_id, cot_id, index, text}]

The text after the last full stop that the model left unfinished (generation stopped at its token
budget) is kept as a sentence too: the extractor decides whether it states a fact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowgic.builder.generation import require
from knowgic.dataset.io import short_id


def segment_text(text: str) -> list[str]:
    """The sentences of ``text``, stripped, empty ones dropped."""
    pysbd = require("pysbd")
    segmenter = pysbd.Segmenter(language="en", clean=False)
    return [s.strip() for s in segmenter.segment(text) if s.strip()]


def with_lead(lead: str, output: str) -> str:
    """``lead`` (the subject the prompt ends with) put back in front of ``output``: a space between
    them when the output starts a new word (a tokenizer often decodes the first generated word without
    its leading space, "Aidan Clinton Mezvinskyis a sibling ..."), none before punctuation ("'s", ",")."""
    if not lead:
        return output
    lead = lead.rstrip()
    start = output[:1]
    if start and not start.isspace() and (start.isalnum() or start in '("“'):
        return f"{lead} {output}"
    return lead + output


def segment(cots: Sequence[dict[str, Any]], lead_from_prompt: bool = False) -> list[dict[str, Any]]:
    """``lead_from_prompt``: the prompt ends with the start of the model's first sentence (the base
    template ends with the subject), so the subject is put back in front of the output."""
    rows = []
    for cot in cots:
        lead = cot["subject"] if lead_from_prompt else ""
        # a small model often repeats itself: a sentence said again adds nothing to extract
        for i, sentence in enumerate(dict.fromkeys(segment_text(with_lead(lead, cot["output"])))):
            rows.append(
                {
                    "sentence_id": short_id([cot["cot_id"], str(i), sentence]),
                    "cot_id": cot["cot_id"],
                    "index": i,
                    "text": sentence,
                }
            )
    return rows
