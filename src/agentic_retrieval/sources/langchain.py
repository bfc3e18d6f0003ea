"""Any LangChain retriever or vector store as a knowledge source.

:class:`LangChainKnowledgeSource` wraps a ``BaseRetriever`` or a ``VectorStore`` (Chroma,
pgvector, Elasticsearch, Qdrant, ``InMemoryVectorStore``...). Stores are queried with
``similarity_search_with_relevance_scores`` so hits carry the store's relevance score (falling
back to ``similarity_search_with_score``, then to rank order, for stores without one).

Concurrency: a store or retriever with a native async implementation is awaited directly;
otherwise the synchronous call runs in a worker thread (:func:`asyncio.to_thread`), so the
graph's parallel search branches stay parallel instead of blocking the event loop in turn.

Filters: the OData filter of a :class:`SearchQuery` is parsed with
:mod:`agentic_retrieval.odata` and translated into the store's own filter format:

- ``InMemoryVectorStore``: a Python predicate over ``Document.metadata`` (full OData subset);
- Chroma: a ``where`` dict (:func:`odata_to_chroma_where`);
- anything else: through a ``filter_translator`` you pass, or a
  :class:`~agentic_retrieval.sources.base.FilterNotSupportedError` from :meth:`search`, which the
  graph records as this source's error. A filter is a security boundary, so it is never
  silently dropped.

Permissions: with ``user_ids_field`` / ``group_ids_field`` naming metadata lists of allowed ids
(``"all"`` for public, Azure's convention), every search adds a permission predicate for the
query's identity, built as a filter expression tree (never as text) and ANDed with the
query's filter, so the store applies it before ranking and ``k``. It needs a filter
translation that can express it (``InMemoryVectorStore`` can; Chroma, whose metadata holds no
lists, cannot): otherwise searches fail with
:class:`~agentic_retrieval.sources.base.PermissionsNotEnforceableError` rather than return
unfiltered results. Without those fields, the source does not trim by permission, and a run
that enforces permissions records an error for it instead of searching it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore, VectorStoreRetriever

from agentic_retrieval.errors import FilterNotSupportedError, PermissionsNotEnforceableError
from agentic_retrieval.odata import (
    All,
    And,
    Any_,
    BoolField,
    Compare,
    Constant,
    Expr,
    Field,
    Literal,
    Not,
    Or,
    SearchIn,
    evaluate_filter,
    parse_filter,
)
from agentic_retrieval.permissions import ALL, Access
from agentic_retrieval.sources.base import Hit, SearchQuery, url_from_metadata

logger = logging.getLogger(__name__)

FilterTranslator = Callable[[Expr], Any]
"""Turns a parsed OData filter into the value passed as the store's ``filter`` keyword."""

_CHROMA_OPS = {"eq": "$eq", "ne": "$ne", "gt": "$gt", "ge": "$gte", "lt": "$lt", "le": "$lte"}
_NEGATED = {"eq": "ne", "ne": "eq", "gt": "le", "ge": "lt", "lt": "ge", "le": "gt"}
_ASYNC_SCORE_METHODS = (
    "asimilarity_search_with_relevance_scores",
    "_asimilarity_search_with_relevance_scores",
    "asimilarity_search_with_score",
)


def odata_to_memory_predicate(expr: Expr) -> Callable[[Document], bool]:
    """Translate a filter for ``InMemoryVectorStore``: a predicate over ``Document.metadata``."""
    return lambda document: evaluate_filter(expr, document.metadata)


def odata_to_chroma_where(expr: Expr) -> dict[str, Any]:
    """Translate a filter into a Chroma ``where`` dict.

    Supported: comparisons (``$eq $ne $gt $gte $lt $lte``; ordering only on numbers),
    ``search.in`` (``$in``), bare boolean fields, ``and``/``or`` (``$and``/``$or``) and ``not``
    (pushed down with De Morgan's laws). Chroma stores scalar metadata only and cannot test
    for null, so lambdas over collections, ``null`` literals, date-times, nested paths and
    constant ``true``/``false`` raise. Unlike OData, Chroma never matches a document that lacks
    the filtered key, so ``x ne 'a'`` excludes documents without ``x``.

    Raises:
        FilterNotSupportedError: For a construct Chroma cannot express.

    """
    return _chroma(expr, negate=False)


