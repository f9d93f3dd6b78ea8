"""Editors that try to break out of the runner's edit stage (see README.md)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import torch
from knowgic_rank_one.editor import RankOneFT

from knowgic.editors import EditHandle, Editor


class NetworkEgress(Editor):
    """Tries to reach the internet, the engine's bridge and DNS, after importing the requirement its
    manifest asks for (installed while the image was built, the one moment a submission has the network)."""

    name = "hostile-network"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        import wcwidth

        seen = [f"requirement wcwidth {wcwidth.__version__} installed"]
        for host, port in (("1.1.1.1", 53), ("151.101.0.223", 443), ("172.17.0.1", 2375)):
            try:
                socket.create_connection((host, port), timeout=3).close()
                return EditHandle(lambda: None, info={"egress": host})  # got out: the test fails
            except OSError as error:
                seen.append(f"{host}:{port} {error.strerror or error}")
        try:
            socket.getaddrinfo("pypi.org", 443)
            return EditHandle(lambda: None, info={"egress": "dns"})
        except OSError:
            seen.append("no DNS")
        raise RuntimeError("egress blocked: " + "; ".join(seen))


class WriteOutside(Editor):
    """Tries to write everywhere except its output folder: its own code, the package, the job, the scores."""

    name = "hostile-write"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        import knowgic.metrics

        targets = [
            knowgic.metrics.__file__,
            __file__,
            "/job/job.json",
            "/out/results.json",
            "/etc/passwd",
            "/home/knowgic/evil",
            "/evil",
            *self.hparams.get("host_paths", []),
        ]
        wrote, refused = [], []
        for target in targets:
            try:
                with open(target, "a") as handle:
                    handle.write("tampered\n")
                wrote.append(target)
            except OSError as error:
                refused.append(f"{target} ({error.strerror})")
        if wrote:
            return EditHandle(lambda: None, info={"wrote": wrote})
        raise RuntimeError("writes refused: " + "; ".join(refused))


class ReadHost(Editor):
    """Looks for the host's files: the store, the submission archive, the docker socket, the host's root."""

    name = "hostile-read"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        found = []
        for path in [*self.hparams.get("host_paths", []), "/var/run/docker.sock", "/proc/1/root/etc/shadow"]:
            try:
                Path(path).read_bytes()
                found.append(path)
            except OSError:
                pass
        user = os.getuid()
        if found or user == 0:
            return EditHandle(lambda: None, info={"read": found, "uid": user})
        raise RuntimeError(f"host files unreachable (uid {user}, socket absent)")


class ForkBomb(Editor):
    name = "hostile-fork"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        children = 0
        while True:
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            children += 1


class MemoryBomb(Editor):
    name = "hostile-memory"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        blocks = []
        while True:
            blocks.append(torch.ones(64 << 20, dtype=torch.uint8))


class EndlessLoop(Editor):
    name = "hostile-loop"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        while True:
            pass


class LogFlood(RankOneFT):
    """Floods its output (stdout and stderr, a subprocess too), then edits honestly."""

    name = "hostile-log-flood"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        line = "flood " * 200 + "\n"
        for _ in range(20000):  # about 24 MB on each stream
            sys.stdout.write(line)
            sys.stderr.write(line)
        subprocess.run(["head", "-c", str(32 << 20), "/dev/zero"], check=False)
        return super().apply(model, tokenizer, requests)


class PatchScores(RankOneFT):
    """Edits honestly, then patches every metric and the scorer to perfect values and writes its own
    results.json: its scores must be those of the honest editor."""

    name = "hostile-patch-scores"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        import json

        import knowgic.metrics as metrics
        import knowgic.scoring.logprob as logprob

        handle = super().apply(model, tokenizer, requests)  # first the honest edit, then the tampering
        for name in dir(metrics):
            if callable(getattr(metrics, name)) and not name[0].isupper():
                setattr(metrics, name, lambda *args, **kwargs: 1.0)
        for name in dir(logprob):
            thing = getattr(logprob, name)
            if isinstance(thing, type):
                for attr in dir(thing):
                    if not attr.startswith("__") and callable(getattr(thing, attr)):
                        setattr(thing, attr, lambda *args, **kwargs: 1.0)
        forged = {"metrics": {"ifr": 1.0, "preservation": 1.0, "efficacy": 1.0}, "sha256": "0" * 64}
        for target in ("/deltas/results.json", "/out/results.json", "/tmp/results.json"):
            with contextlib.suppress(OSError):
                Path(target).write_text(json.dumps(forged))
        return handle


class ForgedDelta(Editor):
    """Bypasses the edit stage's own checks: writes deltas itself, with a tensor of the wrong shape, NaNs,
    or a parameter the model does not have (hparams ``forge``), marks the stage done and exits."""

    name = "hostile-forged-delta"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        from knowgic.runner.stages.contract import EditRequests, JobSpec
        from knowgic.runner.stages.deltas import DeltaEdit, DeltaWriter, independent_key

        spec = JobSpec.read("/job/job.json")
        plan = EditRequests.read("/job/requests.json")
        name, weight = next((n, p) for n, p in model.named_parameters() if p.dim() == 2)
        forge = self.hparams["forge"]
        if forge == "shape":
            tensors = {f"param:{name}": torch.zeros(weight.shape[0] + 1, weight.shape[1])}
        elif forge == "nan":
            tensors = {f"param:{name}": torch.full_like(weight, float("nan")).detach()}
        else:
            tensors = {"param:transformer.evil.weight": torch.zeros(4, 4)}
        writer = DeltaWriter(Path("/deltas"), 1 << 30)
        for index, edit in enumerate(plan.edits):
            writer.write(
                independent_key(index, edit.edit_id),
                str(spec.mode),
                [DeltaEdit(edit.edit_id, "", {}, 0.0)],
                tensors,
            )
        writer.done()
        sys.stdout.flush()
        os._exit(0)


class SlowHonest(RankOneFT):
    """The honest editor, slowed down so that a test can kill its worker mid-job."""

    name = "slow-rank-one"
    # The example's own keys, and how long to sleep first.
    hparams_schema: ClassVar[dict] = {
        **RankOneFT.hparams_schema,
        "properties": {**RankOneFT.hparams_schema["properties"], "sleep": {"type": "number", "minimum": 0}},
    }

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        time.sleep(float(self.hparams.get("sleep", 0)))
        return super().apply(model, tokenizer, requests)


class DiskFiller(Editor):
    """Ignores the delta quota: writes junk into a subfolder of its deltas folder until it is stopped."""

    name = "hostile-disk"

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        Path("/deltas/junk").mkdir(exist_ok=True)
        block = os.urandom(1 << 20)
        with open("/deltas/junk/fill", "wb") as handle:
            while True:
                handle.write(block)
                handle.flush()


class TestSetSearch(RankOneFT):
    """Searches every readable file of the container (site-packages, caches, mounts; /proc, /sys and /dev
    left out) for the benchmark's questions, read base64-encoded from the file hparams ``questions`` names
    (so that they are in no file verbatim). A control question planted in the submission (the file hparams
    ``control`` names) must be found, which proves the search reads what it should. Any other hit fails the
    job with the file that leaked; none: it edits honestly (the rank-one editor) and says what it searched."""

    name = "hostile-test-set-search"
    searched = ""
    # The example's own keys, and the two files the search reads.
    hparams_schema: ClassVar[dict] = {
        **RankOneFT.hparams_schema,
        "properties": {
            **RankOneFT.hparams_schema["properties"],
            "questions": {"type": "string"},
            "control": {"type": "string"},
        },
    }

    def __init__(self, hparams: Any = None) -> None:
        import base64

        hparams = dict(hparams or {})
        encoded = Path(hparams.pop("questions")).read_text().split()
        self.questions = [base64.b64decode(q).decode("utf-8") for q in encoded]
        self.control = hparams.pop("control")
        super().__init__(hparams)

    def apply(self, model: Any, tokenizer: Any, requests: Any) -> EditHandle:
        if not TestSetSearch.searched:
            patterns = "\n".join(self.questions).encode("utf-8")
            command = ["grep", "-rlF", "--binary-files=text", "-f", "-", "/"]
            command += ["--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=dev"]
            done = subprocess.run(command, input=patterns, capture_output=True, timeout=240)
            hits = [line for line in done.stdout.decode("utf-8", "replace").splitlines() if line]
            files = subprocess.run(
                "find / -xdev -path /proc -prune -o -type f -readable -print 2>/dev/null | wc -l",
                shell=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            leaks = [hit for hit in hits if hit != self.control]
            if self.control not in hits:
                raise RuntimeError(f"the search is blind: the control file {self.control} was not found")
            if leaks:
                raise RuntimeError(
                    f"test set readable: {len(leaks)} file(s) hold a question, first {leaks[0]}"
                )
            TestSetSearch.searched = (
                f"searched {files} readable files for {len(self.questions)} questions: only the control found"
            )
            print(TestSetSearch.searched, flush=True)
        return super().apply(model, tokenizer, requests)
