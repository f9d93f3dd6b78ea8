"""A job's key: what the intake resolves once at submit and the queue stores as given. Light on purpose
(no SQLAlchemy): the intake and the leaderboard's submit tab import it without the queue's database layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from knowgic.errors import KnowgicError


class QueueError(KnowgicError):
    """Bad use of the queue: unknown job, a transition its state does not allow, an unusable database."""


class QuotaExceeded(QueueError):
    """A submission refused because its submitter has no account where one is required, or would go over
    a quota; the message names the quota."""


@dataclass(frozen=True)
class JobKey:
    """What one job is: a submission on one model, protocol, mode, dataset version and limit. The intake
    resolves them once at submit (defaults from the benchmark spec); the queue stores them as given."""

    submission_sha256: str
    model: str
    protocol: str
    mode: str
    dataset_version: str
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise QueueError(f"limit must be a positive number of cases, got {self.limit}")
