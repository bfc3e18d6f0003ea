"""Names in the URL (``serve --data``): bounded before any lookup, and unknown ones never cached.

A query key may ask for any knowledge base or index name. Unknown names must cost a lookup,
not memory (they were cached forever: 3,060 made-up 60 KB names grew the server by 177 MiB),
and a name longer than Azure's naming rules allow (128 characters; document keys 1,024) is a
400 before anything looks it up, without echoing it back.
"""

from __future__ import annotations

import tracemalloc

import pytest
from fastapi.testclient import TestClient
from tests.server_harness import intents_body

from agentic_retrieval.kb import catalog as catalog_module
from agentic_retrieval.kb.catalog import ServiceCatalog
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
VERSION = {"api-version": "2026-04-01"}
ADMIN, QUERY = {"api-key": "admin-key"}, {"api-key": "query-key"}
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
    "Host": "127.0.0.1:8080",
}


def index_body(name: str) -> dict:
    return {
        "name": name,
        "fields": [
            {"name": "id", "type": "Edm.String", "key": True},
            {"name": "content", "type": "Edm.String"},
        ],
    }


@pytest.fixture
def service(tmp_path):
    directory = ServiceDirectory(tmp_path / "data")
    yield directory
    directory.close()


@pytest.fixture
def http(service):
    settings = ServerSettings(api_keys=["admin-key"], query_keys=["query-key"], read_env_keys=False)
    with TestClient(create_app(service=service, settings=settings), base_url=BASE) as client:
        client.params = VERSION
        yield client


BASE = "http://127.0.0.1:8080"


def test_unknown_names_asked_for_again_and_again_cost_no_memory(service):
    catalog = ServiceCatalog(service)
    assert catalog.knowledge_base("warm-up") is None  # imports and connections are made once
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(2000):
            name = f"{n}-" + "x" * 1000
            assert catalog.knowledge_base(name) is None
            assert catalog.index_documents(name) is None
            assert catalog.file_documents(name) is None
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "lineno"))
    finally:
        tracemalloc.stop()
    # remembering each miss would keep 6,000 keys of 1 KB: at least 6 MB
    assert grown < 1_000_000, f"{grown} bytes kept for names that do not exist"


def test_the_catalog_keeps_the_most_recently_used_objects_only(service, monkeypatch):
    for name in ("a", "b", "c"):
        service.put("index", name, index_body(name), with_store=True)
    monkeypatch.setattr(catalog_module, "MAX_CACHED", 2)
    catalog = ServiceCatalog(service)
    first = catalog.index_documents("a")
    assert catalog.index_documents("a") is first  # cached
    second = catalog.index_documents("b")
    third = catalog.index_documents("c")  # a third: the least recently used ("a") goes
    assert catalog.index_documents("b") is second
    assert catalog.index_documents("c") is third
    rebuilt = catalog.index_documents("a")
    assert rebuilt is not first and rebuilt is not None
    assert rebuilt.index.name == "a"


def test_a_name_just_within_azures_limit_is_served(http):
    name = "g" * 128
    assert http.put(f"/indexes('{name}')", json=index_body(name), headers=ADMIN).status_code == 201
    found = http.post(f"/indexes/{name}/docs/search", json={"search": "*"}, headers=QUERY)
    assert found.status_code == 200, found.text


LONG = "n" * 60_000


@pytest.mark.parametrize(
    ("method", "path", "headers", "body"),
    [
        ("POST", f"/knowledgebases/{LONG}/retrieve", QUERY, intents_body("x")),
        ("POST", f"/knowledgebases('{LONG}')/retrieve", QUERY, intents_body("x")),
        ("POST", f"/agents/{LONG}/retrieve", QUERY, intents_body("x")),
        ("POST", f"/indexes/{LONG}/docs/search", QUERY, {"search": "*"}),
        ("GET", f"/indexes('{LONG}')/docs/$count", QUERY, None),
        ("GET", f"/indexes/{'g' * 129}/docs", QUERY, None),
        ("GET", f"/indexes('guides')/docs('{'k' * 1025}')", QUERY, None),
        ("GET", f"/knowledgebases/{LONG}", ADMIN, None),
        ("PUT", f"/knowledgesources('{LONG}')", ADMIN, {"kind": "file"}),
        ("GET", f"/knowledgesources/{LONG}/status", ADMIN, None),
        ("DELETE", f"/indexes/{LONG}", ADMIN, None),
        ("GET", f"/knowledgesources('files')/files('{'f' * 129}')", ADMIN, None),
    ],
)
def test_a_name_longer_than_azure_allows_is_a_400_before_any_lookup(
    http, service, monkeypatch, method, path, headers, body
):
    assert http.put("/indexes('guides')", json=index_body("guides"), headers=ADMIN).status_code
    assert http.put("/knowledgesources('files')", json={"kind": "file"}, headers=ADMIN)

    def no_lookup(*args, **kwargs):
        raise AssertionError("a name longer than any name that can exist was looked up")

    monkeypatch.setattr(service, "get", no_lookup)
    response = http.request(method, path, json=body, headers=headers)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert "at most" in error["message"]
    assert len(response.content) < 500  # the name is not echoed back


def test_the_mcp_endpoint_refuses_a_long_name_before_any_lookup(http, service, monkeypatch):
    def no_lookup(*args, **kwargs):
        raise AssertionError("looked up")

    monkeypatch.setattr(service, "get", no_lookup)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = http.post(f"/knowledgebases/{LONG}/mcp", json=call, headers={**QUERY, **MCP_HEADERS})
    assert response.status_code == 400, response.text[:300]
    assert "at most 128" in response.json()["error"]["message"]
    assert len(response.content) < 500


def test_an_overlong_api_version_or_search_type_is_not_echoed(http):
    version = http.get("/indexes", params={"api-version": "v" * 10_000}, headers=ADMIN)
    listing = http.get("/indexes", params={**VERSION, "searchType": "s" * 10_000}, headers=ADMIN)
    for refused in (version, listing):
        assert refused.status_code == 400, refused.text[:300]
        assert len(refused.content) < 600
    assert "a value of 10000 characters is not supported" in version.text
