"""An index holds as many fields as Azure allows, the key included, and not one more.

Azure's documented limit is 1,000 fields per index (Basic: 100), counting every field: the
key and the sub-fields of complex fields alike. An index of 1,000 fields with its key is
created, filled and searched; 1,001 is a 400 naming the limit, whether created at once or
reached by adding a field to a full index.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from agentic_retrieval.kb.definitions import MAX_INDEX_FIELDS
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
VERSION = {"api-version": "2026-04-01"}
ADMIN = {"api-key": "admin-key"}
KEY = {"name": "id", "type": "Edm.String", "key": True}


def wide(count: int) -> dict:
    """An index of ``count`` fields: the key and ``count - 1`` filterable strings."""
    extra = [{"name": f"f{n}", "type": "Edm.String", "filterable": True} for n in range(count - 1)]
    return {"name": "wide", "fields": [KEY, *extra]}


@pytest.fixture
def http(tmp_path):
    service = ServiceDirectory(tmp_path / "data")
    settings = ServerSettings(api_keys=["admin-key"], read_env_keys=False)
    with TestClient(create_app(service=service, settings=settings)) as client:
        client.params = VERSION
        client.headers.update(ADMIN)
        yield client
    service.close()


def test_azures_limit_is_1000_fields():
    assert MAX_INDEX_FIELDS == 1000


def test_an_index_of_1000_fields_key_included_is_created_filled_and_searched(http):
    assert http.put("/indexes/wide", json=wide(1000)).status_code == 201
    assert len(http.get("/indexes/wide").json()["fields"]) == 1000
    document = {"@search.action": "upload", "id": "d", **{f"f{n}": f"v{n}" for n in range(999)}}
    assert http.post("/indexes/wide/docs/index", json={"value": [document]}).status_code == 200
    found = http.post("/indexes/wide/docs/search", json={"search": "*", "filter": "f998 eq 'v998'"})
    assert [d["id"] for d in found.json()["value"]] == ["d"]


def test_1001_fields_are_a_400_naming_the_limit(http):
    refused = http.put("/indexes/wide", json=wide(1001))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"] == (
        "fields: an index has at most 1000 fields, the key field included (Azure's limit); "
        "this one has 1001"
    )
    assert http.get("/indexes/wide").status_code == 404


def test_adding_a_field_to_a_full_index_is_refused_and_changes_nothing(http):
    assert http.put("/indexes/wide", json=wide(1000)).status_code == 201
    grown = wide(1000)
    grown["fields"].append({"name": "one_more", "type": "Edm.String"})
    refused = http.put("/indexes/wide", json=grown)
    assert refused.status_code == 400 and "at most 1000 fields" in refused.text
    assert len(http.get("/indexes/wide").json()["fields"]) == 1000


def test_sub_fields_of_a_simple_field_are_refused_not_stored(http):
    index = {
        "name": "nested",
        "fields": [KEY, {"name": "s", "type": "Edm.String", "fields": [{"name": "a"}]}],
    }
    refused = http.put("/indexes/nested", json=index)
    assert refused.status_code == 400, refused.text
    assert "fields.1.fields: sub-fields belong to complex fields" in refused.text
