"""Reading YAML the one way the project reads it: a broken file is one line with its line and column.

PyYAML's messages span several lines ("while parsing a flow sequence / in "<file>", line 1, column 9 /
expected ',' or ']' ..."). Every YAML the project reads (hparams, the benchmark spec, dataset cards,
facts files, submission manifests) goes through :func:`parse_yaml` or :func:`read_yaml`, which turn that
into ``<where> is not valid YAML: line L, column C: <problem> (<context> at line L', column C')``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from knowgic.clip import clip
from knowgic.errors import KnowgicError


class YamlError(KnowgicError):
    """A YAML text that cannot be parsed; the message is one line naming where and why.

    ``problem``: for a syntax error, the same line without ``where`` (``line L, column C: <problem> ...``),
    for callers that word their own message around it; None otherwise."""

    def __init__(self, message: str, problem: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently,
    so ``layers: [0]`` ... ``layers: [5]`` would run with layer 5 without a word)."""


def _construct_unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged keys may be overridden
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # an unhashable key: the base constructor reports it
            break
        if first is not key_node:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"key {clip(str(key), 80)!r} appears twice (first on line {first.start_mark.line + 1})",
                key_node.start_mark,
            )
    return loader.construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _at(mark: Any, line_offset: int) -> str:
    return f"line {mark.line + 1 + line_offset}, column {mark.column + 1}"


def describe_yaml_error(exc: yaml.YAMLError, line_offset: int = 0, text: str | None = None) -> str:
    """One line from a PyYAML error: position of the problem, the problem, and what was being parsed.

    ``line_offset`` is added to the line numbers (for YAML embedded in a larger file, like a card's front
    matter); ``text``, the parsed text, turns a reader error's character position into line and column.
    """
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        text = f"{_at(exc.problem_mark, line_offset)}: {exc.problem or 'cannot parse'}"
        if exc.context:
            where = f" at {_at(exc.context_mark, line_offset)}" if exc.context_mark is not None else ""
            text += f" ({exc.context}{where})"
        return clip(" ".join(text.split()))
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow, by position
        where = f"position {exc.position}"
        if text is not None and isinstance(exc.position, int):
            line = text.count("\n", 0, exc.position) + 1 + line_offset
            where = f"line {line}, column {exc.position - text.rfind(chr(10), 0, exc.position)}"
        return clip(f"{where}: {exc.reason} (character #x{exc.character:04x})")
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return clip(lines[0] if lines else type(exc).__name__)


def parse_yaml(text: str, where: str, line_offset: int = 0) -> Any:
    """Parse ``text`` as ``yaml.safe_load`` does; raise :class:`YamlError` naming ``where`` when it is broken.

    Besides syntax errors this turns into one line a key given twice in one mapping, what PyYAML's
    constructors raise on values such as the date 2020-02-30, and nesting too deep to parse.
    """
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        problem = describe_yaml_error(exc, line_offset, text)
        raise YamlError(f"{where} is not valid YAML: {problem}", problem) from None
    except RecursionError:
        raise YamlError(f"{where} is nested too deeply to read") from None
    except (ValueError, TypeError, OverflowError) as exc:  # constructors: dates, timestamps, big numbers
        detail = clip(" ".join(str(exc).split()))
        raise YamlError(f"{where} cannot be read ({type(exc).__name__}: {detail})") from None


def read_yaml(path: Path, what: str = "file") -> Any:
    """Read and parse the YAML file ``path``; ``what`` names it in errors (e.g. ``"hparams file"``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KnowgicError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise KnowgicError(f"{what} {path} is a folder, not a file") from None
    except UnicodeDecodeError as exc:
        raise KnowgicError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise KnowgicError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return parse_yaml(text, f"{what} {path}")
