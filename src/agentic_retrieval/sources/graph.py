"""A local source with an entity graph: its documents' triples, searched beside its chunks.

:class:`EntityGraphSource` wraps a :class:`~agentic_retrieval.sources.local.source
.LocalKnowledgeSource`: searches go to the store as before, and :meth:`EntityGraphSource
.extract` reads the store's documents into the graph (an edge list in the store's own SQLite
file by default), incrementally::

    source = EntityGraphSource.open(local, ontology_text, graph_name="companies")
    await source.extract(chat_model)        # changed documents only; deleted ones removed
    kb = KnowledgeBase([source], chat_model=chat_model)
    kb.retrieve({..., "knowledgeSourceParams": [
        {"knowledgeSourceName": "docs", "graphParameters": {"includeQuery": True,
         "provenance": {"kind": "hydrate"}}}]})
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from langchain_core.language_models import BaseChatModel

from agentic_retrieval.entitygraph import (
    Chunk,
    EdgeStore,
    EntityGraph,
    ExtractionLimits,
    ExtractionReport,
    GraphExtractor,
    parse_ontology,
    sync_document,
)
from agentic_retrieval.errors import StoreError
from agentic_retrieval.odata import Expr, FieldSchema
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.local.document_source import DocumentKnowledgeSource
from agentic_retrieval.sources.local.source import LocalKnowledgeSource
from agentic_retrieval.sources.local.store import LocalStore

StoredSource = LocalKnowledgeSource | DocumentKnowledgeSource
"""A source over an embedded store: a local source, or a service's file source."""


class EntityGraphSource:
    """A :class:`LocalKnowledgeSource` (or a service's file source) and its entity graph.

    Args:
        inner: The source whose chunks are searched and whose documents are read.
        graph: The entity graph (ontology, edge list, graph name).
    """

    trims_by_permission = True

    def __init__(self, inner: StoredSource, graph: EntityGraph) -> None:
        self.inner = inner
        self.store = _store_of(inner)
        self.graph = graph
        self.name = inner.name
        self.description = inner.description
        self.kind = inner.kind

    @classmethod
    def open(
        cls,
        inner: StoredSource,
        ontology: str,
        *,
        graph_name: str,
        ontology_name: str = "ontology",
        path: str | Path | None = None,
    ) -> EntityGraphSource:
        """Attach a graph to ``inner``: parse the JSON-LD ``ontology``, open the edge list.

        Args:
            inner: The local source.
            ontology: The inline JSON-LD 1.1 ontology (a string).
            graph_name: The graph's name (``graphName``).
            ontology_name: The ontology's name (``ontology.name``).
            path: The edge list's SQLite file (default: the store's own file).

        Raises:
            OntologyError: The ontology is not valid JSON-LD of the supported subset.
        """
        parsed = parse_ontology(ontology, ontology_name)
        store = EdgeStore(path or _store_of(inner).path)
        return cls(inner, EntityGraph(parsed, store, graph_name))

    @property
    def entity_graph(self) -> EntityGraph:
        """The graph extracted from this source's documents."""
        return self.graph

    def filter_schema(self) -> FieldSchema:
        """The local source's filterable fields."""
        return self.inner.filter_schema()

    def check_filter(self, expr: Expr) -> None:
        """Refuse what the inner source refuses before a search (a permission field)."""
        if isinstance(self.inner, DocumentKnowledgeSource):
            self.inner.check_filter(expr)

    async def search(self, query: SearchQuery) -> list[Hit]:
        """The local source's search."""
        return await self.inner.search(query)

    async def hydrate(self, chunk_ids: Sequence[str], query: SearchQuery) -> list[Hit]:
        """The chunks ``query.identity`` may see among ``chunk_ids``, in that order."""
        stored = await asyncio.to_thread(self.store.chunks_by_id, list(chunk_ids), query.access)
        return [
            Hit(
                doc_key=h.id,
                content=h.content,
                title=h.title or None,
                source=self.name,
                metadata=h.metadata,
            )
            for h in stored
        ]

    async def extract(
        self, model: BaseChatModel, limits: ExtractionLimits | None = None
    ) -> list[ExtractionReport]:
        """Bring the graph up to date with the store: changed documents, then deleted ones.

        A document whose content hash is the one its assertions were read at is skipped; a
        changed or new one is read again and its assertions replaced (all or nothing); a
        document no longer in the store loses its assertions.

        Returns:
            One report per document read (``triplesWritten``, drops, failures, tokens).
        """
        extractor = GraphExtractor(self.graph.ontology, model, self.graph.graph_name, limits)
        store, name = self.graph.store, self.graph.graph_name
        documents = await asyncio.to_thread(self.store.document_chunks)
        done = store.extracted_versions(name)
        reports = []
        for parent, (content_hash, chunks) in documents.items():
            if done.get(parent) == content_hash:
                continue
            pieces = [Chunk(chunk_id, parent, text) for chunk_id, text in chunks]
            reports.append(await sync_document(store, extractor, parent, pieces, content_hash))
        for parent in set(done) - set(documents):
            store.delete_document(name, parent)
        return reports


def _store_of(inner: StoredSource) -> LocalStore:
    """The embedded store whose documents ``inner`` searches.

    Raises:
        StoreError: ``inner`` keeps its documents in PostgreSQL (no entity graph there yet).
    """
    store = inner.store if isinstance(inner, LocalKnowledgeSource) else inner.documents.store
    if not isinstance(store, LocalStore):
        raise StoreError(
            f"{store.label}: an entity graph needs the embedded store; a source kept in "
            "PostgreSQL (serve --store) has none yet"
        )
    return store
