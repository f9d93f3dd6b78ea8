"""Fixtures of the tests marked ``container``: a real Docker engine and the runner's real images.

The engine is started when it is not running (Debian's docker.io; root). The images are built once per
test session and reused across sessions by the engine's cache:

- ``base_image``: Debian bookworm + python3.11, made here with debootstrap (no image registry is reachable
  from CI), skipped when the tag exists;
- ``runner_image``: ``knowgic runner build-image --local-base --tag TEST_RUNNER_IMAGE``, run as a person runs
  it (the top-level Dockerfile FROM that base, given the host's CPU torch wheel and CA bundle); rebuilt each
  session, where only the layers after a changed file run again. ``runner_image_build`` is that run.

The sandbox's contract runs on both engines: ``engine_client`` (with ``engine_base_image``) is
parametrized over Docker and Podman (Podman's API socket, found or started by
knowgic.runner.host.engine.connect), and its Podman case carries the marker ``podman`` as well, so that
``-m "not podman"`` leaves it out. Podman gets the images Docker built, copied through the two API
sockets (``podman_runner_image``): cheaper than building them twice, and the same image ids.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

# Overridable so that two checkouts can run their container tests on one engine at once.
TEST_RUNNER_IMAGE = os.environ.get("KNOWGIC_TEST_RUNNER_IMAGE", "knowgic-runner:test")
CLI = "import sys; from knowgic.cli import main; sys.exit(main())"  # `knowgic`, with this interpreter
BUILD_TIMEOUT_SECONDS = 3600  # a first build on a loaded 2-core machine: debootstrap, then every dependency


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    from knowgic.runner.host.engine import DockerUnavailable, ensure_docker

    try:
        client = ensure_docker()
    except DockerUnavailable as error:  # a container test that cannot reach an engine fails, loudly
        pytest.fail(f"container tests need a Docker engine: {error}")
    yield client
    client.close()


# Each engine the sandbox's contract is tested on; the Podman case also carries the marker `podman`.
ENGINES = [pytest.param("docker", id="docker"), pytest.param("podman", id="podman", marks=pytest.mark.podman)]


@pytest.fixture(scope="session")
def podman_client() -> Iterator[Any]:
    from knowgic.runner.host.engine import EngineUnavailable, connect

    try:
        client = connect("podman")
    except EngineUnavailable as error:  # a Podman test that cannot reach Podman fails, loudly
        pytest.fail(f"podman tests need Podman's API socket: {error}")
    yield client
    client.close()


@pytest.fixture(scope="session", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """``docker`` or ``podman``: each engine-parametrized test runs once per engine."""
    return str(request.param)


@pytest.fixture(scope="session")
def engine_client(engine: str, request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("podman_client" if engine == "podman" else "docker_client")


@pytest.fixture(scope="session")
def engine_base_image(engine: str, base_image: str, request: pytest.FixtureRequest) -> str:
    """The local base in ``engine``'s store (Podman's copied from Docker's)."""
    if engine == "podman":
        from knowgic.runner.host.images import copy_image

        copy_image(
            request.getfixturevalue("docker_client"), request.getfixturevalue("podman_client"), base_image
        )
    return base_image


@pytest.fixture(scope="session")
def podman_runner_image(runner_image: str, docker_client: Any, podman_client: Any) -> str:
    """The runner image in Podman's store, copied from Docker's; prints how long the copy took."""
    from knowgic.runner.host.images import copy_image

    copied = copy_image(docker_client, podman_client, runner_image)
    print(
        f"\n{runner_image} into Podman: {'copied' if copied.built else 'already there'} in {copied.seconds:.1f} s"
    )
    return runner_image


@pytest.fixture(scope="session")
def engine_runner_image(engine: str, runner_image: str, request: pytest.FixtureRequest) -> str:
    """The runner image in ``engine``'s store (Podman's copied from Docker's)."""
    return str(request.getfixturevalue("podman_runner_image")) if engine == "podman" else runner_image


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    from knowgic.runner.host.images import build_local_base

    return build_local_base(docker_client)


@pytest.fixture(scope="session")
def runner_image_build(base_image: str) -> subprocess.CompletedProcess[str]:
    """The command a method author runs to get the runner image where no registry is reachable."""
    done = subprocess.run(
        [sys.executable, "-c", CLI, "runner", "build-image", "--local-base", "--tag", TEST_RUNNER_IMAGE],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        pytest.fail(f"knowgic runner build-image failed (exit {done.returncode}): {done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="session")
def runner_image(runner_image_build: subprocess.CompletedProcess[str]) -> str:
    os.environ["KNOWGIC_RUNNER_IMAGE"] = TEST_RUNNER_IMAGE  # what `knowgic runner worker` runs in these tests
    return TEST_RUNNER_IMAGE
