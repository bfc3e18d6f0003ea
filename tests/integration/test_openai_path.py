"""The real ``langchain-openai`` client, over HTTP, against an OpenAI-compatible stand-in."""

from __future__ import annotations

import json

import pytest
from tests.fakes import user
from tests.integration.openai_standin import OpenAIStandIn

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.llm.chat_models import _init_model

pytest.importorskip("langchain_openai")
pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _fresh_model_cache():
    _init_model.cache_clear()
    yield
    _init_model.cache_clear()


def test_medium_answer_synthesis_over_http_with_token_counts(toy_source, monkeypatch):
    script = {
        "QueryPlan": [
            {
                "needs_retrieval": True,
                "assistant_message": "",
                "queries": [
                    {
                        "query": "day pass price",
                        "goal": "fare",
                        "knowledge_sources": [],
                        "filter": "",
                    }
                ],
            }
        ],
        "EvidenceAssessment": [
            {
                "is_sufficient": True,
                "confidence": 0.8,
                "key_points": [{"point": "day pass is 6 euros", "ref_ids": [0]}],
                "missing_information": [],
                "followup_queries": [],
            }
        ],
        "SynthesizedAnswer": [{"answer": "A day pass costs 6 euros [ref_id:0]."}],
    }
    with OpenAIStandIn(script) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENTIC_RETRIEVAL_CHAT_MODEL", "openai:gpt-4.1-mini")
        kb = KnowledgeBase([toy_source])
        response = kb.retrieve(
            {
                "messages": [user("How much is a day pass?")],
                "retrievalReasoningEffort": {"kind": "medium"},
                "outputMode": "answerSynthesis",
            }
        )
        sent = list(server.requests)
    assert response.text == "A day pass costs 6 euros [ref_id:0]."
    assert response.references[0].doc_key == "fares"
    assert [r["response_format"]["json_schema"]["name"] for r in sent] == [
        "QueryPlan",
        "EvidenceAssessment",
        "SynthesizedAnswer",
    ]
    assert all(r["model"] == "gpt-4.1-mini" for r in sent)
    by_type = {a.type: a.model_extra for a in response.activity}
    for record_type in ("modelQueryPlanning", "modelEvidenceAssessment", "modelAnswerSynthesis"):
        assert by_type[record_type]["inputTokens"] == 321
        assert by_type[record_type]["outputTokens"] == 45
        assert by_type[record_type]["reasoningTokens"] == 7
    assert by_type["agenticReasoning"]["reasoningTokens"] == 21
    # the planner saw the source list and the conversation
    system = sent[0]["messages"][0]["content"]
    assert "- transit: Tram and bike rules" in system
    assert "How much is a day pass?" in json.dumps(sent[0]["messages"])


def test_unparseable_model_output_over_http_degrades(toy_source, monkeypatch):
    script = {"QueryPlan": ["this is not json", '{"needs_retrieval": "perhaps"}']}
    with OpenAIStandIn(script) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        kb = KnowledgeBase([toy_source], chat_model="openai:gpt-4.1-mini")
        response = kb.retrieve({"messages": [user("lost items on a tram")]})
        assert len(server.requests) == 2
    planning = response.activity[0]
    assert planning.error.code == "ModelOutputInvalid"
    # With json_schema output the OpenAI client itself raises on unparseable content, before
    # LangChain sees the usage block: those attempts' tokens cannot be counted.
    assert planning.model_extra["inputTokens"] == 0
    assert "QueryPlan" in planning.error.message or "validation" in planning.error.message
    assert response.references[0].doc_key == "lost"


async def test_answer_deltas_stream_from_the_real_client(toy_source, monkeypatch):
    """answer.delta over langchain-openai's streaming path (server-sent chunks)."""
    answer = "A day pass costs 6 euros [ref_id:0]; a month costs more [ref_id:7]."
    plan = {"needs_retrieval": True, "assistant_message": "", "queries": []}
    plan["queries"] = [{"query": "day pass", "goal": "", "knowledge_sources": [], "filter": ""}]
    script = {"QueryPlan": [plan], "SynthesizedAnswer": [{"answer": answer}]}
    with OpenAIStandIn(script, piece=4) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        kb = KnowledgeBase([toy_source], chat_model="openai:gpt-4.1-mini")
        request = {"messages": [user("How much is a day pass?")], "outputMode": "answerSynthesis"}
        events = [e async for e in kb.astream(request, extensions={"answer.delta"})]
        sent = list(server.requests)
    assert sent[-1]["stream"] is True  # the answer came as server-sent chunks
    deltas = [e["data"]["delta"] for e in events if e["event"] == "answer.delta"]
    assert len(deltas) > 5 and "".join(deltas) == answer
    (completed,) = [e["data"] for e in events if e["event"] == "answer.completed"]
    assert (
        completed["message"]["content"][0]["text"]
        == "A day pass costs 6 euros [ref_id:0]; a month costs more."
    )
    (answer_record,) = [
        e["data"]
        for e in events
        if e["event"] == "activity.completed" and e["data"]["type"] == "modelAnswerSynthesis"
    ]
    assert answer_record["removedCitations"] == [7]
