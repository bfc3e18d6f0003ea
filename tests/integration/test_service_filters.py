"""A retrieve's ``filterAddOn`` and ``docs/search``'s ``filter`` refuse the same filters.

``filterAddOn`` on retrieve silently accepted a filter on the index's permission fields (and
on unknown or non-filterable ones) and matched nothing, while ``docs/search`` refused the
same filter with a 400. Both now check a filter against one schema, the index's filterable
fields and their kinds, and refuse permission fields, over REST, the Python API and MCP.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from tests.server_harness import intents_body

from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.kb.catalog import ServiceCatalog
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
VERSION = {"api-version": "2026-04-01"}
ADMIN, QUERY = {"api-key": "admin-key"}, {"api-key": "query-key"}
INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String"},
        {"name": "year", "type": "Edm.Int32", "filterable": True},
        {"name": "draft", "type": "Edm.String", "filterable": False},
        {"name": "teams", "type": "Collection(Edm.String)", "permissionFilter": "groupIds"},
    ],
    "permissionFilterOption": "disabled",  # not enforced: the field is still no filter
}
DOCS = [
    {"id": "pass", "content": "A day pass costs 6 euros.", "year": 2024, "teams": ["all"]},
    {"id": "old", "content": "A day pass cost 5 euros.", "year": 2019, "teams": ["all"]},
]
REFUSED = [
    ("teams/any(t: t eq 'staff')", "'teams' is a permission field"),
    ("nosuch eq 1", "nosuch"),
    ("draft eq 'x'", "draft"),
    ("year eq '2024'", "year"),
]


@pytest.fixture
def service(tmp_path, open_service_state):
    return open_service_state(tmp_path / "data")


@pytest.fixture
def http(service):
    settings = ServerSettings(api_keys=["admin-key"], query_keys=["query-key"], read_env_keys=False)
    app = create_app(service=service, settings=settings)
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        client.params = VERSION
        assert client.put("/indexes/guides", json=INDEX, headers=ADMIN).status_code == 201
        batch = {"value": [{"@search.action": "upload", **doc} for doc in DOCS]}
        assert client.post("/indexes/guides/docs/index", json=batch, headers=ADMIN).is_success
        source = {"kind": "searchIndex", "searchIndexParameters": {"searchIndexName": "guides"}}
        assert client.put("/knowledgesources/guides-ks", json=source, headers=ADMIN).is_success
        assert client.put("/knowledgesources/files", json={"kind": "file"}, headers=ADMIN)
        base = {"knowledgeSources": [{"name": "guides-ks"}, {"name": "files"}]}
        assert client.put("/knowledgebases/transit", json=base, headers=ADMIN).is_success
        yield client


def retrieve_body(filter_text: str, source: str = "guides-ks") -> dict:
    kind = "file" if source == "files" else "searchIndex"
    params = {"knowledgeSourceName": source, "kind": kind, "filterAddOn": filter_text}
    return intents_body("day pass", knowledgeSourceParams=[params])


@pytest.mark.parametrize(("filter_text", "named"), REFUSED)
def test_retrieve_and_docs_search_refuse_the_same_filter_naming_the_field(http, filter_text, named):
    searched = http.post(
        "/indexes/guides/docs/search", json={"search": "pass", "filter": filter_text}, headers=QUERY
    )
    retrieved = http.post(
        "/knowledgebases/transit/retrieve", json=retrieve_body(filter_text), headers=QUERY
    )
    for response in (searched, retrieved):
        assert response.status_code == 400, response.text
        assert named in response.json()["error"]["message"]
    assert retrieved.json()["error"]["message"].startswith(
        "knowledgeSourceParams[guides-ks].filterAddOn: "
    )


def test_a_filter_both_accept_finds_the_same_documents(http):
    searched = http.post(
        "/indexes/guides/docs/search",
        json={"search": "pass", "filter": "year ge 2024"},
        headers=QUERY,
    )
    retrieved = http.post(
        "/knowledgebases/transit/retrieve", json=retrieve_body("year ge 2024"), headers=QUERY
    )
    assert searched.status_code == retrieved.status_code == 200, retrieved.text
    assert [d["id"] for d in searched.json()["value"]] == ["pass"]
    assert [r["docKey"] for r in retrieved.json()["references"]] == ["pass"]


def test_a_file_source_refuses_filters_on_fields_its_files_do_not_have(http):
    refused = http.post(
        "/knowledgebases/transit/retrieve",
        json=retrieve_body("groupIds/any(g: g eq 'staff')", source="files"),
        headers=QUERY,
    )
    assert refused.status_code == 400, refused.text
    assert "unknown field 'groupIds'" in refused.json()["error"]["message"]


@pytest.mark.parametrize(("filter_text", "named"), REFUSED)
def test_the_python_api_raises_invalid_request_naming_the_field(http, service, filter_text, named):
    kb = ServiceCatalog(service).knowledge_base("transit")
    assert kb is not None
    with pytest.raises(InvalidRequestError, match=named):
        kb.retrieve(retrieve_body(filter_text))


def test_the_mcp_tool_refuses_it_naming_its_filter_argument(http):
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "knowledge_base_retrieve",
            "arguments": {"query": "day pass", "filter": "teams/any(t: t eq 'staff')"},
        },
    }
    headers = {
        **QUERY,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    reply = http.post("/knowledgebases/transit/mcp", json=call, headers=headers)
    assert reply.status_code == 200, reply.text
    (message,) = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    result = json.loads(message)["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "tool knowledge_base_retrieve: filter: " in text, text
    assert "'teams' is a permission field" in text
    assert "filterAddOn" not in text


@pytest.mark.parametrize(("filter_text", "named"), [*REFUSED, ("((", "Invalid OData filter")])
def test_a_knowledge_source_base_filter_is_checked_when_defined(http, filter_text, named):
    source = {
        "kind": "searchIndex",
        "searchIndexParameters": {"searchIndexName": "guides", "baseFilter": filter_text},
    }
    refused = http.put("/knowledgesources/narrow", json=source, headers=ADMIN)
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith("searchIndexParameters.baseFilter: ") and named in message
    source["searchIndexParameters"]["baseFilter"] = "year ge 2024"
    assert http.put("/knowledgesources/narrow", json=source, headers=ADMIN).status_code == 201
