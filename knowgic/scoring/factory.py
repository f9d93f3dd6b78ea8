"""Build a scorer by protocol name with the default parameters of ``spec/benchmark.yaml``."""

from __future__ import annotations

import inspect
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.scoring.base import Scorer
from knowgic.scoring.generate import GenerateScorer, GreedyScorer
from knowgic.scoring.logprob import LogprobScorer
from knowgic.spec import benchmark_spec

SCORERS: dict[str, type] = {"logprob": LogprobScorer, "generate": GenerateScorer, "greedy": GreedyScorer}


def make_scorer(protocol: str, **overrides: Any) -> Scorer:
    """The scorer for ``protocol``: spec defaults, then ``overrides``.

    Accepted overrides are the protocol's constructor arguments (its spec ``params`` plus options such as
    ``chat`` or ``progress``). An unknown protocol or parameter raises :class:`KnowgicError` naming it.
    """
    protocols = benchmark_spec().protocols
    if protocol not in SCORERS or protocol not in protocols:
        known = sorted(set(SCORERS) & set(protocols))
        raise KnowgicError(f"unknown scoring protocol {protocol!r}; known: {', '.join(known)}")
    cls = SCORERS[protocol]
    accepted = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
    spec_params = protocols[protocol].params
    for name in spec_params:
        if name not in accepted:
            raise KnowgicError(f"spec/benchmark.yaml: protocols.{protocol}.params.{name} is not a parameter")
    for name in overrides:
        if name not in accepted:
            raise KnowgicError(
                f"unknown parameter {name!r} for scoring protocol {protocol!r}; accepted: {', '.join(accepted)}"
            )
    return cls(**{**spec_params, **overrides})
