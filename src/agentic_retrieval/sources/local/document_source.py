"""A knowledge source over a :class:`DocumentStore`: an index's documents or a file source.

- ``kind="searchIndex"``: the documents of an index of the knowledge service. A hit is a
  document, keyed by the document key; its passage, title and metadata (``sourceData``) are
  built by a :class:`~agentic_retrieval.sources.local.passages.DocumentView` from the fields
  a caller may read (its best chunk's text, when that is readable text), never from a field
  that is not retrievable or a permission field, though the search finds documents by them.
- ``kind="file"``: the chunks of the files uploaded to a ``file`` knowledge source. A hit is
  one chunk (several passages of one long file may rank), keyed ``<fileName>#<n>`` (file
  names are unique within a source; the ``fileId`` is the management API's handle), with the
  file name, file id, title and page as metadata. Where its store holds vectors (see
  :meth:`DocumentStore.retrieval_mode`) the query is embedded too and the search is hybrid;
  each hit then carries its cosine for the default reranker.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agentic_retrieval.errors import (
    ErrorCode,
    FilterNotSupportedError,
    PermissionsNotEnforceableError,
    SourceError,
    StoreClosedError,
    StoreUnavailableError,
)
from agentic_retrieval.odata import (
    Expr,
    FieldKind,
    FieldSchema,
    FilterFieldError,
    ODataError,
    and_filters,
    filter_field_names,
    parse_filter,
)
from agentic_retrieval.permissions import Access, permission_field_filter_message
from agentic_retrieval.sources.base import Hit, SearchQuery, index_document_url
from agentic_retrieval.sources.local.documents import CHUNK_SEPARATOR, DocumentHit, DocumentStore
from agentic_retrieval.sources.local.passages import DocumentView
from agentic_retrieval.sources.local.query_threads import run_query
from agentic_retrieval.sources.local.store import StoredHit
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

ANY_KIND: frozenset[FieldKind] = frozenset(
    {"string", "number", "boolean", "collection", "object", "null"}
)
"""The kinds of a field whose values are not known (every comparison is accepted)."""


class DocumentKnowledgeSource:
    """Search a :class:`DocumentStore` (safe from many tasks and threads at once).

    Args:
        name: The knowledge source name.
        documents: The store.
        kind: ``searchIndex`` (results per document) or ``file`` (results per chunk).
        description: What the source holds (the planner reads it).
        base_filter: An OData filter ANDed onto every query (``baseFilter``).
        view: What a hit returns of its document: passage, title, ``sourceData``
            (``searchIndex``, which needs it).
        filterable_fields: Fields usable in filters (shown to the planner).
        index_name: The index a ``searchIndex`` source reads (its references' citationUrl
            points at the index document on the serving endpoint).
        filter_schema: Each field a filter may name with its kinds of value: a caller's
            filter naming another field, or comparing one with the wrong kind of value, is
            refused before the search (default: ``filterable_fields``, any kind).
        permission_fields: Fields that hold document permissions: a filter naming one is
            refused (permissions come from the caller's identity).
        topic_graph: How its searches sample across topics where a request says nothing
            (an index's topic graph profile; ``None``: plain ranking).
    """

    def __init__(
        self,
        name: str,
        documents: DocumentStore,
        *,
        kind: str,
        description: str = "",
        base_filter: str | None = None,
        view: DocumentView | None = None,
        filterable_fields: Sequence[str] = (),
        index_name: str | None = None,
        filter_schema: FieldSchema | None = None,
        permission_fields: Collection[str] = (),
        topic_graph: TopicGraphSetting | None = None,
    ) -> None:
        self.name = name
        self.topic_graph_default = topic_graph
        self.index_name = index_name
        self.kind = kind
        self.description = description
        self.documents = documents
        self.base_filter = base_filter
        if kind == "searchIndex" and view is None:
            raise ValueError("a searchIndex source needs the view of its index's documents")
        self.view = view
        self._filterable = list(filterable_fields)
        self._schema = dict(filter_schema or dict.fromkeys(self._filterable, ANY_KIND))
        self._permission_fields = frozenset(permission_fields)

    @property
    def filterable_fields(self) -> Sequence[str]:
        """Fields usable in this source's filters."""
        return self._filterable

    def filter_schema(self) -> FieldSchema:
        """Each field a filter may name, with the kinds of value it holds."""
        return self._schema

    def check_filter(self, expr: Expr) -> None:
        """Refuse a filter naming a permission field (it would match nothing).

        Raises:
            FilterFieldError: Naming the field.
        """
        refused = sorted(filter_field_names(expr) & self._permission_fields)
        if refused:
            raise FilterFieldError(permission_field_filter_message(refused[0]))

    def citation_url(self, hit: Hit, *, endpoint: str | None, api_version: str) -> str | None:
        """The index document's URL on ``endpoint`` (``searchIndex`` sources served over REST)."""
        if self.kind != "searchIndex" or self.index_name is None or endpoint is None:
            return None
        select = self.view.source_data_fields if self.view else ()
        return index_document_url(endpoint, self.index_name, hit.doc_key, api_version, select)

    def topic_setting(self, query: SearchQuery) -> TopicGraphSetting | None:
        """The topic-graph setting of ``query`` over this source's default."""
        if query.topic_graph is None:
            return self.topic_graph_default
        return query.topic_graph.over(self.topic_graph_default)

    trims_by_permission = True
    """Searches apply document permissions inside the store's SQL (before ranking and top)."""

    async def search(self, query: SearchQuery) -> list[Hit]:
        """Return at most ``query.top`` hits its identity may see, best first.

        Raises:
            FilterNotSupportedError: The composed filter is not valid OData.
            PermissionsNotEnforceableError: Permissions are enforced and the store holds
                none.
            SourceError: ``KnowledgeSourceUnavailable`` when the store was deleted or its
                file is damaged or missing.
        """
        text = and_filters(self.base_filter, query.filter)
        try:
            expr = parse_filter(text) if text else None
        except ODataError as exc:
            raise FilterNotSupportedError(f"{self.name}: {exc}") from exc
        try:
            return await run_query(
                self._search, query.text, query.top, expr, query.access, self.topic_setting(query)
            )
        except StoreClosedError:
            # deleted while this run was under way: an error record, not a failure
            raise SourceError(
                ErrorCode.KNOWLEDGE_SOURCE_UNAVAILABLE,
                f"knowledge source '{self.name}' was deleted while it was being searched",
            ) from None
        except StoreUnavailableError as exc:
            raise SourceError(
                ErrorCode.KNOWLEDGE_SOURCE_UNAVAILABLE,
                f"knowledge source '{self.name}' is unavailable: {exc.reason}",
            ) from None
        except PermissionsNotEnforceableError:
            raise PermissionsNotEnforceableError(self._no_permissions()) from None

    def _no_permissions(self) -> str:
        """Why enforced permissions stop this source, in the service's own terms."""
        if self.kind == "searchIndex":
            fix = f"give its index '{self.index_name}' permissionFilter fields (userIds, groupIds)"
        else:
            fix = "list userIds or groupIds in its ingestionPermissionOptions and upload again"
        return (
            f"knowledge source '{self.name}' holds no permission metadata, so it cannot be "
            f"searched while permissions are enforced: {fix}"
        )

    def _search(
        self,
        text: str,
        top: int,
        expr: Expr | None,
        access: Access,
        topic_graph: TopicGraphSetting | None = None,
    ) -> list[Hit]:
        per_unit = self.kind == "searchIndex"
        # hybrid where the store holds vectors and was given the model (a file source)
        vector = self.documents.query_vector(text)
        with self.documents.store.lease():  # the hits' documents are read before a delete
            found = self.documents.search(
                text,
                top=top,
                filter_expr=expr,
                vector=vector,
                per_unit=per_unit,
                access=access,
                topic_graph=topic_graph,
            )
            return [self._to_hit(hit) for hit in found]

    def _to_hit(self, hit: DocumentHit) -> Hit:
        chunk = hit.chunk
        if self.view is not None:
            document = self.documents.get(hit.key) or {}
            return Hit(
                doc_key=hit.key,
                content=self.view.passage(document, chunk.content),
                title=self.view.title(document),
                source=self.name,
                score=hit.score,
                metadata=self.view.source_data(document),
            )
        return Hit(
            doc_key=_file_chunk_key(chunk),
            content=chunk.content,
            title=chunk.title or None,
            source=self.name,
            score=hit.score,
            vector_similarity=chunk.similarity,
            metadata=dict(chunk.metadata),
        )


def _file_chunk_key(chunk: StoredHit) -> str:
    """``<fileName>#<n>``: the key a reader recognises, instead of the stored ``<fileId>#<n>``."""
    name = chunk.metadata.get("file_name")
    _, _, number = chunk.id.rpartition(CHUNK_SEPARATOR)
    return f"{name}{CHUNK_SEPARATOR}{number}" if isinstance(name, str) and name else chunk.id
