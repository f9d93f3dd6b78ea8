#!/usr/bin/env python3
"""Every code block of README.md, docs/*.md and examples/*/README.md, run as a reader runs it, or as
.ci/doc_blocks.yaml declares.

    python .ci/doc_blocks.py check          every block declared, every declaration still true (fast)
    python .ci/doc_blocks.py run [FILE ...] run the blocks, each page in a fresh copy of the tree
    python .ci/doc_blocks.py list           each block with what is done with it

    the pages ──> fenced blocks ──┬─ bash, sh, console, python, yaml: one entry each in
                                  │  .ci/doc_blocks.yaml, in the page's order
                                  └─ text: output, not run
    entry ──> verbatim (run as written) | variant (a declared smaller script) | skip (a reason that is
              checked) | covered (run elsewhere: a step of .ci/run, or a named test) | same-as (equals a file)

`run` copies the tree as .ci/run's first step does (tracked and new files, without what .gitignore names)
once per page, and runs the page's blocks in order in it, so a block can use what an earlier one wrote.
Shell blocks run with `bash -e -o pipefail`, a console block's `$ ` lines likewise (its other lines are
output), python blocks with this interpreter, each with the interpreter's folder first on PATH (its
`knowgic`, `python`, `pip`), a home folder of its own (keys, tokens, caches), the hubs offline, and no
KNOWGIC_* variable but the cache and torch wheel it is given. After a page, nothing it wrote may show in
`git status` (every output the docs name is ignored) or in the runner image's build context (the
.dockerignore allow-list), so following a page leaves the default suite as it was.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DECLARATIONS = Path(".ci/doc_blocks.yaml")  # under the root
RUN_LANGUAGES = {"bash", "sh", "console", "python"}
DECLARED_LANGUAGES = RUN_LANGUAGES | {"yaml"}
OUTPUT_LANGUAGES = {"text"}
KINDS = ("verbatim", "variant", "skip", "covered", "same-as")
# Why a block may be left unrun; `because` must be text of the block that shows the reason holds.
SKIP_REASONS = {
    "gpu": "needs a CUDA device",
    "hosts": "needs machines other than this one (a database host, GPU hosts, a leaderboard host)",
    "extra": "needs a model package outside the development extras",
}
BLOCK_TIMEOUT_SECONDS = 900
SERVE_TIMEOUT_SECONDS = 240


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose code blocks are tests: the README, docs/ in name order, the examples' READMEs."""
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted((root / "examples").glob("*/README.md")),
    ]


@dataclass(frozen=True)
class Block:
    page: str  # relative to the root, e.g. docs/runner.md
    line: int  # the opening fence's line, from 1
    language: str
    text: str  # between the fences, ending in a newline

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text.strip() else ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class Entry:
    kind: str
    raw: dict[str, Any]
    docker: bool = False
    serve: bool = False
    timeout: int = BLOCK_TIMEOUT_SECONDS
    script: str = ""  # what runs: the block, or its variant
    language: str = ""
    problems: list[str] = field(default_factory=list)


class DocsError(Exception):
    """A page or a declaration that does not hold; the message names where."""


# ---- reading the pages


FENCE = re.compile(r"^(`{3,})([^`\s]*)\s*$")


