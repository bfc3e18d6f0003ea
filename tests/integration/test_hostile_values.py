"""Values beyond what JSON, Azure or the store can hold are a 400, never a 500 or a broken index.

A ``skip`` beyond SQLite's integers answered 500 (an ``OverflowError`` deep in the store);
Azure refuses a ``skip`` over 100,000 and a ``top`` over 1,000 with a 400. ``NaN``,
``Infinity`` and ``1e400`` (which Python's JSON parser accepts), lone UTF-16 surrogates and
vector values beyond 32-bit floats were stored, or failed deep inside with a 500; a stored
``NaN`` then made every search returning its document a 500.
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
        {"name": "rating", "type": "Edm.Double", "filterable": True},
        {"name": "v", "type": "Collection(Edm.Single)", "dimensions": 3},
        {"name": "where", "type": "Edm.GeographyPoint"},
    ],
}
BIG = "1" + "0" * 400


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


def document(values: str) -> bytes:
    return ('{"value": [{"@search.action": "upload", "id": "b", ' + values + "}]}").encode()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (document('"rating": NaN'), "NaN is not a JSON value"),
        (document('"rating": -Infinity'), "-Infinity is not a JSON value"),
        (document('"rating": 1e400'), "is not a valid Edm.Double value"),
        (document(f'"rating": {BIG}'), "is not a valid Edm.Double value"),
        (document('"content": "half \\ud800 a pair"'), "unpaired UTF-16 surrogate"),
        (document('"v": [1e39, 0, 0]'), "value[0].v: vector values must be finite"),
        (document(f'"v": [{BIG}, 0, 0]'), "value[0].v: vector values must be finite"),
        (document('"where": {"type": "Point", "coordinates": [1e400, 0]}'), "Edm.Geography"),
        (document('"where": {"type": "Point", "coordinates": [200, 0]}'), "Edm.GeographyPoint"),
    ],
)
def test_values_nothing_can_hold_are_refused_and_the_index_keeps_serving(http, body, named):
    refused = http.post(
        "/indexes/guides/docs/index", content=body, headers={"content-type": "application/json"}
    )
    assert refused.status_code == 400, refused.text
    assert named in refused.json()["error"]["message"]
    served = http.post("/indexes/guides/docs/search", json={"search": "*"})
    assert served.status_code == 200 and [d["id"] for d in served.json()["value"]] == ["a"]


@pytest.mark.parametrize(
    "vector", ["[NaN, 0, 0]", "[1e308, 1e308, 1e308]", f"[{BIG}, 0, 0]", '["x", 0, 0]']
)
def test_a_query_vector_nothing_can_hold_is_refused(http, vector):
    body = '{"search": "*", "vectorQueries": [{"kind": "vector", "vector": ' + vector + "}]}"
    refused = http.post(
        "/indexes/guides/docs/search",
        content=body.encode(),
        headers={"content-type": "application/json"},
    )
    assert refused.status_code == 400, refused.text


def test_search_text_must_be_text(http):
    refused = http.post("/indexes/guides/docs/search", json={"search": ["day"]})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "search: expected a string."
