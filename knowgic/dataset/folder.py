"""A dataset version by name (shipped in the package) or by folder path (one ``knowgic build`` wrote).

Both are Hugging Face dataset folders with a ``version.json``; a folder given by path is checked against
its recorded content hash before use, so a results file never records a hash its data does not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowgic.dataset.io import alias_lists, clean_aliases, read_json, read_rows
from knowgic.dataset.schemas import ROW_SCHEMAS
from knowgic.dataset.versions import (
    ALIASES_FILE,
    VERSION_FILE,
    config_path,
    content_sha256,
    version_dir,
)
from knowgic.errors import KnowgicError
from knowgic.records import AliasMap, Case


@dataclass(frozen=True)
class DatasetFolder:
    folder: Path
    info: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.info.get("name", "knowgic"))

    @property
    def version(self) -> str:
        return str(self.info["version"])

    @property
    def sha256(self) -> str:
        return str(self.info["sha256"])

    def rows(self, config: str) -> list[dict[str, Any]]:
        if config not in ROW_SCHEMAS:
            raise KnowgicError(f"unknown config {config!r}; known: {', '.join(ROW_SCHEMAS)}")
        return [dict(r) for r in read_rows(config_path(self.folder, self.info, config))]

    def has_config(self, config: str) -> bool:
        """Whether the version ships ``config`` (``ripple``: 1.0.0 and private splits do not)."""
        return config in (self.info.get("configs") or {})

    def aliases(self) -> dict[str, list[str]]:
        """The alias map as stored (entity -> aliases, list form)."""
        raw = read_json(self.folder / ALIASES_FILE)
        if not isinstance(raw, dict):
            raise KnowgicError(f"{self.folder / ALIASES_FILE}: expected a JSON object")
        return alias_lists(raw)

    def clean_aliases(self) -> AliasMap:
        return clean_aliases(self.aliases())

    def cases(self) -> list[Case]:
        return sorted((Case.from_row(r) for r in self.rows("chains")), key=lambda c: c.case_id)

    def ref(self, config: str = "chains") -> Any:
        """The :class:`~knowgic.dataset.loading.DatasetRef` a results file records."""
        from knowgic.dataset.loading import DatasetRef

        return DatasetRef(name=self.name, version=self.version, config=config, sha256=self.sha256)


def open_dataset(source: str | Path | None = None) -> DatasetFolder:
    """``source``: a version name shipped with the package (``1.1.0``; None: the latest) or a dataset
    folder's path."""
    if source is None:
        folder = version_dir(None)
        return DatasetFolder(folder, read_json(folder / VERSION_FILE))
    path = Path(source).expanduser()
    if path.is_dir():
        record = path / VERSION_FILE
        if not record.is_file():
            raise KnowgicError(f"{path} is no KnowGIC dataset folder (no {VERSION_FILE})")
        info = read_json(record)
        if not isinstance(info, dict) or not isinstance(info.get("sha256"), str) or "version" not in info:
            raise KnowgicError(f"{record}: not a KnowGIC version file (needs version and sha256)")
        computed = content_sha256(path)
        if computed != info["sha256"]:
            raise KnowgicError(
                f"{path}: content hash mismatch (recorded {info['sha256'][:12]}, computed {computed[:12]}); "
                f"run knowgic validate {path}"
            )
        return DatasetFolder(path, info)
    if any(sep in str(source) for sep in ("/", "\\")) or str(source).startswith("."):
        raise KnowgicError(f"dataset folder {source} does not exist")
    folder = version_dir(str(source))
    return DatasetFolder(folder, read_json(folder / VERSION_FILE))
