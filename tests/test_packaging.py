"""What ``pip install knowgic`` puts into site-packages: one root import package, ``knowgic``.

The wheel is built from a copy of the tracked files (so that the build leaves nothing in the checkout), with
pip and the build backend pyproject.toml names, as a user's ``pip install`` builds it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tracked_copy(target: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in files:
        source = ROOT / name
        if source.is_file() and not name.startswith("tests/"):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_the_wheel_installs_one_root_package(tmp_path) -> None:
    source = _tracked_copy(tmp_path / "src")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = tmp_path.glob("knowgic-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    roots = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert roots == {"knowgic"}, sorted(roots)
    # The top-level folders land inside it, with their data; the spec travels as knowgic/_spec.
    for expected in (
        "knowgic/runner/host/worker.py",
        "knowgic/runner/stages/score.py",
        "knowgic/runner/stages/__main__.py",
        "knowgic/leaderboard/app.py",
        "knowgic/leaderboard/data/methods.yaml",
        "knowgic/_spec/benchmark.yaml",
        "knowgic/_spec/schemas/results.schema.json",
    ):
        assert expected in names, expected
