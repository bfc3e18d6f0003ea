"""Our BaseRetriever adapter passes LangChain's own standard retriever test suite."""

from __future__ import annotations

from typing import Any

import pytest

from agentic_retrieval import (
    Context,
    InMemoryKnowledgeSource,
    KnowledgeBase,
    KnowledgeBaseRetriever,
)

standard = pytest.importorskip("langchain_tests.integration_tests")

CORPUS = [
    {
        "key": f"doc-{i}",
        "title": f"Tram note {i}",
        "content": f"Tram line {i} runs every {5 + i} minutes between the harbour and the depot.",
    }
    for i in range(12)
]


class TestKnowledgeBaseRetrieverStandard(standard.RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[KnowledgeBaseRetriever]:
        return KnowledgeBaseRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        # LangChain's suite expects k documents for a query twelve notes match about equally;
        # without a threshold, as relevance thresholds are tested elsewhere
        kb = KnowledgeBase(
            [InMemoryKnowledgeSource("notes", CORPUS)], defaults=Context(reranker_threshold=None)
        )
        return {"knowledge_base": kb}

    @property
    def retriever_query_example(self) -> str:
        return "how often does the tram run to the depot"
