"""The knowledge-source kinds a knowledge service hosts (``serve --data``), each said once.

:data:`SOURCE_KINDS` is what the catalog, the management operations, the REST status route
and the ``source`` command consult instead of switching on a kind's name: whether the kind
keeps its documents in a store of its own (a ``file`` source holds its uploads) or reads
another definition's (a ``searchIndex`` source reads an index), how the live source a
knowledge base searches is built, and where its documents are counted. What a definition of
the kind may hold (its parameters) is validated in :mod:`agentic_retrieval.kb.definitions`.

Adding a kind: its parameters in ``kb/definitions.py``, a :class:`HostedKind` here, and a
:class:`~agentic_retrieval.sources.base.KnowledgeSource` for it under ``sources/`` when no
existing one searches what it holds (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Protocol

from agentic_retrieval.kb.definitions import SUPPORTED_SOURCE_KINDS, KnowledgeSourceDefinition
from agentic_retrieval.kb.graph_extraction import graph_extraction
from agentic_retrieval.kb.service import StoredDefinition
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.kb.topic_profiles import topic_graph_default
from agentic_retrieval.odata import FieldKind
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.sources.graph import EntityGraphSource
from agentic_retrieval.sources.local.document_source import DocumentKnowledgeSource
from agentic_retrieval.sources.local.documents import DocumentStore

if TYPE_CHECKING:  # the catalog consults this module; it is only ever handed in
    from agentic_retrieval.kb.catalog import ServiceCatalog

FILE_FILTER_SCHEMA: dict[str, frozenset[FieldKind]] = {
    "file_name": frozenset({"string"}),
    "title": frozenset({"string"}),
    "page": frozenset({"number"}),
}
"""What a filter on a file knowledge source's chunks may name."""


class Counted(Protocol):
    """What holds a source's documents, as far as a count goes."""

    def count(self) -> int:
        """How many documents it holds."""
        ...


class HostedKind(ABC):
    """What the service does differently for one kind of knowledge source."""

    name: ClassVar[str]
    owns_store: ClassVar[bool]
    """Its documents live in a store of its own, created with the definition, that uploads
    fill (and that has a file capacity); else it reads another definition's."""

    @abstractmethod
    def build(
        self,
        catalog: ServiceCatalog,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
    ) -> KnowledgeSource | None:
        """The live source a knowledge base searches (``None``: what it reads is gone)."""

    @abstractmethod
    def documents(
        self, catalog: ServiceCatalog, definition: KnowledgeSourceDefinition
    ) -> Counted | None:
        """What holds its documents (``None``: nothing yet, or what it read is gone)."""

    @abstractmethod
    def store_name(
        self,
        service: ServiceState,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
    ) -> str | None:
        """The store whose ingestion history is the source's (``None``: none)."""


class SearchIndexKind(HostedKind):
    """``searchIndex``: a source over an index of this service (its documents are the index's)."""

    name = "searchIndex"
    owns_store = False

    def build(
        self,
        catalog: ServiceCatalog,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
    ) -> KnowledgeSource | None:
        """A :class:`DocumentKnowledgeSource` over the index, with the definition's settings."""
        params = definition.search_index_parameters
        documents = catalog.index_documents(definition.index_name or "")
        if params is None or documents is None:
            return None
        index = documents.index
        chosen = [f.name for f in params.source_data_fields or []]
        return DocumentKnowledgeSource(
            definition.name,
            documents.documents,
            kind="searchIndex",
            description=definition.description or index.description or "",
            base_filter=params.base_filter,
            view=documents.view(chosen or None),
            filterable_fields=list(index.filter_schema()),
            index_name=index.name,
            filter_schema=index.filter_schema(),
            permission_fields=index.permission_field_names,
            topic_graph=topic_graph_default(index.vector_search),
        )

    def documents(
        self, catalog: ServiceCatalog, definition: KnowledgeSourceDefinition
    ) -> Counted | None:
        """The index's documents."""
        return catalog.index_documents(definition.index_name or "")

    def store_name(
        self,
        service: ServiceState,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
    ) -> str | None:
        """The index's store."""
        index = service.get("index", definition.index_name or "")
        return index.store if index is not None else None


class FileKind(HostedKind):
    """``file``: a source over the files uploaded to it (kept in its own store)."""

    name = "file"
    owns_store = True

    def build(
        self,
        catalog: ServiceCatalog,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
    ) -> KnowledgeSource | None:
        """A :class:`DocumentKnowledgeSource` over the uploads' chunks.

        With ``graphExtractionParameters``, an :class:`EntityGraphSource` around it: its
        graph lives in the source's own store file, and a retrieve with ``graphParameters``
        searches it.
        """
        return file_source(catalog.file_store(stored), definition)

    def documents(
        self, catalog: ServiceCatalog, definition: KnowledgeSourceDefinition
    ) -> Counted | None:
        """The source's own store."""
        return catalog.file_documents(definition.name)

    def store_name(
        self,
        service: ServiceState,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
    ) -> str | None:
        """The source's own store."""
        return stored.store


def file_source(
    store: DocumentStore, definition: KnowledgeSourceDefinition
) -> DocumentKnowledgeSource | EntityGraphSource:
    """The live source of a ``file`` knowledge source over ``store`` (graph and all)."""
    inner = DocumentKnowledgeSource(
        definition.name,
        store,
        kind="file",
        description=definition.description or "",
        filterable_fields=list(FILE_FILTER_SCHEMA),
        filter_schema=FILE_FILTER_SCHEMA,
    )
    ingestion = (
        definition.file_parameters.ingestion_parameters if definition.file_parameters else None
    )
    graph = graph_extraction(ingestion)
    if graph is None:
        return inner
    return EntityGraphSource.open(
        inner,
        graph.ontology.value,
        graph_name=graph.graph_name,
        ontology_name=graph.ontology.name,
    )


SOURCE_KINDS: dict[str, HostedKind] = {kind.name: kind for kind in (SearchIndexKind(), FileKind())}
"""Every kind the service hosts, by name (the kinds :data:`SUPPORTED_SOURCE_KINDS` lists)."""

if set(SOURCE_KINDS) != set(SUPPORTED_SOURCE_KINDS):  # a kind half-added fails on import
    raise RuntimeError(
        f"kb/source_kinds.py hosts {sorted(SOURCE_KINDS)} but kb/definitions.py validates "
        f"{sorted(SUPPORTED_SOURCE_KINDS)}"
    )
