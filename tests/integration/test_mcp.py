"""The official ``mcp`` client against the MCP endpoint of our server, and over stdio."""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from tests.fakes import unreachable_index
from tests.server_harness import running_server, transit_kb

from agentic_retrieval.graph.effort import NO_MODEL_NOTE
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
KEY = "mcp-test-key"
QUERY_KEY = "mcp-query-key"


@pytest.fixture(scope="module")
def base_url():
    bases = [transit_kb(), transit_kb(unreachable_index(), name="partial")]
    settings = ServerSettings(api_keys=[KEY], query_keys=[QUERY_KEY], read_env_keys=False)
    with running_server(create_app(bases, settings=settings)) as url:
        yield url


def connect(url: str, key: str | None) -> Client:
    headers = {"api-key": key} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(url, http_client=http))


async def test_lists_the_tool_and_retrieves(base_url):
    async with connect(f"{base_url}/knowledgebases/transit/mcp", QUERY_KEY) as client:
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["knowledge_base_retrieve"]
        schema = tools.tools[0].input_schema
        assert {"query", "messages", "effort", "output_mode", "filter"} <= set(schema["properties"])
        result = await client.call_tool(
            "knowledge_base_retrieve", {"query": "student harbor pass", "effort": "minimal"}
        )
    assert not result.is_error
    data = result.structured_content
    assert [ref["docKey"] for ref in data["references"]] == ["fare-pass"]
    assert json.loads(data["response"])[0]["content"].startswith("The monthly Harbor Pass")
    assert data["partial"] is False


async def test_conversation_input_and_default_effort_without_a_model(base_url, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    messages = [
        {"role": "user", "content": "Tell me about fares"},
        {"role": "assistant", "content": "What would you like to know?"},
        {"role": "user", "content": "When does the last tram leave on Sunday?"},
    ]
    async with connect(f"{base_url}/knowledgebases/partial/mcp", KEY) as client:
        result = await client.call_tool("knowledge_base_retrieve", {"messages": messages})
    assert not result.is_error
    data = result.structured_content
    assert data["references"][0]["docKey"] == "hours-sunday"
    assert data["partial"] is True
    assert data["note"] == NO_MODEL_NOTE


async def test_tool_errors_are_reported_not_crashes(base_url):
    async with connect(f"{base_url}/knowledgebases/transit/mcp", KEY) as client:
        bad_filter = await client.call_tool(
            "knowledge_base_retrieve",
            {"query": "fares", "effort": "minimal", "filter": "title eq 'unterminated"},
        )
        nothing = await client.call_tool("knowledge_base_retrieve", {"effort": "minimal"})
    assert bad_filter.is_error and "filter: Invalid OData filter" in bad_filter.content[0].text
    assert "filterAddOn" not in bad_filter.content[0].text  # the tool's argument, not REST's
    assert nothing.is_error and "query" in nothing.content[0].text


async def test_mcp_endpoint_requires_a_key(base_url):
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            f"{base_url}/knowledgebases/transit/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        unknown = await http.post(
            f"{base_url}/knowledgebases/nope/mcp", headers={"api-key": KEY}, json={}
        )
    assert r.status_code == 401 and r.json()["error"]["code"] == "Unauthorized"
    assert unknown.status_code == 404


async def test_stdio_server_from_the_command_line(tmp_path):
    from agentic_retrieval.kb.loader import build_sample_kb

    kb_dir = tmp_path / "kb"
    build_sample_kb(kb_dir)
    env = {**os.environ, "AGENTIC_RETRIEVAL_CHAT_MODEL": ""}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentic_retrieval.cli", "mcp", "--kb", str(kb_dir)],
        env=env,
    )
    async with Client(params, read_timeout_seconds=60) as client:
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["knowledge_base_retrieve"]
        result = await client.call_tool(
            "knowledge_base_retrieve",
            {"query": "How long is CCTV footage kept before it is overwritten?"},
        )
    assert not result.is_error
    keys = [ref["docKey"] for ref in result.structured_content["references"][:3]]
    assert any(key.startswith("operations-cctv-and-data-requests-md-") for key in keys), keys


async def test_the_tool_reports_the_retrieve_events_as_progress(base_url):
    """The REST stream's events, each as a progress notification's JSON message."""
    seen: list[tuple[float, dict]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, json.loads(message or "{}")))

    async with connect(f"{base_url}/knowledgebases/partial/mcp", KEY) as client:
        result = await client.call_tool(
            "knowledge_base_retrieve",
            {"query": "last tram on Sunday", "effort": "minimal"},
            progress_callback=on_progress,
        )
        quiet = await client.call_tool(
            "knowledge_base_retrieve", {"query": "last tram on Sunday", "effort": "minimal"}
        )
    assert not result.is_error and not quiet.is_error
    assert [p for p, _ in seen] == list(range(1, len(seen) + 1))
    names = [event["event"] for _, event in seen]
    assert names[0] == "retrieval.started"
    assert names[-2:] == ["references.completed", "response.completed"]
    assert names.count("activity.started") == names.count("activity.completed") >= 2
    final = seen[-1][1]["data"]
    assert final["statusCode"] == 206  # the unreachable index: partial, as the result says
    assert result.structured_content["partial"] is True
    assert [r["docKey"] for r in final["response"]["references"]] == [
        r["docKey"] for r in result.structured_content["references"]
    ]
