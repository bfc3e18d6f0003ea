"""api-version ``2026-11-01-preview``: accepted on every route, and its activity records
carry ``startedAt``, ``completedAt`` and ``elapsedInMs`` (the value of ``elapsedMs``), while
every older version reads exactly what it read before the new version existed."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from fastapi.testclient import TestClient
from tests.server_harness import GUIDES_INDEX, intents_body, parse_sse, running_server, transit_kb

from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.testing import Script, ScriptedChatModel
from agentic_retrieval.wire.models import SUPPORTED_API_VERSIONS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
NEW = "2026-11-01-preview"
OLDER = [v for v in SUPPORTED_API_VERSIONS if v != NEW]
KEY = {"api-key": "version-key"}
PLAN = {"needs_retrieval": True, "queries": [{"query": "harbor pass price"}]}
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}
LOW = {
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Harbor pass price?"}]}],
    "retrievalReasoningEffort": {"kind": "low"},
    "includeActivity": True,
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    model = ScriptedChatModel(script=Script({"QueryPlan": [PLAN] * 100}), model_name="gpt-4o")
    app = create_app(
        [transit_kb(chat_model=model)],
        settings=ServerSettings(api_keys=[KEY["api-key"]], read_env_keys=False),
        service=ServiceDirectory(tmp_path_factory.mktemp("versions") / "data"),
    )
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        yield c


def retrieve(client: TestClient, version: str, body: dict | None = None, **headers: str):
    return client.post(
        f"/knowledgebases/transit/retrieve?api-version={version}",
        json=body or LOW,
        headers={**KEY, **headers},
    )


def instant(text: str) -> dt.datetime:
    assert text.endswith("Z"), text
    return dt.datetime.fromisoformat(text)


def test_the_new_version_stamps_every_activity_record(client):
    response = retrieve(client, NEW)
    assert response.status_code == 200, response.text
    activity = response.json()["activity"]
    types = {record["type"] for record in activity}
    assert {"modelQueryPlanning", "searchIndex", "semanticReranker", "agenticReasoning"} <= types
    for record in activity:
        assert isinstance(record["elapsedInMs"], int), record
        if "elapsedMs" in record:
            assert record["elapsedInMs"] == record["elapsedMs"], record
        started, completed = instant(record["startedAt"]), instant(record["completedAt"])
        assert started <= completed
        assert started.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize("version", OLDER)
def test_older_versions_read_what_they_read_before(client, version):
    old = retrieve(client, version).json()["activity"]
    new = retrieve(client, NEW).json()["activity"]
    assert all("elapsedInMs" not in record for record in old)
    # the same records, the same fields: the new version only adds elapsedInMs
    assert [sorted(r) for r in old] == [sorted(set(r) - {"elapsedInMs"}) for r in new]


def test_the_event_stream_stamps_records_under_the_new_version_only(client):
    stream = {"Accept": "text/event-stream"}
    for version, stamped in ((NEW, True), ("2026-10-01", False)):
        response = retrieve(client, version, **stream)
        assert response.status_code == 200, response.text
        events = parse_sse(response.text)
        completed = [data for name, data in events if name == "activity.completed"]
        (final,) = [data for name, data in events if name == "response.completed"]
        assert completed and final["response"]["activity"]
        for record in [*completed, *final["response"]["activity"]]:
            assert ("elapsedInMs" in record) is stamped, (version, record)
            assert "startedAt" in record and "completedAt" in record


def test_management_and_mcp_accept_the_new_version(client):
    put = client.put(f"/indexes('guides')?api-version={NEW}", json=GUIDES_INDEX, headers=KEY)
    assert put.status_code == 201, put.text
    listed = client.get(f"/indexes?api-version={NEW}", headers=KEY)
    assert [i["name"] for i in listed.json()["value"]] == ["guides"]
    assert client.get(f"/knowledgebases?api-version={NEW}", headers=KEY).status_code == 200
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "knowledge_base_retrieve", "arguments": {"query": "harbor pass"}},
    }
    reply = client.post(
        f"/knowledgebases/transit/mcp?api-version={NEW}",
        json=call,
        headers={**KEY, **MCP_HEADERS},
    )
    assert reply.status_code == 200, reply.text
    result = json.loads(reply.text.split("data: ", 1)[1])["result"]
    assert result["isError"] is False
    assert "Harbor Pass" in result["structuredContent"]["response"]


def test_an_unknown_version_still_names_the_new_one(client):
    response = retrieve(client, "2026-12-01-preview", intents_body("pass"))
    assert response.status_code == 400
    assert NEW in response.json()["error"]["message"]


def test_the_unmodified_sdk_still_reads_its_own_version(tmp_path):
    sdk = pytest.importorskip("azure.search.documents.knowledgebases")
    from azure.core.credentials import AzureKeyCredential
    from azure.search.documents.knowledgebases.models import (
        KnowledgeBaseRetrievalRequest,
        KnowledgeRetrievalSemanticIntent,
    )

    app = create_app(
        [transit_kb()], settings=ServerSettings(api_keys=[KEY["api-key"]], read_env_keys=False)
    )
    request = KnowledgeBaseRetrievalRequest(
        intents=[KnowledgeRetrievalSemanticIntent(search="harbor pass")], include_activity=True
    )
    with running_server(app) as url:
        with sdk.KnowledgeBaseRetrievalClient(
            url, AzureKeyCredential(KEY["api-key"]), knowledge_base_name="transit"
        ) as retrieval:
            result = retrieval.retrieve(request)
    assert result.references[0].doc_key == "fare-pass"
    assert all(
        record.elapsed_ms is not None for record in result.activity if record.type == "searchIndex"
    )
    assert all("elapsedInMs" not in record for record in result.activity)
