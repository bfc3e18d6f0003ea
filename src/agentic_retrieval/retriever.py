"""A LangChain ``BaseRetriever`` over a :class:`~agentic_retrieval.KnowledgeBase`.

Each ``Document`` is one reference of the retrieve response: ``page_content`` is the chunk
text and ``metadata`` carries ``ref_id``, ``doc_key``, ``knowledge_source``,
``reranker_score``, ``title`` and the source's own metadata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict

from agentic_retrieval.context import Context
from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.graph.sync import run_sync
from agentic_retrieval.graph.vocabulary import RequestedEffort
from agentic_retrieval.permissions import Identity
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.wire.models import RetrieveRequest, RetrieveResponse


@runtime_checkable
class Retrieves(Protocol):
    """What the retriever needs from a knowledge base (:class:`~agentic_retrieval.KnowledgeBase`).

    A protocol rather than the class itself, so ``knowledge_base`` can import this module
    and :meth:`KnowledgeBase.as_retriever` return a typed retriever without an import cycle.
    """

    defaults: Context

    @property
    def sources(self) -> Mapping[str, KnowledgeSource]:
        """The knowledge sources by name."""
        ...

    async def aretrieve(
        self,
        request: RetrieveRequest | Mapping[str, Any],
        *,
        identity: Identity | Mapping[str, Any] | None = None,
        config: RunnableConfig | None = None,
        defaults: Context | None = None,
    ) -> RetrieveResponse:
        """Run a retrieve request."""
        ...


class KnowledgeBaseRetriever(BaseRetriever):
    """Retrieve ranked chunks from a knowledge base as LangChain documents.

    Attributes:
        knowledge_base: The knowledge base to query.
        reasoning_effort: ``minimal`` searches the query as given (no LLM); ``low`` and
            ``medium`` plan subqueries with the knowledge base's chat model.
        k: Most documents returned (can also be passed per call: ``invoke(q, k=3)``).
        filter: An OData filter applied to every source (as ``filterAddOn``).
        knowledge_sources: Restrict to these sources (default: all).
        identity: Who is asking: only documents this identity may see come back (see
            :meth:`KnowledgeBase.aretrieve`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    knowledge_base: Retrieves
    reasoning_effort: RequestedEffort = "minimal"
    k: int = 4
    filter: str | None = None
    knowledge_sources: list[str] | None = None
    identity: Identity | None = None

    def _request(self, query: str) -> dict[str, Any]:
        names = self.knowledge_sources or list(self.knowledge_base.sources)
        request: dict[str, Any] = {
            "retrievalReasoningEffort": {"kind": self.reasoning_effort},
            "knowledgeSourceParams": [
                {
                    "knowledgeSourceName": name,
                    "includeReferences": True,
                    "includeReferenceSourceData": True,
                    **({"filterAddOn": self.filter} if self.filter else {}),
                }
                for name in names
            ],
        }
        if self.reasoning_effort == "minimal":
            request["intents"] = [{"type": "semantic", "search": query}]
        else:
            request["messages"] = [{"role": "user", "content": [{"type": "text", "text": query}]}]
        return request

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return run_sync(self._aget(query, run_manager.get_child(), int(kwargs.get("k", self.k))))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return await self._aget(query, run_manager.get_child(), int(kwargs.get("k", self.k)))

    async def _aget(self, query: str, callbacks: Any, k: int) -> list[Document]:
        if not query.strip():
            raise InvalidRequestError("query is empty: give the text to retrieve documents for")
        kb = self.knowledge_base
        # keep at least k ranked chunks so k documents can come back
        defaults = dataclasses.replace(kb.defaults, top_n=min(200, max(kb.defaults.top_n, k)))
        response = await kb.aretrieve(
            self._request(query),
            identity=self.identity,
            config=RunnableConfig(callbacks=callbacks),
            defaults=defaults,
        )
        return _documents(response, k)


def _documents(response: RetrieveResponse, k: int) -> list[Document]:
    documents = []
    for reference in response.references[: max(0, k)]:
        data = dict(reference.source_data or {})
        content = str(data.pop("content", ""))
        data.pop("docKey", None)
        metadata = {
            **data,
            "ref_id": int(reference.id),
            "doc_key": reference.doc_key,
            "knowledge_source": _source_of(response, reference.activity_source),
            "reranker_score": reference.reranker_score,
            "activity_source": reference.activity_source,
        }
        documents.append(Document(page_content=content, metadata=metadata, id=reference.doc_key))
    return documents


def _source_of(response: RetrieveResponse, activity_id: int) -> str | None:
    for record in response.activity or []:
        if record.id == activity_id:
            return (record.model_extra or {}).get("knowledgeSourceName")
    return None
