"""What every store-backed knowledge source shares, whatever holds its chunks.

:class:`~agentic_retrieval.sources.local.LocalKnowledgeSource` (SQLite and tantivy) and
:class:`~agentic_retrieval.sources.postgres.PostgresKnowledgeSource` index through the same
ingestion code (:class:`~agentic_retrieval.sources.local.store.target.IndexTarget`) and turn
stored hits into the same :class:`Hit`: this base holds that common part once, so the two
cannot drift apart in what they index, how they read filters or what a hit carries. Each
subclass keeps its own ``search`` (how its store is reached and what its failures mean).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from langchain_core.embeddings import Embeddings

from agentic_retrieval.errors import FilterNotSupportedError, PermissionsNotEnforceableError
from agentic_retrieval.odata import Expr, FieldKind, FieldSchema, ODataError, parse_filter
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.base import Hit, url_from_metadata
from agentic_retrieval.sources.local.ingest import IndexReport, ProgressCallback, index_paths
from agentic_retrieval.sources.local.record_ingest import (
    RecordInput,
    delete_records,
    index_records,
    index_records_file,
)
from agentic_retrieval.sources.local.records import RecordFields
from agentic_retrieval.sources.local.store.rows import StoredHit
from agentic_retrieval.sources.local.store.target import IndexTarget

STORE_FIELDS: dict[str, frozenset[FieldKind]] = {
    "source_path": frozenset({"string"}),
    "file_name": frozenset({"string"}),
    "title": frozenset({"string"}),
    "chunk": frozenset({"number"}),
    "page": frozenset({"number", "null"}),
}
"""The fields ingestion sets on every chunk (``page`` on paged documents only)."""
_KINDS: dict[str, FieldKind] = {
    "integer": "number",
    "real": "number",
    "text": "string",
    "true": "boolean",
    "false": "boolean",
    "null": "null",
    "array": "collection",
    "object": "object",
}


class SourceStore(IndexTarget, Protocol):
    """A store a knowledge source searches: ingestion's operations, plus these two."""

    def metadata_kinds(self) -> dict[str, frozenset[str]]:
        """Each metadata field with the JSON types its chunks hold in it."""
        ...

    def close(self) -> None:
        """Close the store's connections."""
        ...


class StoreBackedSource:
    """Indexing, filters and hits of a knowledge source over a :class:`SourceStore`."""

    name: str
    description: str
    embeddings: Embeddings | None
    chunk_size: int
    overlap: int
    store: SourceStore

    trims_by_permission = True
    """Searches apply document permissions inside the store's query (before ranking and top)."""

    def filter_schema(self) -> FieldSchema:
        """Each filterable field with the kinds of value the indexed chunks hold in it.

        Callers check their filters against it before searching
        (:func:`agentic_retrieval.odata.check_fields`); ``search`` does not, as a field this
        source lacks may belong to another source searched with the same filter.
        """
        schema: dict[str, frozenset[FieldKind]] = dict(STORE_FIELDS)
        for name, types in self.store.metadata_kinds().items():
            schema[name] = frozenset(_KINDS[t] for t in types if t in _KINDS) | schema.get(
                name, frozenset()
            )
        return schema

    def citation_url(self, hit: Hit, *, endpoint: str | None, api_version: str) -> str | None:
        """The hit's file (``file://`` URI, PDF page anchored) or web URL, if it has one."""
        return url_from_metadata(hit.metadata)

    def index(
        self,
        paths: Iterable[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        permissions: Permissions | None = None,
    ) -> IndexReport:
        """Index files and folders into this source (see :func:`index_paths`).

        ``permissions`` says who may see these files (a ``NAME.permissions.json`` sidecar
        overrides it per file); ``None`` keeps each file's earlier permissions.
        """
        return self._refreshed(
            index_paths(
                self.store,
                paths,
                metadata=metadata,
                embeddings=self.embeddings,
                progress=progress,
                chunk_size=self.chunk_size,
                overlap=self.overlap,
                permissions=permissions,
            )
        )

    def index_records(
        self,
        path: str | Path,
        *,
        fields: RecordFields | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        permissions: Permissions | None = None,
    ) -> IndexReport:
        """Index a JSONL / JSON / CSV / TSV records file (see :func:`index_records_file`)."""
        return self._refreshed(
            index_records_file(
                self.store,
                path,
                fields=fields,
                metadata=metadata,
                embeddings=self.embeddings,
                progress=progress,
                chunk_size=self.chunk_size,
                overlap=self.overlap,
                permissions=permissions,
            )
        )

    def delete_documents(self, ids: Iterable[str]) -> IndexReport:
        """Remove documents added with ``add_documents`` (or from a records file) by id."""
        return delete_records(self.store, ids)

    def close(self) -> None:
        """Close the store's connections."""
        self.store.close()

    def _add_records(
        self,
        documents: Iterable[RecordInput],
        fields: RecordFields | None,
        metadata: Mapping[str, Any] | None,
        progress: ProgressCallback | None,
        permissions: Permissions | None,
    ) -> IndexReport:
        """What each source's ``add_documents`` does once its fields are read."""
        return self._refreshed(
            index_records(
                self.store,
                documents,
                fields=fields,
                metadata=metadata,
                embeddings=self.embeddings,
                progress=progress,
                chunk_size=self.chunk_size,
                overlap=self.overlap,
                permissions=permissions,
            )
        )

    def _refreshed(self, report: IndexReport) -> IndexReport:
        """``report``, once the store is ready to search what was written (a hook)."""
        return report

    def _parse_filter(self, text: str | None) -> Expr | None:
        if text is None or not text.strip():
            return None
        try:
            return parse_filter(text)
        except ODataError as exc:
            raise FilterNotSupportedError(f"{self.name}: {exc}") from exc

    def _not_enforceable(self) -> PermissionsNotEnforceableError:
        """The error of a search that must trim by permissions in a store holding none."""
        return PermissionsNotEnforceableError(
            f"knowledge source '{self.name}' holds no permission metadata (it was indexed "
            "without permissions), so it cannot be searched while permissions are "
            "enforced; index it again with permissions"
        )

    def _to_hit(self, hit: StoredHit) -> Hit:
        return Hit(
            doc_key=hit.id,
            content=hit.content,
            title=hit.title or None,
            source=self.name,
            score=hit.score,
            vector_similarity=hit.similarity,
            metadata=hit.metadata,
        )
