"""``docs/search`` paging parameters are bounded as Azure bounds them: never a 500.

A ``skip`` beyond SQLite's integers answered 500 (an ``OverflowError`` deep in the store);
Azure refuses a ``skip`` over 100,000 and a ``top`` over 1,000 with a 400.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String"},
    ],
}


@pytest.fixture
def http(tmp_path):
    service = ServiceDirectory(tmp_path / "data")
    settings = ServerSettings(api_keys=["admin-key"], read_env_keys=False)
    app = create_app(service=service, settings=settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.params = {"api-version": "2026-04-01"}
        client.headers.update({"api-key": "admin-key"})
        assert client.put("/indexes/guides", json=INDEX).status_code == 201
        batch = {"value": [{"@search.action": "upload", "id": "a", "content": "day pass"}]}
        assert client.post("/indexes/guides/docs/index", json=batch).status_code == 200
        yield client
    service.close()


@pytest.mark.parametrize(
    "parameters",
    [
        {"skip": 100_001},
        {"skip": 10**30},
        {"search": "pass", "skip": 10**30, "count": True},
        {"top": 1001},
        {"top": 10**30},
    ],
)
def test_paging_beyond_azures_limits_is_a_400(http, parameters):
    response = http.post("/indexes/guides/docs/search", json={"search": "*", **parameters})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"] == "top must be 0-1000 and skip 0-100000"


def test_paging_at_the_limits_is_served(http):
    response = http.post("/indexes/guides/docs/search", json={"skip": 100_000, "top": 1000})
    assert response.status_code == 200 and response.json()["value"] == []
