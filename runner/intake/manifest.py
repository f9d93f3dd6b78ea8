"""A submission's ``submission.yaml``: read, validated, and the hyper-parameters it gives per model.

``submission.yaml`` is at most ``max_manifest_bytes``, parsed as YAML the project's one way
(:mod:`knowgic.yamlfile`: duplicate keys refused, errors name the line and column) and validated against
``spec/schemas/submission.schema.json``; then the checks the schema cannot express (every string is plain
text, the models are hub ids or offline names, the requirements are plain specifiers, every hparams file
exists and parses, the editor's module is in the submission). Errors are one line naming the file, the
field and the line.

Plain text (:mod:`knowgic.printable`): no control, format or separator character anywhere in the manifest,
keys included (U+2028 inside a requirement's marker would pass the specifier's grammar and fail pip's
later; ESC would reach a maintainer's terminal), except line feeds and tabs in ``description`` and in
inline hyper-parameter values (an in-context editor's template may span lines). A refusal names the
character, the field and its line.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement

from knowgic.dataset.schemas import validator
from knowgic.dataset.versions import resolve_version
from knowgic.errors import KnowgicError
from knowgic.models.registry import get_offline_model
from knowgic.printable import MULTILINE, character_name, first_unsafe, printable
from knowgic.runner.intake.archive import MiB, SubmissionError
from knowgic.schema_errors import explain, reportable
from knowgic.spec import benchmark_spec
from knowgic.yamlfile import YamlError, parse_yaml

MANIFEST_NAME = "submission.yaml"


def manifest_root(unpacked: Path, where: str) -> Path:
    """``unpacked`` when it holds submission.yaml, else its single top-level folder when that one does."""
    if (unpacked / MANIFEST_NAME).is_file():
        return unpacked
    children = [p for p in unpacked.iterdir()]
    if len(children) == 1 and children[0].is_dir() and (children[0] / MANIFEST_NAME).is_file():
        return children[0]
    raise SubmissionError(f"{where}: no {MANIFEST_NAME} at its root (or in its single top-level folder)")


def read_yaml_file(path: Path, shown: str, max_bytes: int) -> Any:
    """Parse a small YAML file of a submission; errors name ``shown`` with the line and column."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise SubmissionError(f"{shown} is {size} bytes; at most {max_bytes} are allowed")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SubmissionError(f"{shown} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SubmissionError(f"cannot read {shown}: {exc.strerror or exc}") from None
    try:
        return parse_yaml(text, shown)
    except YamlError as exc:  # a syntax error names the file, then its line and column
        raise SubmissionError(f"{shown} {exc.problem}" if exc.problem else str(exc)) from None


def _node_line(text: str, path: list[Any]) -> int | None:
    """The 1-based line of the YAML node at ``path`` (keys and indices), or of its closest parent."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None if node is None else node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


def validate_manifest(manifest: Any, manifest_path: Path, shown: str) -> None:
    if not isinstance(manifest, dict):
        kind = "empty" if manifest is None else f"a YAML {type(manifest).__name__}"
        raise SubmissionError(
            f"{shown}: expected a mapping of fields (name, version, editor, ...), found {kind}"
        )
    errors = reportable(validator("submission").iter_errors(manifest))
    if not errors:
        return
    path = list(errors[0].absolute_path)
    pointer = "/".join(str(p) for p in path) or "(top level)"
    line = _node_line(manifest_path.read_text(encoding="utf-8"), path)
    at = f" line {line}," if line else ""
    raise SubmissionError(f"{shown}{at} field {pointer}: {explain(errors[0])}")


# Fields whose strings may span lines (line feeds and tabs); every other string is one line of plain text.
_MULTILINE_FIELDS = ("description", "hparams")


def check_characters(manifest: dict[str, Any], manifest_path: Path, shown: str) -> None:
    """Refuse the first string of the manifest (a key or a value, at any depth) holding a character that is
    not plain text, in one line naming the character, its position, the field and its line."""
    stack: list[tuple[list[Any], Any]] = [([key], value) for key, value in reversed(manifest.items())]
    while stack:
        path, value = stack.pop()
        texts: list[tuple[list[Any], str, bool]] = []
        if isinstance(value, str):
            texts.append((path, value, True))
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                texts.append(([*path, key], str(key), False))
                stack.append(([*path, key], item))
        elif isinstance(value, list):
            stack.extend(([*path, index], item) for index, item in reversed(list(enumerate(value))))
        for where, text, is_value in texts:
            allow = MULTILINE if is_value and where[0] in _MULTILINE_FIELDS else ""
            found = first_unsafe(text, allow)
            if found is None:
                continue
            index, character = found
            line = _node_line(manifest_path.read_text(encoding="utf-8"), where)
            at = f" line {line}," if line else ""
            kind = "value" if is_value else "key"
            raise SubmissionError(
                f"{shown}{at} field {printable('/'.join(map(str, where)))}: character {character_name(character)} at "
                f"position {index + 1} of the {kind} '{printable(text[:120])}': a manifest holds plain text "
                "only (no control, format or separator characters)"
            )


def _resolve_inside(root: Path, relative: str, shown: str, what: str) -> Path:
    """``root / relative`` when it is a regular file inside ``root``; raises otherwise."""
    if relative.startswith("/") or "\\" in relative or ".." in PurePosixPath(relative).parts:
        raise SubmissionError(f"{shown}: {what} {relative!r} must be a relative path inside the submission")
    path = root.joinpath(*PurePosixPath(relative).parts)
    if not path.is_file():
        raise SubmissionError(f"{shown}: {what} {relative!r} does not exist in the submission")
    return path


def _model_family(model: str) -> str | None:
    entry = get_offline_model(model)
    return entry.family if entry is not None else None


def hparams_key(manifest: dict[str, Any], model: str) -> str | None:
    """The ``hparams`` key that applies to ``model``: the model id itself, else its family when known."""
    hparams = manifest.get("hparams") or {}
    if model in hparams:
        return model
    family = _model_family(model)
    if family is not None and family in hparams:
        return family
    return None


def hparams_for(manifest: dict[str, Any], root: Path, model: str) -> dict[str, Any]:
    """The hyper-parameters a submission gives for ``model``: inline, or read from its YAML file."""
    key = hparams_key(manifest, model)
    if key is None:
        raise SubmissionError(
            f"{MANIFEST_NAME}: hparams has no entry for model {model!r} (keys: "
            f"{', '.join(sorted(manifest.get('hparams') or {})) or 'none'}); key it by the model id or family"
        )
    value = manifest["hparams"][key]
    if isinstance(value, dict):
        return dict(value)
    shown = f"hparams file {value!r}"
    path = _resolve_inside(root, value, f"{MANIFEST_NAME} hparams/{key}", "hparams file")
    data = read_yaml_file(path, shown, 1 * MiB)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SubmissionError(f"{shown}: expected a mapping of hyper-parameters, found {type(data).__name__}")
    return data


def _check_editor_module(manifest: dict[str, Any], root: Path, shown: str) -> None:
    """The editor's module must be in the submission, unless a packaging file or requirement provides it."""
    module = str(manifest["editor"]).split(":", 1)[0]
    parts = module.split(".")
    for base in (root, root / "src"):
        if (
            base.joinpath(*parts).with_suffix(".py").is_file()
            or (base.joinpath(*parts) / "__init__.py").is_file()
        ):
            return
    if manifest.get("requirements"):
        return  # a requirement may provide it (a wheel from the index); a missing module then fails the job
    raise SubmissionError(
        f"{shown} field editor: module {module!r} is not in the submission (looked for "
        f"{'/'.join(parts)}.py and {'/'.join(parts)}/__init__.py, also under src/; the submission itself "
        "is never built or installed, it is put on the path as it is)"
    )


