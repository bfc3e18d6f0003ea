"""Every error of the MCP tool names the tool's own argument, never the REST field it becomes.

A model calling ``knowledge_base_retrieve`` knows its arguments (``filter``,
``exclude_sources``, ``effort``...), not the retrieve API's ``filterAddOn``,
``knowledgeSourceParams`` or ``neverQuerySource``; an error in those terms cannot be acted on.
"""

from __future__ import annotations

import re

import pytest
from mcp import Client
from tests.fakes import write
from tests.server_harness import transit_kb

from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.server.mcp import build_mcp_server, in_tool_terms

REST_NAMES = re.compile(
    r"filterAddOn|knowledgeSourceParams|neverQuerySource|alwaysQuerySource|maxOutputDocuments"
    r"|retrievalReasoningEffort|outputMode|intents|knowledgeSourceName"
)


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)


@pytest.fixture
def typed_kb(tmp_path):
    write(tmp_path / "hr" / "leave.md", "# Leave\n\nStaff accrue two vacation days a month.\n")
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    directory.add_or_update_source("handbook")
    directory.index("handbook", [tmp_path / "hr"], metadata={"year": 2025})
    directory.close()
    kb = open_knowledge_base(tmp_path / "kb")
    yield kb
    for source in kb.sources.values():
        source.close()


async def call(kb, arguments: dict) -> str:
    async with Client(build_mcp_server(kb)) as client:
        result = await client.call_tool("knowledge_base_retrieve", arguments)
    assert result.is_error, arguments
    return result.content[0].text


CASES = [
    ({}, "give 'query' or 'messages'"),
    ({"query": "   "}, "give 'query' or 'messages'"),
    ({"query": "fares", "filter": "title eq 'open"}, "filter: Invalid OData filter at position 9"),
    ({"query": "fares", "effort": "minimal", "output_mode": "answerSynthesis"},
     "output_mode 'answerSynthesis' writes an answer with a chat model: it cannot run with "
     "effort 'minimal'"),
    ({"query": "fares", "effort": "low"}, "effort 'low' needs a chat model"),
    ({"query": "fares", "output_mode": "answerSynthesis"}, "output_mode 'answerSynthesis' needs"),
    ({"query": "fares", "exclude_sources": ["nope"]},
     "exclude_sources: unknown knowledge source 'nope' (this knowledge base has: fares, hours)"),
    ({"query": "fares", "exclude_sources": ["fares", "hours"]},
     "exclude_sources leaves out every knowledge source of this knowledge base (fares, hours)"),
    ({"query": "fares", "max_output_documents": 5000}, "max_output_documents"),
    ({"query": "fares", "max_output_documents": 0}, "max_output_documents"),
    ({"query": "fares", "effort": "high"}, "effort"),
]  # fmt: skip


@pytest.mark.parametrize(("arguments", "expected"), CASES, ids=[str(a) for a, _ in CASES])
async def test_an_error_names_the_tool_argument(arguments, expected):
    text = await call(transit_kb(), arguments)
    assert expected in text
    assert not REST_NAMES.search(text), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("yaer ge 2025", "filter: unknown field 'yaer' (did you mean 'year'?)"),
        ("year eq '2025'", "filter: field 'year' holds numbers: write year eq 2025"),
    ],
)
async def test_a_filter_on_fields_the_sources_know_names_the_filter(typed_kb, text, expected):
    message = await call(typed_kb, {"query": "vacation", "filter": text})
    assert expected in message
    assert not REST_NAMES.search(message), message


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "knowledgeSourceParams[fares].filterAddOn: Invalid OData filter at position 1: x",
            "filter: Invalid OData filter at position 1: x",
        ),
        (
            "knowledgeSourceParams: neverQuerySource excludes every knowledge source this "
            "request may query (a); leave at least one to query",
            "exclude_sources leaves out every knowledge source this request may query (a); "
            "leave at least one to query",
        ),
        (
            "'outputMode' answerSynthesis needs an LLM: 'retrievalReasoningEffort' minimal "
            "cannot be combined with it (use low or medium)",
            "output_mode answerSynthesis needs an LLM: effort minimal cannot be combined with "
            "it (use low or medium)",
        ),
        ("maxOutputDocuments: too many", "max_output_documents: too many"),
        (
            "knowledgeSourceParams: no knowledge source left to query: this run may query "
            "only a (Context.knowledge_sources)",
            "no knowledge source left to query: this run may query only a "
            "(Context.knowledge_sources)",
        ),
    ],
)
def test_the_shared_request_checks_are_reworded_in_tool_terms(message, expected):
    """What the pre-checks do not catch still reaches the model in its own terms."""
    assert in_tool_terms(message) == expected
