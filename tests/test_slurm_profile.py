"""The Slurm resource profile and options (no cluster needed): defaults, a YAML file, options over it,
refusals in one line; ``knowgic --help`` builds without submitit."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.slurm import SlurmProfile, add_slurm_options, slurm_minutes, slurm_profile


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_slurm_options(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("text", "minutes"), [("90", 90), ("2:00:00", 120), ("1-12:00:00", 2160), ("30:00", 30), ("0:30", 1)]
)
def test_time_limits_read_as_slurm_writes_them(text: str, minutes: int) -> None:
    assert slurm_minutes(text) == minutes


def test_a_profile_file_replaces_the_defaults_and_options_replace_it(tmp_path: Path) -> None:
    profile = tmp_path / "gpu.yaml"
    profile.write_text('partition: gpu\ngpus: 1\nmem: 32G\ntime: "4:00:00"\n')
    assert slurm_profile(_parse()) == SlurmProfile()
    got = slurm_profile(_parse("--slurm-profile", str(profile), "--slurm-mem", "8g"))
    assert got == SlurmProfile(partition="gpu", gpus=1, mem="8G", time=240)
    assert got.submitit_parameters()["gpus_per_node"] == 1


def test_a_bad_profile_is_one_line_naming_the_key(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("partition: gpu\ngpu: 1\n")
    with pytest.raises(KnowgicError, match=r"bad.yaml: unknown key 'gpu' \(known: partition, gpus"):
        slurm_profile(_parse("--slurm-profile", str(profile)))
    profile.write_text("time: soon\n")
    with pytest.raises(KnowgicError, match="key time: 'soon' is not a time limit"):
        slurm_profile(_parse("--slurm-profile", str(profile)))


@pytest.mark.parametrize("written", ["4:00:00", "30:00", "90"])
def test_an_unquoted_time_is_refused_naming_the_file_and_key(tmp_path: Path, written: str) -> None:
    """YAML reads ``4:00:00`` unquoted as 14400 (base 60): taken as minutes it would ask for ten days."""
    profile = tmp_path / "gpu.yaml"
    profile.write_text(f"partition: gpu\ntime: {written}\n")
    with pytest.raises(KnowgicError, match=r"gpu.yaml, key time: .* is not quoted text") as refused:
        slurm_profile(_parse("--slurm-profile", str(profile)))
    assert "\n" not in str(refused.value)
    profile.write_text(f'partition: gpu\ntime: "{written}"\n')
    assert slurm_profile(_parse("--slurm-profile", str(profile))).time == slurm_minutes(written)


def test_slurm_options_without_the_slurm_executor_are_refused(tmp_path: Path, capsys) -> None:
    code = main(
        ["sweep", "--editors", "none", "--out", str(tmp_path / "s"), "--slurm-gpus", "1", "--no-wait"]
    )
    assert code != 0
    assert "--slurm-gpus, --no-wait: for --executor slurm only" in capsys.readouterr().err


def test_help_does_not_import_submitit() -> None:
    code = "import sys; from knowgic.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\n"
    code += "print('submitit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_without_slurm_both_commands_say_so_before_writing_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no sbatch, srun, squeue nor scontrol
    out = tmp_path / "sweep"
    assert main(["sweep", "--executor", "slurm", "--editors", "none", "--limit", "1", "--out", str(out)]) == 2
    assert "no Slurm here: sbatch, srun, squeue, scontrol not found on PATH" in capsys.readouterr().err
    assert not out.exists()
    store = tmp_path / "store"
    assert main(["runner", "slurm-workers", "2", "--store", str(store)]) == 2
    assert "no Slurm here" in capsys.readouterr().err
    assert not store.exists()
