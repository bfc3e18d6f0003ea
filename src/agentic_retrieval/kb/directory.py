"""A knowledge base on disk: a directory with a manifest and one SQLite index per source.

Layout::

    my-kb/
      knowledge-base.json   # {"name", "description", "sources": [{"name", "kind", "description",
                            #   "database", "embeddings"}]}
      handbook.sqlite       # one LocalKnowledgeSource per entry
      policies.sqlite

``database`` is relative to the directory, so the directory can be moved or copied as a whole.
``embeddings: true`` means the source was indexed with vectors; it is opened with the embedding
model given to :meth:`KnowledgeBaseDirectory.open_sources` or, when none is given, the offline
local model (the ``[local]`` extra).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from langchain_core.embeddings import Embeddings

# defined in errors.py; importable from here as before
from agentic_retrieval.errors import KnowledgeBaseDirectoryError as KnowledgeBaseDirectoryError
from agentic_retrieval.sources.local import IndexReport, LocalKnowledgeSource, ProgressCallback

MANIFEST_NAME = "knowledge-base.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}\Z")

EmbeddingsChoice = Embeddings | Literal[False] | None
"""An ``Embeddings`` to use, ``None`` for "the local model where a source uses vectors", or
``False`` to open every source lexical-only."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SourceEntry:
    """One source as recorded in the manifest."""

    name: str
    description: str
    database: str
    embeddings: bool
    kind: str = "local"


class KnowledgeBaseDirectory:
    """Create, load and index a knowledge base stored in a directory.

    Args:
        path: The directory (need not exist before :meth:`create`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = ""
        self.description = ""
        self._entries: dict[str, SourceEntry] = {}
        self._loaded = False
        self._open: dict[str, LocalKnowledgeSource] = {}
        self._lock = threading.Lock()

    @property
    def manifest_path(self) -> Path:
        """The ``knowledge-base.json`` file."""
        return self.path / MANIFEST_NAME

    def create(self, name: str, description: str = "") -> KnowledgeBaseDirectory:
        """Create the directory and an empty manifest.

        Raises:
            KnowledgeBaseDirectoryError: Invalid name, or a knowledge base already exists here.
        """
        _check_name(name, "knowledge base")
        if self.manifest_path.exists():
            raise KnowledgeBaseDirectoryError(f"{self.path} already holds a knowledge base")
        self.path.mkdir(parents=True, exist_ok=True)
        self.name, self.description = name, description
        self._entries = {}
        self._loaded = True
        self._save()
        return self

    def load(self) -> KnowledgeBaseDirectory:
        """Read the manifest.

        Raises:
            KnowledgeBaseDirectoryError: No directory or manifest, or an invalid manifest.
        """
        if not self.path.is_dir():
            raise KnowledgeBaseDirectoryError(f"no knowledge base directory at {self.path}")
        if not self.manifest_path.is_file():
            raise KnowledgeBaseDirectoryError(
                f"{self.path} is not a knowledge base: {MANIFEST_NAME} is missing"
            )
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
            entries = [SourceEntry(**_entry_fields(raw)) for raw in data.get("sources", [])]
            self.name = str(data["name"])
            self.description = str(data.get("description", ""))
        except (ValueError, KeyError, TypeError) as exc:
            raise KnowledgeBaseDirectoryError(f"invalid {self.manifest_path}: {exc}") from exc
        self._entries = {entry.name: entry for entry in entries}
        self._loaded = True
        return self

    @property
    def source_names(self) -> list[str]:
        """The sources' names, in the order they were added."""
        return list(self._require_loaded()._entries)

    @property
    def sources(self) -> list[SourceEntry]:
        """The manifest's source entries."""
        return list(self._require_loaded()._entries.values())

    def add_or_update_source(
        self, name: str, description: str | None = None, embeddings: bool | None = None
    ) -> SourceEntry:
        """Add a source, or change an existing one's description or embeddings setting.

        Args:
            name: Letters, digits, ``-`` and ``_`` (the database file is ``<name>.sqlite``).
            description: What the source holds (the planner reads it); ``None`` keeps the
                current one.
            embeddings: Whether to index vectors for hybrid search; ``None`` keeps the current
                setting (``False`` for a new source). Turning it on re-embeds every file at the
                next :meth:`index`.

        Returns:
            The entry as saved.
        """
        self._require_loaded()
        _check_name(name, "source")
        current = self._entries.get(name)
        entry = SourceEntry(
            name=name,
            description=description
            if description is not None
            else (current.description if current else ""),
            database=current.database if current else f"{name}.sqlite",
            embeddings=embeddings
            if embeddings is not None
            else (current.embeddings if current else False),
        )
        with self._lock:
            self._entries[name] = entry
            if current is not None and current != entry and name in self._open:
                self._open.pop(name).close()  # reopen with the new settings
        self._save()
        if current is None:
            # create the (empty) index now, so a missing file later means it was lost
            self.open_source(name, embeddings=False, create=True).close()
            with self._lock:
                self._open.pop(name, None)
        return entry

    def open_sources(self, embeddings: EmbeddingsChoice = None) -> list[LocalKnowledgeSource]:
        """Open every source (once; later calls return the same objects).

        Args:
            embeddings: See :data:`EmbeddingsChoice`; applies to sources indexed with vectors.
        """
        return [self.open_source(name, embeddings) for name in self.source_names]

    def open_source(
        self, name: str, embeddings: EmbeddingsChoice = None, *, create: bool = False
    ) -> LocalKnowledgeSource:
        """Open one source (once; later calls return the same object).

        Args:
            name: The source.
            embeddings: See :data:`EmbeddingsChoice`.
            create: Create the index file when it is missing (indexing); reading never does.

        Raises:
            KnowledgeBaseDirectoryError: Unknown source name, or its index file is missing or
                not a readable index.
        """
        entry = self._entry(name)
        database = self.path / entry.database
        with self._lock:
            source = self._open.get(name)
            if source is not None:
                return source
            if not create and not database.exists():
                raise KnowledgeBaseDirectoryError(
                    f"source {name!r}: its index {database} is missing; rebuild it with "
                    f"'agentic-retrieval index --kb {self.path} --source {name} PATH...'"
                )
            try:
                source = LocalKnowledgeSource(
                    entry.name,
                    database,
                    description=entry.description,
                    embeddings=_resolve_embeddings(entry, embeddings, for_indexing=create),
                )
            except sqlite3.DatabaseError as exc:
                raise KnowledgeBaseDirectoryError(
                    f"source {name!r}: {database} is not a readable index ({exc}); delete it "
                    "and index the source again"
                ) from exc
            self._open[name] = source
            return source

    def index(
        self,
        source_name: str,
        paths: Iterable[str | Path],
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        embeddings: EmbeddingsChoice = None,
    ) -> IndexReport:
        """Index files and folders into one source (incrementally).

        Raises:
            KnowledgeBaseDirectoryError: Unknown source name.
        """
        source = self.open_source(source_name, embeddings, create=True)
        return source.index(paths, metadata=metadata, progress=progress)

    def close(self) -> None:
        """Close every opened source."""
        with self._lock:
            for source in self._open.values():
                source.close()
            self._open.clear()

    def _entry(self, name: str) -> SourceEntry:
        entry = self._require_loaded()._entries.get(name)
        if entry is None:
            known = ", ".join(self._entries) or "none"
            raise KnowledgeBaseDirectoryError(
                f"knowledge base {self.name!r} has no source {name!r} (sources: {known})"
            )
        return entry

    def _require_loaded(self) -> KnowledgeBaseDirectory:
        if not self._loaded:
            self.load()
        return self

    def _save(self) -> None:
        data = {
            "name": self.name,
            "description": self.description,
            "sources": [asdict(entry) for entry in self._entries.values()],
        }
        temporary = self.manifest_path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, self.manifest_path)  # readers never see a half-written manifest


