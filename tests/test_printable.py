"""Text stays text on the runner's side: a name, a reason or a log line that carries terminal escapes,
separators, bidirectional overrides or rich markup is printed as visible text by ``store list``,
``runner status``, ``runner logs`` and ``summarize``, and the JSON outputs say the same characters as
escapes. Real results files, the real store and queue, the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.printable import character_name, first_unsafe, printable, printable_json
from knowgic.results import content_sha256
from knowgic.runner.queue.queue import JobQueue
from tests.test_queue import enqueue, fake_submission

# A window title and clipboard write (OSC), a colour (CSI), C1 CSI, a line separator, a right-to-left
# override, a carriage return that would hide what came before it, and rich markup with a link.
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cm0gLXJm\x07\x1b[31mred\x9b2J\u2028\u202eevil\r[bold][link=https://x.example]x[/link]"
RAW = ("\x1b", "\x07", "\x9b", "\u2028", "\u202e", "\r")


def _shown_as_text(out: str) -> None:
    assert not any(c in out for c in RAW), repr(out)
    assert "\\x1b]0;owned\\x07" in out and "\\u2028" in out and "\\u202e" in out


def test_printable_escapes_exactly_what_is_not_plain_text() -> None:
    assert printable("KnowGIC – Qwen/Qwen2.5-0.5B · ✓ ünïcode") == "KnowGIC – Qwen/Qwen2.5-0.5B · ✓ ünïcode"
    assert printable("a\tb\nc") == "a\\x09b\\x0ac"
    assert printable("a\tb\nc\x1b", newlines=True) == "a\tb\nc\\x1b"
    assert printable("\ud800") == "\\ud800"  # a lone surrogate would stop print() itself
    assert first_unsafe("name\u2028x") == (4, "\u2028")
    assert (
        character_name("\u2028") == "U+2028 LINE SEPARATOR" and character_name("\x00") == "U+0000 (control)"
    )
    text = printable_json({"k": HOSTILE, "emoji": "🙂"}, indent=2)
    assert json.loads(text) == {"k": HOSTILE, "emoji": "🙂"} and all(
        c.isprintable() or c == "\n" for c in text
    )


@pytest.fixture(scope="module")
def hostile_results(evaluated_results: Path, tmp_path_factory) -> Path:
    """A valid results file (its own hash recomputed) whose model name is ``HOSTILE``."""
    document = json.loads(evaluated_results.read_text(encoding="utf-8"))
    document["config"]["model"] = HOSTILE
    document["sha256"] = content_sha256(document)
    path = tmp_path_factory.mktemp("hostile") / "results.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_store_add_and_list_print_names_as_text(hostile_results, tmp_path, capsys) -> None:
    root = tmp_path / "store"
    assert main(["store", "add", str(hostile_results), "--store", str(root), "--label", "note\x1b[8m"]) == 0
    _shown_as_text(capsys.readouterr().out)
    assert main(["store", "list", "--store", str(root)]) == 0
    _shown_as_text(capsys.readouterr().out)
    assert main(["store", "list", "--store", str(root), "--json"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW)
    [run] = json.loads(out)["runs"]
    assert run["model"] == HOSTILE and run["label"] == "note\x1b[8m"  # the same characters, as escapes


def test_summarize_and_compare_print_names_as_text(hostile_results, capsys) -> None:
    assert main(["summarize", str(hostile_results)]) == 0
    _shown_as_text(capsys.readouterr().out)
    assert main(["summarize", str(hostile_results), "--json"]) == 0
    assert not any(c in capsys.readouterr().out for c in RAW)
    assert main(["compare", str(hostile_results), str(hostile_results)]) == 0
    out = capsys.readouterr().out
    _shown_as_text(out)
    assert "[bold][link=https://x.example]x[/link]" in out  # rich shows it, not parses it


def test_runner_status_and_logs_show_escapes_as_text(tmp_path, capsys) -> None:
    store = tmp_path / "store"
    queue = JobQueue(f"sqlite:///{store / 'queue.sqlite'}")
    [job] = enqueue(queue, fake_submission(tmp_path))
    queue.append_log(job.job_id, f"editor output: {HOSTILE}\nsecond line\n")
    claimed = queue.claim("w1")
    assert claimed is not None
    queue.fail(job.job_id, "w1", f"the editor raised: {HOSTILE}")

    assert main(["runner", "status", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert (
        not any(c in out for c in RAW) and "\\x1b]0;owned\\x07" in out
    )  # (a reason is one line: \u2028 is a space)
    assert main(["runner", "status", "--store", str(store), "--json"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW) and " ".join(HOSTILE.split()) in json.loads(out)[0]["reason"]
    assert main(["runner", "logs", job.job_id, "--store", str(store)]) == 0
    out = capsys.readouterr().out
    _shown_as_text(out)
    assert "\nsecond line\n" in out  # a log keeps its lines


def test_an_error_quoting_input_is_printed_as_text(tmp_path, capsys) -> None:
    assert main(["runner", "logs", f"job\x1b[2J{HOSTILE}", "--store", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and not any(c in err for c in RAW)
