"""The runner's images: the Docker engine, a locally made base, the runner image and each submission's edit image.

Three images, each built FROM the one before::

    base      a CUDA PyTorch runtime image (real GPU hosts pull it), or, where no registry is reachable,
              a Debian bookworm made here with debootstrap (python3.11 + pip), imported with `docker import`
    runner    the top-level Dockerfile: the package with its runner extras, pinned (docker/requirements.lock);
              the trusted score stage runs in it and nothing of a submission ever enters it
    edit      runner minus every benchmark text (runner/host/edit_base.py) + one submission's files (/submission)
              and its requirements, tagged by the submission's sha256 and the runner image's id, so a
              submission is built once per runner image. Its requirements are wheels only, fetched first
              (runner/intake/wheels.py, in a container of the runner image), then installed in a build with no
              network as the non-root user: no submitted code runs as root or with the network, ever

Builds use the engine's classic builder through the docker SDK, so the Dockerfile orders its layers for the
cache (base, torch, pinned dependencies, then the sources): a second build of changed sources only reruns
the last install.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tqdm import tqdm

from knowgic import __version__
from knowgic.dataset.versions import available_versions
from knowgic.errors import KnowgicError
from knowgic.runner.host.engine import DockerUnavailable, docker_sdk, engine_of
from knowgic.runner.host.sandbox import Mount, SandboxLimits, run_sandboxed

if TYPE_CHECKING:
    import docker
    from knowgic.runner.intake.submission import Submission

DEFAULT_BASE_IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
LOCAL_BASE_IMAGE = "knowgic-base:bookworm"
RUNNER_REPOSITORY = "knowgic-runner"
EDIT_REPOSITORY = "knowgic-edit"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Packages of the local base: Python 3.11 with pip, TLS roots, and useradd for the Dockerfile's user.
BASE_PACKAGES = ("python3", "python3-pip", "ca-certificates", "passwd")
SUBMISSION_DIR = "/submission"
# A build step as Docker's classic builder ("Step 3/23 : RUN ...") and Podman's Buildah ("STEP 3/23: RUN ...") print it.
_STEP = re.compile(r"^(?:Step|STEP) (\d+)/(\d+) ?: (.*)")
_LOG = Callable[[str], None]


class ImageBuildError(KnowgicError):
    """An image build failed; the message ends with the build's last output lines."""


def _quiet(_: str) -> None:
    pass


def knowgic_version() -> str:
    return __version__


def default_runner_image() -> str:
    """``$KNOWGIC_RUNNER_IMAGE``, else ``knowgic-runner:<package version>``."""
    return os.environ.get("KNOWGIC_RUNNER_IMAGE") or f"{RUNNER_REPOSITORY}:{knowgic_version()}"


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    docker = docker_sdk()
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def image_id(client: docker.DockerClient, tag: str) -> str:
    """The image's id (``sha256:...``)."""
    docker = docker_sdk()
    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound as error:
        raise DockerUnavailable(
            f"no image {tag!r} in the Docker engine: build it with `knowgic runner build-image --tag {tag}` "
            "(add --local-base where no image registry is reachable)"
        ) from error


def copy_image(
    source: docker.DockerClient, target: docker.DockerClient, tag: str, *, log: _LOG = _quiet
) -> BuiltImage:
    """``tag`` from one engine's store into another's (``docker save | podman load``, streamed through
    the two API sockets); nothing is copied when the target already holds the same image id. The target
    keeps the image id, so edit images built from it are tagged alike on both engines."""
    started = time.monotonic()
    wanted = image_id(source, tag)
    if image_exists(target, tag) and image_id(target, tag) == wanted:
        return BuiltImage(tag, wanted, False, time.monotonic() - started)
    log(f"copying {tag} ({wanted.removeprefix('sha256:')[:12]}) into the other engine")
    target.images.load(source.api.get_image(tag, chunk_size=1 << 20))
    copied = image_id(target, tag)
    if copied != wanted:
        raise ImageBuildError(f"copying {tag}: the target holds {copied}, not {wanted}")
    return BuiltImage(tag, copied, True, time.monotonic() - started)


