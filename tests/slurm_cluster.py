"""A real one-node Slurm cluster for the tests marked ``slurm`` (Debian's ``slurm-wlm`` and ``munge``).

The session fixture :func:`slurm_cluster` writes, in a temporary folder, a munge key and a ``slurm.conf``
for one node on this host (127.0.0.1, free ports, ``proctrack/linuxproc``, ``task/none``, no cgroup,
``select/cons_tres`` with this machine's CPUs and most of its memory, no accounting database), starts
``munged``, ``slurmctld`` and ``slurmd`` on it, waits until ``sinfo`` shows the node idle, points
``$SLURM_CONF`` at it for the session, and at the end stops the three daemons and ends every process of
the cluster left (a job's ``slurmstepd``, its processes), failing the session if any outlives that::

    folder/munge.key --> munged (socket folder/munge.sock) <-- slurmctld, slurmd (AuthInfo=socket=...)
    folder/slurm.conf --> $SLURM_CONF --> sbatch, squeue, scancel, sinfo (submitit calls them)

Everything runs as the current user (root in CI: Slurm's jobs then run as root too). Run it as a script to
start a cluster by hand: ``python tests/slurm_cluster.py FOLDER`` (prints the ``export SLURM_CONF=...``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"
# Seconds between SIGTERM and SIGKILL when a job is cancelled or runs out of time (Slurm's default is 30):
# long enough for a worker to hand its job back, short enough for the tests.
KILL_WAIT = 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _memory_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


@dataclass
class SlurmCluster:
    """A running one-node cluster: its folder, configuration file, node and partition names."""

    folder: Path
    conf: Path
    node: str
    partition: str
    cpus: int
    memory_mib: int

    def env(self) -> dict[str, str]:
        """The environment of a Slurm client of this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *command: str) -> str:
        """A Slurm client command's output (``squeue``, ``scancel``...); raises when it fails."""
        done = subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def node_state(self) -> str:
        try:
            return self.run("sinfo", "-h", "-N", "-o", "%T").strip()
        except (RuntimeError, subprocess.TimeoutExpired):
            return ""

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}:\n" + (self.folder / f"{name}.log").read_text(errors="replace")[-4000:]
            for name in DAEMONS
            if (self.folder / f"{name}.log").is_file()
        )


def write_config(folder: Path) -> SlurmCluster:
    """The munge key and ``slurm.conf`` of a one-node cluster in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # munged refuses folders others may write
    key = folder / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    for name in ("state", "spool"):
        (folder / name).mkdir(exist_ok=True)
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    memory = max(1024, int(_memory_mib() * 0.8))  # slurmd drains a node that has less than it declares
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    conf = folder / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=knowgic-test",
                f"SlurmctldHost={node}(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                f"SlurmUser={user}",
                f"SlurmdUser={user}",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={folder / 'munge.sock'}",
                f"StateSaveLocation={folder / 'state'}",
                f"SlurmdSpoolDir={folder / 'spool'}",
                f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
                f"SlurmdPidFile={folder / 'slurmd.pid'}",
                f"SlurmctldLogFile={folder / 'slurmctld.log'}",
                f"SlurmdLogFile={folder / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/none",
                "MpiDefault=none",
                "ReturnToService=2",
                f"KillWait={KILL_WAIT}",
                "MinJobAge=300",
                "SchedulerParameters=sched_interval=1",
                "SlurmctldTimeout=30",
                "SlurmdTimeout=60",
                f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN",
                f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return SlurmCluster(folder, conf, node, PARTITION, cpus, memory)


def start(cluster: SlurmCluster, timeout: float = 60.0) -> None:
    """Start munged, slurmctld and slurmd, and wait until the node is idle."""
    folder = cluster.folder
    missing = [name for name in (*DAEMONS, "sinfo", "sbatch") if shutil.which(name) is None]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not found: apt-get install slurm-wlm munge")
    env = cluster.env()
    subprocess.run(
        [
            "munged",
            "--force",
            f"--socket={folder / 'munge.sock'}",
            f"--key-file={folder / 'munge.key'}",
            f"--pid-file={folder / 'munged.pid'}",
            f"--log-file={folder / 'munged.log'}",
            f"--seed-file={folder / 'munged.seed'}",
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    # -i: ignore any state a former run left; both daemonise and write their pid files.
    subprocess.run(["slurmctld", "-i", "-f", str(cluster.conf)], check=True, capture_output=True, env=env)
    subprocess.run(
        ["slurmd", "-N", cluster.node, "-f", str(cluster.conf)], check=True, capture_output=True, env=env
    )
    deadline = time.monotonic() + timeout
    while (state := cluster.node_state()) != "idle":
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the Slurm node is {state or 'not known'} after {timeout:g} s\n{cluster.logs()}"
            )
        time.sleep(0.5)


def cluster_processes(cluster: SlurmCluster) -> dict[int, str]:
    """Every process of this cluster still alive (pid -> command line): the daemons, the ``slurmstepd`` of
    its jobs and the jobs' own processes. A process is the cluster's when its environment names this
    cluster's ``slurm.conf``, or its command line, working folder or an open file lies in the cluster's
    folder (a folder of its own: another cluster on this host is never matched)."""
    conf = f"SLURM_CONF={cluster.conf}".encode()
    folder = str(cluster.folder)
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if not command:  # a zombie, or a kernel thread
                continue
            ours = conf in (entry / "environ").read_bytes().split(b"\0") or folder in command
            places = [entry / "cwd", *(entry / "fd").iterdir()] if not ours else []
            ours = ours or any(os.readlink(p).startswith(folder) for p in places if p.is_symlink())
        except OSError:  # it ended meanwhile, or is not ours to read
            continue
        if ours:
            found[int(entry.name)] = command
    return found


def _end(pids: list[int], wait: float) -> None:
    """SIGTERM ``pids``, then SIGKILL those still alive ``wait`` seconds later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if Path(f"/proc/{pid}/cmdline").is_file() and _alive(pid)]
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def stop(cluster: SlurmCluster) -> None:
    """Stop the daemons (slurmd first, munged last), each by the pid it wrote, then end every process of
    the cluster left (a job's ``slurmstepd`` outlives slurmd)."""
    _stop_daemons(cluster)
    _end(list(cluster_processes(cluster)), wait=5)


def _stop_daemons(cluster: SlurmCluster) -> None:
    for name in reversed(DAEMONS):
        pid_file = cluster.folder / f"{name}.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running one-node cluster; ``$SLURM_CONF`` points at it for the session."""
    cluster = write_config(Path(tempfile.mkdtemp(prefix="knowgic-slurm-")))
    previous = os.environ.get("SLURM_CONF")
    try:
        start(cluster)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        stop(cluster)
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else ""
        pytest.fail(f"cannot start the test's Slurm cluster: {exc} {detail or ''}\n{cluster.logs()}")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        stop(cluster)
        left = cluster_processes(cluster)
        shutil.rmtree(cluster.folder, ignore_errors=True)
        assert not left, f"processes of the test's Slurm cluster outlived it: {left}"


if __name__ == "__main__":
    if sys.argv[1] == "--stop":
        folder = Path(sys.argv[2]).resolve()
        stop(SlurmCluster(folder, folder / "slurm.conf", "", PARTITION, 0, 0))
    else:
        by_hand = write_config(Path(sys.argv[1]).resolve())
        start(by_hand)
        print(f"export SLURM_CONF={by_hand.conf}  # stop: python {__file__} --stop {by_hand.folder}")