def _chroma(expr: Expr, *, negate: bool) -> dict[str, Any]:
    if isinstance(expr, And | Or):
        is_and = isinstance(expr, And) != negate
        parts: list[dict[str, Any]] = []
        for side in (expr.left, expr.right):
            part = _chroma(side, negate=negate)
            key = "$and" if is_and else "$or"
            parts.extend(part[key] if set(part) == {key} else [part])
        return {"$and" if is_and else "$or": parts}
    if isinstance(expr, Not):
        return _chroma(expr.operand, negate=not negate)
    if isinstance(expr, Compare):
        op = _NEGATED[expr.op] if negate else expr.op
        return {_chroma_field(expr.field): {_CHROMA_OPS[op]: _chroma_value(op, expr.literal.value)}}
    if isinstance(expr, BoolField):
        return {_chroma_field(expr.field): {"$ne" if negate else "$eq": True}}
    if isinstance(expr, SearchIn):
        return {_chroma_field(expr.field): {"$nin" if negate else "$in": list(expr.values)}}
    if isinstance(expr, Any_ | All):
        raise FilterNotSupportedError(
            "filters not supported by this source: Chroma metadata holds no collections "
            f"({expr.field.path}/{'any' if isinstance(expr, Any_) else 'all'})"
        )
    if isinstance(expr, Constant):
        raise FilterNotSupportedError(
            "filters not supported by this source: Chroma cannot express a constant true/false"
        )
    raise FilterNotSupportedError(f"filters not supported by this source: {expr!r}")


def _chroma_field(field: Field) -> str:
    if "/" in field.path:
        raise FilterNotSupportedError(
            f"filters not supported by this source: Chroma metadata is flat ({field.path})"
        )
    return field.path


def _chroma_value(op: str, value: Any) -> Any:
    if value is None:
        raise FilterNotSupportedError(
            "filters not supported by this source: Chroma cannot test for null"
        )
    if not isinstance(value, str | int | float | bool):
        raise FilterNotSupportedError(
            f"filters not supported by this source: Chroma metadata cannot hold {value!r}"
        )
    if op not in ("eq", "ne") and (isinstance(value, str | bool)):
        raise FilterNotSupportedError(
            f"filters not supported by this source: Chroma orders numbers only ({op} {value!r})"
        )
    return value


def default_filter_translator(target: Any) -> FilterTranslator | None:
    """Return the built-in translator for ``target``'s store type, or ``None``."""
    store = target.vectorstore if isinstance(target, VectorStoreRetriever) else target
    if isinstance(store, InMemoryVectorStore):
        return odata_to_memory_predicate
    if type(store).__name__ == "Chroma" and type(store).__module__.startswith("langchain_chroma"):
        return odata_to_chroma_where
    return None


def content_key(content: str) -> str:
    """Return a stable key for a document without an id: a hash of its text."""
    return "sha1:" + hashlib.sha1(content.encode("utf-8")).hexdigest()[:16]


