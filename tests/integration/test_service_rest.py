"""The management REST API over raw HTTP: bad input, ETags, paging, path forms, restarts.

Every refused request must answer Azure's error shape with the right status and leave what
is stored exactly as it was.
"""

from __future__ import annotations

import httpx
import pytest
from tests.server_harness import running_server

from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
ADMIN = {"api-key": "admin-key"}
VERSION = {"api-version": "2026-04-01"}

INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "title", "type": "Edm.String", "searchable": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
        {"name": "year", "type": "Edm.Int32", "filterable": True},
    ],
}
DOCS = [
    {"id": "a", "title": "Tram fares", "content": "A day pass costs 6 euros.", "year": 2024},
    {"id": "b", "title": "Bike fees", "content": "Late bikes pay 1 euro.", "year": 2023},
]


def serve(service):
    settings = ServerSettings(api_keys=["admin-key"], query_keys=["query-key"], read_env_keys=False)
    return running_server(create_app(service=service, settings=settings))


@pytest.fixture
def http(tmp_path, open_service_state):
    with serve(open_service_state(tmp_path / "data")) as url:
        with httpx.Client(base_url=url, headers=ADMIN, params=VERSION, timeout=30) as client:
            yield client


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"code", "message"}
    assert error["message"]
    return error


def with_guides(http: httpx.Client) -> None:
    assert http.put("/indexes('guides')", json=INDEX).status_code == 201
    batch = {"value": [{"@search.action": "upload", **doc} for doc in DOCS]}
    assert http.post("/indexes('guides')/docs/search.index", json=batch).status_code == 200
    source = {"name": "guides-ks", "kind": "searchIndex"}
    source["searchIndexParameters"] = {"searchIndexName": "guides"}
    assert http.put("/knowledgesources('guides-ks')", json=source).status_code == 201
    base = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}]}
    assert http.put("/knowledgebases('transit')", json=base).status_code == 201


def count(http: httpx.Client) -> int:
    return int(http.get("/indexes('guides')/docs/$count").text)


def test_a_source_of_a_kind_the_service_cannot_host_is_a_400_naming_the_kind(http):
    web = {"name": "news", "kind": "web", "webParameters": {}}
    error = error_of(http.put("/knowledgesources('news')", json=web), 400)
    assert "'web'" in error["message"] and "searchIndex, file" in error["message"]
    error = error_of(http.post("/knowledgesources", json={**web, "kind": "gopher"}), 400)
    assert "'gopher'" in error["message"]
    assert http.get("/knowledgesources").json()["value"] == []


def test_an_index_without_a_key_field_or_with_duplicate_fields_is_refused(http):
    keyless = {"name": "guides", "fields": [{"name": "title", "type": "Edm.String"}]}
    assert "key" in error_of(http.post("/indexes", json=keyless), 400)["message"]
    twice = {**INDEX, "fields": [*INDEX["fields"], {"name": "title", "type": "Edm.String"}]}
    assert "title" in error_of(http.post("/indexes", json=twice), 400)["message"]
    assert http.get("/indexes").json()["value"] == []


def test_duplicate_names_are_a_409_and_keep_the_original(http):
    with_guides(http)
    renamed = {**INDEX, "description": "a second guides index"}
    assert "already exists" in error_of(http.post("/indexes", json=renamed), 409)["message"]
    assert "description" not in http.get("/indexes('guides')").json()
    base = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}]}
    error_of(http.post("/knowledgebases", json=base), 409)
    listed_twice = {"name": "other", "knowledgeSources": [{"name": "guides-ks"}] * 2}
    assert "twice" in error_of(http.post("/knowledgebases", json=listed_twice), 400)["message"]
    assert count(http) == 2


def test_etags_guard_updates_and_deletes(http):
    with_guides(http)
    current = http.get("/knowledgebases('transit')")
    etag = current.json()["@odata.etag"]
    assert current.headers["etag"] == f'"{etag}"'
    changed = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}], "description": "x"}

    stale = http.put("/knowledgebases('transit')", json=changed, headers={"If-Match": '"0xBAD"'})
    assert "changed" in error_of(stale, 412)["message"]
    error_of(
        http.put("/knowledgebases('transit')", json=changed, headers={"If-None-Match": "*"}), 412
    )
    error_of(http.delete("/knowledgebases('transit')", headers={"If-Match": "0xBAD"}), 412)
    assert http.get("/knowledgebases('transit')").json() == current.json()

    updated = http.put(
        "/knowledgebases('transit')",
        json=changed,
        headers={"If-Match": f'"{etag}"', "Prefer": "return=representation"},
    )
    assert updated.status_code == 200
    assert updated.json()["description"] == "x"
    assert updated.json()["@odata.etag"] != etag
    quiet = http.put("/knowledgebases('transit')", json=changed)  # no Prefer: no body
    assert quiet.status_code == 204
    error_of(
        http.put(
            "/knowledgebases('ghost')", json=changed | {"name": "ghost"}, headers={"If-Match": "*"}
        ),
        412,
    )


