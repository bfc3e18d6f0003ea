"""The REST app in-process: routes, status codes, auth, limits, streaming, error bodies."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from fastapi.testclient import TestClient
from tests.fakes import SlowSource, unreachable_index
from tests.server_harness import intents_body, parse_sse, transit_kb

from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.testing import ScriptedChatModel
from agentic_retrieval.wire.models import SUPPORTED_API_VERSIONS

GA = "2026-04-01"
KEY = "admin-secret-key"
QUERY_KEY = "query-secret-key"


def client(*extra, settings=None, chat_model=None, **kwargs) -> TestClient:
    kb = transit_kb(*extra, chat_model=chat_model)
    settings = settings or ServerSettings(read_env_keys=False)
    return TestClient(create_app(kb, settings=settings, mcp=False), **kwargs)


def doc_keys(body: dict) -> list[str]:
    return [ref["docKey"] for ref in body["references"]]


@pytest.mark.parametrize(
    "path",
    [
        "/knowledgebases/transit/retrieve",
        "/knowledgebases('transit')/retrieve",
        "/agents/transit/retrieve",
    ],
)
def test_retrieve_both_path_forms(path):
    with client() as c:
        r = c.post(f"{path}?api-version={GA}", json=intents_body("student harbor pass"))
    assert r.status_code == 200
    body = r.json()
    assert doc_keys(body)[0] == "fare-pass"
    assert json.loads(body["response"][0]["content"][0]["text"])[0]["ref_id"] == 0
    assert {a["knowledgeSourceName"] for a in body["activity"] if "count" in a} == {
        "fares",
        "hours",
    }


@pytest.mark.parametrize("version", SUPPORTED_API_VERSIONS)
def test_every_supported_api_version_is_accepted(version):
    with client() as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={version}",
            json=intents_body("last tram sunday"),
        )
    assert r.status_code == 200
    assert doc_keys(r.json())[0] == "hours-sunday"


@pytest.mark.parametrize("query", ["?api-version=2020-01-01", ""])
def test_unknown_or_missing_api_version_is_400_naming_supported(query):
    with client() as c:
        r = c.post(f"/knowledgebases/transit/retrieve{query}", json=intents_body("x"))
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "InvalidApiVersion"
    for version in SUPPORTED_API_VERSIONS:
        assert version in error["message"]


def test_unknown_kb_and_unknown_source_are_404():
    with client() as c:
        r = c.post(f"/knowledgebases/nope/retrieve?api-version={GA}", json=intents_body("x"))
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "KnowledgeBaseNotFound"
        body = intents_body("x", knowledgeSourceParams=[{"knowledgeSourceName": "ghost"}])
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=body)
        assert r.status_code == 404
        assert "ghost" in r.json()["error"]["message"]


def test_failing_source_gives_206_with_the_others_results():
    with client(unreachable_index()) as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}",
            json=intents_body("harbor pass students"),
        )
    assert r.status_code == 206
    body = r.json()
    assert doc_keys(body)[0] == "fare-pass"
    errors = [a for a in body["activity"] if a.get("error")]
    assert [(a["knowledgeSourceName"], a["error"]["code"]) for a in errors] == [
        ("broken", "ServiceUnavailable")
    ]


def test_runtime_elapsed_with_nothing_ready_is_408():
    kb_settings = ServerSettings(read_env_keys=False)
    from agentic_retrieval import KnowledgeBase

    kb = KnowledgeBase([SlowSource(delay=10)], name="slowkb")
    with TestClient(create_app(kb, settings=kb_settings, mcp=False)) as c:
        r = c.post(
            f"/knowledgebases/slowkb/retrieve?api-version={GA}",
            json=intents_body("anything", maxRuntimeInSeconds=1),
        )
    assert r.status_code == 408
    assert r.json()["error"]["code"] == "RequestTimeout"


def test_messages_with_a_scripted_planner():
    plan = {
        "needs_retrieval": True,
        "queries": [{"query": "last tram Sunday Hillcrest", "knowledge_sources": ["hours"]}],
    }
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    body = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "When can I get home on Sunday night?"}],
            }
        ]
    }
    with client(chat_model=model) as c:
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=body)
    assert r.status_code == 200
    body = r.json()
    assert doc_keys(body)[0] == "hours-sunday"
    assert body["activity"][0]["type"] == "modelQueryPlanning"


def test_low_effort_without_a_model_is_400(monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "fares?"}]}],
        "retrievalReasoningEffort": {"kind": "low"},
    }
    with client() as c:
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=body)
    assert r.status_code == 400
    assert "AGENTIC_RETRIEVAL_CHAT_MODEL" in r.json()["error"]["message"]


# --- auth ----------------------------------------------------------------------------------


def keyed_client() -> TestClient:
    settings = ServerSettings(api_keys=[KEY], query_keys=[QUERY_KEY], read_env_keys=False)
    return client(settings=settings)


@pytest.mark.parametrize(
    "headers",
    [{}, {"api-key": "wrong"}, {"authorization": "Bearer nope"}, {"authorization": f"Basic {KEY}"}],
)
def test_missing_or_wrong_key_is_401_without_kb_detail(headers):
    with keyed_client() as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}",
            json=intents_body("x"),
            headers=headers,
        )
        r_unknown = c.post(
            f"/knowledgebases/nope/retrieve?api-version={GA}",
            json=intents_body("x"),
            headers=headers,
        )
    assert r.status_code == 401 and r_unknown.status_code == 401
    assert r.json() == r_unknown.json()  # no hint whether the KB exists
    assert "transit" not in r.text and "fares" not in r.text


@pytest.mark.parametrize(
    "headers", [{"api-key": KEY}, {"Authorization": f"Bearer {KEY}"}, {"api-key": QUERY_KEY}]
)
def test_valid_keys_may_retrieve(headers):
    with keyed_client() as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}",
            json=intents_body("bike unlock"),
            headers=headers,
        )
    assert r.status_code == 200
    assert doc_keys(r.json())[0] == "fare-bike"


def test_query_key_cannot_read_definitions_admin_key_can():
    with keyed_client() as c:
        forbidden = c.get(f"/knowledgebases?api-version={GA}", headers={"api-key": QUERY_KEY})
        listed = c.get(f"/knowledgebases?api-version={GA}", headers={"api-key": KEY})
        one = c.get(f"/knowledgebases('transit')?api-version={GA}", headers={"api-key": KEY})
    assert forbidden.status_code == 403
    assert listed.status_code == 200
    assert [kb["name"] for kb in listed.json()["value"]] == ["transit"]
    assert [s["name"] for s in one.json()["knowledgeSources"]] == ["fares", "hours"]
    assert KEY not in listed.text and QUERY_KEY not in listed.text


def test_keys_from_the_environment(monkeypatch):
    monkeypatch.setenv("AGENTIC_RETRIEVAL_API_KEYS", "envadmin, query:envquery")
    with client(settings=ServerSettings()) as c:
        url = f"/knowledgebases/transit/retrieve?api-version={GA}"
        assert c.post(url, json=intents_body("x")).status_code == 401
        allowed = c.post(url, json=intents_body("x"), headers={"api-key": "envquery"})
        assert allowed.status_code == 200
        listing = c.get(f"/knowledgebases?api-version={GA}", headers={"api-key": "envquery"})
        assert listing.status_code == 403
        listing = c.get(f"/knowledgebases?api-version={GA}", headers={"api-key": "envadmin"})
        assert listing.status_code == 200


def test_healthz_needs_no_key():
    with keyed_client() as c:
        r = c.get("/healthz")
    # (issue 19 added the figures behind the status: lag, query wait, conversions)
    assert r.status_code == 200 and r.json()["status"] == "ok"


# --- limits and bugs ------------------------------------------------------------------------


def test_body_over_the_limit_is_413_before_parsing():
    settings = ServerSettings(read_env_keys=False, max_body_bytes=1000)
    with client(settings=settings) as c:
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", content=b"x" * 1001)
        ok = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}", json=intents_body("fares")
        )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "RequestEntityTooLarge"
    assert ok.status_code == 200


async def test_requests_beyond_the_in_flight_cap_get_429_with_retry_after():
    from agentic_retrieval import KnowledgeBase

    kb = KnowledgeBase([SlowSource(delay=0.5)], name="slowkb")
    settings = ServerSettings(read_env_keys=False, max_in_flight=2, retry_after_seconds=3)
    app = create_app(kb, settings=settings, mcp=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        url = f"/knowledgebases/slowkb/retrieve?api-version={GA}"
        responses = await asyncio.gather(*(c.post(url, json=intents_body("x")) for _ in range(4)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 200, 429, 429]
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["retry-after"] == "3"
    assert refused.json()["error"]["code"] == "TooManyRequests"


def test_query_keys_may_send_bodies_to_the_query_routes_only_and_uploads_are_declared():
    # the server's guard refuses a body from the route's declaration before reading it
    # (issue 27): this pins which routes open their body to query keys, and which take
    # uploads; every other route takes an admin key's body of at most max_body_bytes
    from agentic_retrieval.server.auth import body_access_of

    app = create_app(transit_kb(), settings=ServerSettings(read_env_keys=False))
    body_routes = [
        (route.path, body_access_of(route.endpoint))
        for route in app.router.routes
        if not getattr(route, "methods", None) or {"POST", "PUT", "PATCH"} & route.methods
    ]
    query = sorted(path for path, access in body_routes if access.role == "query")
    uploads = sorted(path for path, access in body_routes if access.upload)
    assert query == [
        "/agents('{name}')/retrieve",
        "/agents/{name}/retrieve",
        "/indexes('{name}')/docs/search",
        "/indexes('{name}')/docs/search.post.search",
        "/indexes/{name}/docs/search",
        "/indexes/{name}/docs/search.post.search",
        "/knowledgebases('{name}')/mcp",
        "/knowledgebases('{name}')/retrieve",
        "/knowledgebases/{name}/mcp",
        "/knowledgebases/{name}/retrieve",
        "/v1/chat/completions",
    ]
    assert uploads == [
        "/indexes('{name}')/docs/index",
        "/indexes('{name}')/docs/search.index",
        "/indexes/{name}/docs/index",
        "/indexes/{name}/docs/search.index",
        "/knowledgesources('{name}')/files",
        "/knowledgesources('{name}')/files('{file_id}')",
        "/knowledgesources/{name}/files",
        "/knowledgesources/{name}/files/{file_id}",
    ]


def test_a_bug_is_500_with_a_request_id_and_no_trace(monkeypatch):
    kb = transit_kb()

    async def broken(*args, **kwargs):
        raise RuntimeError("internal secret detail")

    monkeypatch.setattr(kb, "aretrieve", broken)
    app = create_app(kb, settings=ServerSettings(read_env_keys=False), mcp=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=intents_body("x"))
    assert r.status_code == 500
    request_id = r.headers["x-ms-request-id"]
    assert request_id in r.json()["error"]["message"]
    assert "secret" not in r.text and "Traceback" not in r.text


def test_unknown_route_and_method_use_the_error_shape():
    with client() as c:
        missing = c.get("/nothing-here")
        wrong_method = c.get(f"/knowledgebases/transit/retrieve?api-version={GA}")
    assert missing.status_code == 404 and set(missing.json()["error"]) == {
        "code",
        "message",
        "details",
    }
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()


# --- streaming -------------------------------------------------------------------------------


def test_event_stream_sends_azure_events_then_the_response():
    with client(unreachable_index()) as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}",
            json=intents_body("night tram"),
            headers={"accept": "text/event-stream"},
        )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    names = [name for name, _ in events]
    assert names[0] == "retrieval.started" and names[-1] == "response.completed"
    assert names.count("activity.started") == names.count("activity.completed") == 4
    final = events[-1][1]
    assert final["statusCode"] == 206  # the unreachable index failed: partial
    assert final["response"]["references"][0]["docKey"] == "hours-night"
    failed = [d for n, d in events if n == "activity.completed" and d.get("error")]
    assert [d["knowledgeSourceName"] for d in failed] == ["broken"]


def test_event_stream_validation_errors_are_plain_400():
    with client() as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}",
            json={"intents": []},
            headers={"accept": "text/event-stream"},
        )
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/json")


def test_event_stream_reports_a_failing_run_as_an_error_event(monkeypatch):
    from agentic_retrieval.knowledge_base import KnowledgeBase

    async def broken_stream(self, request, **kwargs):
        yield {"event": "retrieval.started", "data": {"requestId": "r"}}
        raise RuntimeError("provider exploded")

    monkeypatch.setattr(KnowledgeBase, "astream", broken_stream)
    with client() as c:
        r = c.post(
            f"/knowledgebases/transit/retrieve?api-version={GA}",
            json=intents_body("night tram"),
            headers={"accept": "text/event-stream"},
        )
    events = parse_sse(r.text)
    assert [name for name, _ in events] == ["retrieval.started", "error"]
    error = events[-1][1]
    assert error["error"]["code"] == "InternalServerError"
    assert "provider exploded" not in json.dumps(error)  # no internals leak
    assert error["error"]["details"][0]["code"] == "RequestId"


def test_2025_05_preview_target_index_params_are_accepted():
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "night tram"}]}],
        "retrievalReasoningEffort": {"kind": "minimal"},
        "targetIndexParams": [
            {
                "indexName": "hours",
                "filterAddOn": None,
                "IncludeReferenceSourceData": True,
                "rerankerThreshold": 0.5,
                "maxDocsForReranker": 250,
            }
        ],
    }
    with client() as c:
        r = c.post("/agents/transit/retrieve?api-version=2025-05-01-preview", json=body)
    assert r.status_code == 200, r.text
    refs = r.json()["references"]
    assert refs and all(ref.get("sourceData") for ref in refs)
    sources = {a["knowledgeSourceName"] for a in r.json()["activity"] if "count" in a}
    assert sources == {"hours"}
