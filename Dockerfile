# The KnowGIC runner image: the package with its runner extras, `knowgic` as entry point, run as a
# non-root user. The runner's trusted score stage runs in this image; a submission's edit stage runs in an
# image built FROM it with the submission's files added (runner/host/images.py).
#
#   docker build -t knowgic-runner:0.1.0 --build-arg GIT_COMMIT=$(git rev-parse HEAD) .
#   mkdir -p results cache && docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/results:/results" -v "$PWD/cache:/cache" knowgic-runner:0.1.0
#
# The base image is a build argument: a CUDA PyTorch runtime image for GPU hosts (the default), or any
# Debian-like image with python3 (3.11+) and pip, in which case a torch wheel must be put into
# docker/extra/wheels/ (knowgic.runner.host.images.build_runner_image does so for CPU test images).
# Only classic-builder instructions are used, so the engine's builder and the docker SDK both build it;
# the layers are ordered so that a change to the sources rebuilds only the last install.
ARG BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    KNOWGIC_CACHE=/cache \
    HF_HOME=/cache/huggingface \
    MPLCONFIGDIR=/tmp/matplotlib
# The package index pip uses while building (a mirror's URL where PyPI is not reachable).
ARG PIP_INDEX_URL=https://pypi.org/simple

# 1. torch, only when the base image has none: the wheel from docker/extra/wheels/, its dependencies pinned.
COPY docker/extra/ /opt/knowgic-build/extra/
COPY docker/torch-cpu.lock docker/requirements.lock /opt/knowgic-build/lock/
RUN set -eu; \
    if [ -f /opt/knowgic-build/extra/ca-certificates.crt ]; then export PIP_CERT=/opt/knowgic-build/extra/ca-certificates.crt; fi; \
    if ! python3 -c "import torch" 2>/dev/null; then \
        wheel=$(ls /opt/knowgic-build/extra/wheels/torch-*.whl 2>/dev/null | head -n 1); \
        if [ -z "$wheel" ]; then echo "the base image has no torch and docker/extra/wheels/ holds no torch wheel" >&2; exit 1; fi; \
        python3 -m pip install --no-deps "$wheel"; \
        python3 -m pip install -r /opt/knowgic-build/lock/torch-cpu.lock; \
    fi; \
    rm -rf /opt/knowgic-build/extra/wheels

# 2. The pinned dependency closure (changes only when requirements.lock does).
RUN set -eu; \
    if [ -f /opt/knowgic-build/extra/ca-certificates.crt ]; then export PIP_CERT=/opt/knowgic-build/extra/ca-certificates.crt; fi; \
    python3 -m pip install -r /opt/knowgic-build/lock/requirements.lock

# 3. The project itself, without touching the pinned dependencies.
WORKDIR /opt/knowgic
COPY pyproject.toml setup.py README.md ./
COPY spec ./spec
COPY knowgic ./knowgic
COPY runner ./runner
COPY leaderboard ./leaderboard
RUN python3 -m pip install --no-deps --no-build-isolation . \
    && (cd / && python3 -c "import knowgic.runner, knowgic.leaderboard") \
    && (id -u knowgic >/dev/null 2>&1 || useradd --uid 10001 --user-group --create-home --shell /bin/sh knowgic) \
    && mkdir -p /cache /results && chown knowgic:knowgic /cache /results \
    && rm -rf /opt/knowgic-build

ARG KNOWGIC_VERSION=0.1.0
ARG DATASET_VERSIONS=unknown
ARG GIT_COMMIT=unknown
LABEL org.opencontainers.image.title="KnowGIC runner" \
      org.opencontainers.image.description="KnowGIC deep knowledge editing benchmark: evaluation and the runner's score stage" \
      org.opencontainers.image.version="${KNOWGIC_VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.licenses="MIT" \
      org.knowgic.dataset-versions="${DATASET_VERSIONS}"

USER knowgic
WORKDIR /home/knowgic
ENTRYPOINT ["knowgic"]
CMD ["evaluate", "--model", "knowgic-tiny", "--editor", "none", "--out", "/results"]
