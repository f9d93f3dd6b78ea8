"""Slurm jobs through submitit: the resource profile, declared once, and what the scheduler says of a job.

``knowgic sweep --executor slurm`` and ``knowgic runner slurm-workers`` ask for the same resources::

    PROFILE_FIELDS defaults  <--  --slurm-profile FILE (YAML: the same names)  <--  --slurm-partition ... options
                                  = SlurmProfile --> slurm_executor(folder) (submitit.SlurmExecutor)

submitit writes the job scripts, pickles each job's function and its result, and keeps the jobs' logs in
the folder it is given (inside the sweep folder, or the store); nothing here needs root, and nothing is kept
outside that folder. A job's state is read from ``squeue`` while it is queued or running, then from
``sacct`` (clusters with accounting) or ``scontrol show job`` (for ``MinJobAge`` seconds after it ended).
submitit is the ``slurm`` extra and is imported only where a job is submitted: ``knowgic --help`` builds every
parser without it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from knowgic.argtypes import non_negative_int, positive_int
from knowgic.errors import KnowgicError
from knowgic.yamlfile import read_yaml

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")
_MEMORY = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)


def slurm_minutes(text: str) -> int:
    """A Slurm time limit as whole minutes: ``90`` (minutes), ``2:00:00``, ``1-12:00:00``, ``30:00``."""
    match = _TIME.match(str(text).strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time limit (e.g. 90, 2:00:00, 1-12:00:00)")
    days, first, second, third = match.groups()
    if second is None:  # minutes alone, or days-hours
        minutes = int(first) * 60 if days else int(first)
    elif third is None:  # MM:SS, or days-HH:MM
        minutes = int(first) * 60 + int(second) if days else int(first) + (int(second) > 0)
    else:  # HH:MM:SS
        minutes = int(first) * 60 + int(second) + (int(third) > 0)
    minutes += int(days or 0) * 24 * 60
    if minutes < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a time limit must be at least one minute")
    return minutes


def slurm_memory(text: str) -> str:
    """Memory per node as Slurm writes it: ``16G``, ``512M``, ``4000`` (MiB)."""
    value = str(text).strip().upper().removesuffix("B")
    if not _MEMORY.match(value) or int(value.rstrip("KMGT")) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of memory (e.g. 16G, 512M)")
    return value


def _partition(text: str) -> str:
    value = str(text).strip()
    if not re.fullmatch(r"[A-Za-z0-9_.,-]*", value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a partition name (letters, digits, _ . - ,)")
    return value


@dataclass(frozen=True)
class ProfileField:
    """One resource of :class:`SlurmProfile`: its name (the YAML key; the option is ``--slurm-NAME``),
    default, parser and help."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    metavar: str
    help: str
    text_only: bool = False
    """In a profile file, the value must be quoted text: YAML reads an unquoted ``4:00:00`` as the
    base-60 number 14400, which would pass for 14400 minutes."""


PROFILE_FIELDS: tuple[ProfileField, ...] = (
    ProfileField("partition", "", _partition, "NAME", "partition (default: the cluster's default partition)"),
    ProfileField("gpus", 0, non_negative_int, "N", "GPUs per job (default 0)"),
    ProfileField("cpus", 4, positive_int, "N", "CPUs per job (default 4)"),
    ProfileField("mem", "16G", slurm_memory, "SIZE", "memory per job, e.g. 16G (default 16G)"),
    ProfileField(
        "time",
        120,
        slurm_minutes,
        "TIME",
        "time limit per job: minutes or D-HH:MM:SS (default 120)",
        text_only=True,
    ),
    ProfileField(
        "account", "", _partition, "NAME", "account to charge (default: the user's default account)"
    ),
    ProfileField("qos", "", _partition, "NAME", "quality of service (default: the cluster's)"),
)
"""The resources a job asks for, declared once: the profile's fields, YAML keys, options and defaults."""


