"""No exception class name or internal text reaches a response; the log gets the details once.

Covers every path a failure can take to a client: an activity record (a failing source, a
failing reranker), the REST body, the SSE error event and the MCP tool result.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from fastapi.testclient import TestClient
from tests.fakes import FailingSource
from tests.server_harness import intents_body, transit_kb

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.server import ServerSettings, create_app

SECRET = "password=hunter2 at db-internal:5432"


class LeakySource(FailingSource):
    """A source with a bug whose exception text holds internal details."""

    def __init__(self) -> None:
        super().__init__("leaky", RuntimeError(SECRET))


class LeakyReranker:
    name = "leaky-reranker"

    async def ascore(self, query, hits):
        await asyncio.sleep(0)
        raise KeyError(SECRET)


def texts_of(response) -> str:
    return json.dumps(response.to_wire())


def test_a_failing_source_is_named_in_the_record_without_its_exception(caplog):
    kb = transit_kb(LeakySource())
    caplog.set_level(logging.ERROR)
    first = kb.retrieve(intents_body("bike fares"))
    second = kb.retrieve(intents_body("bike fares"))
    assert first.status_code == second.status_code == 206
    [error] = [a.error for a in first.activity if a.error]
    assert (error.code, error.message) == (
        "KnowledgeSourceError",
        "knowledge source 'leaky' failed; the server log has the details",
    )
    for response in (first, second):
        assert SECRET not in texts_of(response) and "RuntimeError" not in texts_of(response)
    failures = [r for r in caplog.records if "leaky" in r.getMessage()]
    # the traceback once, then one line per failure
    assert [r.exc_info is not None for r in failures] == [True, False]
    assert SECRET in failures[1].getMessage()


def test_a_failing_reranker_is_named_in_the_record_without_its_exception():
    kb = KnowledgeBase(transit_kb().sources.values(), name="t", reranker=LeakyReranker())
    response = kb.retrieve(intents_body("bike fares"))
    [error] = [a.error for a in response.activity if a.error]
    assert error.message == (
        "reranker leaky-reranker failed; candidates were ranked by lexical coverage"
    )
    assert SECRET not in texts_of(response) and "KeyError" not in texts_of(response)
    assert response.references  # still ranked


@pytest.fixture
def broken_app(monkeypatch):
    kb = transit_kb()

    async def broken(*args, **kwargs):
        raise RuntimeError(SECRET)
        yield  # pragma: no cover  (an async generator for astream)

    async def broken_call(*args, **kwargs):
        raise RuntimeError(SECRET)

    monkeypatch.setattr(kb, "aretrieve", broken_call)
    monkeypatch.setattr(kb, "astream", broken)
    return create_app(kb, settings=ServerSettings(read_env_keys=False))


URL = "/knowledgebases/transit/retrieve?api-version=2026-04-01"


def test_rest_and_sse_bugs_carry_a_request_id_only(broken_app):
    with TestClient(broken_app, raise_server_exceptions=False) as client:
        plain = client.post(URL, json=intents_body("x"))
        stream = client.post(URL, json=intents_body("x"), headers={"Accept": "text/event-stream"})
    assert plain.status_code == 500
    for body in (plain.text, stream.text):
        assert SECRET not in body and "RuntimeError" not in body
        assert "quote request id" in body


def test_mcp_tool_bugs_carry_a_request_id_only(broken_app):
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "knowledge_base_retrieve",
            "arguments": {"query": "x", "effort": "minimal"},
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
        "Host": "127.0.0.1:8080",
    }
    with TestClient(broken_app, base_url="http://127.0.0.1:8080") as client:
        reply = client.post("/knowledgebases/transit/mcp", json=call, headers=headers)
    assert reply.status_code == 200, reply.text
    # the answer is an SSE stream (room for progress notifications): its one JSON-RPC message
    (message,) = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    result = json.loads(message)["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "quote request id" in text
    assert SECRET not in reply.text and "RuntimeError" not in reply.text