def test_an_oversized_batch_or_a_document_without_its_key_changes_nothing(http):
    with_guides(http)
    many = {"value": [{"id": f"d{n}", "title": "t"} for n in range(1001)]}
    assert "1000" in error_of(http.post("/indexes('guides')/docs/index", json=many), 413)["message"]
    keyless = {"value": [{"id": "c", "title": "new"}, {"title": "no key"}]}
    error = error_of(http.post("/indexes('guides')/docs/index", json=keyless), 400)
    assert "value[1]" in error["message"] and "'id'" in error["message"]
    unknown = {"value": [{"id": "c", "colour": "red"}]}
    assert (
        "colour"
        in error_of(http.post("/indexes('guides')/docs/index", json=unknown), 400)["message"]
    )
    wrong_type = {"value": [{"id": "c", "year": "2024"}]}
    error_of(http.post("/indexes('guides')/docs/index", json=wrong_type), 400)
    assert count(http) == 2
    assert http.get("/indexes('guides')/docs('c')").status_code == 404


def test_partial_failure_is_a_207_with_a_status_per_document(http):
    with_guides(http)
    batch = {
        "value": [
            {"@search.action": "mergeOrUpload", "id": "c", "title": "Night trams"},
            {"@search.action": "merge", "id": "ghost", "title": "nobody"},
            {"@search.action": "upload", "id": "bad key!", "title": "spaces"},
            {"@search.action": "merge", "id": "a", "year": 2025},
            {"@search.action": "delete", "id": "b"},
        ]
    }
    response = http.post("/indexes('guides')/docs/index", json=batch)
    assert response.status_code == 207
    assert [(r["key"], r["status"], r["statusCode"]) for r in response.json()["value"]] == [
        ("c", True, 201),
        ("ghost", False, 404),
        ("bad key!", False, 400),
        ("a", True, 200),
        ("b", True, 200),
    ]
    assert http.get("/indexes('guides')/docs('a')").json() == {**DOCS[0], "year": 2025}
    assert count(http) == 2


def test_references_block_deletes_and_unknown_references_block_creates(http):
    with_guides(http)
    error = error_of(http.delete("/knowledgesources('guides-ks')"), 409)
    assert "transit" in error["message"]
    assert "guides-ks" in error_of(http.delete("/indexes('guides')"), 409)["message"]
    orphan = {"name": "lonely", "knowledgeSources": [{"name": "nowhere"}]}
    assert "nowhere" in error_of(http.post("/knowledgebases", json=orphan), 400)["message"]
    dangling = {
        "name": "x",
        "kind": "searchIndex",
        "searchIndexParameters": {"searchIndexName": "nope"},
    }
    assert "nope" in error_of(http.post("/knowledgesources", json=dangling), 400)["message"]
    assert http.get("/knowledgesources('guides-ks')").status_code == 200
    assert count(http) == 2


def test_an_existing_field_cannot_change_but_a_new_field_can_be_added(http):
    with_guides(http)
    retyped = {**INDEX, "fields": [*INDEX["fields"][:3], {"name": "year", "type": "Edm.String"}]}
    assert "type" in error_of(http.put("/indexes('guides')", json=retyped), 400)["message"]
    extended = {
        **INDEX,
        "fields": [*INDEX["fields"], {"name": "tags", "type": "Collection(Edm.String)"}],
    }
    assert (
        http.put(
            "/indexes('guides')", json=extended, headers={"Prefer": "return=representation"}
        ).status_code
        == 200
    )
    assert http.get("/indexes('guides')/docs('a')").json() == {**DOCS[0], "tags": None}