def blocks_of(page: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of ``page``. A fence without a language, or an indented code block, is an
    error: every code block says what it is, so none escapes the check."""
    name = page.relative_to(root).as_posix()
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i, previous = 0, ""
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match:
            ticks, language = match.groups()
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i].rstrip() != ticks:
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise DocsError(f"{name}:{start + 1}: a code block is never closed")
            if not language:
                raise DocsError(
                    f"{name}:{start + 1}: a code block without a language: give it one "
                    f"({', '.join(sorted(DECLARED_LANGUAGES | OUTPUT_LANGUAGES))})"
                )
            if language not in DECLARED_LANGUAGES | OUTPUT_LANGUAGES:
                raise DocsError(
                    f"{name}:{start + 1}: a ```{language} block: .ci/doc_blocks.py knows no such language"
                )
            found.append(Block(name, start + 1, language, "\n".join(body) + "\n"))
            previous = ""
        elif lines[i].startswith("    ") and lines[i].strip() and not previous.strip():
            before = next((line for line in reversed(lines[:i]) if line.strip()), "")
            if not re.match(r"^(\s|[-*+] |\d+\. |\|)", before):  # not a list item's or a table's continuation
                raise DocsError(f"{name}:{i + 1}: an indented code block: fence it with a language instead")
        previous = lines[i] if i < len(lines) else ""
        i += 1
    return found


def declared_blocks(page: Path, root: Path = ROOT) -> list[Block]:
    return [b for b in blocks_of(page, root) if b.language in DECLARED_LANGUAGES]


def load_declarations(root: Path = ROOT) -> dict[str, list[dict[str, Any]]]:
    if not (root / DECLARATIONS).is_file():
        raise DocsError(f"{DECLARATIONS} is missing")
    data = yaml.safe_load((root / DECLARATIONS).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise DocsError(f"{DECLARATIONS.name}: expected a mapping of page -> list of entries")
    return data


# ---- checking the declarations


def console_commands(text: str) -> str:
    """A console block's commands: its `$ ` lines, with their `\\` continuations; the rest is output."""
    commands: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = [lines[i][2:]]
            while command[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                command.append(lines[i])
            commands.append("\n".join(command))
        i += 1
    return "\n".join(commands) + "\n"


def _test_exists(node: str, root: Path) -> bool:
    path, _, name = node.partition("::")
    file = root / path
    if not file.is_file() or not name:
        return False
    tree = ast.parse(file.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name for n in tree.body)


def _ci_step_command(which: str, root: Path) -> str:
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import readme_command
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    commands = readme_command.setup_commands((root / "README.md").read_text(encoding="utf-8"))
    return commands[readme_command.WHICH[which]] + "\n"


def _requirement(text: str) -> tuple[str, list[str]]:
    """A requirement's normalised name and the extras it asks for."""
    match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", text)
    if not match:
        return "", []
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
    return name, [e.strip() for e in (match.group(2) or "").split(",") if e.strip()]


def development_packages(root: Path) -> set[str]:
    """The distributions `pip install -e ".[dev]"` installs by name, as pyproject.toml declares them: the
    project, its dependencies, and the dev extra with the project's extras it names."""
    file = root / "pyproject.toml"
    if not file.is_file():
        return {"knowgic"}
    project = tomllib.loads(file.read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    names = {"knowgic"} | {_requirement(r)[0] for r in project.get("dependencies", [])}
    wanted, seen = ["dev"], set()
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in extras.get(extra, []):
            name, inner = _requirement(requirement)
            if name == "knowgic":
                wanted += inner
            else:
                names.add(name)
    return names


def skip_problem(reason: str, because: str, block: Block, root: Path = ROOT) -> str | None:
    """Why the declared skip no longer holds, or None when it does."""
    if reason not in SKIP_REASONS:
        return f"unknown skip reason {reason!r} (known: {', '.join(SKIP_REASONS)})"
    if not because or because not in block.text:
        return f"`because: {because!r}` is not text of the block"
    if reason == "gpu" and not re.search(r"cuda|--gpus all", because):
        return f"skip gpu: {because!r} names no CUDA device"
    if reason == "hosts" and not re.search(r"\.example\.org\b|/shared/|/srv/", because):
        return f"skip hosts: {because!r} names no other host or shared folder"
    if reason == "extra":
        model = re.search(r"--model\s+(\S+)", because)
        if not model:
            return f"skip extra: {because!r} names no --model"
        from knowgic.models.registry import get_offline_model

        name = model.group(1)
        offline = get_offline_model(name)
        if offline is None:
            return f"skip extra: {name} is not an offline model, so it has no package to miss"
        package = re.sub(
            r"[-_.]+", "-", offline.install.split()[-1]
        ).lower()  # "pip install [--no-deps] NAME"
        if package in development_packages(root):
            return f"skip extra: {name}'s package {package} is among the development extras, so the block can run"
    return None


def variant_script(block: Block, variant: Any) -> tuple[str, list[str]]:
    """A variant is a whole script, or a list of ``[old, new]`` replacements made in the block's own
    script (each ``old`` found exactly once), so that what differs from the page is all it says."""
    if isinstance(variant, str):
        return variant if variant.endswith("\n") else variant + "\n", []
    script = console_commands(block.text) if block.language == "console" else block.text
    problems: list[str] = []
    if not isinstance(variant, list) or not variant:
        return script, ["`variant:` is a script or a list of [old, new] replacements"]
    for pair in variant:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            problems.append(f"a replacement is a pair [old, new] of strings, not {pair!r}")
            continue
        old, new = pair
        if script.count(old) != 1:
            problems.append(f"{old!r} is in the block {script.count(old)} times, not once")
            continue
        script = script.replace(old, new)
    return script, problems


def entry_for(block: Block, raw: Any, root: Path = ROOT) -> Entry:
    """The declaration ``raw`` read against ``block``; its problems name what no longer matches."""
    if not isinstance(raw, dict):
        return Entry("?", {}, problems=["an entry must be a mapping"])
    kinds = [k for k in KINDS if k in raw]
    if "verbatim" in raw and "same-as" in raw:
        kinds = ["verbatim"]  # run as written, and equal to a file besides
    if len(kinds) != 1:
        return Entry(
            "?", raw, problems=[f"an entry has exactly one of {', '.join(KINDS)}; this one has {kinds}"]
        )
    kind = kinds[0]
    entry = Entry(
        kind,
        raw,
        docker=bool(raw.get("docker", False)),
        serve=bool(raw.get("serve", False)),
        timeout=int(raw.get("timeout", BLOCK_TIMEOUT_SECONDS)),
        language=block.language,
    )
    known = {*KINDS, "block", "why", "because", "docker", "serve", "timeout"}
    entry.problems += [f"unknown key {key!r}" for key in raw if key not in known]
    if kind == "verbatim":
        if raw["verbatim"] != block.first:
            entry.problems.append(
                f"`verbatim:` is {raw['verbatim']!r}, the block's first line is {block.first!r}"
            )
        entry.script = console_commands(block.text) if block.language == "console" else block.text
    elif kind == "same-as":
        if raw.get("block", block.first) != block.first:
            entry.problems.append("`block:` is not the block's first line")
    else:
        if raw.get("block") != block.text:
            entry.problems.append("the block changed since it was declared (`block:` is its old text)")
        if not str(raw.get("why", "")).strip():
            entry.problems.append(f"a {kind} says why (`why:`)")
    if "same-as" in raw:
        other = root / str(raw["same-as"])
        if not other.is_file() or other.read_text(encoding="utf-8") != block.text:
            entry.problems.append(f"the block is not the text of {raw['same-as']} (same-as)")
    if kind == "variant":
        entry.script, problems = variant_script(block, raw["variant"])
        entry.problems += problems
    elif kind == "skip":
        problem = skip_problem(str(raw["skip"]), str(raw.get("because", "")), block, root)
        if problem:
            entry.problems.append(problem)
    elif kind == "covered":
        by = str(raw["covered"])
        if by in (".ci/run step 1", ".ci/run step 2"):
            which = "main" if by.endswith("1") else "tests"
            if _ci_step_command(which, root) != block.text:
                entry.problems.append(f"{by} runs `readme_command.py {which}`, which is not this block")
        elif not _test_exists(by, root):
            entry.problems.append(f"covered by {by!r}: no such test")
    if block.language not in RUN_LANGUAGES and kind not in ("same-as", "skip"):
        entry.problems.append(f"a ```{block.language} block is not run: declare it same-as a file")
    return entry


def _matches(raw: Any, block: Block, root: Path) -> bool:
    """Whether entry ``raw`` is the one of ``block``: its first line (verbatim), its text, or its file."""
    if not isinstance(raw, dict):
        return False
    if "verbatim" in raw:
        return raw["verbatim"] == block.first
    if "block" in raw:
        return raw["block"] == block.text
    if "same-as" in raw:
        other = root / str(raw["same-as"])
        return other.is_file() and other.read_text(encoding="utf-8") == block.text
    return False


def _label(raw: Any) -> str:
    if isinstance(raw, dict):
        text = raw.get("verbatim") or raw.get("block") or raw.get("same-as") or ""
        return repr(str(text).splitlines()[0] if str(text).strip() else text)
    return repr(raw)


def align(blocks: list[Block], entries: list[Any], root: Path) -> list[tuple[Block | None, int, Any]]:
    """Blocks paired with their entries in order: (block, entry number, entry), with None for a block
    without an entry or an entry without a block. A new block does not shift the entries after it, and
    a block edited in place keeps its entry, which then says what changed."""
    pairs: list[tuple[Block | None, int, Any]] = []
    i = j = 0
    while i < len(blocks) or j < len(entries):
        if i < len(blocks) and j < len(entries) and _matches(entries[j], blocks[i], root):
            pairs.append((blocks[i], j + 1, entries[j]))
            i, j = i + 1, j + 1
        elif i < len(blocks) and any(_matches(e, blocks[i], root) for e in entries[j + 1 :]):
            pairs.append((None, j + 1, entries[j]))  # an entry whose block went away
            j += 1
        elif j < len(entries) and any(_matches(entries[j], b, root) for b in blocks[i + 1 :]):
            pairs.append((blocks[i], 0, None))  # a new block
            i += 1
        elif i < len(blocks) and j < len(entries):
            pairs.append((blocks[i], j + 1, entries[j]))  # the same place, changed: the entry says how
            i, j = i + 1, j + 1
        elif i < len(blocks):
            pairs.append((blocks[i], 0, None))
            i += 1
        else:
            pairs.append((None, j + 1, entries[j]))
            j += 1
    return pairs


def plan(root: Path = ROOT) -> list[tuple[Block, Entry]]:
    """Every declarable block with its entry; raises DocsError listing every mismatch."""
    declarations = load_declarations(root)
    problems: list[str] = []
    out: list[tuple[Block, Entry]] = []
    names = {page.relative_to(root).as_posix() for page in pages(root)}
    problems += [
        f"{DECLARATIONS.name}: {name} is not a page (README.md, docs/*.md, examples/*/README.md)"
        for name in declarations
        if name not in names
    ]
    for page in pages(root):
        name = page.relative_to(root).as_posix()
        try:
            blocks = declared_blocks(page, root)
        except DocsError as error:
            problems.append(str(error))
            continue
        entries = declarations.get(name) or []
        if not isinstance(entries, list):
            problems.append(f"{DECLARATIONS}: {name}: expected a list of entries")
            continue
        for block, number, raw in align(blocks, entries, root):
            if raw is None:
                assert block is not None
                problems.append(
                    f"{block.where}: the ```{block.language} block {block.first!r} has no entry in "
                    f"{DECLARATIONS}; to run it as written, add under {name}: "
                    f"`- verbatim: {json.dumps(block.first, ensure_ascii=False)}`"
                )
            elif block is None:
                problems.append(
                    f"{DECLARATIONS}: entry {number} of {name} ({_label(raw)}) matches no block of the page: "
                    "the block was removed, or changed beyond recognition"
                )
            else:
                entry = entry_for(block, raw, root)
                problems += [
                    f"{block.where} ({entry.kind}, entry {number} of {name}): {p}" for p in entry.problems
                ]
                out.append((block, entry))
    if problems:
        raise DocsError("\n".join(problems))
    return out


# ---- running


def fresh_copy(into: Path) -> Path:
    """The tree as .ci/run copies it, made a git repository with everything added, so that `git status`
    afterwards shows exactly what the blocks wrote that git does not ignore."""
    checkout = into / "checkout"
    checkout.mkdir(parents=True)
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout  # fmt: skip
    # present files only (a deleted, uncommitted file is still listed)
    names = [n for n in files.split(b"\0") if n and (ROOT / os.fsdecode(n)).exists()]
    tar = subprocess.run(
        ["tar", "-c", "--null", "-T", "-"], cwd=ROOT, input=b"\0".join(names), check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=tar.stdout, check=True)
    git = ["git", "-c", "core.excludesFile=/dev/null", "-c", "user.name=ci", "-c", "user.email=ci@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "fresh copy"]):
        subprocess.run([*git, *args], cwd=checkout, check=True, capture_output=True)
    return checkout


def git_leftovers(checkout: Path) -> list[str]:
    status = subprocess.run(
        ["git", "-c", "core.excludesFile=/dev/null", "status", "--porcelain", "--untracked-files=all"],
        cwd=checkout, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [line for line in status.splitlines() if line.strip()]


def build_context(checkout: Path) -> set[str]:
    import docker.utils.build

    from knowgic.runner.host.images import _read_dockerignore

    return set(docker.utils.build.exclude_paths(str(checkout), _read_dockerignore(checkout), "Dockerfile"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torch_wheel() -> Path | None:
    """The CPU torch wheel the runner image gets: ``$KNOWGIC_TORCH_WHEEL``, else the one that
    ``knowgic runner build-image`` keeps in this user's cache (the container tests' build puts it there)."""
    named = os.environ.get("KNOWGIC_TORCH_WHEEL")
    if named and Path(named).is_file():
        return Path(named)
    import torch

    from knowgic.paths import cache_dir

    release = torch.__version__.split("+")[0]
    found = sorted((cache_dir() / "wheels").glob(f"torch-{release}[+-]*.whl"))
    return found[0] if found else None


def environment(home: Path, cache: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNOWGIC_", "XDG_", "GRADIO_"))}
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        KNOWGIC_CACHE=str(cache),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
        GRADIO_SERVER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    wheel = torch_wheel()
    if wheel is not None:
        env["KNOWGIC_TORCH_WHEEL"] = str(wheel)  # build-image's own variable, so that it fetches nothing
    return env


def command_of(entry: Entry, script: Path) -> list[str]:
    if entry.language == "python":
        return [sys.executable, str(script)]
    return ["bash", "-e", "-o", "pipefail", str(script)]


def serve_and_stop(command: list[str], cwd: Path, env: dict[str, str], port: int, log: Path) -> str | None:
    """Start a block that serves (a leaderboard), wait until its page answers, stop it. None: it served."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + SERVE_TIMEOUT_SECONDS
        try:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    return f"it stopped (exit {process.returncode}) before its page answered on port {port}"
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                        if page.status == 200 and b"<html" in page.read(4096).lower():
                            return None
                except (urllib.error.URLError, OSError):
                    pass
                time.sleep(2)
            return f"its page did not answer on port {port} within {SERVE_TIMEOUT_SECONDS} s"
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def run_block(block: Block, entry: Entry, checkout: Path, env: dict[str, str], scratch: Path) -> str | None:
    """Run one block's script in ``checkout``; None when it passed, else why not (with its output)."""
    script = scratch / f"block-{block.line}.{'py' if entry.language == 'python' else 'sh'}"
    script.write_text(entry.script, encoding="utf-8")
    log = scratch / f"block-{block.line}.log"
    command = command_of(entry, script)
    if entry.serve:
        failure = serve_and_stop(command, checkout, env, int(env["GRADIO_SERVER_PORT"]), log)
    else:
        with log.open("wb") as out:
            try:
                done = subprocess.run(
                    command,
                    cwd=checkout,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=entry.timeout,
                )
                failure = None if done.returncode == 0 else f"exit {done.returncode}"
            except subprocess.TimeoutExpired:
                failure = f"still running after {entry.timeout} s"
    if failure is None:
        return None
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
    return failure + "\n" + "\n".join("    | " + line for line in tail)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def run(selected: list[str], cache: Path | None, docker: bool) -> int:
    steps = plan()
    wanted = {str(Path(p)) for p in selected}
    by_page: dict[str, list[tuple[Block, Entry]]] = {}
    for block, entry in steps:
        if wanted and block.page not in wanted:
            continue
        by_page.setdefault(block.page, []).append((block, entry))
    failures: list[str] = []
    counts = {"ran": 0, "skipped": 0}
    started = time.monotonic()
    print(
        f"docs' code blocks: {sum(len(v) for v in by_page.values())} block(s) on {len(by_page)} page(s), {load()}"
    )
    with tempfile.TemporaryDirectory(prefix="knowgic-docs-") as tmp:
        shared_cache = cache or Path(tmp) / "cache"
        shared_cache.mkdir(parents=True, exist_ok=True)
        if docker and any(e.docker for v in by_page.values() for _, e in v):
            from knowgic.runner.host.engine import DockerUnavailable, ensure_docker

            try:
                ensure_docker().close()
            except DockerUnavailable as error:
                print(f"error: the docs' Docker blocks need a Docker engine: {error}", file=sys.stderr)
                return 1
        for page, items in by_page.items():
            scratch = Path(tmp) / page.replace("/", "_")
            checkout = fresh_copy(scratch)
            home = scratch / "home"
            home.mkdir()
            env = environment(home, shared_cache, free_port())
            context_before = build_context(checkout)
            page_started = time.monotonic()
            print(f"== {page} ({load()})", flush=True)
            broken = False
            for block, entry in items:
                label = f"{block.where} {block.language} {entry.kind}: {block.first[:70]}"
                if entry.kind in ("skip", "covered", "same-as") or (entry.docker and not docker) or broken:
                    why = {
                        "skip": f"skipped: {SKIP_REASONS.get(str(entry.raw.get('skip')), '')}",
                        "covered": f"covered by {entry.raw.get('covered')}",
                        "same-as": f"equals {entry.raw.get('same-as')}",
                    }.get(
                        entry.kind,
                        "not run: needs Docker (--docker)"
                        if not broken
                        else "not run: an earlier block failed",
                    )
                    print(f"   {label}\n      {why}", flush=True)
                    counts["skipped"] += 1
                    continue
                t0 = time.monotonic()
                failure = run_block(block, entry, checkout, env, scratch)
                counts["ran"] += 1
                status = "ok" if failure is None else "FAILED"
                print(f"   {label}\n      {status} in {time.monotonic() - t0:.1f} s", flush=True)
                if failure is not None:
                    failures.append(f"{block.where}: {failure}")
                    print("      " + failure, flush=True)
                    broken = True  # the page's later blocks may rest on this one
            leftovers = git_leftovers(checkout)
            if leftovers:
                failures.append(
                    f"{page}: following it leaves files git does not ignore: {', '.join(leftovers[:10])}"
                )
            grown = sorted(build_context(checkout) - context_before)
            if grown:
                failures.append(
                    f"{page}: following it adds to the runner image's build context: {', '.join(grown[:10])}"
                )
            print(f"   {page}: {time.monotonic() - page_started:.0f} s", flush=True)
            if not os.environ.get("KNOWGIC_DOCS_KEEP"):
                shutil.rmtree(checkout, ignore_errors=True)
    print(
        f"docs' code blocks: {counts['ran']} run, {counts['skipped']} not run here, {len(failures)} failure(s), "
        f"{time.monotonic() - started:.0f} s, {load()}"
    )
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=".ci/doc_blocks.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="every block declared, every declaration still true")
    sub.add_parser("list", help="each block with what is done with it")
    runner = sub.add_parser("run", help="run the blocks, each page in a fresh copy of the tree")
    runner.add_argument("pages", nargs="*", help="only these pages (e.g. docs/runner.md)")
    runner.add_argument("--cache", type=Path, help="KNOWGIC_CACHE for every block (default: an empty one)")
    runner.add_argument(
        "--no-docker", action="store_true", help="leave out the blocks that need a Docker engine"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            steps = plan()
            kinds = {k: sum(1 for _, e in steps if e.kind == k) for k in KINDS}
            print(f"{len(steps)} declared block(s): " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
            return 0
        if args.command == "list":
            for block, entry in plan():
                extra = " (docker)" if entry.docker else ""
                print(f"{block.where}\t{block.language}\t{entry.kind}{extra}\t{block.first[:80]}")
            return 0
        return run(args.pages, args.cache, docker=not args.no_docker)
    except DocsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
