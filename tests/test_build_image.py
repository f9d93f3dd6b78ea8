"""``knowgic runner build-image``: the registry-free route to the runner image, and its one-line errors.

The errors that come before the Docker engine (a wrong --torch-wheel, no wheel to be had, no engine) run in
the default suite; the build itself and the missing-debootstrap error need the engine (marked container).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from knowgic.cli import main
from tests.container_fixtures import TEST_RUNNER_IMAGE

TORCH = "2.13.0"
GOOD_WHEEL = f"torch-{TORCH}-cp311-cp311-manylinux_2_28_x86_64.whl"  # named right; never installed here


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``knowgic runner build-image ARGV`` must exit 2 with one error line; that line."""
    try:
        code = main(["runner", "build-image", *argv])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    _, err = capsys.readouterr()
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.fixture
def no_dockerd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No engine to reach and no dockerd to start: DOCKER_HOST names a socket nobody listens on."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def test_a_wrong_torch_wheel_is_one_line_saying_how_to_get_one(tmp_path: Path, capsys) -> None:
    release = torch.__version__.split("+")[0]  # the hint names the host's torch release
    hint = f"pip download torch=={release} --no-deps -d DIR --index-url https://download.pytorch.org/whl/cpu"
    line = refused(capsys, "--local-base", "--torch-wheel", str(tmp_path / "missing.whl"))
    assert "missing.whl: no such file" in line and hint in line and "--torch-wheel DIR" in line
    empty = tmp_path / "wheels"
    empty.mkdir()
    line = refused(capsys, "--local-base", "--torch-wheel", str(empty))
    assert "must hold exactly one torch wheel (holds none)" in line and hint in line
    not_torch = tmp_path / "numpy-2.0.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    not_torch.write_bytes(b"")
    line = refused(capsys, "--torch-wheel", str(not_torch))
    assert "not a torch wheel" in line
    other_python = tmp_path / f"torch-{TORCH}-cp312-cp312-manylinux_2_28_x86_64.whl"
    other_python.write_bytes(b"")
    line = refused(capsys, "--local-base", "--torch-wheel", str(other_python))
    assert "needs a cp311 linux wheel" in line and hint in line


def test_no_wheel_to_be_had_is_one_line_before_any_build(
    tmp_path: Path, capsys, monkeypatch, no_dockerd
) -> None:
    """No cached wheel and an index that does not answer: the command stops before the engine is asked."""
    monkeypatch.setenv("KNOWGIC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KNOWGIC_TORCH_WHEEL", raising=False)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no configured find-links or local index
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # the discard port: refused at once
    monkeypatch.setenv("PIP_RETRIES", "0")
    line = refused(capsys, "--local-base")
    assert "no torch wheel for the image (cannot get a torch" in line
    assert re.search(r"pip download torch==\S+ --no-deps -d DIR", line)
    monkeypatch.setenv("KNOWGIC_TORCH_WHEEL", str(tmp_path / "gone.whl"))
    line = refused(capsys, "--local-base")
    assert f"KNOWGIC_TORCH_WHEEL={tmp_path / 'gone.whl'}: no such file" in line


def test_no_docker_engine_is_one_line(tmp_path: Path, capsys, no_dockerd) -> None:
    wheel = tmp_path / GOOD_WHEEL
    wheel.write_bytes(b"")
    line = refused(capsys, "--local-base", "--torch-wheel", str(wheel))
    assert "cannot reach the Docker engine" in line and "apt-get install docker.io" in line


def test_option_clashes_are_one_line(capsys) -> None:
    line = refused(capsys, "--local-base", "--base-image", "debian:bookworm")
    assert "argument --base-image: not allowed with argument --local-base" in line
    line = refused(capsys, "--rebuild-base")
    assert "--rebuild-base goes with --local-base" in line


# -- with the Docker engine --------------------------------------------------------------------------------
@pytest.mark.container
def test_build_image_local_base_makes_a_runner_image_that_runs(
    runner_image_build: subprocess.CompletedProcess[str], docker_client: Any
) -> None:
    """`knowgic runner build-image --local-base --tag TAG` (run by the fixture, as a person runs it)."""
    from knowgic import __version__

    out = runner_image_build.stdout
    assert re.search(
        rf"^built {re.escape(TEST_RUNNER_IMAGE)} \([0-9a-f]{{12}}\) in \d+ s: knowgic {__version__},",
        out,
        re.M,
    )
    assert f"KNOWGIC_RUNNER_IMAGE={TEST_RUNNER_IMAGE} knowgic runner worker" in out
    progress = runner_image_build.stderr
    assert "local base knowgic-base:bookworm:" in progress and re.search(r"Step \d+/(\d+) : ", progress)
    image = docker_client.images.get(TEST_RUNNER_IMAGE)
    assert image.labels["org.opencontainers.image.version"] == __version__
    assert image.labels["org.knowgic.dataset-versions"] != "unknown"
    printed = docker_client.containers.run(
        TEST_RUNNER_IMAGE,
        [
            "-c",
            "import torch, knowgic; print(torch.__version__, torch.cuda.is_available(), knowgic.__version__)",
        ],
        entrypoint="python3",
        network_mode="none",
        remove=True,
    )
    assert printed.decode().split() == [f"{TORCH}+cpu", "False", __version__]


@pytest.mark.container
def test_no_debootstrap_is_one_line_and_keeps_the_base(
    tmp_path: Path, capsys, monkeypatch, docker_client: Any, base_image: str
) -> None:
    before = docker_client.images.get(base_image).id
    wheel = tmp_path / GOOD_WHEEL
    wheel.write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # the engine answers; debootstrap is not found
    line = refused(capsys, "--local-base", "--rebuild-base", "--torch-wheel", str(wheel))
    assert "needs root and debootstrap (apt-get install debootstrap)" in line
    assert docker_client.images.get(base_image).id == before
