"""KnowGIC: a benchmark and reference implementation for deep knowledge editing."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    import datasets


def load_dataset(config: str = "chains", version: str | None = None, split: str = "test") -> datasets.Dataset:
    """Load a KnowGIC config (``chains``, ``edits`` or ``facts``) of a version (latest by default), offline."""
    from knowgic.dataset.versions import load_version_dataset

    return load_version_dataset(config=config, version=version, split=split)


__all__ = ["__version__", "load_dataset"]