def _bar(total: int | None, desc: str, unit: str) -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, disable=not sys.stderr.isatty(), leave=False)


def build_local_base(
    client: docker.DockerClient,
    *,
    tag: str = LOCAL_BASE_IMAGE,
    suite: str = "bookworm",
    mirror: str = DEBIAN_MIRROR,
    rebuild: bool = False,
    log: _LOG = _quiet,
) -> str:
    """A Debian base image with Python 3.11 and pip, made with debootstrap and ``docker import``.

    For machines that reach Debian's mirror but no image registry. Skipped when ``tag`` exists (about a
    minute otherwise). Needs root and debootstrap (Debian package ``debootstrap``).
    """
    if not rebuild and image_exists(client, tag):
        return tag
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None or os.geteuid() != 0:
        raise DockerUnavailable(
            "building the local base image needs root and debootstrap (apt-get install debootstrap)"
        )
    with tempfile.TemporaryDirectory(prefix="knowgic-base-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        command = [
            debootstrap,
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            suite,
            str(rootfs),
            mirror,
        ]
        log(f"debootstrap {suite} from {mirror}")
        tail: list[str] = []
        with _bar(None, f"debootstrap {suite}", "step") as bar:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert process.stdout is not None
            for line in process.stdout:
                tail = [*tail[-19:], line.rstrip()]
                if line.startswith("I: "):
                    bar.update(1)
                    bar.set_postfix_str(line[3:60].strip())
            code = process.wait()
        if code != 0:
            raise ImageBuildError(f"debootstrap failed (exit {code}): " + " | ".join(tail[-5:]))
        # Package caches and lists are of no use in an image.
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        archive = Path(scratch) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(archive), "."], check=True)
        repository, _, version = tag.partition(":")
        log(f"docker import {tag}")
        client.api.import_image_from_file(
            str(archive),
            repository=repository,
            tag=version or "latest",
            changes=[
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
                'CMD ["python3"]',
                f"LABEL org.knowgic.base=debootstrap-{suite}",
            ],
        )
    return tag


