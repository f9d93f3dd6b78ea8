#!/usr/bin/env python3
"""Print one of the README's two set-up commands, so that CI runs exactly what a newcomer copies.

    python3 .ci/readme_command.py main     the first ```bash block of the README's "## Set up" section
    python3 .ci/readme_command.py tests    the second one (the test command)

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Set up"
WHICH = {"main": 0, "tests": 1}


def setup_commands(text: str) -> list[str]:
    """The ```bash blocks of the set-up section, in order, each as the text between its fences."""
    start = text.find(f"\n{SECTION}\n")
    if start < 0:
        raise ValueError(f"README.md has no {SECTION!r} section")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    return [block.strip() for block in re.findall(r"^```bash\n(.*?)^```$", section, re.M | re.S)]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in WHICH:
        print(f"usage: readme_command.py {{{','.join(WHICH)}}}", file=sys.stderr)
        return 2
    try:
        commands = setup_commands(README.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if len(commands) != len(WHICH):
        print(
            f"error: README.md's {SECTION!r} section has {len(commands)} bash block(s), expected "
            f"{len(WHICH)} (the main command, then the test command)",
            file=sys.stderr,
        )
        return 1
    print(commands[WHICH[argv[0]]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
