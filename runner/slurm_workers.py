"""``knowgic runner slurm-workers N``: N runner workers as Slurm jobs, each draining the shared queue.

    submit_workers --> one job array of N tasks (submitit), each run_worker_job:
        knowgic runner worker --drain --worker-id HOST-slurmJOBID_TASK [the worker's options] (a child process)
      leaves when no job is waiting; Slurm sends it SIGTERM 60 s before its time limit (--signal), and
      scancel sends the same: the worker hands its job back to PENDING and leaves. A worker killed outright
      (SIGKILL, a node lost) is covered by the queue's heartbeat: its job is given back after the grace
      period by the next worker that looks (docs/runner.md, Queue and scale-out).

The queue must be one every node reaches (PostgreSQL: ``--db`` or ``$KNOWGIC_QUEUE_URL``), and the store and
the signing key on a file system the nodes mount at the same paths. submitit's scripts and the workers'
logs go to ``STORE/slurm-workers``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from knowgic.slurm import SlurmProfile, job_name, slurm_executor

WORKER_COMMAND = (sys.executable, "-m", "knowgic.cli", "runner", "worker")
"""How a worker job starts the worker: this Python's ``knowgic runner worker``."""
STOP_SIGNAL = "TERM@60"
"""Slurm's ``--signal``: SIGTERM to the worker 60 s before the time limit, so it hands its job back."""


def run_worker_job(command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """One worker, on a Slurm node: ``command --drain`` as a child process (its output is the job's log),
    named after the Slurm job; raises when it fails, so that the job's result says so."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", str(os.getpid()))
    worker_id = f"{socket.gethostname()}-slurm{job}"  # the id squeue shows
    argv = [*command, "--drain", "--worker-id", worker_id]
    done = subprocess.run(argv, env=dict(env) if env is not None else None, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {worker_id} exited with status {done.returncode}")
    return done.returncode


def submit_workers(
    count: int,
    worker_args: Sequence[str],
    profile: SlurmProfile,
    folder: Path,
    *,
    command: Sequence[str] = WORKER_COMMAND,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """Submit ``count`` worker jobs (one array) running ``command`` with ``worker_args``; their job ids."""
    folder.mkdir(parents=True, exist_ok=True)
    executor = slurm_executor(folder, profile, job_name("knowgic-worker"), signal=STOP_SIGNAL)
    with executor.batch():
        jobs = [executor.submit(run_worker_job, [*command, *worker_args], env) for _ in range(count)]
    return [str(job.job_id) for job in jobs]
