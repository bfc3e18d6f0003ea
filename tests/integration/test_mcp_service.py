"""MCP for a service's knowledge bases (``serve --data``): created, changed and deleted over
REST while the server runs, each served at ``/knowledgebases/{name}/mcp`` as it is."""

from __future__ import annotations

import httpx
import pytest
from tests.server_harness import GUIDES, GUIDES_INDEX, running_server

from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytest.importorskip("mcp")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEY = "service-mcp-key"
SOURCE = {
    "name": "guides-ks",
    "kind": "searchIndex",
    "searchIndexParameters": {"searchIndexName": "guides"},
}


def knowledge_base(max_documents: int) -> dict:
    return {
        "name": "late",
        "description": "Made after the server started.",
        "knowledgeSources": [{"name": "guides-ks"}],
        "retrieveDefaults": {"maxOutputDocuments": max_documents},
    }


async def call(url: str, arguments: dict):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"api-key": KEY}, timeout=httpx2.Timeout(30, read=60))
    async with Client(streamable_http_client(url, http_client=http)) as client:
        tools = await client.list_tools()
        result = await client.call_tool("knowledge_base_retrieve", arguments)
    return tools.tools[0], result


async def test_a_knowledge_base_created_while_serving_is_an_mcp_server(tmp_path):
    service = ServiceDirectory(tmp_path / "data")
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    question = {"query": "harbor pass dollars", "effort": "minimal"}
    with running_server(create_app(settings=settings, service=service)) as base:
        http = httpx.Client(
            base_url=base, headers={"api-key": KEY}, params={"api-version": "2026-10-01"}
        )
        mcp_url = f"{base}/knowledgebases/late/mcp"
        before = http.post("/knowledgebases/late/mcp", json={})
        assert before.status_code == 404  # no such knowledge base yet
        assert http.put("/indexes('guides')", json=GUIDES_INDEX).status_code == 201
        batch = {"value": [{"@search.action": "upload", **doc} for doc in GUIDES]}
        assert http.post("/indexes('guides')/docs/search.index", json=batch).status_code == 200
        assert http.put("/knowledgesources('guides-ks')", json=SOURCE).status_code == 201
        assert http.put("/knowledgebases('late')", json=knowledge_base(1)).status_code == 201

        tool, result = await call(mcp_url, question)
        assert "late" in tool.description and "Made after the server started." in tool.description
        assert not result.is_error, result.content
        assert [r["docKey"] for r in result.structured_content["references"]] == ["pass"]

        # a change applies to the next call: the tool retrieves from the KB as it is now
        assert http.put("/knowledgebases('late')", json=knowledge_base(2)).status_code in (200, 204)
        _, wider = await call(mcp_url, question)
        assert [r["docKey"] for r in wider.structured_content["references"]] == ["pass", "day"]

        assert http.delete("/knowledgebases('late')").status_code == 204
        gone = http.post("/knowledgebases/late/mcp", json={})
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == "KnowledgeBaseNotFound"


async def test_deleting_knowledge_bases_stops_their_mcp_servers(tmp_path):
    service = ServiceDirectory(tmp_path / "data")
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    app = create_app(settings=settings, service=service)
    [mounts] = [r.endpoint for r in app.routes if getattr(r, "path", "").endswith("/mcp")][:1]
    with running_server(app) as base:
        http = httpx.Client(
            base_url=base, headers={"api-key": KEY}, params={"api-version": "2026-10-01"}
        )
        assert http.put("/indexes('guides')", json=GUIDES_INDEX).status_code == 201
        assert http.put("/knowledgesources('guides-ks')", json=SOURCE).status_code == 201
        base_body = {"knowledgeSources": [{"name": "guides-ks"}]}
        for n in range(6):  # create, serve over MCP, delete: a service's routine churn
            name = f"churn{n}"
            assert http.put(f"/knowledgebases('{name}')", json=base_body).status_code == 201
            tool, _ = await call(f"{base}/knowledgebases/{name}/mcp", {"query": "pass"})
            assert name in tool.description
            assert http.delete(f"/knowledgebases('{name}')").status_code == 204
        # each new server stops those of the deleted knowledge bases: one is left, not six
        assert list(mounts._managers) == ["churn5"]
        assert len([task for task in mounts._tasks if not task.done()]) == 1