# A model the sandbox can load: an offline model name or a hub id (owner/name); a path on the worker host
# means nothing inside the container.
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def _check_models(manifest: dict[str, Any], shown: str) -> None:
    """Each model is an offline name or a possible hub id, checked as ``knowgic evaluate`` checks it (a name
    close to an offline one is taken for a typo), before anything is stored or an image built."""
    from knowgic.models.loading import resolve_source

    for index, model in enumerate(manifest["models"]):
        if not _MODEL_ID.match(model) or ".." in model:
            raise SubmissionError(
                f"{shown} field models/{index}: {model!r} is not a hub id (owner/name) or an offline model name; "
                "a submission cannot name files of the machine that runs it"
            )
        try:
            resolve_source(model)
        except KnowgicError as exc:
            raise SubmissionError(f"{shown} field models/{index}: {exc}") from None


def _check_requirements(manifest: dict[str, Any], shown: str) -> None:
    """Each requirement is one PEP 508 specifier of a package on the index: no pip options (``-r``,
    ``--index-url``, ``-e``), no direct reference (``name @ URL``: a file, a folder, an archive, a VCS
    checkout), whose build would run the submission's code; the runner installs wheels from the index only."""
    for index, text in enumerate(manifest.get("requirements") or []):
        where = f"{shown} field requirements/{index}"
        if text.lstrip().startswith("-"):
            raise SubmissionError(f"{where}: {text!r} is a pip option; list package requirements only")
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            reason = " ".join(str(exc).split())
            raise SubmissionError(
                f"{where}: {text!r} is not a requirement specifier ({reason}); local paths and VCS URLs "
                "are not accepted"
            ) from None
        if requirement.url:
            raise SubmissionError(
                f"{where}: {text!r} is a direct reference (name @ URL); the runner installs wheels from the "
                "package index only: name a released package, or put the code into the submission"
            )


def check_manifest(manifest: dict[str, Any], root: Path, shown: str) -> dict[str, Any]:
    """Semantic checks the schema cannot express; returns the manifest with defaults filled."""
    filled = dict(manifest)
    filled.setdefault("modes", [benchmark_spec().default_mode])
    try:  # left out: the main track's latest; a track's name: its latest (jobs record the resolved key)
        filled["dataset_version"] = resolve_version(filled.get("dataset_version"))
    except KnowgicError as exc:
        raise SubmissionError(f"{shown} field dataset_version: {exc}") from None
    _check_models(filled, shown)
    _check_requirements(filled, shown)
    for key, value in filled["hparams"].items():
        if isinstance(value, str):
            _resolve_inside(root, value, f"{shown} field hparams/{key}", "hparams file")
    missing = [model for model in filled["models"] if hparams_key(filled, model) is None]
    if missing:  # the schema asks for one entry at least; which keys cover which models it cannot know
        raise SubmissionError(
            f"{shown} field hparams: no entry for the model(s) {', '.join(map(repr, missing))} asked for in "
            f"models (keys: {', '.join(map(repr, filled['hparams']))}); key hparams by the model id or its "
            "family (gpt2, gptj, llama, qwen), with {} for an editor that takes no hyper-parameters"
        )
    for model in filled["models"]:
        hparams_for(filled, root, model)  # every referenced file parses
    _check_editor_module(filled, root, shown)
    return filled
