"""Edit deltas: what one edit (or a sequential run) changed in a model, as files the score stage can trust.

The untrusted edit stage writes, per edit key, into one folder:

- ``<key>.safetensors``: the full value of every parameter or buffer whose content differs from the pristine
  model (found with :mod:`knowgic.evaluation.fingerprint`'s per-tensor digests), keyed like the fingerprint
  (``param:<name>`` / ``buffer:<name>``). Absent when the edit changed no tensor (in-context editors).
- ``<key>.json``: the sidecar, the commit record of the delta: format version, mode, the edit ids it covers,
  and per edit the in-context ``prompt_prefix``, the editor's ``info`` and the seconds the edit stage says
  it took (shown as reported, never used in a score).

Both are written to a temporary name and renamed into place, tensors first and sidecar last: once a sidecar
is visible, its tensors are complete. The folder also receives ``done`` (every delta written) or ``failed``
(one line: why the edit stage stopped). The edit stage waits while the folder holds more than its quota, so
disk stays bounded while the score stage consumes (and deletes) deltas.

The trusted side (:class:`DeltaReader`) opens only names it derives itself, refuses links and anything that
is not a regular file, bounds every size before reading, parses tensors with safetensors (never pickle), and
checks that each tensor is a parameter or buffer of the model with its shape and dtype and finite values,
and that the sidecar follows ``spec/schemas/delta_sidecar.schema.json`` and covers exactly the expected edits.
Each key is scored once: a delta that reappears after its key was consumed, or that is replaced while being
scored, is a second delta for an edit already scored. Anything else raises :class:`DeltaError` with the
reason, which fails the job.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file

from knowgic.errors import KnowgicError
from knowgic.evaluation.fingerprint import TensorStamp, changed_since, named_tensors
from knowgic.runner.stages.contract import DONE_MARKER, FAILED_MARKER, one_line, read_sidecar

DELTA_FORMAT = "knowgic-delta"
DELTA_FORMAT_VERSION = 1
SEQUENTIAL_KEY = "sequential"
TENSORS_SUFFIX = ".safetensors"
SIDECAR_SUFFIX = ".json"
KEY_PATTERN = r"^(edit-[0-9]{4,6}-[0-9a-f]{12}|sequential(-[1-9])?)$"
EDIT_ID_PATTERN = r"^[0-9a-f]{12}$"
# Bounds of what the trusted side reads from the untrusted one.
MAX_SIDECAR_BYTES = 8 << 20
MAX_PREFIX_CHARS = 100_000  # the sidecar schema's maxLength of a prompt prefix
MAX_INFO_BYTES = 64 << 10
# safetensors' JSON header and alignment on top of the raw tensor bytes.
HEADER_ALLOWANCE_BYTES = 1 << 20


class DeltaError(KnowgicError):
    """A delta (or the edit stage's folder) the score stage cannot accept; the message is the job's reason."""


@dataclass(frozen=True)
class DeltaEdit:
    """One edit's part of a delta: its id, in-context prefix, the editor's info and its reported seconds."""

    edit_id: str
    prompt_prefix: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None


@dataclass
class Delta:
    """A validated delta: the edits it covers and the changed tensors (CPU), keyed like the fingerprint."""

    key: str
    mode: str
    edits: list[DeltaEdit]
    tensors: dict[str, torch.Tensor]
    nbytes: int
    merged_adapters: list[str] = field(default_factory=list)


def sequential_key(group: int) -> str:
    """The key of group ``group``'s cumulative delta in sequential mode (the public edits: ``sequential``)."""
    return SEQUENTIAL_KEY if group == 0 else f"{SEQUENTIAL_KEY}-{group}"


def independent_key(index: int, edit_id: str) -> str:
    """The key of the ``index``-th edit (plan order) in independent mode: plan order sorts by name."""
    return f"edit-{index:04d}-{edit_id}"


def changed_tensors(model: torch.nn.Module, pristine: Mapping[str, TensorStamp]) -> dict[str, torch.Tensor]:
    """CPU copies of the tensors whose content differs from the ``pristine`` fingerprint.

    An edit that adds, removes, reshapes, retypes or moves a tensor cannot be replayed onto the pristine
    model, so it is refused here, in the edit stage, with the names.
    """
    names = changed_since(model, dict(pristine))
    tensors = named_tensors(model)
    added = [n for n in names if n not in pristine]
    removed = [n for n in names if n not in tensors]
    if added or removed:
        what = "; ".join(
            part
            for part in (
                f"added {', '.join(added[:5])}" if added else "",
                f"removed {', '.join(removed[:5])}" if removed else "",
            )
            if part
        )
        raise DeltaError(
            f"the edit changed the model's structure ({what}); the runner replays changes to the values of "
            "existing parameters and buffers only"
        )
    moved = [
        n
        for n in names
        if (tuple(tensors[n].shape), str(tensors[n].dtype), str(tensors[n].device))
        != (pristine[n].shape, pristine[n].dtype, pristine[n].device)
    ]
    if moved:
        raise DeltaError(
            f"the edit changed the shape, dtype or device of {', '.join(moved[:5])}; the runner replays "
            "changes to the values of existing parameters and buffers only"
        )
    return {n: tensors[n].detach().to("cpu", copy=True).contiguous() for n in names}


def _tuner_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The outermost peft tuner layers of ``model`` (name, layer); none when peft is not installed."""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return []
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        if isinstance(module, BaseTunerLayer) and not any(name.startswith(f"{outer}.") for outer, _ in found):
            found.append((name, module))
    return found


@contextmanager
def folded_adapters(model: torch.nn.Module) -> Iterator[list[str]]:
    """Within the block, every peft tuner layer is replaced by its base layer holding the merged weights.

    An adapter-based editor (peft LoRA) leaves the pristine weight W in each tuner layer's ``base_layer``
    and adds its adapters beside it; the layer computes ``W x + Σ_a s_a B_a A_a x`` over its active
    adapters a (s_a = α/r). Its change as a value of the pristine model's own parameter is the merged weight

        W' = W + Σ_a s_a B_a A_a        (peft's ``merge``; transposed for ``fan_in_fan_out`` layers),

    so inside the block the model has the pristine structure (module names, parameters) with W' in place
    of W, and :func:`changed_tensors` records W' like any other edited weight. A layer whose adapters are
    disabled or already merged contributes its base weight as it is (peft's forward then uses the base
    layer alone). Yields the names of the layers whose adapters were merged. On leaving, each tuner layer
    goes back in its place, peft unmerges, and the base layer's parameters and buffers are copied back
    bitwise from a snapshot (unmerging subtracts, which is not exact in floating point).
    """
    layers = _tuner_layers(model)
    folded: list[tuple[torch.nn.Module, str, torch.nn.Module, bool, dict[str, torch.Tensor]]] = []
    merged_names: list[str] = []
    try:
        for name, layer in layers:
            base = layer.get_base_layer()
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            if layer.disable_adapters and layer.merged:
                raise DeltaError(
                    f"peft layer {name} has merged adapters that are disabled; the runner cannot tell which "
                    "weights the edited model computes with"
                )
            snapshot = {
                key: value.detach().clone()
                for key, value in [*base.named_parameters(), *base.named_buffers()]
            }
            merge = not layer.disable_adapters and not layer.merged and bool(layer.active_adapters)
            entry = (parent, child, layer, merge, snapshot)
            if merge:
                try:
                    layer.merge(adapter_names=list(layer.active_adapters))
                except Exception as exc:
                    _restore_base(entry, base)
                    raise DeltaError(
                        f"cannot merge the adapters of peft layer {name} into its base weight: "
                        f"{type(exc).__name__}: {one_line(str(exc), 300)}"
                    ) from exc
                merged_names.append(name)
            folded.append(entry)
            setattr(parent, child, base)
        yield merged_names
    finally:
        for entry in reversed(folded):
            parent, child, layer, _, _ = entry
            base = getattr(parent, child)
            setattr(parent, child, layer)
            _restore_base(entry, base)


def _restore_base(
    entry: tuple[torch.nn.Module, str, torch.nn.Module, bool, dict[str, torch.Tensor]], base: torch.nn.Module
) -> None:
    """Undo :func:`folded_adapters`' merge of one layer: peft's bookkeeping, then the exact values."""
    _, _, layer, merged, snapshot = entry
    if merged and layer.merged:
        layer.unmerge()
    current = dict([*base.named_parameters(), *base.named_buffers()])
    with torch.no_grad():
        for key, value in snapshot.items():
            current[key].copy_(value)


def tensors_nbytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _readable_by_others(path: str) -> None:
    """The usual mode of a new file (0644 less the umask), not a temporary file's 0600: the score stage may
    run as another user than the edit stage."""
    mask = os.umask(0o022)
    os.umask(mask)
    os.chmod(path, 0o644 & ~mask)


def _write_atomic_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        _readable_by_others(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files directly in ``folder`` (temporary files included)."""
    total = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:  # consumed meanwhile
                continue
    return total


