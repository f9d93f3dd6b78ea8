"""The job queue: one table of jobs in SQLite (the default, a file beside the store) or PostgreSQL.

One code path for both, through SQLAlchemy 2 Core. A job moves through these states::

    PENDING --claim--> RUNNING --finish--> FINISHED
       ^                 |  \\--fail-----> FAILED  --requeue--> PENDING
       |                 |   \\--cancel--> CANCELLED --requeue--> PENDING
       +--release/recover+

Claims are atomic. On PostgreSQL the claim selects the oldest PENDING row ``FOR UPDATE SKIP LOCKED``, so
concurrent workers each lock a different row without waiting; on SQLite every transaction starts with
``BEGIN IMMEDIATE`` (one writer at a time), and the claim's ``UPDATE ... WHERE state = 'PENDING'`` is
checked by its row count on both, so a job is never claimed twice.

A RUNNING job's worker sends heartbeats. :meth:`JobQueue.recover_stale` puts the jobs whose heartbeat is
older than a grace period back to PENDING with ``attempts + 1``, and marks them FAILED once
``attempts = max_attempts``. Workers call it before each claim, so a dead worker's job is picked up by
the next worker that looks. Times are UTC seconds from the hosts' clocks: hosts sharing a database should
keep their clocks synchronised (NTP), and the grace period should be well above any skew.

The time a job spends in each state is recorded (``state_seconds``), and each job keeps a log capped at
``LOG_CAP_BYTES``: when it overflows, the oldest text is dropped and a marker says how much.

Each job records its submitter (``token:NAME``, ``huggingface:USER``, or none on a deployment without
accounts). Quotas per submitter (:class:`knowgic.runner.options.Quotas`: jobs per day, open jobs) are
enforced in the transaction that inserts a submission's jobs, after it locks the submitter's row of
``knowgic_submitters`` (an ``UPDATE``: on PostgreSQL two submissions of one submitter wait for each other;
on SQLite every write transaction already does), so concurrent submissions cannot pass a quota together.
A submission is queued whole or not at all.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from knowgic.runner.options import SubmitPolicy, queue_url
from knowgic.runner.queue.keys import JobKey, QueueError, QuotaExceeded
from knowgic.runner.queue.states import TERMINAL_STATES, JobState

if TYPE_CHECKING:
    from knowgic.runner.store.store import ResultsStore

QUEUE_SCHEMA_VERSION = 2  # 2: jobs.submitter and knowgic_submitters
DEFAULT_MAX_ATTEMPTS = 3
LOG_CAP_BYTES = 256 * 1024
_DAY_SECONDS = 24 * 3600.0


class Enqueued(Protocol):
    """What the queue reads of a submission to make its jobs: plain keys, never its files (a loaded
    :class:`knowgic.runner.intake.submission.Submission` is one)."""

    @property
    def manifest(self) -> dict[str, Any]: ...
    @property
    def sha256(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...


class JobLost(QueueError):
    """The worker no longer owns the job: it was cancelled, or recovered after missed heartbeats."""


@dataclass(frozen=True)
class Job:
    """One evaluation: a submission on one model, protocol and mode (and dataset version)."""

    job_id: str
    submission_sha256: str
    submission_name: str
    submission_version: str
    model: str
    protocol: str
    mode: str
    dataset_version: str
    state: JobState
    attempts: int
    max_attempts: int
    created_at: _dt.datetime
    updated_at: _dt.datetime
    state_seconds: dict[str, float]
    worker: str | None
    heartbeat_at: _dt.datetime | None
    device: str | None
    reason: str | None
    results_sha256: str | None
    limit: int | None = None
    manifest: dict[str, Any] | None = None
    submitter: str | None = None  # token:NAME, huggingface:USER; None without accounts

    def record(self) -> dict[str, Any]:
        """The job as JSON-ready data (what the results store keeps with a verified run)."""
        data = asdict(self)
        data.pop("manifest")
        data["state"] = str(self.state)
        for key in ("created_at", "updated_at", "heartbeat_at"):
            value = data[key]
            data[key] = value.isoformat() if value is not None else None
        return data


_metadata = sa.MetaData()
_jobs = sa.Table(
    "knowgic_jobs",
    _metadata,
    sa.Column("job_id", sa.String(160), primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False),  # enqueue order: oldest first
    sa.Column("submission_sha256", sa.String(64), nullable=False),
    sa.Column("submission_name", sa.String(64), nullable=False),
    sa.Column("submission_version", sa.String(32), nullable=False),
    sa.Column("manifest", sa.Text, nullable=False),
    sa.Column("model", sa.String(512), nullable=False),
    sa.Column("protocol", sa.String(32), nullable=False),
    sa.Column("mode", sa.String(32), nullable=False),
    sa.Column("dataset_version", sa.String(32), nullable=False),
    sa.Column("case_limit", sa.Integer, nullable=True),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("state_entered_at", sa.Float, nullable=False),
    sa.Column("state_seconds", sa.Text, nullable=False),
    sa.Column("worker", sa.String(256), nullable=True),
    sa.Column("heartbeat_at", sa.Float, nullable=True),
    sa.Column("device", sa.String(64), nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("results_sha256", sa.String(64), nullable=True),
    sa.Column("log", sa.Text, nullable=False, default=""),
    sa.Column("log_dropped", sa.Integer, nullable=False, default=0),
    sa.Column("submitter", sa.String(128), nullable=True, index=True),
)
# One row per submitter: the row an enqueue locks, so that two submissions of one submitter are counted
# against the quotas one after the other.
_submitters = sa.Table(
    "knowgic_submitters",
    _metadata,
    sa.Column("submitter", sa.String(128), primary_key=True),
    sa.Column("last_enqueued_at", sa.Float, nullable=False),
)
_meta = sa.Table(
    "knowgic_queue_meta",
    _metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)


def _utc(seconds: float | None) -> _dt.datetime | None:
    return None if seconds is None else _dt.datetime.fromtimestamp(seconds, _dt.UTC)


def job_id_for(submission_name: str, submission_version: str, key: dict[str, Any]) -> str:
    """``<name>-<version>-<10 hex>``: readable, and the same for the same submission, model, protocol,
    mode, dataset version and limit, so that submitting twice does not queue the work twice."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:10]
    return f"{submission_name}-{submission_version}-{digest}"


