"""Fixtures of the tests marked ``container``: a real Docker engine and the runner's real images.

The engine is started when it is not running (Debian's docker.io; root). The images are built once per
test session and reused across sessions by the engine's cache:

- ``base_image``: Debian bookworm + python3.11, made here with debootstrap (no image registry is reachable
  from CI), skipped when the tag exists;
- ``runner_image``: the top-level Dockerfile FROM that base, given the host's CPU torch wheel and CA bundle;
  rebuilt each session, where only the layers after a changed file run again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# Overridable so that two checkouts can run their container tests on one engine at once.
TEST_RUNNER_IMAGE = os.environ.get("KNOWGIC_TEST_RUNNER_IMAGE", "knowgic-runner:test")


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    from runner.images import DockerUnavailable, ensure_docker

    try:
        client = ensure_docker()
    except DockerUnavailable as error:  # a container test that cannot reach an engine fails, loudly
        pytest.fail(f"container tests need a Docker engine: {error}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    from runner.images import build_local_base

    return build_local_base(docker_client)


@pytest.fixture(scope="session")
def runner_image(docker_client: Any, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    from knowgic.paths import cache_dir
    from runner.images import build_runner_image, find_torch_wheel

    wheel = find_torch_wheel(cache_dir() / "wheels")
    built = build_runner_image(docker_client, tag=TEST_RUNNER_IMAGE, base_image=base_image, torch_wheel=wheel)
    os.environ["KNOWGIC_RUNNER_IMAGE"] = built.tag  # what `knowgic runner worker` runs in these tests
    return built.tag
