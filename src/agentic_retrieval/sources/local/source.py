"""The embedded default knowledge source: a :class:`LocalStore` behind the source protocol."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from agentic_retrieval.embeddings import vectors_made_with
from agentic_retrieval.errors import (
    ErrorCode,
    PermissionsNotEnforceableError,
    SourceError,
    StoreError,
    StoreUnavailableError,
)
from agentic_retrieval.odata import (
    Expr,
)
from agentic_retrieval.permissions import ANONYMOUS, Access, Permissions
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.local.chunking import DEFAULT_CHUNK_SIZE, DEFAULT_OVERLAP
from agentic_retrieval.sources.local.ingest import IndexReport, ProgressCallback
from agentic_retrieval.sources.local.query_threads import run_query
from agentic_retrieval.sources.local.record_ingest import (
    RecordInput,
)
from agentic_retrieval.sources.local.records import RecordFields
from agentic_retrieval.sources.local.store import LocalStore, TopicIndexState
from agentic_retrieval.sources.local.store_source import StoreBackedSource
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

logger = logging.getLogger(__name__)


class LocalKnowledgeSource(StoreBackedSource):
    """Search one SQLite index: BM25, or BM25 + vectors fused with RRF when given embeddings.

    Safe to search from many tasks, threads and event loops at once: every search runs its
    blocking work (query embedding, SQLite) in a worker thread with that thread's own
    connection.

    Args:
        name: The source name (``knowledgeSourceName``).
        path: The SQLite file.
        description: What the source holds (the planner reads it).
        embeddings: A LangChain ``Embeddings`` for hybrid search and for embedding chunks at
            ingest; ``None`` for a lexical-only source.
        chunk_size: Chunk length used by :meth:`index`.
        overlap: Chunk overlap used by :meth:`index`.
        create: Create the file when it is missing (to :meth:`index` into it). Without it,
            opening a source never creates anything.
        preload: With ``embeddings``, read the store's vectors and graph into memory on a
            background thread now, so that the first search does not wait for them (a
            million chunks: tens of seconds); ``False`` leaves it to the first search.
        topic_graph: How searches sample across the topics of the store's vectors where a
            query says nothing (``diverse``, ``balanced``; ``None``: plain ranking). The
            topic index is built from the stored vectors on the first search that needs
            it (or with :meth:`refresh_topics`); see :mod:`agentic_retrieval.sources.topic_graph`.

    Raises:
        StoreNotFoundError: ``path`` does not exist and ``create`` is false.
        StoreError: ``path`` is not a local source index.
    """

    kind = "local"
    store: LocalStore

    def __init__(
        self,
        name: str,
        path: str | Path,
        *,
        description: str = "",
        embeddings: Embeddings | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        overlap: int = DEFAULT_OVERLAP,
        create: bool = False,
        preload: bool = True,
        topic_graph: TopicGraphSetting | None = None,
    ) -> None:
        self.name = name
        self.topic_graph_default = topic_graph
        self.description = description
        self.embeddings = embeddings
        self.chunk_size = chunk_size
        self.overlap = overlap
        self.store = LocalStore(path, create=create)
        # the store records it beside the vectors it writes ("local@bf16")
        self.store.vectors_made_with = vectors_made_with(embeddings) if embeddings else None
        if embeddings is None:
            logger.info("local source %r has no embeddings: lexical (BM25) search only", name)
        self.preloading: threading.Thread | None = None
        """The thread that reads the vectors into memory (``preload``; ``None`` without it).

        It is kept once finished: ``preloading.is_alive()`` says whether it still runs.
        """
        if embeddings is not None and preload:
            self.preloading = threading.Thread(
                target=self._preload, name=f"vectors-{name}", daemon=True
            )
            self.preloading.start()

    def _preload(self) -> None:
        try:
            self.store.load_vectors()
        except (StoreError, sqlite3.Error, OSError) as exc:  # the first search reports it
            logger.info("local source %r: vectors not preloaded: %s", self.name, exc)

    def _refreshed(self, report: IndexReport) -> IndexReport:
        """``report``, once the store's vector graph (if it needs one) is current and saved."""
        if self.embeddings is not None:
            self.store.refresh_vectors()
        return report

    @property
    def path(self) -> Path:
        """The SQLite file."""
        return self.store.path

    def topic_setting(self, query: SearchQuery) -> TopicGraphSetting | None:
        """The topic-graph setting of ``query`` over this source's default."""
        if query.topic_graph is None:
            return self.topic_graph_default
        return query.topic_graph.over(self.topic_graph_default)

    def refresh_topics(self) -> TopicIndexState:
        """Build (or bring up to date) the topic index over the stored vectors, now."""
        return self.store.refresh_topics()

    async def search(self, query: SearchQuery) -> list[Hit]:
        """Return at most ``query.top`` hits for ``query`` that its identity may see.

        Cancelling the call also stops the search in its worker thread.

        Raises:
            FilterNotSupportedError: When ``query.filter`` is not a valid OData filter.
            SourceError: ``KnowledgeSourceUnavailable`` while the index file is damaged or
                missing, ``KnowledgeSourceError`` when SQLite fails otherwise (both without
                SQLite's internals; the log has them).
            PermissionsNotEnforceableError: Permissions are enforced and the store holds
                none.
        """
        filter_expr = self._parse_filter(query.filter)
        cancel = threading.Event()
        try:
            return await run_query(
                self.search_sync,
                query.text,
                query.top,
                filter_expr,
                cancel,
                query.access,
                self.topic_setting(query),
            )
        except asyncio.CancelledError:
            cancel.set()  # the worker thread's SQLite statement stops too, not only the wait
            raise
        except PermissionsNotEnforceableError:
            raise self._not_enforceable() from None
        except StoreUnavailableError as exc:
            raise SourceError(
                ErrorCode.KNOWLEDGE_SOURCE_UNAVAILABLE,
                f"knowledge source '{self.name}' is unavailable: {exc.reason}; index it again "
                "(or restore its file) to bring it back",
            ) from None
        except sqlite3.Error as exc:
            logger.warning("local source %r: search failed: %s", self.name, exc)
            raise SourceError(
                ErrorCode.KNOWLEDGE_SOURCE_ERROR,
                f"knowledge source '{self.name}' could not be searched",
            ) from None

    def search_sync(
        self,
        text: str,
        top: int = 50,
        filter_expr: Expr | None = None,
        cancel: threading.Event | None = None,
        access: Access = ANONYMOUS,
        topic_graph: TopicGraphSetting | None = None,
    ) -> list[Hit]:
        """Blocking search (what :meth:`search` runs in a worker thread).

        Raises:
            StoreUnavailableError: The index file is damaged or missing.
        """
        vector = self.embeddings.embed_query(text) if self.embeddings and text.strip() else None
        stored = self.store.search(
            text,
            top=top,
            filter_expr=filter_expr,
            query_vector=vector,
            cancel=cancel,
            access=access,
            topic_graph=topic_graph,
        )
        return [self._to_hit(hit) for hit in stored]

    def add_documents(
        self,
        documents: Iterable[RecordInput],
        *,
        id_field: str | None = None,
        title_field: str | None = None,
        text_field: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        permissions: Permissions | None = None,
        user_ids_field: str | None = None,
        group_ids_field: str | None = None,
    ) -> IndexReport:
        """Add or update documents given as dicts or LangChain ``Document``s.

        Incremental: a document whose id, text, title and fields are unchanged is skipped;
        a changed one replaces its chunks. Every field other than the id, title, text and
        permission fields is stored as filterable metadata (see
        :mod:`~agentic_retrieval.sources.local.records`).

        Args:
            documents: Dicts or ``Document``s (e.g. from a ``langchain_community`` loader).
            id_field: The id field (default: ``_id``, else ``id``; ``Document.id`` first).
            title_field: The title field (default: ``title``).
            text_field: The text field of dicts (default: ``text``, else ``content``).
            metadata: Fields added to every chunk of these documents.
            progress: Called after each document.
            permissions: Who may see documents that name no permissions of their own
                (``None``: each keeps what it had; new ones are unmarked).
            user_ids_field: The field (of a dict, or of a ``Document``'s metadata) listing
                the user ids allowed to see that document.
            group_ids_field: Likewise for group ids.

        Returns:
            The report: ids indexed, unchanged, and failed (with the reason).
        """
        fields = RecordFields.of(
            id_field,
            title_field,
            text_field,
            user_ids_field=user_ids_field,
            group_ids_field=group_ids_field,
        )
        return self._add_records(documents, fields, metadata, progress, permissions)