def _check_name(name: str, what: str) -> None:
    if not _NAME.match(name):
        raise KnowledgeBaseDirectoryError(
            f"invalid {what} name {name!r}: use letters, digits, '-' and '_' (max 128)"
        )


def _entry_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    if raw.get("kind", "local") != "local":
        raise ValueError(f"source {raw.get('name')!r} has unsupported kind {raw.get('kind')!r}")
    name = str(raw["name"])
    _check_name(name, "source")
    database = str(raw.get("database", f"{name}.sqlite"))
    if Path(database).is_absolute() or ".." in Path(database).parts:
        raise ValueError(f"source {name!r}: database must be a path inside the directory")
    return {
        "name": name,
        "description": str(raw.get("description", "")),
        "database": database,
        "embeddings": bool(raw.get("embeddings", False)),
    }


def _resolve_embeddings(
    entry: SourceEntry, choice: EmbeddingsChoice, *, for_indexing: bool = False
) -> Embeddings | None:
    if not entry.embeddings or choice is False:
        return None
    if choice is not None:
        return choice
    from agentic_retrieval.embeddings import local_embeddings, local_embeddings_available

    if not for_indexing and not local_embeddings_available():
        # reading still works on the lexical half of a hybrid index
        logger.warning(
            "source %r was indexed with vectors but the [local] extra is not installed: "
            "searching it lexically only",
            entry.name,
        )
        return None
    return local_embeddings()
