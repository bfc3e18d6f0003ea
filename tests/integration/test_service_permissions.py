"""Permissions through the knowledge service (``serve --data``): index documents with Azure's
``permissionFilter`` fields, file uploads with ``ingestionPermissionOptions``, and document
reads by query keys trimmed to the caller's token.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from tests.fakes import AUDIENCE, ISSUER, JWT_SECRET, TokenMint

from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.tokens import HEADER, TokenSettings

pytestmark = pytest.mark.integration
VERSION = {"api-version": "2026-10-01"}
ADMIN, QUERY = {"api-key": "admin-key"}, {"api-key": "query-key"}
MINT = TokenMint()
ALICE = {HEADER: f"Bearer {MINT.hs256('alice', ['acme'])}"}
BOB = {HEADER: f"Bearer {MINT.hs256('bob', ['globex'])}"}

INDEX = {
    "name": "policies",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
        {"name": "readers", "type": "Collection(Edm.String)", "permissionFilter": "userIds"},
        {"name": "teams", "type": "Collection(Edm.String)", "permissionFilter": "groupIds"},
    ],
    "permissionFilterOption": "enabled",
}
DOCS = [
    {"id": "acme", "content": "Acme vacation policy", "teams": ["acme"]},
    {"id": "globex", "content": "Globex vacation policy", "teams": ["globex"]},
    {"id": "memo", "content": "Board vacation memo", "readers": ["alice"]},
    {"id": "public", "content": "Public vacation days", "teams": ["all"]},
    {"id": "nobody", "content": "Vacation draft with no readers"},
]


@pytest.fixture
def http(tmp_path, open_service_state):
    settings = ServerSettings(
        api_keys=["admin-key"],
        query_keys=["query-key"],
        read_env_keys=False,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
    )
    app = create_app(service=open_service_state(tmp_path / "data"), settings=settings)
    with TestClient(app) as client:
        client.params = VERSION
        yield client


def put_policies(http):
    assert http.put("/indexes('policies')", json=INDEX, headers=ADMIN).status_code == 201
    batch = {"value": [{"@search.action": "upload", **doc} for doc in DOCS]}
    answer = http.post("/indexes('policies')/docs/search.index", json=batch, headers=ADMIN)
    assert answer.status_code == 200, answer.text


def search(http, headers, **body):
    response = http.post(
        "/indexes('policies')/docs/search.post.search",
        json={"search": "vacation", **body},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    return response.json()


def keys(body):
    return sorted(v["id"] for v in body["value"])


def test_document_reads_by_query_keys_are_trimmed_to_the_token(http):
    put_policies(http)
    assert keys(search(http, QUERY | ALICE)) == ["acme", "memo", "public"]
    assert keys(search(http, QUERY | BOB)) == ["globex", "public"]
    assert keys(search(http, QUERY)) == ["public"]
    assert keys(search(http, ADMIN)) == ["acme", "globex", "memo", "nobody", "public"]
    counted = search(http, QUERY | BOB, count=True)
    assert counted["@odata.count"] == 2
    assert http.get("/indexes('policies')/docs/$count", headers=QUERY | BOB).text == "2"
    assert http.get("/indexes('policies')/docs/$count", headers=ADMIN).text == "5"


def test_query_keys_never_read_permission_fields_nor_filter_on_them(http):
    put_policies(http)
    assert set(search(http, QUERY | ALICE)["value"][0]) == {"@search.score", "id", "content"}
    admin_fields = {"@search.score", "id", "content", "readers", "teams"}
    assert set(search(http, ADMIN)["value"][0]) == admin_fields
    picked = http.post(
        "/indexes('policies')/docs/search.post.search",
        json={"search": "*", "select": "id,teams"},
        headers=QUERY | ALICE,
    )
    assert picked.status_code == 400 and "not retrievable" in picked.json()["error"]["message"]
    probe = http.post(
        "/indexes('policies')/docs/search.post.search",
        json={"search": "*", "filter": "teams/any(t: t eq 'globex')"},
        headers=ADMIN,
    )
    assert probe.status_code == 400 and "permission field" in probe.json()["error"]["message"]


def test_a_lookup_of_a_document_the_caller_may_not_see_is_a_404(http):
    put_policies(http)
    assert http.get("/indexes('policies')/docs('memo')", headers=QUERY | ALICE).status_code == 200
    hidden = http.get("/indexes('policies')/docs('memo')", headers=QUERY | BOB)
    missing = http.get("/indexes('policies')/docs('no-such')", headers=QUERY | BOB)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"] == "No document named 'memo' exists."


def test_a_knowledge_base_over_the_index_retrieves_what_the_token_allows(http):
    put_policies(http)
    source = {
        "name": "policies-ks",
        "kind": "searchIndex",
        "searchIndexParameters": {"searchIndexName": "policies"},
    }
    assert http.put("/knowledgesources('policies-ks')", json=source, headers=ADMIN).is_success
    base = {"name": "hr", "knowledgeSources": [{"name": "policies-ks"}]}
    assert http.put("/knowledgebases('hr')", json=base, headers=ADMIN).is_success
    body = {"intents": [{"search": "vacation"}], "retrievalReasoningEffort": {"kind": "minimal"}}

    def retrieve(headers):
        response = http.post("/knowledgebases('hr')/retrieve", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()

    found = retrieve(QUERY | ALICE)
    assert sorted(r["docKey"] for r in found["references"]) == ["acme", "memo", "public"]
    assert "teams" not in json.dumps(found) and "readers" not in json.dumps(found)
    assert [r["docKey"] for r in retrieve(QUERY)["references"]] == ["public"]


def test_permission_fields_are_validated_and_fixed_once_created(http):
    rbac = {**INDEX, "name": "rbac", "fields": [*INDEX["fields"][:2], _field("s", "rbacScope")]}
    answer = http.put("/indexes('rbac')", json=rbac, headers=ADMIN)
    assert answer.status_code == 400 and "rbacScope" in answer.json()["error"]["message"]
    scalar = {
        **INDEX,
        "name": "scalar",
        "fields": [*INDEX["fields"][:2], {**_field("g", "groupIds"), "type": "Edm.String"}],
    }
    answer = http.put("/indexes('scalar')", json=scalar, headers=ADMIN)
    assert answer.status_code == 400 and "Collection(Edm.String)" in answer.text
    put_policies(http)
    disabled = {**INDEX, "permissionFilterOption": "disabled"}
    answer = http.put("/indexes('policies')", json=disabled, headers=ADMIN)
    assert answer.status_code == 400 and "cannot change" in answer.json()["error"]["message"]


def _field(name: str, kind: str) -> dict:
    return {"name": name, "type": "Collection(Edm.String)", "permissionFilter": kind}


def _upload(http, source: str, name: str, text: str, **extra):
    metadata = {"fileName": name, "metadata": {}, **extra}
    return http.post(
        f"/knowledgesources('{source}')/files",
        files={
            "metadata": (None, json.dumps(metadata), "application/json"),
            "content": (name, text.encode(), "application/octet-stream"),
        },
        headers=ADMIN,
    )


def test_file_uploads_carry_the_permissions_their_source_ingests(http):
    options = {"ingestionParameters": {"ingestionPermissionOptions": ["userIds", "groupIds"]}}
    source = {"name": "handbook", "kind": "file", "fileParameters": options}
    assert http.put("/knowledgesources('handbook')", json=source, headers=ADMIN).is_success
    uploaded = _upload(http, "handbook", "acme.md", "Acme vacation rules.", groupIds=["acme"])
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["groupIds"] == ["acme"]
    assert _upload(http, "handbook", "all.md", "Vacation for all.", userIds=["all"]).is_success

    missing = _upload(http, "handbook", "none.md", "Vacation with no permissions.")
    assert missing.status_code == 400 and "ingests permissions" in missing.text
    raw = http.post(
        "/knowledgesources('handbook')/files",
        content=b"Raw vacation",
        headers=ADMIN
        | {
            "content-type": "application/octet-stream",
            "content-disposition": 'attachment; filename="raw.md"',
        },
    )
    assert raw.status_code == 400

    base = {"name": "staff", "knowledgeSources": [{"name": "handbook"}]}
    assert http.put("/knowledgebases('staff')", json=base, headers=ADMIN).is_success
    body = {"intents": [{"search": "vacation"}], "retrievalReasoningEffort": {"kind": "minimal"}}

    def titles(headers):
        response = http.post("/knowledgebases('staff')/retrieve", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return sorted(r["sourceData"]["file_name"] for r in response.json()["references"])

    body["knowledgeSourceParams"] = [
        {"knowledgeSourceName": "handbook", "kind": "file", "includeReferenceSourceData": True}
    ]
    assert titles(QUERY | ALICE) == ["acme.md", "all.md"]
    assert titles(QUERY | BOB) == ["all.md"]

    changed = {**source, "fileParameters": {"ingestionParameters": {}}}
    answer = http.put("/knowledgesources('handbook')", json=changed, headers=ADMIN)
    assert answer.status_code == 400 and "cannot change" in answer.text


def test_ids_sent_to_a_source_that_does_not_ingest_them_are_refused_not_dropped(http):
    assert http.put(
        "/knowledgesources('notes')", json={"name": "notes", "kind": "file"}, headers=ADMIN
    ).is_success
    answer = _upload(http, "notes", "a.md", "Vacation notes.", groupIds=["acme"])
    assert answer.status_code == 400
    assert "does not ingest groupIds" in answer.json()["error"]["message"]
    bad = {"name": "bad", "kind": "file"}
    bad["fileParameters"] = {"ingestionParameters": {"ingestionPermissionOptions": ["rbacScope"]}}
    answer = http.put("/knowledgesources('bad')", json=bad, headers=ADMIN)
    assert answer.status_code == 400 and "rbacScope not supported" in answer.text


def test_an_index_without_permission_fields_fails_closed_for_query_keys(http):
    plain = {"name": "plain", "fields": INDEX["fields"][:2]}
    assert http.put("/indexes('plain')", json=plain, headers=ADMIN).status_code == 201
    batch = {"value": [{"@search.action": "upload", "id": "a", "content": "vacation"}]}
    assert http.post("/indexes('plain')/docs/search.index", json=batch, headers=ADMIN).is_success
    searched = http.post(
        "/indexes('plain')/docs/search.post.search", json={"search": "*"}, headers=QUERY | ALICE
    )
    counted = http.get("/indexes('plain')/docs/$count", headers=QUERY)
    for refused in (searched, counted):
        assert refused.status_code == 403, refused.text
        assert "no permission metadata" in refused.json()["error"]["message"]
    assert http.get("/indexes('plain')/docs('a')", headers=QUERY).status_code == 404
    admin = http.post(
        "/indexes('plain')/docs/search.post.search", json={"search": "*"}, headers=ADMIN
    )
    assert [v["id"] for v in admin.json()["value"]] == ["a"]
