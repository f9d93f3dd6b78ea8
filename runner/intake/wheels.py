"""A submission's requirements as a wheelhouse: resolved and fetched before its image is built, wheels only.

Run by the worker host in a container of the runner image (trusted code only: the project's image, its
non-root user, nothing of the submission but the requirement lines, which ``knowgic.runner.intake.submission`` checked
are index requirements, no direct references), because pip must resolve against the packages that image
already holds, for its Python and platform::

    pip install --dry-run --only-binary :all: --user --report report.json -r requirements.txt
        -> the distributions the image lacks, name==version
    pip download --no-deps --only-binary :all: -d wheels/ name==version ...

Wheels only: no source distribution is ever built, so no submitted code runs while fetching; the index
and a local folder of wheels (``--find-links``) are the only sources. The edit image then installs from
``wheels/`` in a build without network, as the non-root user (:mod:`knowgic.runner.host.images`).

Command line (in the container)::

    python -m knowgic.runner.intake.wheels --requirements REQUIREMENTS.txt --out DIR [--find-links DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PINNED_FILE = "pinned.txt"
WHEELS_FOLDER = "wheels"


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
    )


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["(no output)"])[-1]


def fetch(requirements: Path, out: Path, find_links: Path | None = None) -> list[str]:
    """Resolve ``requirements`` against this environment and download the missing wheels into
    ``out/wheels``; returns the pinned ``name==version`` lines (also written to ``out/pinned.txt``)."""
    sources = ["--find-links", str(find_links)] if find_links is not None else []
    report = out / "report.json"
    done = _pip(
        "install",
        "--dry-run",
        "--user",
        "--only-binary",
        ":all:",
        "--no-cache-dir",
        *sources,
        "--report",
        str(report),
        "-r",
        str(requirements),
    )
    if done.returncode != 0:
        raise SystemExit(f"error: resolving the requirements (wheels only) failed: {_last_line(done)}")
    plan = json.loads(report.read_text(encoding="utf-8"))
    pinned = [
        f"{item['metadata']['name']}=={item['metadata']['version']}" for item in plan.get("install", [])
    ]
    wheels = out / WHEELS_FOLDER
    wheels.mkdir(parents=True, exist_ok=True)
    if pinned:
        done = _pip(
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--no-cache-dir",
            *sources,
            "-d",
            str(wheels),
            *pinned,
        )
        if done.returncode != 0:
            raise SystemExit(f"error: downloading the requirements' wheels failed: {_last_line(done)}")
    (out / PINNED_FILE).write_text("".join(f"{line}\n" for line in pinned), encoding="utf-8")
    return pinned


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowgic.runner.intake.wheels", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--requirements", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--find-links", type=Path, default=None)
    args = parser.parse_args(argv)
    pinned = fetch(args.requirements, args.out, args.find_links)
    print(f"{len(pinned)} wheel(s): {' '.join(pinned) or '(every requirement is already installed)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
