"""A private split's block of a results document: only what ranking needs, and nothing that names an edit.

::

    the split's records (scored where submitted code never runs)
        ──metric_sums──> EditSums per metric path, in the run's private edit order
        ──private_block──> {"edits": opaque keys, "sums": {path: {numerator, denominator, n, reason}},
                            "metrics": metrics_of_sums(sums), ...}
    read_private(block) ──> PrivateSums (keys, EditSums by path): what the recomputation and the
                            rankings read back

Every metric is a ratio of per-edit sums (:mod:`knowgic.measure.registry`), so the sums give back every
value and interval, and rankings pair runs edit by edit over them. An edit is published only as its *key*,
``sha256(split content hash, edit id)`` cut to :data:`EDIT_KEY_CHARS` hex digits: the same across runs on
one split, so that rankings can pair edits, and naming no text. No case id, chain, per-chain score,
per-edit text or prefix is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.intervals import BootstrapSettings
from knowgic.measure.compute import metrics_of_sums
from knowgic.measure.registry import EditSums
from knowgic.spec import BenchmarkSpec

EDIT_KEY_CHARS = 16
"""Hex digits of an edit key (64 bits: two edits of one split never share one)."""
OLD_BLOCK = (
    "its private block was scored on chains of the public edits (a drill, or a same-edit holdout of results "
    "schema 1.4 and before): shown, never ranked from or flagged"
)
"""Why a drill's private block, or one written before results schema 1.5, does not rank."""


def edit_key(split_sha256: str, edit_id: str) -> str:
    """An edit's key in the private block of split ``split_sha256``."""
    return hashlib.sha256(f"{split_sha256}\x1f{edit_id}".encode()).hexdigest()[:EDIT_KEY_CHARS]


def sums_record(sums: Mapping[str, EditSums]) -> dict[str, Any]:
    """A private block's ``sums``: every plain metric path -> :meth:`EditSums.record`."""
    return {path: s.record() for path, s in sums.items()}


def private_block(
    dataset: Mapping[str, Any],
    kind: str,
    edits_outside_run: int,
    edit_ids: Sequence[str],
    sums: Mapping[str, EditSums],
    counts: Mapping[str, int],
    spec: BenchmarkSpec,
    settings: BootstrapSettings | None = None,
) -> dict[str, Any]:
    """The ``private`` object of a results document, but for its flag (``ifr_gap``): the split's reference
    and kind (``disjoint``: new edits, it ranks; ``drill``: chains of the public edits, never ranks), the
    aggregate ``counts``, each edit's key (in ``edit_ids``' order, the order of the sums), the sums, the
    metrics computed from them (:func:`knowgic.measure.compute.metrics_of_sums`) and the interval settings."""
    settings = settings or BootstrapSettings()
    return {
        "dataset": dict(dataset),
        "kind": kind,
        "edits_outside_run": edits_outside_run,
        "counts": dict(counts),
        "edits": [edit_key(str(dataset["sha256"]), e) for e in edit_ids],
        "sums": sums_record(sums),
        "metrics": metrics_of_sums(sums, spec, settings),
        "uncertainty": settings.record(),
    }


@dataclass(frozen=True)
class PrivateSums:
    """A private block read back: the split's content hash, its edits' keys and every metric's sums."""

    split_sha256: str
    keys: tuple[str, ...]
    sums: dict[str, EditSums]

    def reordered(self, order: Sequence[str]) -> dict[str, EditSums]:
        """The sums with the edits in ``order`` (keys of this block)."""
        index = {k: i for i, k in enumerate(self.keys)}
        take = [index[k] for k in order]
        return {
            p: EditSums(type(s.ratio)(s.ratio.numerator[take], s.ratio.denominator[take]), s.n, s.reason)
            for p, s in self.sums.items()
        }


def has_sums(block: Any) -> bool:
    """Whether ``block`` is a private block of results schema 1.5 or later (per-edit sums, edit keys)."""
    return isinstance(block, Mapping) and "sums" in block and "edits" in block


def read_private(block: Mapping[str, Any], where: str = "private") -> PrivateSums:
    """The :class:`PrivateSums` of a private block; a one-line :class:`KnowgicError` naming what is wrong
    (an old block without sums, repeated keys, sums of another length than the keys)."""
    if not has_sums(block):
        raise KnowgicError(f"{where}: {OLD_BLOCK}")
    keys = tuple(str(k) for k in block["edits"])
    if len(set(keys)) != len(keys):
        raise KnowgicError(f"{where}.edits: an edit key is repeated")
    sums = {}
    for path, record in block["sums"].items():
        found = EditSums.from_record(record, f"{where}.sums.{path}")
        if found.ratio.numerator.size != len(keys):
            raise KnowgicError(
                f"{where}.sums.{path}: {found.ratio.numerator.size} edits, the block has {len(keys)} edit keys"
            )
        sums[path] = found
    return PrivateSums(str(block["dataset"]["sha256"]), keys, sums)