def test_both_path_forms_api_versions_and_paging(http):
    with_guides(http)
    for n in range(4):
        base = {"name": f"kb-{n}", "knowledgeSources": [{"name": "guides-ks"}]}
        assert http.post("/knowledgebases", json=base).status_code == 201
    assert (
        http.get("/knowledgebases/transit").json() == http.get("/knowledgebases('transit')").json()
    )
    for version in ("2026-04-01", "2026-08-01-preview", "2026-10-01", "2025-11-01-preview"):
        assert http.get("/knowledgebases", params={"api-version": version}).status_code == 200
    error_of(http.get("/knowledgebases", params={"api-version": "1999-01-01"}), 400)

    # the client's default params would replace the link's own query: follow links as given
    link = f"{http.base_url}/knowledgebases?pageSize=2&api-version=2026-08-01-preview"
    names, pages = [], 0
    while link and pages < 10:
        body = httpx.get(link, headers=ADMIN).json()
        names += [b["name"] for b in body["value"]]
        link, pages = body.get("@odata.nextLink"), pages + 1
    assert names == ["kb-0", "kb-1", "kb-2", "kb-3", "transit"]
    assert pages == 3
    prefixed = http.get("/knowledgebases", params={**VERSION, "search": "kb-", "pageSize": 3})
    assert [b["name"] for b in prefixed.json()["value"]] == ["kb-0", "kb-1", "kb-2"]


def test_definitions_and_documents_survive_a_restart(tmp_path, open_service_state):
    first = open_service_state(tmp_path / "data")
    with serve(first) as url, httpx.Client(base_url=url, headers=ADMIN, params=VERSION) as http:
        with_guides(http)
        before = http.get("/knowledgebases('transit')").json()
    first.close()
    again = open_service_state(tmp_path / "data")
    with serve(again) as url, httpx.Client(base_url=url, headers=ADMIN, params=VERSION) as http:
        assert http.get("/knowledgebases('transit')").json() == before
        assert count(http) == 2
        retrieved = http.post(
            "/knowledgebases('transit')/retrieve",
            json={"intents": [{"type": "semantic", "search": "day pass"}]},
        )
        assert retrieved.json()["references"][0]["docKey"] == "a"


def test_model_keys_are_redacted_on_reads_and_kept_when_sent_back(
    http, tmp_path, open_service_state
):
    with_guides(http)
    model = {"kind": "azureOpenAI", "azureOpenAIParameters": {"deploymentId": "d", "apiKey": "s3"}}
    base = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}], "models": [model]}
    assert http.put("/knowledgebases('transit')", json=base).status_code == 204
    read = http.get("/knowledgebases('transit')").json()
    assert read["models"][0]["azureOpenAIParameters"]["apiKey"] == "<redacted>"
    assert "s3" not in http.get("/knowledgebases").text
    read["description"] = "edited after a read"
    assert http.put("/knowledgebases('transit')", json=read).status_code == 204
    stored = open_service_state(tmp_path / "data").get("knowledgeBase", "transit")
    assert stored.body["models"][0]["azureOpenAIParameters"]["apiKey"] == "s3"
    assert stored.body["description"] == "edited after a read"


def test_deleting_what_does_not_exist_is_a_404_in_azures_shape(http):
    with_guides(http)
    file_source = {"name": "docs", "kind": "file"}
    assert http.put("/knowledgesources('docs')", json=file_source).status_code == 201
    for path, named in [
        ("/knowledgebases('ghost')", "knowledge base named 'ghost'"),
        ("/knowledgesources('ghost')", "knowledge source named 'ghost'"),
        ("/indexes('ghost')", "index named 'ghost'"),
        ("/knowledgesources('docs')/files('ghost')", "file with id 'ghost'"),
    ]:
        assert named in error_of(http.delete(path), 404)["message"], path


def test_knowledge_bases_served_from_a_directory_are_read_only(tmp_path, open_service_state):
    from tests.server_harness import transit_kb

    settings = ServerSettings(api_keys=["admin-key"], read_env_keys=False)
    for service in (None, open_service_state(tmp_path / "data")):
        app = create_app(transit_kb(), settings=settings, mcp=False, service=service)
        with (
            running_server(app) as url,
            httpx.Client(base_url=url, headers=ADMIN, params=VERSION) as http,
        ):
            assert http.get("/knowledgebases('transit')").json()["name"] == "transit"
            assert [b["name"] for b in http.get("/knowledgebases").json()["value"]] == ["transit"]
            base = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}]}
            for response in (
                http.put("/knowledgebases('transit')", json=base),
                http.delete("/knowledgebases('transit')"),
            ):
                assert "read-only" in error_of(response, 409)["message"]
