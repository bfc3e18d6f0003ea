"""The newest retrieve contract over the wire: per-source controls, knowledge-base settings,
``warning``, ``model`` and ``citationUrl``, through raw REST, the unmodified
azure-search-documents 12.0.0 client and the MCP tool, on every accepted api-version."""

from __future__ import annotations

import json

import httpx
import pytest
from tests.fakes import FailingSource
from tests.server_harness import GUIDES, GUIDES_INDEX, running_server, transit_kb

from agentic_retrieval.errors import SourceError
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.testing import Script, ScriptedChatModel
from agentic_retrieval.wire.models import SUPPORTED_API_VERSIONS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
KEY = "newest-key"
PREVIEW = "2026-08-01-preview"
PLAN = {"needs_retrieval": True, "queries": [{"query": "harbor pass price"}]}
BROKEN = FailingSource("broken", SourceError("ServiceUnavailable", "the index is unreachable"))


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    script = Script({"QueryPlan": [PLAN] * 50})
    bases = [
        transit_kb(chat_model=ScriptedChatModel(script=script, model_name="gpt-4o")),
        transit_kb(BROKEN, name="partial"),
    ]
    service = ServiceDirectory(tmp_path_factory.mktemp("service") / "data")
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    with running_server(create_app(bases, settings=settings, service=service)) as base_url:
        with client(base_url) as http:
            define_service(http)
        yield base_url


def client(base_url: str, version: str = PREVIEW) -> httpx.Client:
    return httpx.Client(
        base_url=base_url, headers={"api-key": KEY}, params={"api-version": version}, timeout=60
    )


def define_service(http: httpx.Client) -> None:
    assert http.put("/indexes('guides')", json=GUIDES_INDEX).status_code == 201
    batch = {"value": [{"@search.action": "upload", **doc} for doc in GUIDES]}
    assert http.post("/indexes('guides')/docs/search.index", json=batch).status_code == 200
    for name, processing in (("guides-ks", None), ("raw-ks", "none")):
        source = {
            "name": name,
            "kind": "searchIndex",
            "searchIndexParameters": {
                "searchIndexName": "guides",
                "sourceDataFields": [{"name": "id"}, {"name": "title"}],
            },
            **({"resultsProcessing": processing} if processing else {}),
        }
        assert http.put(f"/knowledgesources('{name}')", json=source).status_code == 201
    for name, sources in (("service", ["guides-ks"]), ("raw", ["raw-ks"])):
        base = {
            "name": name,
            "knowledgeSources": [{"name": s} for s in sources],
            "retrievalInstructions": "Prefer guides.",
            "answerInstructions": "Be brief.",
            "retrieveDefaults": {"maxOutputDocuments": 1, "maxRuntimeInSeconds": 30},
        }
        assert http.put(f"/knowledgebases('{name}')", json=base).status_code == 201


def intents(text: str, **fields) -> dict:
    return {"intents": [{"type": "semantic", "search": text}], "includeActivity": True, **fields}


def source_params(*entries: dict) -> list[dict]:
    return [{"kind": "searchIndex", **entry} for entry in entries]


