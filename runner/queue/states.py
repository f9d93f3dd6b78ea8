"""The queue's vocabulary, importable with the base install only.

The command line builds every parser (``knowgic runner status --state``, the worker's timing options) from
these names, so ``knowgic --help`` works without the ``runner`` extra; ``knowgic.runner.queue.queue`` (SQLAlchemy) and
``knowgic.runner.host.worker`` use the same names.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_STATES = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED})

DEFAULT_HEARTBEAT_SECONDS = 10.0
"""Seconds between a worker's heartbeats."""
DEFAULT_POLL_SECONDS = 5.0
"""Seconds between a worker's looks at an empty queue."""
DEFAULT_GRACE_SECONDS = 120.0
"""Seconds without a heartbeat after which a RUNNING job is taken back from its worker."""