def find_torch_wheel(dest: Path, version: str | None = None) -> Path:
    """A torch wheel of ``version`` (default: the installed torch's release) for an image without torch.

    ``$KNOWGIC_TORCH_WHEEL`` names one directly; otherwise ``pip download torch==VERSION --no-deps`` with
    the host's pip configuration, which takes a local wheel when pip's find-links holds one.
    """
    named = os.environ.get("KNOWGIC_TORCH_WHEEL")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ImageBuildError(f"KNOWGIC_TORCH_WHEEL={named}: no such file")
        return path
    if version is None:
        import torch  # only here: the worker host imports no torch otherwise

        version = torch.__version__.split("+")[0]
    dest.mkdir(parents=True, exist_ok=True)
    existing = sorted(dest.glob(f"torch-{version}[+-]*.whl"))
    if existing:
        return existing[0]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps", "-d", str(dest)],
        capture_output=True,
        text=True,
    )
    found = sorted(dest.glob(f"torch-{version}[+-]*.whl"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ImageBuildError(f"cannot get a torch {version} wheel with pip download: {last}")
    return found[0]


def repository_root() -> Path:
    """The checkout holding the top-level Dockerfile (two folders above this file, runner/host/)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "Dockerfile").is_file():
        raise ImageBuildError(f"no Dockerfile in {root}: build the runner image from a source checkout")
    return root


def _read_dockerignore(root: Path) -> list[str]:
    path = root / ".dockerignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _context_archive(
    files: Iterable[tuple[str, Path]], generated: Mapping[str, bytes], handle: IO[bytes]
) -> None:
    """A build context: ``files`` (name in the context, path here) and ``generated`` (name, bytes)."""
    with tarfile.open(fileobj=handle, mode="w") as archive:
        for name, path in sorted(files):
            info = archive.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with path.open("rb") as content:
                    archive.addfile(info, content)
            else:
                archive.addfile(info)
        for name, data in sorted(generated.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    handle.seek(0)


@dataclass(frozen=True)
class BuiltImage:
    """An image in the engine: its tag and id, and whether this call built it or found it."""

    tag: str
    image_id: str
    built: bool
    seconds: float
    labels: dict[str, str] = field(default_factory=dict)


def _stream_build(
    client: docker.DockerClient,
    context: IO[bytes],
    *,
    tag: str,
    buildargs: Mapping[str, str],
    labels: Mapping[str, str] | None,
    log: _LOG,
    network_mode: str | None = None,
) -> None:
    """Run a classic build and follow it: a progress bar over its steps, step lines to ``log``."""
    tail: list[str] = []
    stream: Iterator[dict[str, Any]] = client.api.build(
        fileobj=context,
        custom_context=True,
        tag=tag,
        buildargs=dict(buildargs),
        labels=dict(labels) if labels else None,
        rm=True,
        forcerm=True,
        decode=True,
        network_mode=network_mode,
    )
    with _bar(None, f"building {tag}", "step") as bar:
        for chunk in stream:
            if "error" in chunk:
                detail = str(chunk.get("error", "")).strip()
                lines = [line for line in tail if line.strip()][-8:]
                raise ImageBuildError(f"building {tag} failed: {detail} | last output: " + " | ".join(lines))
            text = str(chunk.get("stream", ""))
            for line in text.splitlines():
                tail = [*tail[-39:], line]
                step = _STEP.match(line)
                if step:
                    bar.total = int(step.group(2))
                    bar.n = int(step.group(1)) - 1
                    bar.set_postfix_str(step.group(3)[:50])
                    bar.refresh()
                    log(f"{tag}: {line[:200]}")


def _git_commit(root: Path) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def _dataset_versions() -> str:
    return ",".join(available_versions())


def build_runner_image(
    client: docker.DockerClient,
    *,
    tag: str | None = None,
    base_image: str = DEFAULT_BASE_IMAGE,
    root: Path | None = None,
    torch_wheel: Path | None = None,
    ca_bundle: Path | None = HOST_CA_BUNDLE,
    pip_index_url: str | None = None,
    git_commit: str | None = None,
    log: _LOG = _quiet,
) -> BuiltImage:
    """Build the top-level Dockerfile FROM ``base_image``.

    The context is the checkout minus .dockerignore, plus the optional build inputs under docker/extra/:
    ``torch_wheel`` (needed when the base has no torch) and ``ca_bundle`` (pip's CA roots while building,
    when the file exists). ``pip_index_url`` overrides the index pip uses in the build.
    """
    docker = docker_sdk()
    started = time.monotonic()
    root = root or repository_root()
    tag = tag or default_runner_image()
    files = [
        (name, root / name)
        for name in docker.utils.build.exclude_paths(str(root), _read_dockerignore(root), "Dockerfile")
    ]
    if ca_bundle is not None and ca_bundle.is_file():
        files.append(("docker/extra/ca-certificates.crt", ca_bundle))
    if torch_wheel is not None:
        files.append((f"docker/extra/wheels/{torch_wheel.name}", torch_wheel))
    buildargs = {
        "BASE_IMAGE": base_image,
        "KNOWGIC_VERSION": knowgic_version(),
        "DATASET_VERSIONS": _dataset_versions(),
        "GIT_COMMIT": git_commit or _git_commit(root),
    }
    if pip_index_url:
        buildargs["PIP_INDEX_URL"] = pip_index_url
    torch_from = f"torch from the wheel {torch_wheel}" if torch_wheel is not None else "torch from the base"
    log(f"building {tag} FROM {base_image}, {torch_from}")
    with tempfile.TemporaryFile(prefix="knowgic-context-") as context:
        _context_archive(files, {}, context)
        _stream_build(client, context, tag=tag, buildargs=buildargs, labels=None, log=log)
    image = client.images.get(tag)
    return BuiltImage(tag, str(image.id), True, time.monotonic() - started, dict(image.labels or {}))


def edit_image_tag(runner_image_id: str, submission_sha256: str) -> str:
    """One edit image per (submission, runner image): a new runner image rebuilds the submission's."""
    return f"{EDIT_REPOSITORY}:{submission_sha256[:24]}-{runner_image_id.removeprefix('sha256:')[:12]}"


# Where the edit image installs a submission's requirements (the non-root user's PYTHONUSERBASE): pip's
# --user scheme keeps the packages the runner image already holds, and puts only the missing ones here.
SUBMISSION_PACKAGES = "/opt/knowgic-submission-packages"
WHEELHOUSE = "/opt/knowgic-wheels"


def _edit_dockerfile(runner_image: str, has_requirements: bool, installed: bool = False) -> str:
    """The edit image's Dockerfile. ``installed``: the requirements were installed beforehand, in a sandboxed
    container (:func:`install_wheels`, Podman), and the build only copies them: no step runs their code."""
    lines = [
        f"FROM {runner_image}",
        "USER root",
        # Before anything of the submission: the image keeps no benchmark text (runner/host/edit_base.py).
        "RUN python3 -m knowgic.runner.host.edit_base",
        f"COPY submission/ {SUBMISSION_DIR}/",
        # Readable by the sandbox's user, writable by nobody: the running editor cannot change its own code.
        f"RUN chown -R root:root {SUBMISSION_DIR} && chmod -R a+rX,go-w {SUBMISSION_DIR}",
    ]
    if has_requirements and installed:
        lines += [
            f"COPY packages/ {SUBMISSION_PACKAGES}/",
            f"RUN chown -R root:root {SUBMISSION_PACKAGES} && chmod -R a+rX,go-w {SUBMISSION_PACKAGES}",
            f"ENV PYTHONUSERBASE={SUBMISSION_PACKAGES}",
        ]
    elif has_requirements:
        lines += [
            f"COPY wheels/ {WHEELHOUSE}/",
            f"RUN mkdir -p {SUBMISSION_PACKAGES} && chown knowgic:knowgic {SUBMISSION_PACKAGES}",
            f"ENV PYTHONUSERBASE={SUBMISSION_PACKAGES}",
            # As the non-root user, from the wheelhouse only (the build has no network): wheels are unpacked,
            # never built, and the import check runs whatever they install with no network and no root.
            "USER knowgic",
            f"RUN {_PIP_INSTALL} --find-links {WHEELHOUSE}/wheels -r {WHEELHOUSE}/requirements.txt "
            f"&& {_IMPORT_CHECK}",
            "USER root",
            f"RUN rm -rf {WHEELHOUSE} && chown -R root:root {SUBMISSION_PACKAGES} "
            f"&& chmod -R a+rX,go-w {SUBMISSION_PACKAGES}",
        ]
    lines += [f"ENV PYTHONPATH={SUBMISSION_DIR}:{SUBMISSION_DIR}/src", "USER knowgic", ""]
    return "\n".join(lines)


_PIP_INSTALL = "python3 -m pip install --user --no-index --no-cache-dir --only-binary :all:"
_IMPORT_CHECK = 'python3 -c "import knowgic.runner"'


def install_wheels(client: docker.DockerClient, runner_image: str, wheelhouse: Path, packages: Path) -> None:
    """Install the fetched wheels into ``packages`` in a sandboxed container of the runner image (no network,
    the non-root user, a read-only root), then check that ``knowgic.runner`` still imports with them, in
    another: what the Docker build's own step does, for an engine whose builds cannot be trusted with it.
    Podman's API builds run every step in the host's network namespace, whatever the network mode asked."""
    packages.mkdir(parents=True, exist_ok=True)
    packages.chmod(0o755)
    limits = SandboxLimits(memory_bytes=4 * (1 << 30), cpus=2.0, pids=256, timeout_seconds=900.0)
    environment = {"PYTHONUSERBASE": SUBMISSION_PACKAGES}
    wheels = Mount(wheelhouse, WHEELHOUSE)
    steps = (
        (
            [
                *_PIP_INSTALL.split(),
                "--find-links",
                f"{WHEELHOUSE}/wheels",
                "-r",
                f"{WHEELHOUSE}/requirements.txt",
            ],
            [wheels, Mount(packages, SUBMISSION_PACKAGES, writable=True)],
        ),
        (["python3", "-c", "import knowgic.runner"], [Mount(packages, SUBMISSION_PACKAGES)]),
    )
    for command, mounts in steps:
        result = run_sandboxed(
            client, runner_image, command, mounts=mounts, limits=limits, gpus="none", environment=environment
        )
        if not result.ok:
            lines = [line for line in result.logs.splitlines() if line.strip()] or [result.describe()]
            raise ImageBuildError(f"installing the requirements failed: {lines[-1]}")


def fetch_wheels(
    client: docker.DockerClient,
    runner_image: str,
    requirements: list[str],
    folder: Path,
    *,
    ca_bundle: Path | None = HOST_CA_BUNDLE,
    find_links: Path | None = None,
    log: _LOG = _quiet,
) -> list[str]:
    """Resolve ``requirements`` against the runner image's packages and download the wheels it lacks into
    ``folder/wheels`` (:mod:`knowgic.runner.intake.wheels`, in a container of the runner image: trusted code, the non-root
    user, a read-only root, with the network, which pip needs and nothing of the submission gets).

    ``find_links`` (default ``$KNOWGIC_FIND_LINKS``): a host folder of wheels pip may take besides the
    index (``$PIP_INDEX_URL`` when set). Returns the pinned ``name==version`` of the wheels fetched.
    """
    inputs, out = folder / "in", folder / "out"
    inputs.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    (inputs / "requirements.txt").write_text("".join(f"{line}\n" for line in requirements), encoding="utf-8")
    inputs.chmod(0o755)
    (inputs / "requirements.txt").chmod(0o644)
    mounts = [Mount(inputs, "/in"), Mount(out, "/out", writable=True)]
    command = [
        "python3",
        "-m",
        "knowgic.runner.intake.wheels",
        "--requirements",
        "/in/requirements.txt",
        "--out",
        "/out",
    ]
    environment: dict[str, str] = {}
    if ca_bundle is not None and ca_bundle.is_file():
        mounts.append(Mount(ca_bundle, "/etc/knowgic-ca.crt"))
        environment["PIP_CERT"] = "/etc/knowgic-ca.crt"
    if os.environ.get("PIP_INDEX_URL"):
        environment["PIP_INDEX_URL"] = os.environ["PIP_INDEX_URL"]
    find_links = find_links or (
        Path(os.environ["KNOWGIC_FIND_LINKS"]) if os.environ.get("KNOWGIC_FIND_LINKS") else None
    )
    if find_links is not None:
        mounts.append(Mount(find_links, "/find-links"))
        command += ["--find-links", "/find-links"]
    log(f"fetching the wheels of {len(requirements)} requirement(s)")
    result = run_sandboxed(
        client,
        runner_image,
        command,
        mounts=mounts,
        limits=SandboxLimits(memory_bytes=4 * (1 << 30), cpus=2.0, pids=256, timeout_seconds=900.0),
        gpus="none",
        environment=environment,
        network=True,
    )
    lines = [line for line in result.logs.splitlines() if line.strip()]
    if not result.ok:
        errors = [line for line in lines if line.startswith("error:")]
        detail = (errors or lines or [result.describe()])[-1].removeprefix("error: ")
        raise ImageBuildError(f"the requirements cannot be installed from wheels: {detail}")
    pinned_file = out / "pinned.txt"
    pinned = pinned_file.read_text(encoding="utf-8").split() if pinned_file.is_file() else []
    log(f"wheels: {' '.join(pinned) or 'none needed (the runner image has every requirement)'}")
    return pinned


def build_edit_image(
    client: docker.DockerClient,
    runner_image: str,
    submission: Submission,
    *,
    ca_bundle: Path | None = HOST_CA_BUNDLE,
    find_links: Path | None = None,
    rebuild: bool = False,
    log: _LOG = _quiet,
) -> BuiltImage:
    """The edit-stage image of ``submission``: the runner image without the benchmark's texts
    (:mod:`knowgic.runner.host.edit_base`) + /submission + its ``requirements``, installed from wheels.

    Cached by the submission's sha256 and the runner image's id. The wheels are fetched first
    (:func:`fetch_wheels`); the build itself has no network, and installs them as the non-root user.
    """
    started = time.monotonic()
    runner_id = image_id(client, runner_image)
    tag = edit_image_tag(runner_id, submission.sha256)
    if not rebuild and image_exists(client, tag):
        image = client.images.get(tag)
        return BuiltImage(tag, str(image.id), False, time.monotonic() - started, dict(image.labels or {}))
    manifest = submission.manifest
    requirements = [str(item) for item in manifest.get("requirements") or []]
    root = Path(submission.root)
    files = [
        (f"submission/{path.relative_to(root).as_posix()}", path)
        for path in sorted(root.rglob("*"))
        if not path.is_symlink() and (path.is_file() or path.is_dir())
    ]
    # Podman's builds get the host's network whatever is asked, so no submitted code runs in them there.
    install_first = bool(requirements) and engine_of(client) == "podman"
    generated = {"Dockerfile": _edit_dockerfile(runner_image, bool(requirements), install_first).encode()}
    labels = {
        "org.knowgic.submission.sha256": submission.sha256,
        "org.knowgic.submission.name": str(manifest.get("name", "")),
        "org.knowgic.submission.version": str(manifest.get("version", "")),
        "org.knowgic.runner-image": runner_id,
    }
    with tempfile.TemporaryDirectory(prefix="knowgic-wheelhouse-") as scratch:
        if requirements:
            fetch_wheels(
                client,
                runner_image,
                requirements,
                Path(scratch),
                ca_bundle=ca_bundle,
                find_links=find_links,
                log=log,
            )
            wheels = Path(scratch) / "out" / "wheels"
            text = ("\n".join(requirements) + "\n").encode()
            if install_first:
                (Path(scratch) / "out" / "requirements.txt").write_bytes(text)
                (Path(scratch) / "out" / "requirements.txt").chmod(0o644)
                packages = Path(scratch) / "packages"
                log("installing the requirements in a container with no network (Podman)")
                install_wheels(client, runner_image, Path(scratch) / "out", packages)
                files += [
                    (f"packages/{path.relative_to(packages).as_posix()}", path)
                    for path in sorted(packages.rglob("*"))
                    if not path.is_symlink() and (path.is_file() or path.is_dir())
                ]
            else:
                files += [(f"wheels/wheels/{path.name}", path) for path in sorted(wheels.glob("*.whl"))]
                generated["wheels/requirements.txt"] = text
        log(f"building the edit image {tag} ({len(requirements)} requirement(s), no network)")
        with tempfile.TemporaryFile(prefix="knowgic-edit-context-") as context:
            _context_archive(files, generated, context)
            _stream_build(client, context, tag=tag, buildargs={}, labels=labels, log=log, network_mode="none")
    image = client.images.get(tag)
    return BuiltImage(tag, str(image.id), True, time.monotonic() - started, dict(image.labels or {}))


def remove_stale_edit_images(client: docker.DockerClient, runner_image_id: str) -> list[str]:
    """Remove the edit images built FROM an earlier runner image (they are never used again); returns
    their tags. An earlier runner image is one that is gone or has lost its tag (rebuilt): another runner
    image that still has a tag (a second checkout or version sharing this engine) keeps its edit images.
    Images a running container uses stay."""
    docker = docker_sdk()
    removed: list[str] = []
    for image in client.images.list(filters={"label": "org.knowgic.runner-image"}):
        built_from = (image.labels or {}).get("org.knowgic.runner-image")
        if built_from == runner_image_id:
            continue
        try:
            if client.images.get(built_from).tags:
                continue  # a runner image still in use
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError:
            continue
        for tag in image.tags:
            try:
                client.images.remove(tag, noprune=False)
                removed.append(tag)
            except docker.errors.APIError:  # in use by a container, or already gone
                pass
    return removed
