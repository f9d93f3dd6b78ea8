"""What a job means to ``knowgic evaluate``'s code: the job with the benchmark's defaults filled in
(:func:`resolved`) and its :class:`~knowgic.evaluation.evaluate.EvaluationRequest`
(:func:`evaluation_request`). The trusted prepare and score stages check a job through it; the edit stage
reads only the resolved protocol and mode.
"""

from __future__ import annotations

from dataclasses import replace

from knowgic.evaluation.evaluate import EvaluationRequest
from knowgic.runner.stages.contract import JobSpec
from knowgic.spec import benchmark_spec

# The score stage's trusted editor (:class:`knowgic.runner.stages.score.ReplayEditor`), named as a job's
# editor is: the prepare and score stages check the job's request with it.
REPLAY_EDITOR = "knowgic.runner.stages.score:ReplayEditor"


def resolved(spec: JobSpec) -> JobSpec:
    """``spec`` with the benchmark's default protocol and mode filled in where it names none."""
    if spec.protocol is not None and spec.mode is not None:
        return spec
    bench = benchmark_spec()
    return replace(
        spec, protocol=spec.protocol or bench.default_protocol, mode=spec.mode or bench.default_mode
    )


def evaluation_request(spec: JobSpec, editor: str | None = None) -> EvaluationRequest:
    """The :class:`EvaluationRequest` of a job (``editor`` replaces the job's entry point)."""
    spec = resolved(spec)
    return EvaluationRequest(
        model=spec.model,
        editor=editor or spec.editor,
        protocol=str(spec.protocol),
        protocol_overrides=dict(spec.protocol_params),
        mode=str(spec.mode),
        dataset_version=spec.dataset_version,
        limit=spec.limit,
        seed=spec.seed,
        dtype=spec.dtype,
        device=spec.device,
        use_cache=False,  # the score stage trusts no file it did not compute in this run
    )
