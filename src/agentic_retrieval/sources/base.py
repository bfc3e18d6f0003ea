"""The knowledge-source protocol every backend implements, and the hit it returns.

A knowledge source answers one query at a time: ``await source.search(SearchQuery(...))``
returns a ranked list of :class:`Hit` (:class:`KnowledgeSource`, the one required protocol).
A source may also offer optional capabilities, each declared here as its own protocol that
the graph checks with ``isinstance``: :class:`FilterableKnowledgeSource` names the metadata
fields its OData filters accept, so the planner can write filters on them;
:class:`TypedFilterableKnowledgeSource` also knows each field's kinds of value, so a caller's
filter naming an unknown field or comparing one with the wrong kind of value is rejected
before the search (HTTP 400, exit code 2) instead of silently matching nothing. A source
without that knowledge (a LangChain store, Azure AI Search, which validates filters itself)
gets the filter as written: its own error, if any, becomes an error activity record.
:class:`FilterCheckingKnowledgeSource` refuses filters naming fields it never filters on (its
permission fields). :class:`PermissionTrimmingKnowledgeSource` returns only what
``SearchQuery.identity`` may see. :class:`GraphKnowledgeSource` has an entity graph.
While a run enforces permissions, a source without that capability is never searched (its
activity record carries a ``PermissionsNotEnforced`` error) rather than answering unfiltered.

The graph runs one search per (subquery, source) pair concurrently, so implementations must
be safe to call from several tasks at once. A source signals failure by raising; the graph
turns the exception into an error activity record and returns the other sources' results (a
partial response), so a source should never swallow its own errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from agentic_retrieval.entitygraph.graph import EntityGraph
from agentic_retrieval.odata.ast import Expr
from agentic_retrieval.odata.fields import FieldSchema
from agentic_retrieval.permissions import Access, Identity
from agentic_retrieval.sources.topic_graph import TopicGraphSetting


class SearchQuery(BaseModel):
    """One query sent to one knowledge source."""

    model_config = ConfigDict(frozen=True)

    text: str
    """The search text (a planned subquery, an intent, or the user's last message)."""
    filter: str | None = None
    """An OData filter, already composed: the source's own filter, the caller's ``filterAddOn``
    and the planner's filter, ANDed. ``None`` means no restriction."""
    top: int = 50
    """How many hits to return at most."""
    goal: str | None = None
    """What the planner hopes this query finds; sources may ignore it."""
    identity: Identity | None = None
    """Who is asking, from the run's Context (never from the planner or the request body).
    A :class:`PermissionTrimmingKnowledgeSource` returns only what this identity may see."""
    enforce_permissions: bool = False
    """Fail closed: documents without permission metadata are not returned, and a source
    that cannot tell raises :class:`PermissionsNotEnforceableError`."""
    topic_graph: TopicGraphSetting | None = None
    """The caller's topic-graph setting for this source (``knowledgeSourceParams[].topicGraph``):
    a source that samples by topic (:class:`TopicSamplingKnowledgeSource`) applies it over its
    own default; others ignore it."""

    @property
    def access(self) -> Access:
        """The identity and enforcement as one value, for stores that trim by permission."""
        return Access(identity=self.identity, enforce=self.enforce_permissions)


class Hit(BaseModel):
    """One retrieved document or chunk, as the source ranked it."""

    model_config = ConfigDict(frozen=True)

    doc_key: str
    """The document (chunk) key, unique within its source."""
    content: str
    """The text given to the reranker, the grounding string and the answer model."""
    title: str | None = None
    source: str = ""
    """Name of the knowledge source that returned it (set by the graph)."""
    score: float = 0.0
    """The source's own relevance score (BM25, RRF, cosine...). Only its order within one
    result list is meaningful."""
    reranker_score: float | None = None
    """A semantic score on the 0-4 scale when the source computes one itself (Azure's
    ``@search.rerankerScore``); rerankers may pass it through."""
    vector_similarity: float | None = None
    """The cosine of the query's embedding and this passage's, when the source compared them
    (the embedded store's hybrid search): meaning the default reranker weighs without
    embedding the passage again. ``None`` when the source did not."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Filterable fields and provenance (path, page, url...), returned as ``sourceData``."""


@runtime_checkable
class KnowledgeSource(Protocol):
    """What the graph needs from a knowledge source.

    Attributes:
        name: Unique name within a knowledge base (``knowledgeSourceName`` on the wire).
        description: What the source holds; the planner reads it to select sources.
        kind: The activity/reference type on the wire (``searchIndex``, ``local``...).
    """

    name: str
    description: str
    kind: str

    async def search(self, query: SearchQuery) -> list[Hit]:
        """Return hits for ``query``, best first, at most ``query.top`` of them."""
        ...


@runtime_checkable
class FilterableKnowledgeSource(KnowledgeSource, Protocol):
    """Optional capability: a source that names the fields its OData filters accept.

    The planner lists these fields beside the source's description, so the model can write a
    filter on them (``year ge 2024``); without them it sees the description only. Implement
    it as a plain attribute or a property.

    Attributes:
        filterable_fields: Metadata field names usable in this source's filters.
    """

    @property
    def filterable_fields(self) -> Sequence[str]:
        """Metadata field names usable in this source's filters."""
        ...


@runtime_checkable
class TypedFilterableKnowledgeSource(KnowledgeSource, Protocol):
    """Optional capability: a source that knows the kinds of value each filterable field holds.

    Callers check filters against :meth:`filter_schema` with
    :func:`agentic_retrieval.odata.check_fields` before searching: a filter for several
    sources against the union of their schemas (a field may exist in one source only).
    """

    def filter_schema(self) -> FieldSchema:
        """Each filterable field with the kinds of value it holds."""
        ...


@runtime_checkable
class FilterCheckingKnowledgeSource(KnowledgeSource, Protocol):
    """Optional capability: a source that refuses some filters meant for it outright.

    A caller's filter for this source (a ``filterAddOn`` naming it) is passed to
    :meth:`check_filter` before the search, whatever other sources the knowledge base holds:
    a field the source keeps but never filters on (a permission field, whose values come
    from the caller's identity) is an error there rather than a filter that matches nothing.
    """

    def check_filter(self, expr: Expr) -> None:
        """Raise :class:`~agentic_retrieval.odata.FilterFieldError` naming a refused field."""
        ...


NEWEST_GA_API_VERSION = "2026-10-01"
"""The api-version a citation URL names when the caller gave none (Python calls)."""


@runtime_checkable
class CitableKnowledgeSource(KnowledgeSource, Protocol):
    """Optional capability: a source that can point at the document behind a hit.

    The URL becomes the reference's ``citationUrl``: a file's ``file://`` URI or its web URL
    for embedded and LangChain sources, an index document URL (as Azure gives) for index
    sources.
    """

    def citation_url(self, hit: Hit, *, endpoint: str | None, api_version: str) -> str | None:
        """The URL of ``hit``'s document, or ``None`` when there is none to give.

        Args:
            hit: A hit this source returned.
            endpoint: The base URL of the service answering the request (``None`` outside
                the REST server).
            api_version: The request's api-version (index document URLs carry it).
        """
        ...


def url_from_metadata(metadata: Mapping[str, Any]) -> str | None:
    """A hit's own address from its provenance: a web URL, else an absolute file path's URI.

    Looks at ``url``, ``source_url``, ``source_path`` and ``source`` (LangChain loaders'
    key), in that order; a PDF page (``page``) is appended as ``#page=N``.
    """
    for key in ("url", "source_url", "source_path", "source"):
        value = metadata.get(key)
        if not isinstance(value, str) or not value.strip():
            continue
        if value.startswith(("http://", "https://", "file://")):
            return value
        path = Path(value)
        if path.is_absolute():
            page = metadata.get("page")
            anchor = f"#page={page}" if isinstance(page, int) and not isinstance(page, bool) else ""
            return path.as_uri() + anchor
    return None


def index_document_url(
    endpoint: str, index: str, key: str, api_version: str, select: Sequence[str] = ()
) -> str:
    """An index document's URL as Azure's ``citationUrl`` gives it.

    ``{endpoint}/indexes/{index}/docs/{key}?$select=a%2Cb&api-version={version}``.
    """
    query = f"$select={quote(','.join(select), safe='')}&" if select else ""
    return (
        f"{endpoint.rstrip('/')}/indexes/{quote(index, safe='')}/docs/{quote(key, safe='')}"
        f"?{query}api-version={quote(api_version, safe='')}"
    )


@runtime_checkable
class PermissionTrimmingKnowledgeSource(KnowledgeSource, Protocol):
    """Optional capability: a source that applies document-level permissions itself.

    Its :meth:`search` returns only documents ``query.identity`` may see (and, with
    ``query.enforce_permissions``, none without permission metadata), applying the check
    where the documents are selected (before ranking and ``top``), not by dropping hits
    afterwards. ``trims_by_permission`` may be ``False`` when this instance is not set up to
    (a LangChain store without a permission mapping): the graph then treats it as a source
    without the capability.

    Attributes:
        trims_by_permission: Whether searches of this source are trimmed by permission.
    """

    @property
    def trims_by_permission(self) -> bool:
        """Whether searches of this source are trimmed by permission."""
        ...


@runtime_checkable
class GraphKnowledgeSource(KnowledgeSource, Protocol):
    """Optional capability: a source whose documents feed an entity graph.

    With ``graphParameters`` in a retrieve's params for it, the graph also runs a graph search
    over :attr:`entity_graph` (the ``graph_search`` node) beside the source's search, and
    hydrates the rows' evidence with :meth:`hydrate`.
    """

    @property
    def entity_graph(self) -> EntityGraph:
        """The graph extracted from this source's documents."""
        ...

    async def hydrate(self, chunk_ids: Sequence[str], query: SearchQuery) -> list[Hit]:
        """The chunks named ``chunk_ids`` that ``query.identity`` may see, in that order.

        Trimmed by permission exactly as :meth:`search` is: a row whose evidence the caller
        may not see is not returned either.
        """
        ...


@runtime_checkable
class TopicSamplingKnowledgeSource(KnowledgeSource, Protocol):
    """Optional capability: a source that samples its results across topics (a topic graph).

    Its :meth:`search` applies ``query.topic_graph`` over :attr:`topic_graph_default` (an
    index's topic graph profile); the search's activity record shows the setting that
    applied (:meth:`topic_setting`).
    """

    @property
    def topic_graph_default(self) -> TopicGraphSetting | None:
        """The setting a query without one gets (``None``: plain ranking)."""
        ...

    def topic_setting(self, query: SearchQuery) -> TopicGraphSetting | None:
        """The setting that applies to ``query`` (its own over the default)."""
        ...
