"""Finding an editor class by name: built-ins, ``knowgic.editors`` entry points, or ``module:Class``."""

from __future__ import annotations

import difflib
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
    module_name, attr = module_name.strip(), attr.strip()
    if not module_name or not attr:
        raise KnowgicError(f"editor {what!r}: expected 'package.module:ClassName', got {target!r}")
    where = "" if what == target else f" (registered as {target})"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise KnowgicError(
                f"editor {what!r}{where}: no module named {missing!r}; is its package installed "
                "(pip install ...) or its folder on PYTHONPATH?"
            ) from None
        raise KnowgicError(
            f"editor {what!r}{where}: importing {module_name!r} failed: it needs module {missing!r}, "
            "which is not installed"
        ) from None
    except Exception as exc:  # a plug-in's own import-time error (SyntaxError, NameError, ...) in one line
        raise KnowgicError(
            f"editor {what!r}{where}: importing {module_name!r} failed: {type(exc).__name__}: "
            + " ".join(str(exc).split())
        ) from None
    try:
        cls = getattr(module, attr)
    except AttributeError:
        public = sorted(
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, Editor) and v is not Editor
        )
        hint = f"; editor classes there: {', '.join(public)}" if public else ""
        raise KnowgicError(
            f"editor {what!r}{where}: module {module_name!r} has no attribute {attr!r}{hint}"
        ) from None
    if not isinstance(cls, type):
        raise KnowgicError(
            f"editor {what!r}{where}: {module_name}:{attr} is a {type(cls).__name__}, not a class; "
            "an editor is a subclass of knowgic.editors.Editor"
        )
    if not issubclass(cls, Editor):
        raise KnowgicError(
            f"editor {what!r}{where}: class {module_name}:{attr} is not a subclass of knowgic.editors.Editor"
        )
    if cls.apply is Editor.apply:
        raise KnowgicError(f"editor {what!r}{where}: class {module_name}:{attr} does not implement apply()")
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
    names = sorted(available_editors())
    close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise KnowgicError(
        f"unknown editor {name!r}{hint}; known: {', '.join(names)}; or give 'package.module:ClassName'"
    )
