# KnowGIC evaluation image. The base image is a build argument: a CUDA PyTorch image for real use
# (e.g. pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime), or any image with python3 and pip for CPU runs.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 KNOWGIC_CACHE=/cache
WORKDIR /opt/knowgic
COPY pyproject.toml README.md ./
COPY spec ./spec
COPY knowgic ./knowgic
# torch comes from the base image when it has one; otherwise pip takes the release the range allows.
RUN python3 -m pip install --no-cache-dir . && mkdir -p /cache /results

ENTRYPOINT ["knowgic"]
CMD ["evaluate", "--model", "knowgic-tiny", "--editor", "none", "--out", "/results"]