def check_queue_url(url: str) -> Any:
    """``url`` parsed as a database URL, touching nothing; one line when it is none."""
    try:
        return sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise QueueError(
            f"queue URL {url!r} is not a database URL (sqlite:///PATH or postgresql+psycopg://...)"
        ) from None


def _engine_for(url: str) -> Engine:
    parsed = check_queue_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            folder = Path(database).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise QueueError(f"cannot create the queue folder {folder}: {exc.strerror or exc}") from None
        engine = sa.create_engine(url, connect_args={"timeout": 60})

        @sa.event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy's begin event issue BEGIN itself (pysqlite would defer it to the first write).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
            cursor.execute("PRAGMA busy_timeout=60000")
            # With WAL, NORMAL cannot corrupt the file; a power cut may lose the last commits, which the
            # queue survives (a lost claim is recovered, a lost finish re-runs and finds the stored result).
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _sqlite_begin(connection: Connection) -> None:
            # One writer at a time, decided when the transaction starts: no lock upgrades, no deadlocks.
            connection.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    if parsed.get_backend_name() != "postgresql":
        raise QueueError(
            f"queue URL {url!r}: only sqlite:/// and postgresql+psycopg:// databases are supported"
        )
    try:
        return sa.create_engine(url, pool_pre_ping=True)
    except (ImportError, sa.exc.ArgumentError) as exc:
        raise QueueError(f"queue URL {url!r}: {exc}") from None


