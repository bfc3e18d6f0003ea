"""``kb.as_tool()`` passes LangChain's own standard tool test suites (unit and integration)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.tools import BaseTool
from tests.fakes import FAQ_DOCS, TOY_DOCS, FilterableMemorySource

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase

unit = pytest.importorskip("langchain_tests.unit_tests")
integration = pytest.importorskip("langchain_tests.integration_tests")


def knowledge_base_tool() -> BaseTool:
    """The tool with every optional argument offered (two sources, filterable fields)."""
    kb = KnowledgeBase(
        [
            FilterableMemorySource("transit", TOY_DOCS, description="Fares, bikes and hours."),
            InMemoryKnowledgeSource("faq", FAQ_DOCS, description="Refund questions."),
        ],
        name="transit",
    )
    return kb.as_tool()


EXAMPLE = {"query": "day pass costs euros", "filter": "year ge 2024", "sources": ["transit"]}


class TestKnowledgeBaseToolUnit(unit.ToolsUnitTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return knowledge_base_tool()

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return dict(EXAMPLE)


class TestKnowledgeBaseToolIntegration(integration.ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> BaseTool:
        return knowledge_base_tool()

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return dict(EXAMPLE)


def test_the_example_finds_what_it_asks_for():
    """The standard suites check shapes only: the example call must also find the fare."""
    message = knowledge_base_tool().invoke(
        {"type": "tool_call", "id": "1", "name": "search_transit", "args": EXAMPLE}
    )
    assert message.status == "success"
    assert [r.doc_key for r in message.artifact.references] == ["fares"]