# --- raw REST ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            [{"knowledgeSourceName": "fares", "neverQuerySource": True, "alwaysQuerySource": True}],
            "knowledgeSourceParams[fares]: neverQuerySource cannot be combined with "
            "alwaysQuerySource on the same knowledge source",
        ),
        (
            [{"knowledgeSourceName": "fares", "resultsProcessing": "none", "rerankerThreshold": 2}],
            "knowledgeSourceParams[fares]: rerankerThreshold cannot be combined with "
            "resultsProcessing 'none' (the source's results are not reranked)",
        ),
        (
            [
                {"knowledgeSourceName": "fares", "neverQuerySource": True},
                {"knowledgeSourceName": "hours", "neverQuerySource": True},
            ],
            "knowledgeSourceParams: neverQuerySource excludes every knowledge source this "
            "request may query (fares, hours); leave at least one to query",
        ),
    ],
)
def test_contradictory_source_params_are_400s(url, params, message):
    with client(url) as http:
        response = http.post(
            "/knowledgebases/transit/retrieve",
            json=intents("pass", knowledgeSourceParams=source_params(*params)),
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "InvalidRequest"
    assert error["message"].endswith(message)


def test_the_threshold_400_also_holds_for_a_source_stored_as_unreranked(url):
    body = intents(
        "pass",
        knowledgeSourceParams=source_params(
            {"knowledgeSourceName": "raw-ks", "rerankerThreshold": 1}
        ),
    )
    with client(url) as http:
        response = http.post("/knowledgebases('raw')/retrieve", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "knowledgeSourceParams[raw-ks]: rerankerThreshold cannot be combined with "
        "resultsProcessing 'none' (the source's results are not reranked)"
    )


def test_fail_on_error_is_a_424_naming_the_source_and_its_error(url):
    body = intents(
        "pass",
        knowledgeSourceParams=source_params(
            {"knowledgeSourceName": "fares"},
            {"knowledgeSourceName": "broken", "failOnError": True},
        ),
    )
    with client(url) as http:
        failed = http.post("/knowledgebases/partial/retrieve", json=body)
        body["knowledgeSourceParams"][1]["failOnError"] = False
        partial = http.post("/knowledgebases/partial/retrieve", json=body)
    assert failed.status_code == 424
    assert failed.json() == {
        "error": {
            "code": "KnowledgeSourceFailed",
            "message": "knowledge source 'broken' failed and its failOnError is set, so the "
            "request failed: the index is unreachable",
            "target": "broken",
            "details": [
                {
                    "code": "ServiceUnavailable",
                    "message": "the index is unreachable",
                    "target": "broken",
                }
            ],
        }
    }
    assert partial.status_code == 206


def test_never_query_source_turns_a_partial_response_into_a_full_one(url):
    body = intents(
        "harbor pass",
        knowledgeSourceParams=source_params(
            {"knowledgeSourceName": "broken", "neverQuerySource": True}
        ),
    )
    with client(url) as http:
        response = http.post("/knowledgebases/partial/retrieve", json=body)
    assert response.status_code == 200
    names = {r.get("knowledgeSourceName") for r in response.json()["activity"]}
    assert names == {"fares", "hours", None}


def test_knowledge_base_defaults_apply_and_the_request_wins(url):
    with client(url) as http:
        stored = http.post("/knowledgebases('service')/retrieve", json=intents("harbor pass"))
        wider = http.post(
            "/knowledgebases('service')/retrieve",
            json=intents("harbor pass", maxOutputDocuments=2),
        )
    assert [r["docKey"] for r in stored.json()["references"]] == ["pass"]
    assert [r["docKey"] for r in wider.json()["references"]] == ["pass", "day"]
    (search,) = [r for r in stored.json()["activity"] if r["type"] == "searchIndex"]
    assert search["warning"] == (
        "1 document found by this query was left out of the response: 1 exceeded "
        "maxOutputDocuments."
    )


@pytest.mark.parametrize("version", SUPPORTED_API_VERSIONS)
def test_citation_urls_carry_the_request_api_version_and_resolve(url, version):
    with client(url, version) as http:
        response = http.post("/knowledgebases('service')/retrieve", json=intents("harbor day pass"))
        (reference,) = response.json()["references"]
        assert reference["citationUrl"] == (
            f"{url}/indexes/guides/docs/day?$select=id%2Ctitle&api-version={version}"
        )
        document = httpx.get(reference["citationUrl"], headers={"api-key": KEY}, timeout=30)
    assert document.status_code == 200
    assert document.json() == {"id": "day", "title": "Day pass"}


def test_a_source_stored_with_results_processing_none_keeps_its_order(url):
    with client(url) as http:
        response = http.post(
            "/knowledgebases('raw')/retrieve", json=intents("harbor pass", maxOutputDocuments=3)
        )
    references = response.json()["references"]
    assert [r["docKey"] for r in references] == ["pass", "day"]
    assert all("rerankerScore" not in r for r in references)


def test_model_records_carry_the_model_name(url):
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "pass price?"}]}],
        "includeActivity": True,
    }
    with client(url) as http:
        response = http.post("/knowledgebases/transit/retrieve", json=body)
    (planning,) = [r for r in response.json()["activity"] if r["type"] == "modelQueryPlanning"]
    assert planning["model"] == {"modelName": "gpt-4o"}


# --- the unmodified SDK --------------------------------------------------------------------------


def test_the_sdk_reads_every_new_field_and_sends_preview_params(url):
    sdk = pytest.importorskip("azure.search.documents.knowledgebases")
    from azure.core.credentials import AzureKeyCredential
    from azure.search.documents.knowledgebases.models import (
        KnowledgeBaseRetrievalRequest,
        KnowledgeRetrievalSemanticIntent,
        SearchIndexKnowledgeSourceParams,
    )

    params = SearchIndexKnowledgeSourceParams(knowledge_source_name="guides-ks")
    params["maxOutputDocuments"] = 1  # preview fields the GA model lacks: set as raw keys
    params["resultsProcessing"] = "rerank"
    request = KnowledgeBaseRetrievalRequest(
        intents=[KnowledgeRetrievalSemanticIntent(search="harbor pass")],
        include_activity=True,
        knowledge_source_params=[params],
    )
    request["maxOutputDocuments"] = 3
    with sdk.KnowledgeBaseRetrievalClient(
        url, AzureKeyCredential(KEY), knowledge_base_name="service"
    ) as retrieval:
        result = retrieval.retrieve(request)
    assert [ref.doc_key for ref in result.references] == ["pass"]
    assert result.references[0]["citationUrl"].startswith(f"{url}/indexes/guides/docs/pass?")
    (search,) = [record for record in result.activity if record.type == "searchIndex"]
    assert search["warning"].endswith("1 exceeded maxOutputDocuments.")


