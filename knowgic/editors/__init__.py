"""Editing methods behind one interface (:class:`~knowgic.editors.base.Editor`)."""

from knowgic.editors.base import EditHandle, Editor, snapshot_restore

__all__ = ["EditHandle", "Editor", "snapshot_restore"]
