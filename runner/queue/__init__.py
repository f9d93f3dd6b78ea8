"""The job queue: trusted bookkeeping, shared by every host. ``queue`` keeps the jobs (SQLAlchemy: SQLite
beside the store, or PostgreSQL) with atomic claims, heartbeats, recovery and logs; ``states`` names the
states without SQLAlchemy, for the command line. A job is plain keys (submission sha256, name, version,
model, protocol, mode, dataset version, limit): the queue never opens a submission, runs nothing of it and
depends on no other part of the runner but ``options`` (the store appears only as a type).
"""