def test_the_sdk_sees_fail_on_error_once_without_retrying(url):
    sdk = pytest.importorskip("azure.search.documents.knowledgebases")
    from azure.core.credentials import AzureKeyCredential
    from azure.core.exceptions import HttpResponseError

    body = intents(
        "pass",
        knowledgeSourceParams=source_params({"knowledgeSourceName": "broken", "failOnError": True}),
    )
    calls = BROKEN.calls
    with sdk.KnowledgeBaseRetrievalClient(
        url, AzureKeyCredential(KEY), knowledge_base_name="partial"
    ) as retrieval:
        with pytest.raises(HttpResponseError) as info:
            retrieval.retrieve(body)
    assert info.value.status_code == 424
    assert info.value.error.code == "KnowledgeSourceFailed"
    assert BROKEN.calls == calls + 1


def test_the_sdk_pipeline_reads_the_event_stream(url):
    """The GA SDK has no streaming method; its pipeline (key policy, retries) with
    ``send_request`` is how an Azure client streams, and it reads ours unchanged."""
    sdk = pytest.importorskip("azure.search.documents.knowledgebases")
    from azure.core.credentials import AzureKeyCredential
    from azure.core.rest import HttpRequest

    request = HttpRequest(
        "POST",
        "/knowledgebases('service')/retrieve",
        params={"api-version": "2026-10-01"},
        headers={"Accept": "text/event-stream"},
        json=intents("harbor day pass"),
    )
    with sdk.KnowledgeBaseRetrievalClient(
        url, AzureKeyCredential(KEY), knowledge_base_name="service"
    ) as retrieval:
        response = retrieval.send_request(request, stream=True)
        text = b"".join(response.iter_bytes()).decode()
        response.close()
    lines = [line for line in text.splitlines() if line.startswith("event: ")]
    assert response.status_code == 200
    names = [line.removeprefix("event: ") for line in lines]
    assert names[0] == "retrieval.started"
    assert names[-2:] == ["references.completed", "response.completed"]


# --- MCP -----------------------------------------------------------------------------------------


async def test_the_mcp_tool_excludes_caps_and_warns(url):
    pytest.importorskip("mcp")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"api-key": KEY}, timeout=httpx2.Timeout(30, read=60))
    async with Client(
        streamable_http_client(f"{url}/knowledgebases/partial/mcp", http_client=http)
    ) as mcp:
        result = await mcp.call_tool(
            "knowledge_base_retrieve",
            {
                "query": "harbor pass price in dollars",
                "effort": "minimal",
                "max_output_documents": 1,
                "exclude_sources": ["broken"],
            },
        )
        refused = await mcp.call_tool(
            "knowledge_base_retrieve",
            {"query": "pass", "effort": "minimal", "exclude_sources": ["fares", "hours", "broken"]},
        )
    data = result.structured_content
    assert data["partial"] is False
    assert [ref["docKey"] for ref in data["references"]] == ["fare-pass"]
    # lexical scores are not cut by the default threshold: the cap is what leaves them out
    assert data["warnings"] == [
        "fares: 2 documents found by this query were left out of the response: 2 exceeded "
        "maxOutputDocuments."
    ]
    assert refused.is_error
    assert "exclude_sources leaves out every knowledge source" in refused.content[0].text
    assert "neverQuerySource" not in refused.content[0].text  # the tool's argument, not REST's


def test_the_event_stream_carries_citation_urls_too(url):
    """The SSE route passes the service endpoint and api-version like the JSON route."""
    version = "2026-10-01"
    with client(url, version) as http:
        streamed = http.post(
            "/knowledgebases('service')/retrieve",
            json=intents("harbor day pass"),
            headers={"accept": "text/event-stream"},
        )
    frames = [block.splitlines() for block in streamed.text.strip().split("\n\n")]
    events = {lines[0].removeprefix("event: "): json.loads(lines[1][6:]) for lines in frames}
    (reference,) = events["references.completed"]
    expected = f"{url}/indexes/guides/docs/day?$select=id%2Ctitle&api-version={version}"
    assert reference["citationUrl"] == expected
    assert events["response.completed"]["response"]["references"] == [reference]
