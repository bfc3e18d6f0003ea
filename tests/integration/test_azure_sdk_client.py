"""The official azure-search-documents 12.0.0 retrieval clients, unmodified, against our server.

The SDK sends ``POST /knowledgebases('{name}')/retrieve?api-version=2026-04-01`` with an
``api-key`` header; its key policy accepts plain http, so the server runs on 127.0.0.1 without
TLS.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("azure.search.documents.knowledgebases")

from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import ClientAuthenticationError, ResourceNotFoundError
from azure.search.documents.knowledgebases import KnowledgeBaseRetrievalClient
from azure.search.documents.knowledgebases.aio import (
    KnowledgeBaseRetrievalClient as AsyncKnowledgeBaseRetrievalClient,
)
from azure.search.documents.knowledgebases.models import (
    KnowledgeBaseAgenticReasoningActivityRecord,
    KnowledgeBaseRetrievalRequest,
    KnowledgeRetrievalSemanticIntent,
)
from tests.fakes import unreachable_index
from tests.server_harness import running_server, transit_kb

from agentic_retrieval.graph.effort import NO_MODEL_NOTE
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.testing import Script, ScriptedChatModel

pytestmark = pytest.mark.integration
KEY = "sdk-test-key"
PLAN = {
    "needs_retrieval": True,
    "queries": [{"query": "last Hillcrest tram Sunday", "knowledge_sources": ["hours"]}],
}


@pytest.fixture(scope="module")
def endpoint():
    script = Script({"QueryPlan": [PLAN] * 20})
    bases = [
        transit_kb(chat_model=ScriptedChatModel(script=script)),
        transit_kb(unreachable_index(), name="partial"),
    ]
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    with running_server(create_app(bases, settings=settings)) as url:
        yield url


def intents_request(text: str) -> KnowledgeBaseRetrievalRequest:
    return KnowledgeBaseRetrievalRequest(
        intents=[KnowledgeRetrievalSemanticIntent(search=text)], include_activity=True
    )


def messages_body(text: str) -> dict:
    return {
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "retrievalReasoningEffort": {"kind": "low"},
        "includeActivity": True,
    }


def test_sync_client_retrieves_with_intents(endpoint):
    with KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name="transit"
    ) as client:
        result = client.retrieve(intents_request("student harbor pass price"))
    assert [ref.doc_key for ref in result.references] == ["fare-pass"]
    assert result.references[0].reranker_score > 0
    assert {record.type for record in result.activity} == {"searchIndex", "semanticReranker"}
    grounding = json.loads(result.response[0].content[0].text)
    assert grounding[0]["ref_id"] == 0 and "39 dollars" in grounding[0]["content"]


def test_sync_client_retrieves_with_messages_as_a_raw_body(endpoint):
    with KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name="transit"
    ) as client:
        result = client.retrieve(messages_body("When does the last tram leave on Sunday?"))
    assert result.references[0].doc_key == "hours-sunday"
    assert result.activity[0].type == "modelQueryPlanning"
    assert result.activity[0]["inputTokens"] == 120  # a preview record: kept as raw JSON


@pytest.mark.parametrize(
    ("question", "tier"),
    [
        ("When does the last Hillcrest Line tram leave on Sunday?", "minimal"),
        ("How much is a student Harbor Pass, and when does the last tram leave?", "low"),
    ],
    ids=["direct", "two-part"],
)
def test_sync_client_reads_auto_effort_responses(endpoint, question, tier):
    body = {**messages_body(question), "retrievalReasoningEffort": {"kind": "auto"}}
    with KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name="transit"
    ) as client:
        result = client.retrieve(body)
    assert result.references[0].doc_key in {"hours-sunday", "fare-pass"}
    (record,) = [r for r in result.activity if r.type == "agenticReasoning"]
    assert isinstance(record, KnowledgeBaseAgenticReasoningActivityRecord)
    assert record.retrieval_reasoning_effort.kind == tier
    assert record["logicalReasoningEffort"] == {"kind": "auto"}  # preview: raw JSON
    assert record["effortDecisions"][0]["step"] == "question"


def test_sync_client_reads_the_no_model_note(endpoint, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    body = messages_body("When does the night tram run?")
    del body["retrievalReasoningEffort"]
    with KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name="partial"
    ) as client:
        result = client.retrieve(body)
    (record,) = [r for r in result.activity if r.type == "agenticReasoning"]
    assert record.retrieval_reasoning_effort.kind == "minimal"
    assert record["warning"] == NO_MODEL_NOTE


def test_sync_client_gets_partial_results_when_a_source_fails(endpoint):
    with KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name="partial"
    ) as client:
        result = client.retrieve(intents_request("night tram"))
    assert result.references[0].doc_key == "hours-night"
    failed = [r for r in result.activity if r.error is not None]
    assert [(r["knowledgeSourceName"], r.error.code) for r in failed] == [
        ("broken", "ServiceUnavailable")
    ]


def test_wrong_key_raises_the_sdk_auth_error(endpoint):
    with KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential("wrong"), knowledge_base_name="transit"
    ) as client:
        with pytest.raises(ClientAuthenticationError):
            client.retrieve(intents_request("fares"))


def test_unknown_kb_raises_the_sdk_not_found_error(endpoint):
    with KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name="no-such-kb"
    ) as client:
        with pytest.raises(ResourceNotFoundError) as caught:
            client.retrieve(intents_request("fares"))
    assert caught.value.error.code == "KnowledgeBaseNotFound"


async def test_async_client_retrieves_and_reports_errors(endpoint):
    async with AsyncKnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name="transit"
    ) as client:
        result = await client.retrieve(intents_request("bike unlock per minute"))
        assert result.references[0].doc_key == "fare-bike"
        chat = await client.retrieve(messages_body("Last tram on Sunday?"))
        assert chat.references[0].doc_key == "hours-sunday"
    async with AsyncKnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential("wrong"), knowledge_base_name="transit"
    ) as client:
        with pytest.raises(ClientAuthenticationError):
            await client.retrieve(intents_request("fares"))
