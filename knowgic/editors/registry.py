"""Finding an editor class by name: built-ins, ``knowgic.editors`` entry points, or ``module:Class``."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from knowgic.editors.base import Editor
from knowgic.errors import KnowgicError

ENTRY_POINT_GROUP = "knowgic.editors"

# name -> "module:Class"; imported lazily so that listing editors does not import every method.
BUILTIN_EDITORS: dict[str, str] = {
    "none": "knowgic.editors.none:NoEdit",
    "ice": "knowgic.editors.ice:InContextEditor",
    "rome": "knowgic.editors.rome.rome_main:ROMEEditor",
    "memit": "knowgic.editors.memit.memit_main:MEMITEditor",
    "alphaedit": "knowgic.editors.alphaedit.alphaedit_main:AlphaEditEditor",
    "prune": "knowgic.editors.prune:PRUNEEditor",
    "rect": "knowgic.editors.rect:RECTEditor",
    "ft": "knowgic.editors.ft:FTEditor",
    "lora": "knowgic.editors.lora:LoRAEditor",
}


def _load_target(target: str, what: str) -> type[Editor]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise KnowgicError(f"editor {what!r}: expected 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise KnowgicError(f"editor {what!r}: cannot import module {module_name!r} ({exc})") from None
    try:
        cls = getattr(module, attr)
    except AttributeError:
        raise KnowgicError(f"editor {what!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, Editor)):
        raise KnowgicError(f"editor {what!r}: {target} is not a subclass of knowgic.editors.Editor")
    return cls


def plugin_editors() -> dict[str, str]:
    """Editors registered by installed packages under the ``knowgic.editors`` entry-point group."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_editors() -> dict[str, str]:
    return {**plugin_editors(), **BUILTIN_EDITORS}


def resolve_editor(name: str) -> type[Editor]:
    """``name`` is a built-in (``rome``), an entry-point name, or ``package.module:ClassName``."""
    if name in BUILTIN_EDITORS:
        return _load_target(BUILTIN_EDITORS[name], name)
    plugins = plugin_editors()
    if name in plugins:
        return _load_target(plugins[name], name)
    if ":" in name:
        return _load_target(name, name)
    known = ", ".join(sorted(available_editors()))
    raise KnowgicError(f"unknown editor {name!r}; known: {known}; or give 'package.module:ClassName'")