class LangChainKnowledgeSource:
    """A LangChain ``BaseRetriever`` or ``VectorStore`` as a knowledge source.

    Args:
        name: Source name (``knowledgeSourceName`` on the wire).
        retriever_or_store: The retriever or vector store to query.
        description: What the store holds, for the planner's source selection.
        kind: The activity/reference type on the wire.
        filter_translator: Turns a parsed OData filter into the store's ``filter`` keyword
            argument; defaults to the built-in translator for ``InMemoryVectorStore`` and
            Chroma. For a plain ``BaseRetriever`` the result is passed as ``filter=`` to
            ``invoke``.
        top: Upper bound on hits per query (the query's own ``top`` may be lower).
        key_metadata_field: Metadata key holding the document key; when absent (or not set),
            ``Document.id`` is used, then a hash of the content.
        title_metadata_field: Metadata key holding the title.
        user_ids_field: Metadata key listing the user ids allowed to see a document.
        group_ids_field: Metadata key listing the group ids allowed to see a document.

    """

    def __init__(
        self,
        name: str,
        retriever_or_store: BaseRetriever | VectorStore,
        *,
        description: str = "",
        kind: str = "langchain",
        filter_translator: FilterTranslator | None = None,
        top: int = 50,
        key_metadata_field: str | None = None,
        title_metadata_field: str = "title",
        user_ids_field: str | None = None,
        group_ids_field: str | None = None,
    ) -> None:
        if not isinstance(retriever_or_store, BaseRetriever | VectorStore):
            raise TypeError(
                "expected a langchain BaseRetriever or VectorStore, got "
                f"{type(retriever_or_store).__name__}"
            )
        self.name = name
        self.description = description
        self.kind = kind
        self.top = top
        self.key_metadata_field = key_metadata_field
        self.title_metadata_field = title_metadata_field
        self._target = retriever_or_store
        self._translator = filter_translator or default_filter_translator(retriever_or_store)
        self.permission_fields = tuple(f for f in (user_ids_field, group_ids_field) if f)
        self._user_ids_field = user_ids_field
        self._group_ids_field = group_ids_field

    @property
    def trims_by_permission(self) -> bool:
        """Whether permission fields are configured and the store can filter on them."""
        return bool(self.permission_fields) and self._translator is not None

    def citation_url(self, hit: Hit, *, endpoint: str | None, api_version: str) -> str | None:
        """The hit's file (``file://`` URI, PDF page anchored) or web URL, if it has one."""
        return url_from_metadata(hit.metadata)

    async def search(self, query: SearchQuery) -> list[Hit]:
        """Search the store or retriever; see the module docstring for filters.

        Raises:
            FilterNotSupportedError: The query has a filter this store cannot apply.
            PermissionsNotEnforceableError: Permissions are enforced and this source has no
                permission fields, or its store cannot express the permission predicate.
            odata.ODataError: The filter does not parse.

        """
        top = min(query.top, self.top)
        search_kwargs = self._search_filter(query)
        if isinstance(self._target, VectorStore):
            pairs = await self._search_store(self._target, query.text, top, search_kwargs)
        else:
            pairs = await self._search_retriever(self._target, query.text, top, search_kwargs)
        return [self._to_hit(document, score) for document, score in pairs[:top]]

    def _search_filter(self, query: SearchQuery) -> dict[str, Any]:
        """The store's ``filter`` keyword: the query's filter AND the permission predicate."""
        text = query.filter
        expr = parse_filter(text) if text is not None and text.strip() else None
        if self.permission_fields:
            allowed = self.permission_predicate(query.access)
            expr = allowed if expr is None else And(allowed, expr)
        elif query.enforce_permissions:
            raise PermissionsNotEnforceableError(
                f"knowledge source '{self.name}' has no permission fields "
                "(user_ids_field / group_ids_field)"
            )
        if expr is None:
            return {}
        if self._translator is None:
            error = FilterNotSupportedError(
                f"filters not supported by this source: {type(self._target).__name__} "
                "has no filter translator (pass filter_translator=...)"
            )
            if self.permission_fields:
                raise PermissionsNotEnforceableError(error.message)
            raise error
        try:
            return {"filter": self._translator(expr)}
        except FilterNotSupportedError as exc:
            if self.permission_fields:  # the predicate is part of every filter sent
                raise PermissionsNotEnforceableError(
                    f"knowledge source '{self.name}' cannot apply permissions: {exc.message}"
                ) from exc
            raise

    def permission_predicate(self, access: Access) -> Expr:
        """What ``access`` may see, over the permission fields, as a filter expression tree.

        Public documents (``"all"`` in a list) and documents listing one of the identity's
        ids; unless enforced, also documents without either field (unmarked).
        """
        identity = access.identity
        own = {
            self._user_ids_field: [identity.user_id] if identity and identity.user_id else [],
            self._group_ids_field: list(identity.groups) if identity else [],
        }
        matches: list[Expr] = [
            Any_(Field(name), "p", SearchIn(Field("p"), (ALL, *own.get(name, []))))
            for name in self.permission_fields
        ]
        absent: list[Expr] = [
            Compare("eq", Field(name), Literal(None)) for name in self.permission_fields
        ]
        visible = functools.reduce(Or, matches)
        return visible if access.enforce else Or(visible, functools.reduce(And, absent))

    async def _search_store(
        self, store: VectorStore, text: str, k: int, kwargs: dict[str, Any]
    ) -> list[tuple[Document, float]]:
        native = any(
            getattr(type(store), m) is not getattr(VectorStore, m) for m in _ASYNC_SCORE_METHODS
        )
        try:
            if native:
                return await store.asimilarity_search_with_relevance_scores(text, k=k, **kwargs)
            return await asyncio.to_thread(
                store.similarity_search_with_relevance_scores, text, k, **kwargs
            )
        except NotImplementedError:
            logger.debug("%s has no relevance scores; falling back", type(store).__name__)
        try:
            return await asyncio.to_thread(store.similarity_search_with_score, text, k, **kwargs)
        except NotImplementedError:
            documents = await asyncio.to_thread(store.similarity_search, text, k, **kwargs)
            return _rank_scores(documents)

    async def _search_retriever(
        self, retriever: BaseRetriever, text: str, k: int, kwargs: dict[str, Any]
    ) -> list[tuple[Document, float]]:
        if isinstance(retriever, VectorStoreRetriever):
            kwargs = {"k": k, **kwargs}
        native = type(retriever)._aget_relevant_documents is not (
            BaseRetriever._aget_relevant_documents
        )
        if native:
            documents = await retriever.ainvoke(text, **kwargs)
        else:
            documents = await asyncio.to_thread(retriever.invoke, text, **kwargs)
        return _rank_scores(documents)

    def _to_hit(self, document: Document, score: float) -> Hit:
        metadata = dict(document.metadata)
        key = metadata.get(self.key_metadata_field) if self.key_metadata_field else None
        if key is None:
            key = document.id or content_key(document.page_content)
        title = metadata.get(self.title_metadata_field)
        return Hit(
            doc_key=str(key),
            content=document.page_content,
            title=None if title is None else str(title),
            source=self.name,
            score=float(score),
            metadata=metadata,
        )


def _rank_scores(documents: Sequence[Document]) -> list[tuple[Document, float]]:
    """Score documents without a score of their own: a ``score`` metadata value or the rank."""
    pairs = []
    for rank, document in enumerate(documents):
        own = document.metadata.get("relevance_score", document.metadata.get("score"))
        score = float(own) if isinstance(own, int | float) else float(len(documents) - rank)
        pairs.append((document, score))
    return pairs