class JobQueue:
    """The queue in the database at ``url`` (tables created when missing)."""

    def __init__(self, url: str, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.url = url
        self.queue_id = ""  # a random id made with the tables: labels what this queue's workers leave
        self.max_attempts = max_attempts
        self.engine = _engine_for(url)
        self._migrate()

    def __repr__(self) -> str:
        return f"JobQueue({self.engine.url.render_as_string(hide_password=True)!r})"

    def close(self) -> None:
        self.engine.dispose()

    # -- database -----------------------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as connection:
                yield connection
        except sa.exc.OperationalError as exc:
            where = self.engine.url.render_as_string(hide_password=True)
            raise QueueError(f"queue database {where}: {str(exc.orig).splitlines()[0]}") from None

    def _migrate(self) -> None:
        """Create the tables when missing and check the schema version row."""
        for attempt in range(3):
            try:
                with self._transaction() as connection:
                    _metadata.create_all(connection, checkfirst=True)
                    row = connection.execute(
                        sa.select(_meta.c.value).where(_meta.c.key == "schema_version")
                    ).first()
                    if row is None:
                        connection.execute(
                            sa.insert(_meta).values(key="schema_version", value=str(QUEUE_SCHEMA_VERSION))
                        )
                    elif row.value == "1":
                        self._upgrade_from_1(connection)
                    elif row.value != str(QUEUE_SCHEMA_VERSION):
                        raise QueueError(
                            f"queue database {self!r} has schema version {row.value}; this knowgic uses "
                            f"{QUEUE_SCHEMA_VERSION}: use a new database or a matching knowgic"
                        )
                    found = connection.execute(
                        sa.select(_meta.c.value).where(_meta.c.key == "queue_id")
                    ).first()
                    if found is None:
                        self.queue_id = uuid.uuid4().hex
                        connection.execute(sa.insert(_meta).values(key="queue_id", value=self.queue_id))
                    else:
                        self.queue_id = str(found.value)
                return
            except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
                # Two processes created the tables at once (PostgreSQL): the second one retries and finds them.
                if attempt == 2:
                    raise
                time.sleep(0.2)

    @staticmethod
    def _upgrade_from_1(connection: Connection) -> None:
        """Schema 1 -> 2: each job's submitter (none for the jobs queued before; knowgic_submitters was made
        by ``create_all``). In the migration's transaction: a second process waits, fails, and retries."""
        connection.execute(sa.text("ALTER TABLE knowgic_jobs ADD COLUMN submitter VARCHAR(128)"))
        for index in _jobs.indexes:
            if "submitter" in index.columns:
                index.create(connection, checkfirst=True)
        connection.execute(
            sa.update(_meta).where(_meta.c.key == "schema_version").values(value=str(QUEUE_SCHEMA_VERSION))
        )

    def _row(self, connection: Connection, job_id: str) -> Any:
        row = connection.execute(sa.select(_jobs).where(_jobs.c.job_id == job_id)).first()
        if row is None:
            raise QueueError(f"no job {job_id!r} in the queue (see `knowgic runner status`)")
        return row

    @staticmethod
    def _job(row: Any, now: float | None = None) -> Job:
        seconds = json.loads(row.state_seconds)
        # The current state's time so far counts too.
        spent = max(0.0, (now if now is not None else time.time()) - row.state_entered_at)
        if row.state not in TERMINAL_STATES:
            seconds[row.state] = seconds.get(row.state, 0.0) + spent
        return Job(
            job_id=row.job_id,
            submission_sha256=row.submission_sha256,
            submission_name=row.submission_name,
            submission_version=row.submission_version,
            model=row.model,
            protocol=row.protocol,
            mode=row.mode,
            dataset_version=row.dataset_version,
            state=JobState(row.state),
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            created_at=_utc(row.created_at),  # type: ignore[arg-type]
            updated_at=_utc(row.updated_at),  # type: ignore[arg-type]
            state_seconds={k: round(v, 3) for k, v in seconds.items()},
            worker=row.worker,
            heartbeat_at=_utc(row.heartbeat_at),
            device=row.device,
            reason=row.reason,
            results_sha256=row.results_sha256,
            limit=row.case_limit,
            manifest=json.loads(row.manifest),
            submitter=row.submitter,
        )

    @staticmethod
    def _move(row: Any, state: JobState, now: float, **values: Any) -> dict[str, Any]:
        """The column values of moving ``row`` to ``state`` at ``now`` (closing the old state's time)."""
        seconds = json.loads(row.state_seconds)
        seconds[row.state] = seconds.get(row.state, 0.0) + max(0.0, now - row.state_entered_at)
        return {
            "state": str(state),
            "state_entered_at": now,
            "state_seconds": json.dumps(seconds, sort_keys=True),
            "updated_at": now,
            **values,
        }

    def _transition(
        self,
        connection: Connection,
        row: Any,
        state: JobState,
        now: float,
        *,
        guard: Any = None,
        **values: Any,
    ) -> bool:
        """Move the row to ``state`` only if it is still in the state it was read in (and ``guard`` holds)."""
        condition = sa.and_(_jobs.c.job_id == row.job_id, _jobs.c.state == row.state)
        if guard is not None:
            condition = sa.and_(condition, guard)
        result = connection.execute(
            sa.update(_jobs).where(condition).values(**self._move(row, state, now, **values))
        )
        return result.rowcount == 1

    def _unclaim(
        self, connection: Connection, row: Any, now: float, *, guard: Any = None, **values: Any
    ) -> bool:
        """PENDING again, free for any worker: no owner, heartbeat or device."""
        return self._transition(
            connection,
            row,
            JobState.PENDING,
            now,
            guard=guard,
            worker=None,
            heartbeat_at=None,
            device=None,
            **values,
        )

    def _count_lost_run(
        self, connection: Connection, row: Any, now: float, *, guard: Any, attempts: int, failed_reason: str
    ) -> bool:
        """A run lost (not the submission's fault): PENDING again with ``attempts``, or FAILED with
        ``failed_reason`` once ``attempts`` reaches the job's maximum."""
        if attempts >= row.max_attempts:
            return self._transition(
                connection,
                row,
                JobState.FAILED,
                now,
                guard=guard,
                attempts=attempts,
                reason=_clip(failed_reason),
            )
        return self._unclaim(connection, row, now, guard=guard, attempts=attempts)

    # -- submitting and reading -----------------------------------------------------------------------
    def enqueue(
        self,
        submission: Enqueued,
        keys: Sequence[JobKey],
        *,
        submitter: str | None = None,
        policy: SubmitPolicy | None = None,
    ) -> list[Job]:
        """One PENDING job per key (the intake fans a submission out into keys), recorded with its
        ``submitter``; a job already queued is returned as is. Under a ``policy`` that requires accounts, an
        anonymous submission is refused, and a submitter's new jobs must fit each of its quotas, counted in
        the inserting transaction: all of them are queued, or none (:class:`QuotaExceeded`, one line naming
        the quota)."""
        foreign = [k for k in keys if k.submission_sha256 != submission.sha256]
        if foreign:
            raise QueueError(f"job key {foreign[0]} is not one of submission {submission.sha256[:12]}…")
        refusal = policy.refusal(submitter) if policy is not None else None
        if refusal is not None:
            raise QuotaExceeded(refusal)
        ids = [job_id_for(submission.name, submission.version, asdict(key)) for key in keys]
        for attempt in range(3):
            try:
                self._insert_jobs(submission, keys, ids, submitter, policy)
                break
            except sa.exc.IntegrityError:
                # The same submission, or a first one of the same submitter, enqueued at the same moment
                # elsewhere (PostgreSQL): look again.
                if attempt == 2:
                    raise
        return [self.get(job_id) for job_id in ids]

    def check_quotas(
        self, submission: Enqueued, keys: Sequence[JobKey], *, submitter: str | None, policy: SubmitPolicy
    ) -> None:
        """What :meth:`enqueue` would refuse, checked without queueing (before a submission is stored):
        :class:`QuotaExceeded` with its line, else nothing. :meth:`enqueue` checks again, atomically."""
        refusal = policy.refusal(submitter)
        if refusal is not None:
            raise QuotaExceeded(refusal)
        if submitter is None:
            return
        ids = [job_id_for(submission.name, submission.version, asdict(key)) for key in keys]
        with self._transaction() as connection:
            existing = set(
                connection.execute(sa.select(_jobs.c.job_id).where(_jobs.c.job_id.in_(ids))).scalars()
            )
            new = len([job_id for job_id in ids if job_id not in existing])
            if new:
                self._check_quotas(connection, submitter, policy, new, time.time())

    @staticmethod
    def _lock_submitter(connection: Connection, submitter: str, now: float) -> None:
        """Lock the submitter's row until the transaction ends (made on its first submission)."""
        updated = connection.execute(
            sa.update(_submitters).where(_submitters.c.submitter == submitter).values(last_enqueued_at=now)
        )
        if updated.rowcount == 0:
            connection.execute(sa.insert(_submitters).values(submitter=submitter, last_enqueued_at=now))

    @staticmethod
    def _check_quotas(
        connection: Connection, submitter: str, policy: SubmitPolicy, new: int, now: float
    ) -> None:
        """Raise :class:`QuotaExceeded` when ``new`` more jobs would take ``submitter`` over a quota."""
        quotas, mine = policy.quotas, _jobs.c.submitter == submitter
        if quotas.open_jobs:
            open_states = [str(JobState.PENDING), str(JobState.RUNNING)]
            count = connection.execute(
                sa.select(sa.func.count()).select_from(_jobs).where(mine, _jobs.c.state.in_(open_states))
            ).scalar_one()
            if count + new > quotas.open_jobs:
                raise QuotaExceeded(
                    f"submitter {submitter} is over the quota of {quotas.describe('open_jobs')}: "
                    f"{count} PENDING or RUNNING, and this submission adds {new}; "
                    + (
                        "submit fewer models, protocols or modes at once"
                        if new > quotas.open_jobs
                        else "submit again when some have finished"
                    )
                )
        if quotas.jobs_per_day:
            since = now - _DAY_SECONDS
            times = (
                connection.execute(
                    sa.select(_jobs.c.created_at)
                    .where(mine, _jobs.c.created_at > since)
                    .order_by(_jobs.c.created_at)
                )
                .scalars()
                .all()
            )
            over = len(times) + new - quotas.jobs_per_day
            if over > 0:
                if new > quotas.jobs_per_day:
                    when = "submit fewer models, protocols or modes at once"
                else:  # the moment enough of the day's jobs are a day old
                    free_at = _utc(times[over - 1] + _DAY_SECONDS)
                    assert free_at is not None
                    when = f"submit again after {free_at.isoformat(timespec='minutes')}"
                raise QuotaExceeded(
                    f"submitter {submitter} is over the quota of {quotas.describe('jobs_per_day')}: "
                    f"{len(times)} queued in the last 24 hours, and this submission adds {new}; {when}"
                )

    def _insert_jobs(
        self,
        submission: Enqueued,
        keys: Sequence[JobKey],
        ids: list[str],
        submitter: str | None,
        policy: SubmitPolicy | None,
    ) -> None:
        manifest = submission.manifest
        with self._transaction() as connection:
            now = time.time()
            if submitter is not None:
                self._lock_submitter(connection, submitter, now)  # first: the counts below are then ours
            existing = set(
                connection.execute(sa.select(_jobs.c.job_id).where(_jobs.c.job_id.in_(ids))).scalars()
            )
            new = [(key, job_id) for key, job_id in zip(keys, ids, strict=True) if job_id not in existing]
            if submitter is not None and policy is not None and new:
                self._check_quotas(connection, submitter, policy, len(new), now)
            seq = connection.execute(sa.select(sa.func.coalesce(sa.func.max(_jobs.c.seq), 0))).scalar_one()
            for key, job_id in new:
                seq += 1
                connection.execute(
                    sa.insert(_jobs).values(
                        job_id=job_id,
                        seq=seq,
                        submission_sha256=submission.sha256,
                        submission_name=submission.name,
                        submission_version=submission.version,
                        manifest=json.dumps(manifest, sort_keys=True),
                        model=key.model,
                        protocol=key.protocol,
                        mode=key.mode,
                        dataset_version=key.dataset_version,
                        case_limit=key.limit,
                        state=str(JobState.PENDING),
                        attempts=0,
                        max_attempts=self.max_attempts,
                        created_at=now,
                        updated_at=now,
                        state_entered_at=now,
                        state_seconds="{}",
                        log="",
                        log_dropped=0,
                        submitter=submitter,
                    )
                )

    def get(self, job_id: str) -> Job:
        with self._transaction() as connection:
            return self._job(self._row(connection, job_id))

    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """Jobs in enqueue order, all of them or those in ``states``."""
        query = sa.select(_jobs).order_by(_jobs.c.seq, _jobs.c.job_id)
        if states is not None:
            query = query.where(_jobs.c.state.in_([str(JobState(s)) for s in states]))
        with self._transaction() as connection:
            now = time.time()
            return [self._job(row, now) for row in connection.execute(query)]

    def counts(self) -> dict[str, int]:
        """The number of jobs in each state (every state listed)."""
        with self._transaction() as connection:
            rows = connection.execute(sa.select(_jobs.c.state, sa.func.count()).group_by(_jobs.c.state))
            found = {state: count for state, count in rows}
        return {str(state): int(found.get(str(state), 0)) for state in JobState}

    # -- workers --------------------------------------------------------------------------------------
    def claim(self, worker_id: str, *, device: str | None = None) -> Job | None:
        """The oldest PENDING job, now RUNNING on ``worker_id``; None when there is none. Atomic."""
        for _ in range(100):
            with self._transaction() as connection:
                row = connection.execute(
                    sa.select(_jobs)
                    .where(_jobs.c.state == str(JobState.PENDING))
                    .order_by(_jobs.c.seq, _jobs.c.job_id)
                    .limit(1)
                    .with_for_update(skip_locked=True)  # PostgreSQL; SQLite's BEGIN IMMEDIATE serialises
                ).first()
                if row is None:
                    return None
                now = time.time()
                if self._transition(
                    connection, row, JobState.RUNNING, now, worker=worker_id, heartbeat_at=now, device=device
                ):
                    return self._job(self._row(connection, row.job_id), now)
            # Someone else moved that row between the select and the update: look again.
        return None

    def _owned(self, connection: Connection, job_id: str, worker_id: str) -> Any:
        row = self._row(connection, job_id)
        if row.state != JobState.RUNNING or row.worker != worker_id:
            holder = f" on worker {row.worker}" if row.state == JobState.RUNNING else ""
            raise JobLost(f"job {job_id} is {row.state}{holder}, no longer running on worker {worker_id}")
        return row

    def heartbeat(self, job_id: str, worker_id: str) -> None:
        """Record that ``worker_id`` still runs the job; raises :class:`JobLost` when it no longer owns it."""
        with self._transaction() as connection:
            now = time.time()
            result = connection.execute(
                sa.update(_jobs)
                .where(
                    _jobs.c.job_id == job_id,
                    _jobs.c.state == str(JobState.RUNNING),
                    _jobs.c.worker == worker_id,
                )
                .values(heartbeat_at=now, updated_at=now)
            )
            if result.rowcount != 1:
                self._owned(connection, job_id, worker_id)  # raises with what happened

    def running_on(self, job_id: str, worker_id: str, grace_seconds: float) -> bool:
        """Whether ``worker_id`` runs the job and sent a heartbeat within ``grace_seconds``: what it left on
        a host (containers, a job folder) is its own; anything else a dead worker's, to be reaped."""
        with self._transaction() as connection:
            row = connection.execute(
                sa.select(_jobs.c.state, _jobs.c.worker, _jobs.c.heartbeat_at).where(_jobs.c.job_id == job_id)
            ).first()
        return (
            row is not None
            and row.state == str(JobState.RUNNING)
            and row.worker == worker_id
            and row.heartbeat_at is not None
            and row.heartbeat_at >= time.time() - grace_seconds
        )

    def finish(self, job_id: str, worker_id: str, results_sha256: str) -> Job:
        with self._transaction() as connection:
            row = self._owned(connection, job_id, worker_id)
            now = time.time()
            guard = _jobs.c.worker == worker_id
            if not self._transition(
                connection,
                row,
                JobState.FINISHED,
                now,
                guard=guard,
                results_sha256=results_sha256,
                reason=None,
            ):
                self._owned(connection, job_id, worker_id)
            return self._job(self._row(connection, job_id), now)

    def fail(self, job_id: str, worker_id: str, reason: str) -> Job:
        """Mark the job FAILED with a reason a person can act on (kept to one paragraph)."""
        with self._transaction() as connection:
            row = self._owned(connection, job_id, worker_id)
            now = time.time()
            guard = _jobs.c.worker == worker_id
            if not self._transition(connection, row, JobState.FAILED, now, guard=guard, reason=_clip(reason)):
                self._owned(connection, job_id, worker_id)
            return self._job(self._row(connection, job_id), now)

    def retry(self, job_id: str, worker_id: str, reason: str) -> Job:
        """A fault of the worker's host (not of the submission): the attempt counts, and the job goes back
        to PENDING for another worker, or FAILED once ``attempts == max_attempts``."""
        with self._transaction() as connection:
            row = self._owned(connection, job_id, worker_id)
            now = time.time()
            attempts = row.attempts + 1
            self._count_lost_run(
                connection,
                row,
                now,
                guard=_jobs.c.worker == worker_id,
                attempts=attempts,
                failed_reason=(
                    f"{reason} (attempt {attempts} of {row.max_attempts}, so the job is failed: fix the worker "
                    f"hosts, then `knowgic runner requeue {job_id}`)"
                ),
            )
            self._append(connection, job_id, f"[queue] {reason}; attempt {attempts} of {row.max_attempts}\n")
            return self._job(self._row(connection, job_id), now)

    def release(self, job_id: str, worker_id: str, note: str) -> Job:
        """A stopping worker hands its job back: PENDING again, without counting an attempt."""
        with self._transaction() as connection:
            row = self._owned(connection, job_id, worker_id)
            now = time.time()
            self._unclaim(connection, row, now, guard=_jobs.c.worker == worker_id)
            self._append(connection, job_id, f"[queue] released by worker {worker_id}: {note}\n")
            return self._job(self._row(connection, job_id), now)

    def recover_stale(self, grace_seconds: float) -> list[Job]:
        """RUNNING jobs without a heartbeat for ``grace_seconds``: back to PENDING with ``attempts + 1``,
        or FAILED when that makes ``attempts == max_attempts``. Returns the jobs moved."""
        moved: list[Job] = []
        with self._transaction() as connection:
            now = time.time()
            rows = connection.execute(
                sa.select(_jobs)
                .where(_jobs.c.state == str(JobState.RUNNING), _jobs.c.heartbeat_at < now - grace_seconds)
                .with_for_update(skip_locked=True)
            ).all()
            for row in rows:
                attempts = row.attempts + 1
                last = _utc(row.heartbeat_at)
                lost = (
                    f"worker {row.worker} stopped sending heartbeats (last at "
                    f"{last.isoformat(timespec='seconds') if last else 'never'}, grace {grace_seconds:g} s)"
                )
                done = self._count_lost_run(
                    connection,
                    row,
                    now,
                    guard=_jobs.c.heartbeat_at
                    == row.heartbeat_at,  # unchanged since read: the worker is silent
                    attempts=attempts,
                    failed_reason=(
                        f"{lost}; this was attempt {attempts} of {row.max_attempts}, so the job is failed: "
                        f"check the worker hosts (out of memory? killed?) and `knowgic runner logs {row.job_id}`, "
                        f"then `knowgic runner requeue {row.job_id}`"
                    ),
                )
                if done:
                    self._append(
                        connection, row.job_id, f"[queue] {lost}; attempt {attempts} of {row.max_attempts}\n"
                    )
                    moved.append(self._job(self._row(connection, row.job_id), now))
        return moved

    # -- people ---------------------------------------------------------------------------------------
    def requeue(self, job_id: str) -> Job:
        """A FAILED or CANCELLED job: PENDING again, attempts reset."""
        with self._transaction() as connection:
            row = self._row(connection, job_id)
            state = JobState(row.state)
            if state == JobState.FINISHED:
                raise QueueError(
                    f"job {job_id} is FINISHED (results {row.results_sha256[:12]}… are in the store)"
                )
            if state == JobState.PENDING:
                raise QueueError(f"job {job_id} is already PENDING")
            if state == JobState.RUNNING:
                raise QueueError(f"job {job_id} is RUNNING on worker {row.worker}; cancel it first")
            now = time.time()
            self._unclaim(connection, row, now, attempts=0, reason=None)
            self._append(connection, job_id, f"[queue] requeued from {state}\n")
            return self._job(self._row(connection, job_id), now)

    def cancel(self, job_id: str) -> Job:
        """A PENDING or RUNNING job: CANCELLED (a running worker learns it at its next heartbeat)."""
        with self._transaction() as connection:
            row = self._row(connection, job_id)
            state = JobState(row.state)
            if state in TERMINAL_STATES:
                raise QueueError(f"job {job_id} is already {state}; nothing to cancel")
            now = time.time()
            self._transition(connection, row, JobState.CANCELLED, now, reason="cancelled by a maintainer")
            self._append(connection, job_id, f"[queue] cancelled while {state}\n")
            return self._job(self._row(connection, job_id), now)

    # -- logs -----------------------------------------------------------------------------------------
    def _append(self, connection: Connection, job_id: str, text: str) -> None:
        row = connection.execute(
            sa.select(_jobs.c.log, _jobs.c.log_dropped).where(_jobs.c.job_id == job_id)
        ).first()
        if row is None:
            raise QueueError(f"no job {job_id!r} in the queue")
        log = row.log + text
        dropped = row.log_dropped
        if len(log) > LOG_CAP_BYTES:
            cut = len(log) - LOG_CAP_BYTES
            newline = log.find("\n", cut)
            if 0 <= newline < cut + 4096:  # drop whole lines when one ends nearby
                cut = newline + 1
            dropped += cut
            log = log[cut:]
        connection.execute(
            sa.update(_jobs).where(_jobs.c.job_id == job_id).values(log=log, log_dropped=dropped)
        )

    def append_log(self, job_id: str, text: str) -> None:
        """Add text to the job's log; past ``LOG_CAP_BYTES`` characters the oldest text is dropped."""
        text = text.replace("\x00", "")
        with self._transaction() as connection:
            self._append(connection, job_id, text)

    def logs(self, job_id: str) -> str:
        with self._transaction() as connection:
            self._row(connection, job_id)
            row = connection.execute(
                sa.select(_jobs.c.log, _jobs.c.log_dropped).where(_jobs.c.job_id == job_id)
            ).one()
        head = f"[… {row.log_dropped} earlier characters dropped …]\n" if row.log_dropped else ""
        return head + row.log


def _clip(reason: str, limit: int = 2000) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def default_queue_url(store: ResultsStore) -> str:
    """``$KNOWGIC_QUEUE_URL``, else the SQLite file beside the store (see runner/options.py)."""
    return queue_url(None, store.root)