def _jsonable(value: Any) -> Any:
    """The editor's info as plain JSON values (tensors and NumPy scalars become numbers or lists)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return _jsonable(value.detach().cpu().tolist())
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "item"):  # NumPy scalars
        return _jsonable(value.item())
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    return str(value)


class DeltaWriter:
    """The edit stage's side: writes deltas and markers atomically, never past ``quota_bytes`` of folder.

    A delta waits until the folder's files plus the delta fit the quota; a delta larger than the quota on
    its own is written once the folder is empty, so the stage always progresses.
    """

    def __init__(
        self,
        folder: Path,
        quota_bytes: int,
        poll_seconds: float = 0.05,
        wait_timeout: float | None = None,
        on_wait: Callable[[int, int], None] | None = None,
    ) -> None:
        if quota_bytes < 1:
            raise KnowgicError(f"delta quota must be a positive number of bytes, got {quota_bytes}")
        self.folder = folder
        self.quota_bytes = quota_bytes
        self.poll_seconds = poll_seconds
        self.wait_timeout = wait_timeout
        self.on_wait = on_wait
        self.peak_bytes = 0
        self.written_bytes = 0
        self.wait_seconds = 0.0
        self.waits = 0
        self.deltas = 0

    def _wait_for_room(self, size: int) -> None:
        start = time.monotonic()
        waited = False
        while True:
            used = folder_bytes(self.folder)
            if used == 0 or used + size <= self.quota_bytes:
                break
            if self.wait_timeout is not None and time.monotonic() - start > self.wait_timeout:
                raise KnowgicError(
                    f"waited {self.wait_timeout:g} s for the score stage to consume deltas in {self.folder} "
                    f"({used} bytes held, quota {self.quota_bytes})"
                )
            if not waited:
                waited = True
                self.waits += 1
                if self.on_wait is not None:
                    self.on_wait(used, size)
            time.sleep(self.poll_seconds)
        if waited:
            self.wait_seconds += time.monotonic() - start

    def write(
        self,
        key: str,
        mode: str,
        edits: Sequence[DeltaEdit],
        tensors: Mapping[str, torch.Tensor],
        merged_adapters: Sequence[str] = (),
    ) -> int:
        """Write one delta (tensors, then sidecar); return its bytes on disk. ``merged_adapters``: the
        layers whose adapters :func:`folded_adapters` merged into ``tensors``."""
        if not re.match(KEY_PATTERN, key):
            raise ValueError(f"malformed delta key {key!r}")
        sidecar = {
            "format": DELTA_FORMAT,
            "format_version": DELTA_FORMAT_VERSION,
            "key": key,
            "mode": mode,
            "edits": [
                {
                    "edit_id": e.edit_id,
                    "prompt_prefix": e.prompt_prefix,
                    "info": _jsonable(e.info),
                    **({"seconds": e.seconds} if e.seconds is not None else {}),
                }
                for e in edits
            ],
            "tensors": f"{key}{TENSORS_SUFFIX}" if tensors else None,
            "tensor_names": sorted(tensors),
            **({"merged_adapters": sorted(merged_adapters)} if merged_adapters else {}),
        }
        # NaN in an editor's info stays NaN, as knowgic evaluate writes it.
        sidecar_bytes = json.dumps(sidecar, ensure_ascii=False, default=str).encode("utf-8")
        expected = (tensors_nbytes(tensors) + HEADER_ALLOWANCE_BYTES if tensors else 0) + len(sidecar_bytes)
        self._wait_for_room(expected)
        size = len(sidecar_bytes)
        if tensors:
            path = self.folder / f"{key}{TENSORS_SUFFIX}"
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            try:
                save_file(dict(tensors), tmp, metadata={"format": DELTA_FORMAT, "key": key})
                _readable_by_others(tmp)
                size += os.path.getsize(tmp)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        _write_atomic_bytes(self.folder / f"{key}{SIDECAR_SUFFIX}", sidecar_bytes)
        self.deltas += 1
        self.written_bytes += size
        self.peak_bytes = max(self.peak_bytes, folder_bytes(self.folder))
        return size

    def done(self) -> None:
        _write_atomic_bytes(self.folder / DONE_MARKER, b"done\n")

    def failed(self, reason: str) -> None:
        _write_atomic_bytes(self.folder / FAILED_MARKER, (one_line(reason) + "\n").encode("utf-8"))


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


def model_spec(model: torch.nn.Module) -> dict[str, TensorSpec]:
    """What a delta may name: every parameter and buffer of the model, with its shape and dtype."""
    return {n: TensorSpec(tuple(t.shape), t.dtype) for n, t in named_tensors(model).items()}


def _read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path`` if it is a regular file (not a link, FIFO, device) of at most ``limit`` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise DeltaError(f"{what} {path.name} is missing") from None
    except OSError as exc:  # ELOOP: a symbolic link
        raise DeltaError(f"{what} {path.name} is not a regular file ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DeltaError(f"{what} {path.name} is not a regular file")
        if info.st_size > limit:
            raise DeltaError(f"{what} {path.name} has {info.st_size} bytes, more than the limit of {limit}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise DeltaError(f"{what} {path.name} grew past the limit of {limit} bytes while being read")
        return data
    finally:
        os.close(fd)


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


class DeltaReader:
    """The score stage's side: waits for deltas in plan order, validates them, and deletes them when used.

    ``spec`` lists the model's parameters and buffers; ``max_tensor_bytes`` bounds a tensors file (default:
    the model's own size plus the header allowance, the most a delta of changed tensors can need).
    ``timeout_seconds`` bounds each wait for the edit stage.
    """

    def __init__(
        self,
        folder: Path,
        spec: Mapping[str, TensorSpec],
        timeout_seconds: float = 3600.0,
        poll_seconds: float = 0.05,
        max_tensor_bytes: int | None = None,
    ) -> None:
        self.folder = folder
        self.spec = dict(spec)
        self.timeout_seconds = timeout_seconds
        self.poll_seconds = poll_seconds
        model_bytes = sum(math.prod(s.shape) * _itemsize(s.dtype) for s in self.spec.values())
        self.max_tensor_bytes = (
            max_tensor_bytes if max_tensor_bytes is not None else model_bytes + HEADER_ALLOWANCE_BYTES
        )
        self.deltas_read = 0
        self.bytes_read = 0
        self.merged_adapter_deltas = 0
        self.merged_adapter_modules: set[str] = set()
        self.wait_seconds = 0.0
        # Keys read (with the identity of the sidecar read) and keys consumed: each delta is scored once.
        self._read_as: dict[str, tuple[int, int, int]] = {}
        self._consumed: list[str] = []
        self._rewritten: str | None = None

    # -- markers --------------------------------------------------------------------------------------
    def failure(self) -> str | None:
        """The edit stage's reason when it wrote a ``failed`` marker, else None."""
        path = self.folder / FAILED_MARKER
        if not os.path.lexists(path):
            return None
        try:
            text = _read_regular_file(path, 64 << 10, "marker").decode("utf-8", errors="replace")
        except DeltaError as exc:
            text = f"(unreadable reason: {exc})"
        return one_line(text) or "(no reason given)"

    def is_done(self) -> bool:
        return bool(_is_regular(self.folder / DONE_MARKER))

    def _raise_if_failed(self) -> None:
        reason = self.failure()
        if reason is not None:
            raise DeltaError(f"the edit stage failed: {reason}")
        self.check_written_once()

    def check_written_once(self) -> None:
        """Fail when the edit stage wrote a second delta for a key already scored: written again after the
        score stage consumed it, or replaced while it was being scored (the first one would have been
        scored and the second ignored)."""
        if self._rewritten is not None:
            raise DeltaError(_second_delta_reason(self._rewritten, "while that edit was being scored"))
        for key in self._consumed:
            if any(
                os.path.lexists(self.folder / f"{key}{suffix}") for suffix in (SIDECAR_SUFFIX, TENSORS_SUFFIX)
            ):
                raise DeltaError(_second_delta_reason(key, "after that edit was scored"))

    def wait_for(self, key: str) -> None:
        """Block until ``key``'s sidecar exists; fail on a ``failed`` marker, a ``done`` without it, or time."""
        start = time.monotonic()
        sidecar = self.folder / f"{key}{SIDECAR_SUFFIX}"
        while True:
            self._raise_if_failed()
            if os.path.lexists(sidecar):
                break
            if self.is_done():
                if os.path.lexists(sidecar):  # written just before the marker
                    break
                raise DeltaError(f"the edit stage finished without writing the delta {key}")
            if time.monotonic() - start > self.timeout_seconds:
                raise DeltaError(
                    f"timed out after {self.timeout_seconds:g} s waiting for the edit stage's delta {key}"
                )
            time.sleep(self.poll_seconds)
        self.wait_seconds += time.monotonic() - start

    def wait_done(self) -> None:
        """Block until the edit stage's ``done`` marker; fail on ``failed`` or time."""
        start = time.monotonic()
        while not self.is_done():
            self._raise_if_failed()
            if time.monotonic() - start > self.timeout_seconds:
                raise DeltaError(
                    f"timed out after {self.timeout_seconds:g} s waiting for the edit stage to finish"
                )
            time.sleep(self.poll_seconds)
        self.check_written_once()  # whatever the edit stage wrote before its marker is visible now
        self.wait_seconds += time.monotonic() - start

    # -- reading --------------------------------------------------------------------------------------
    def read(self, key: str, mode: str, expected_ids: Sequence[str] | None) -> Delta:
        """Read and validate ``key``'s delta; ``expected_ids`` (when given) must be its edit ids, in order."""
        sidecar_path = self.folder / f"{key}{SIDECAR_SUFFIX}"
        if key in self._read_as or key in self._consumed:
            raise DeltaError(_second_delta_reason(key, "after that edit was read"))
        identity = _identity(sidecar_path)
        raw = _read_regular_file(sidecar_path, MAX_SIDECAR_BYTES, "delta sidecar")
        try:
            sidecar = read_sidecar(raw, sidecar_path.name)
        except DeltaError:
            raise
        except KnowgicError as exc:
            raise DeltaError(str(exc)) from None
        if sidecar["key"] != key:
            raise DeltaError(
                f"delta sidecar {sidecar_path.name} claims key {sidecar['key']!r}, expected {key!r}"
            )
        if sidecar["mode"] != mode:
            raise DeltaError(
                f"delta sidecar {sidecar_path.name} is for mode {sidecar['mode']!r}, the job's is {mode!r}"
            )
        for entry in sidecar["edits"]:
            size = len(json.dumps(entry["info"], ensure_ascii=False).encode("utf-8"))
            if size > MAX_INFO_BYTES:
                raise DeltaError(
                    f"delta sidecar {sidecar_path.name}: the info of edit {entry['edit_id']} has {size} bytes of "
                    f"JSON, more than the limit of {MAX_INFO_BYTES}"
                )
        ids = [e["edit_id"] for e in sidecar["edits"]]
        if expected_ids is not None and ids != list(expected_ids):
            raise DeltaError(
                f"delta sidecar {sidecar_path.name} claims edit id(s) {', '.join(ids[:5])}, expected "
                f"{', '.join(list(expected_ids)[:5])}"
            )
        expected_file = f"{key}{TENSORS_SUFFIX}"
        if sidecar["tensors"] is not None and sidecar["tensors"] != expected_file:
            raise DeltaError(
                f"delta sidecar {sidecar_path.name} names tensors file {sidecar['tensors']!r}, expected "
                f"{expected_file!r}"
            )
        tensors: dict[str, torch.Tensor] = {}
        nbytes = len(raw)
        if sidecar["tensors"] is not None:
            data = _read_regular_file(self.folder / expected_file, self.max_tensor_bytes, "delta")
            nbytes += len(data)
            tensors = self._validated_tensors(expected_file, data)
            listed = sidecar.get("tensor_names")
            if listed is not None and sorted(listed) != sorted(tensors):
                raise DeltaError(
                    f"delta sidecar {sidecar_path.name} lists tensors other than those {expected_file} holds"
                )
        elif os.path.lexists(self.folder / expected_file):
            raise DeltaError(f"delta {expected_file} exists but its sidecar says the edit changed no tensor")
        merged_adapters = list(sidecar.get("merged_adapters", []))
        owners = {n.split(":", 1)[1].rpartition(".")[0] for n in self.spec if n.startswith("param:")}
        for module in merged_adapters:
            # A label for the reader of the results (the scores come from the tensors alone), kept honest
            # to the model's shape: a merged layer is a module with parameters of its own.
            if module not in owners:
                raise DeltaError(
                    f"delta sidecar {sidecar_path.name} says adapters were merged into {module!r}, which is not "
                    "a module with parameters in the model"
                )
        edits = [
            DeltaEdit(
                edit_id=e["edit_id"],
                prompt_prefix=e["prompt_prefix"],
                info=e["info"],
                seconds=e.get("seconds"),
            )
            for e in sidecar["edits"]
        ]
        self.deltas_read += 1
        self.bytes_read += nbytes
        if identity is not None:
            self._read_as[key] = identity
        if merged_adapters:
            self.merged_adapter_deltas += 1
            self.merged_adapter_modules.update(merged_adapters)
        return Delta(
            key=key, mode=mode, edits=edits, tensors=tensors, nbytes=nbytes, merged_adapters=merged_adapters
        )

    def _validated_tensors(self, name: str, data: bytes) -> dict[str, torch.Tensor]:
        try:
            tensors = load_safetensors(data)
        except (SafetensorError, ValueError, RuntimeError, OverflowError) as exc:
            raise DeltaError(
                f"delta {name} is not a valid safetensors file: {one_line(str(exc), 200)}"
            ) from None
        if not tensors:
            raise DeltaError(f"delta {name} holds no tensor")
        for tensor_name, tensor in sorted(tensors.items()):
            expected = self.spec.get(tensor_name)
            if expected is None:
                raise DeltaError(f"delta {name}: {tensor_name!r} is not a parameter or buffer of the model")
            if tuple(tensor.shape) != expected.shape:
                raise DeltaError(
                    f"delta {name}: {tensor_name} has shape {list(tensor.shape)}, the model's is "
                    f"{list(expected.shape)}"
                )
            if tensor.dtype != expected.dtype:
                raise DeltaError(
                    f"delta {name}: {tensor_name} has dtype {tensor.dtype}, the model's is {expected.dtype}"
                )
            if (tensor.is_floating_point() or tensor.is_complex()) and not bool(torch.isfinite(tensor).all()):
                bad = int((~torch.isfinite(tensor)).sum())
                raise DeltaError(f"delta {name}: {tensor_name} has {bad} non-finite value(s) (NaN or inf)")
        return tensors

    def remove(self, key: str) -> None:
        """Delete a consumed delta (tensors first, so a sidecar never points at nothing).

        A sidecar that is no longer the one read was replaced while the edit was scored: remembered, and
        the job fails at the next wait (restoring the model must not be interrupted)."""
        read_as = self._read_as.pop(key, None)
        if read_as is not None and _identity(self.folder / f"{key}{SIDECAR_SUFFIX}") != read_as:
            self._rewritten = self._rewritten or key
        for suffix in (TENSORS_SUFFIX, SIDECAR_SUFFIX):
            (self.folder / f"{key}{suffix}").unlink(missing_ok=True)
        self._consumed.append(key)


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells two versions of a file apart: (inode, modification time, size); None when absent."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def _second_delta_reason(key: str, when: str) -> str:
    """The job's reason when the edit stage writes ``key``'s delta a second time."""
    match = re.match(r"^edit-([0-9]+)-([0-9a-f]{12})$", key)
    what = f"edit {int(match.group(1)) + 1} ({match.group(2)})" if match else "the sequential run"
    return f"the edit stage wrote a second delta for {what} {when}; each edit's delta is written once"


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def apply_tensors(model: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> Callable[[], None]:
    """Write ``tensors`` into the model in place; return the function that writes the saved values back.

    Exact (bitwise) both ways: values are copied, never recomputed. Tied aliases are saved once per name,
    and restored in reverse order so an alias ends with the pristine value.
    """
    targets = named_tensors(model)
    saved = {name: targets[name].detach().clone() for name in tensors}
    with torch.no_grad():
        for name, value in tensors.items():
            targets[name].copy_(value.to(device=targets[name].device))

    def restore() -> None:
        with torch.no_grad():
            for name in reversed(list(saved)):
                targets[name].copy_(saved[name])

    return restore
