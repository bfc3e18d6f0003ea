"""agentic-retrieval: agentic retrieval as a LangGraph graph you own."""

from agentic_retrieval.context import Context
from agentic_retrieval.errors import (
    AgenticRetrievalError,
    InvalidRequestError,
    KnowledgeSourceFailedError,
    SourceError,
    UnknownKnowledgeSourceError,
)
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.permissions import Identity, Permissions
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.retriever import KnowledgeBaseRetriever
from agentic_retrieval.sources.base import Hit, KnowledgeSource, SearchQuery
from agentic_retrieval.sources.memory import InMemoryKnowledgeSource
from agentic_retrieval.tool import KnowledgeBaseTool
from agentic_retrieval.wire.models import RetrieveRequest, RetrieveResponse
from agentic_retrieval.wiring.builder import build_graph

__all__ = [
    "AgenticRetrievalError",
    "Context",
    "Hit",
    "Identity",
    "InMemoryKnowledgeSource",
    "InvalidRequestError",
    "KnowledgeBase",
    "KnowledgeBaseRetriever",
    "KnowledgeBaseTool",
    "KnowledgeSource",
    "KnowledgeSourceFailedError",
    "Permissions",
    "Reranker",
    "RetrieveRequest",
    "RetrieveResponse",
    "SearchQuery",
    "SourceError",
    "UnknownKnowledgeSourceError",
    "build_graph",
]