@dataclass(frozen=True)
class SlurmProfile:
    """What each job asks of the scheduler; ``""`` leaves a name to the cluster's default."""

    partition: str = ""
    gpus: int = 0
    cpus: int = 4
    mem: str = "16G"
    time: int = 120  # minutes
    account: str = ""
    qos: str = ""

    def describe(self) -> str:
        """``partition gpu, 1 GPU, 4 CPUs, 16G, 120 min``."""
        parts = [f"partition {self.partition or '(default)'}"]
        parts += [f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}", f"{self.cpus} CPUs", self.mem]
        parts.append(f"{self.time} min")
        parts += [f"account {self.account}"] if self.account else []
        parts += [f"qos {self.qos}"] if self.qos else []
        return ", ".join(parts)

    def submitit_parameters(self) -> dict[str, Any]:
        """The ``SlurmExecutor.update_parameters`` of this profile."""
        params: dict[str, Any] = {
            "cpus_per_task": self.cpus,
            "mem": self.mem,
            "time": self.time,
            "ntasks_per_node": 1,
            "nodes": 1,
        }
        if self.gpus:
            params["gpus_per_node"] = self.gpus
        for name in ("partition", "account", "qos"):
            if getattr(self, name):
                params[name] = getattr(self, name)
        return params


assert [f.name for f in PROFILE_FIELDS] == [f.name for f in fields(SlurmProfile)]
assert all(f.default == getattr(SlurmProfile(), f.name) for f in PROFILE_FIELDS)


def add_slurm_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--slurm-profile FILE`` and one ``--slurm-NAME`` option per field of :data:`PROFILE_FIELDS`."""
    parser.add_argument(
        "--slurm-profile",
        type=Path,
        default=None,
        metavar="FILE",
        help="YAML file of Slurm resources (keys: "
        + ", ".join(f.name for f in PROFILE_FIELDS)
        + "); the --slurm-* options override it",
    )
    for field in PROFILE_FIELDS:
        parser.add_argument(
            f"--slurm-{field.name}",
            dest=f"slurm_{field.name}",
            type=field.parse,
            default=None,
            metavar=field.metavar,
            help=field.help,
        )


def given_slurm_options(args: argparse.Namespace) -> list[str]:
    """The ``--slurm-*`` options given on the command line (to refuse them where no job is submitted)."""
    names = ["profile", *(f.name for f in PROFILE_FIELDS)]
    return [f"--slurm-{n}" for n in names if getattr(args, f"slurm_{n}", None) is not None]


def read_profile(path: Path) -> dict[str, Any]:
    """The fields a profile file sets, each checked as its option is; an unknown key is refused."""
    data = read_yaml(path, "Slurm profile")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KnowgicError(
            f"Slurm profile {path}: expected a mapping of {', '.join(f.name for f in PROFILE_FIELDS)}"
        )
    declared = {f.name: f for f in PROFILE_FIELDS}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in declared:
            raise KnowgicError(f"Slurm profile {path}: unknown key {key!r} (known: {', '.join(declared)})")
        if declared[key].text_only and not isinstance(value, str):
            raise KnowgicError(
                f"Slurm profile {path}, key {key}: {value!r} is not quoted text (YAML reads an unquoted "
                f'4:00:00 as the number 14400); quote it: {key}: "4:00:00", or {key}: "90" for minutes'
            )
        try:
            values[key] = declared[key].parse(str(value))
        except argparse.ArgumentTypeError as exc:
            raise KnowgicError(f"Slurm profile {path}, key {key}: {exc}") from None
    return values


def slurm_profile(args: argparse.Namespace) -> SlurmProfile:
    """The profile: each field's default, else the profile file's value, else the option's."""
    profile = SlurmProfile()
    if getattr(args, "slurm_profile", None) is not None:
        profile = replace(profile, **read_profile(args.slurm_profile))
    given = {
        f.name: value for f in PROFILE_FIELDS if (value := getattr(args, f"slurm_{f.name}", None)) is not None
    }
    return replace(profile, **given)


# -- submitting ---------------------------------------------------------------------------------------------
SLURM_COMMANDS = ("sbatch", "srun", "squeue", "scontrol")
"""The Slurm commands jobs are submitted, followed and released with (submitit looks for srun too)."""


