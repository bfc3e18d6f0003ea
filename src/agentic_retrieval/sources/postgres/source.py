"""A knowledge source on PostgreSQL: a :class:`PostgresStore` behind the source protocol.

It is :class:`~agentic_retrieval.sources.local.LocalKnowledgeSource` on a shared database:
the same indexing (files, folders, records; incremental by content hash), the same searches
and hits, so a knowledge base, the graph and the CLI use either alike. Searches run their
blocking database work in a worker thread, each thread on its own connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.embeddings import Embeddings

from agentic_retrieval.embeddings import vectors_made_with
from agentic_retrieval.errors import (
    ErrorCode,
    PermissionsNotEnforceableError,
    SourceError,
    StoreUnavailableError,
)
from agentic_retrieval.odata import Expr
from agentic_retrieval.permissions import ANONYMOUS, Access, Permissions
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.local.chunking import DEFAULT_CHUNK_SIZE, DEFAULT_OVERLAP
from agentic_retrieval.sources.local.ingest import IndexReport, ProgressCallback
from agentic_retrieval.sources.local.record_ingest import (
    RecordInput,
)
from agentic_retrieval.sources.local.records import RecordFields
from agentic_retrieval.sources.local.store_source import StoreBackedSource
from agentic_retrieval.sources.postgres.connections import Database
from agentic_retrieval.sources.postgres.store import PostgresStore

logger = logging.getLogger(__name__)


class PostgresKnowledgeSource(StoreBackedSource):
    """Search one store of a PostgreSQL database: BM25, or BM25 + vectors fused with RRF.

    Args:
        name: The source name (``knowledgeSourceName``); also the store's name in the
            database unless ``store`` is given.
        database: The database, or its URL.
        description: What the source holds (the planner reads it).
        embeddings: A LangChain ``Embeddings`` for hybrid search and for embedding chunks at
            ingest; ``None`` for a lexical-only source.
        store: The store's name in the database (default: ``name``).
        chunk_size: Chunk length used by :meth:`index`.
        overlap: Chunk overlap used by :meth:`index`.
        create: Create the store when the database has none of that name.

    Raises:
        StoreError: An invalid URL or name.
        StoreNotFoundError: No such store and ``create`` is false.
        StoreUnavailableError: The database cannot be reached.
    """

    kind = "postgres"
    store: PostgresStore

    def __init__(
        self,
        name: str,
        database: Database | str,
        *,
        description: str = "",
        embeddings: Embeddings | None = None,
        store: str | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        overlap: int = DEFAULT_OVERLAP,
        create: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.embeddings = embeddings
        self.chunk_size = chunk_size
        self.overlap = overlap
        self.store = PostgresStore(database, store or name, create=create)
        self.store.vectors_made_with = vectors_made_with(embeddings) if embeddings else None

    async def search(self, query: SearchQuery) -> list[Hit]:
        """Return at most ``query.top`` hits for ``query`` that its identity may see.

        Raises:
            FilterNotSupportedError: ``query.filter`` is not a valid OData filter.
            SourceError: ``KnowledgeSourceUnavailable`` while the database is unreachable.
            PermissionsNotEnforceableError: Permissions are enforced and the store has none.
        """
        filter_expr = self._parse_filter(query.filter)
        try:
            return await asyncio.to_thread(
                self.search_sync, query.text, query.top, filter_expr, query.access
            )
        except PermissionsNotEnforceableError:
            raise self._not_enforceable() from None
        except StoreUnavailableError as exc:
            logger.warning("postgres source %r: %s", self.name, exc)
            raise SourceError(
                ErrorCode.KNOWLEDGE_SOURCE_UNAVAILABLE,
                f"knowledge source '{self.name}' is unavailable: {exc.reason}",
            ) from None

    def search_sync(
        self,
        text: str,
        top: int = 50,
        filter_expr: Expr | None = None,
        access: Access = ANONYMOUS,
    ) -> list[Hit]:
        """Blocking search (what :meth:`search` runs in a worker thread)."""
        vector = self.embeddings.embed_query(text) if self.embeddings and text.strip() else None
        stored = self.store.search(
            text, top=top, filter_expr=filter_expr, query_vector=vector, access=access
        )
        return [self._to_hit(hit) for hit in stored]

    def add_documents(
        self,
        documents: Iterable[RecordInput],
        *,
        fields: RecordFields | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        permissions: Permissions | None = None,
    ) -> IndexReport:
        """Add or update documents given as dicts or LangChain ``Document``s (incremental)."""
        return self._add_records(documents, fields, metadata, progress, permissions)
