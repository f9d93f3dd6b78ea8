"""The typed records every metric is computed from: one per chain and one per edit of a run.

A results document carries them as ``chains`` and ``per_edit``; :meth:`Records.from_document` reads them
back, so that what a reader recomputes from a published file is what the run computed::

    results document ──chains────> ChainOutcome (edit, length, active, R, R', known after the edit)
                     ──per_edit──> EditRecord   (the edit's rewrite and question outcomes, and the sums of
                                                 its broader-context facts and neighbours)
                     ──ripple────> RippleRecord (a ripple query of an edit: criterion, conditions known,
                                                 kept, accuracy, p' of target and competitor)
                     ──> Records ──> knowgic.measure.registry (each metric's per-edit sums)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.metrics import ChainOutcome

_EDIT_SUMS = ("preservation_sum", "preservation_n", "specificity_kept", "neighbours", "neighbours_known")
"""Per-edit sums every readable document records (results schema 1.1 and later)."""


@dataclass(frozen=True)
class EditRecord:
    """One edit's outcomes: p'(o*) and p'(o^c) on the rewrite prompt, its question-form outcome (``None``
    without a question form), its broader-context facts (how many, how many known, and the sum of
    min(1, p'/p) over the ``preservation_n`` known ones with p > 0) and its neighbours (the kind of its neighbourhood, how many, how
    many known before the edit, how many of those kept their answer)."""

    edit_id: str
    p_new: float
    p_true: float
    generalization: float | None
    preservation_facts: int | None
    preservation_facts_known: int
    preservation_sum: float
    preservation_n: int
    neighbourhood: str
    neighbours: int
    neighbours_known: int
    specificity_kept: int


@dataclass(frozen=True)
class RippleRecord:
    """One ripple query of an edit (the version's ``ripple`` config): ``conditions`` condition facts, of which
    ``conditions_known`` the unedited model knows; ``kept`` when it knows all of them (only kept queries are
    scored after the edit, the others have ``None`` outcomes); ``accuracy`` 1.0 when the edited model's greedy
    continuation contains the target (RippleEdits' form), else 0.0; ``p_target`` and ``p_competitor`` the
    edited model's p' under the run's protocol (``p_competitor`` None for a query without a competitor)."""

    edit_id: str
    query_id: str
    criterion: str
    conditions: int
    conditions_known: int
    kept: bool
    accuracy: float | None
    p_target: float | None
    p_competitor: float | None
    has_competitor: bool


NO_RIPPLE_RECORDS = "the document records no ripple queries (written before ripple scoring)"
"""Why RippleEdits' metrics are undefined on records that carry no ripple queries at all."""


@dataclass(frozen=True)
class Records:
    """A run's records, in the run's edit order; ``preservation_facts``: its broader-context facts in all;
    ``ripple``: its ripple queries (None: none were scored, for the reason ``ripple_reason``)."""

    edits: tuple[EditRecord, ...]
    chains: tuple[ChainOutcome, ...]
    preservation_facts: int
    ripple: tuple[RippleRecord, ...] | None = None
    ripple_reason: str = NO_RIPPLE_RECORDS

    @property
    def edit_ids(self) -> tuple[str, ...]:
        return tuple(e.edit_id for e in self.edits)

    def index(self) -> dict[str, int]:
        """Edit id -> its position in :attr:`edits`."""
        return {e.edit_id: i for i, e in enumerate(self.edits)}

    def only(self, edit_id: str) -> Records:
        """The records of one edit: each metric computed on them is that edit's own value."""
        edits = tuple(e for e in self.edits if e.edit_id == edit_id)
        chains = tuple(c for c in self.chains if c.edit_id == edit_id)
        ripple = None if self.ripple is None else tuple(r for r in self.ripple if r.edit_id == edit_id)
        return Records(
            edits, chains, sum(e.preservation_facts or 0 for e in edits), ripple, self.ripple_reason
        )

    def reordered(self, order: tuple[str, ...]) -> Records:
        """The same records with the edits in ``order`` (the chains and ripple queries are looked up by edit
        id)."""
        by_id = {e.edit_id: e for e in self.edits}
        return Records(
            tuple(by_id[e] for e in order),
            self.chains,
            self.preservation_facts,
            self.ripple,
            self.ripple_reason,
        )

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Records:
        """The records of a results document; a one-line error when it has none to recompute from."""
        per_edit, chains = document.get("per_edit"), document.get("chains")
        if not isinstance(per_edit, list) or not isinstance(chains, list):
            raise KnowgicError("the results document has no per_edit and chains records to recompute from")
        lacking = sorted({k for r in per_edit for k in _EDIT_SUMS if k not in r})
        if lacking:
            raise KnowgicError(
                f"results schema {document.get('schema_version')} records no per-edit {', '.join(lacking)}: its "
                "metrics and intervals cannot be recomputed (results schema 1.1 and later record them; rerun "
                "the evaluation)"
            )
        edits = tuple(
            EditRecord(
                edit_id=str(r["edit_id"]),
                p_new=float(r["p_new"]),
                p_true=float(r["p_true"]),
                generalization=None if r["generalization"] is None else float(r["generalization"]),
                preservation_facts=None if "preservation_facts" not in r else int(r["preservation_facts"]),
                preservation_facts_known=int(r["preservation_facts_known"]),
                preservation_sum=float(r["preservation_sum"]),
                preservation_n=int(r["preservation_n"]),
                neighbourhood=str(r["neighbourhood"]),
                neighbours=int(r["neighbours"]),
                neighbours_known=int(r["neighbours_known"]),
                specificity_kept=int(r["specificity_kept"]),
            )
            for r in per_edit
        )
        if all(e.preservation_facts is not None for e in edits):
            facts = sum(int(e.preservation_facts or 0) for e in edits)
        else:  # results schema 1.1/1.2 record the total only
            facts = int(document["counts"]["preservation_facts"])
        return cls(
            edits=edits,
            chains=tuple(
                ChainOutcome(
                    case_id=int(c["case_id"]),
                    edit_id=str(c["edit_id"]),
                    length=int(c["length"]),
                    active=bool(c["active"]),
                    r_pre=float(c["r_pre"]),
                    r_post=float(c["r_post"]),
                    known_post=c.get("known_post"),
                    # absent in documents written before chains recorded it: not recorded, not False
                    restates_edit=c.get("restates_edit"),
                )
                for c in chains
            ),
            preservation_facts=facts,
            ripple=None
            if not isinstance(document.get("ripple"), list)
            else ripple_records(document["ripple"]),
        )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def ripple_records(rows: Any) -> tuple[RippleRecord, ...]:
    """The typed ripple records of a document's ``ripple`` list (``spec/schemas/results.schema.json``)."""
    return tuple(
        RippleRecord(
            edit_id=str(r["edit_id"]),
            query_id=str(r["query_id"]),
            criterion=str(r["criterion"]),
            conditions=int(r["conditions"]),
            conditions_known=int(r["conditions_known"]),
            kept=bool(r["kept"]),
            accuracy=_float_or_none(r["accuracy"]),
            p_target=_float_or_none(r["p_target"]),
            p_competitor=_float_or_none(r["p_competitor"]),
            has_competitor=bool(r["has_competitor"]),
        )
        for r in rows
    )