def require_slurm() -> None:
    """One line, before anything is written, where this machine has no Slurm commands on PATH."""
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        raise KnowgicError(
            f"no Slurm here: {', '.join(missing)} not found on PATH; --executor slurm and slurm-workers run on "
            "a Slurm cluster's login node (docs/cluster.md)"
        )


def slurm_executor(folder: Path, profile: SlurmProfile, name: str, **extra: Any) -> Any:
    """A ``submitit.SlurmExecutor`` writing into ``folder``, its jobs named ``name`` and asking ``profile``;
    ``extra``: more sbatch settings (``dependency``, ``hold``...). No requeue on timeout: a job that runs out
    of time is reported, and the next call resubmits it."""
    try:
        import submitit
    except ImportError:
        raise KnowgicError("Slurm jobs need submitit: pip install 'knowgic[slurm]'") from None
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
    executor.update_parameters(
        job_name=name,
        **profile.submitit_parameters(),
        additional_parameters=dict(extra),
        use_srun=False,  # the job's process is the batch script's own: scancel's SIGTERM reaches it directly
    )
    return executor


def job_name(*parts: str) -> str:
    """A job name ``squeue`` shows whole: the parts joined by ``:``, without spaces or commas."""
    return ":".join(re.sub(r"[^A-Za-z0-9._/+-]+", "-", p) for p in parts)[:120]


def _slurm(*command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise KnowgicError(f"{command[0]} not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise KnowgicError(f"{' '.join(command)} did not answer in {timeout:g} s") from None


def rename_and_release(names: Mapping[str, str], array: str) -> None:
    """Name each task of a held array (``JOBID_INDEX`` -> name, so that ``squeue`` shows it), then release
    the array. A name the cluster refuses leaves the array's own; the release always happens."""
    for job, name in names.items():
        _slurm("scontrol", "update", f"jobid={job}", f"name={name}")
    done = _slurm("scontrol", "release", array)
    if done.returncode != 0:
        raise KnowgicError(f"scontrol release {array}: {done.stderr.strip()}")


def release(jobs: Iterable[str]) -> None:
    """Release each of ``jobs`` that is held; a job that is not held, or ended, is left as it is."""
    for job in jobs:
        _slurm("scontrol", "release", job)


LIVE = (
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "RESIZING",
    "SUSPENDED",
    "REQUEUE_HOLD",
)
"""Slurm states of a job that has not ended."""


def job_states(job_ids: Iterable[str]) -> dict[str, str]:
    """Each job's Slurm state (``JOBID`` or ``JOBID_INDEX``): ``squeue`` for live jobs, then ``sacct``, then
    ``scontrol show job``; ``UNKNOWN`` for a job none of them knows any more."""
    wanted = list(dict.fromkeys(job_ids))
    states: dict[str, str] = {}
    if not wanted:
        return states
    queued = _slurm("squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(wanted))
    for line in queued.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in wanted:
            states[parts[0]] = parts[1]
    rest = [j for j in wanted if j not in states]
    if rest:
        accounted = _slurm("sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(rest))
        if accounted.returncode == 0:
            for line in accounted.stdout.splitlines():
                job, _, state = line.partition("|")
                if job in rest and state:
                    states[job] = state.split()[0]  # "CANCELLED by 0"
    for job in (j for j in wanted if j not in states):
        shown = _slurm("scontrol", "-o", "show", "job", job)
        found = re.search(r"\bJobState=(\S+)", shown.stdout) if shown.returncode == 0 else None
        states[job] = found.group(1) if found else "UNKNOWN"
    return states


def log_tail(paths: Sequence[Path], lines: int = 15) -> str:
    """The last ``lines`` lines of a job's log files (stderr first: that is where a traceback goes)."""
    out = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        tail = [line for line in text.splitlines() if line.strip()][-lines:]
        if tail:
            out.append(f"  {path}:\n" + "\n".join(f"    {line}" for line in tail))
    return "\n".join(out) or "  (no log)"
