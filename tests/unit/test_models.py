"""Wire models: validation errors name the field; JSON round-trips through the Azure SDK."""

from __future__ import annotations

import json

import pytest
from tests.fakes import user

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.wire.models import RetrieveRequest, RetrieveResponse
from agentic_retrieval.wire.retrieve import parse_request

sdk = pytest.importorskip("azure.search.documents.knowledgebases.models")


def test_request_accepts_ga_and_preview_fields():
    body = {
        "messages": [user("hello world")],
        "intents": [{"type": "semantic", "search": "what is a brokerage"}],
        "retrievalReasoningEffort": {"kind": "low"},
        "outputMode": "answerSynthesis",
        "includeActivity": True,
        "maxRuntimeInSeconds": 60,
        "maxOutputSize": 100000,
        "maxOutputSizeInTokens": 5000,
        "knowledgeSourceParams": [
            {
                "kind": "searchIndex",
                "knowledgeSourceName": "ks",
                "filterAddOn": "foo eq 'bar'",
                "includeReferences": True,
                "includeReferenceSourceData": True,
                "alwaysQuerySource": False,
                "rerankerThreshold": 2.1,
            }
        ],
    }
    request = RetrieveRequest.model_validate(body)
    assert request.effort == "low"
    assert request.knowledge_source_params[0].reranker_threshold == 2.1
    assert request.to_wire() == body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [user("   ")]}, "messages"),
        ({"intents": [{"search": ""}]}, "intents.0.search"),
        ({"intents": [{"search": "x"}], "maxRuntimeInSeconds": 0}, "maxRuntimeInSeconds"),
        ({"intents": [{"search": "x"}], "maxRuntimeInSeconds": 301}, "maxRuntimeInSeconds"),
        (
            {"intents": [{"search": "x"}], "retrievalReasoningEffort": {"kind": "high"}},
            "retrievalReasoningEffort.kind",
        ),
        ({"intents": [{"search": "x"}], "outputMode": "grounded"}, "outputMode"),
        ({"intents": [{"search": "x"}], "maxOutputSize": -5}, "maxOutputSize"),
        ({"intents": [{"search": "x"}], "unknownField": 1}, "unknownField"),
        (
            {
                "intents": [{"search": "x"}],
                "knowledgeSourceParams": [{"knowledgeSourceName": "a", "rerankerThreshold": 5}],
            },
            "knowledgeSourceParams.0.rerankerThreshold",
        ),
        (
            {
                "intents": [{"search": "x"}],
                "retrievalReasoningEffort": {"kind": "minimal"},
                "outputMode": "answerSynthesis",
            },
            "minimal",
        ),
    ],
)
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(InvalidRequestError) as excinfo:
        parse_request(body)
    assert field in str(excinfo.value)


def test_context_rejects_out_of_range_values_naming_the_field():
    with pytest.raises(ValueError, match="max_subqueries"):
        Context(max_subqueries=11)
    with pytest.raises(ValueError, match="reasoning_effort"):
        Context(reasoning_effort="high")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_runtime_seconds"):
        Context(max_runtime_seconds=301)


def test_effort_as_plain_string_is_accepted():
    request = RetrieveRequest.model_validate(
        {"intents": [{"search": "x"}], "retrievalReasoningEffort": "minimal"}
    )
    assert request.effort == "minimal"


def test_sdk_request_serialises_to_a_request_we_accept():
    request = sdk.KnowledgeBaseRetrievalRequest(
        intents=[sdk.KnowledgeRetrievalSemanticIntent(search="what is a brokerage")],
        max_runtime_in_seconds=30,
        max_output_size_in_tokens=5000,
        include_activity=True,
        knowledge_source_params=[
            sdk.SearchIndexKnowledgeSourceParams(
                knowledge_source_name="transit",
                filter_add_on="year ge 2023",
                include_references=True,
                include_reference_source_data=True,
                reranker_threshold=1.5,
            )
        ],
    )
    ours = RetrieveRequest.model_validate(json.loads(json.dumps(request.as_dict())))
    assert ours.intents[0].search == "what is a brokerage"
    assert ours.max_output_size_in_tokens == 5000
    params = ours.knowledge_source_params[0]
    assert (params.kind, params.filter_add_on, params.reranker_threshold) == (
        "searchIndex",
        "year ge 2023",
        1.5,
    )


def test_our_response_round_trips_through_the_sdk_models(toy_source, faq_source):
    kb = KnowledgeBase([toy_source, faq_source])
    ours = kb.retrieve(
        {
            "intents": [{"search": "day pass refund"}],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "transit", "includeReferenceSourceData": True},
                {"knowledgeSourceName": "faq"},
            ],
        }
    )
    wire = json.loads(json.dumps(ours.to_wire()))
    theirs = sdk.KnowledgeBaseRetrievalResponse(wire)
    assert theirs.response[0].role == "assistant"
    assert theirs.response[0].content[0].text == ours.text
    assert isinstance(theirs.references[0], sdk.KnowledgeBaseSearchIndexReference)
    assert [r.doc_key for r in theirs.references] == [r.doc_key for r in ours.references]
    assert [r.reranker_score for r in theirs.references] == [
        r.reranker_score for r in ours.references
    ]
    assert theirs.references[0].activity_source == ours.references[0].activity_source
    assert [a.type for a in theirs.activity] == [a.type for a in ours.activity]
    assert [a.elapsed_ms for a in theirs.activity] == [a.elapsed_ms for a in ours.activity]
    # and back: the SDK's serialisation is a response we parse identically
    again = RetrieveResponse.model_validate(theirs.as_dict())
    assert again.to_wire() == ours.to_wire()


def test_error_records_round_trip_through_the_sdk(toy_source):
    from tests.fakes import FailingSource

    kb = KnowledgeBase([toy_source, FailingSource()])
    ours = kb.retrieve({"intents": [{"search": "day pass"}]})
    theirs = sdk.KnowledgeBaseRetrievalResponse(json.loads(json.dumps(ours.to_wire())))
    failed = [a for a in theirs.activity if a.error is not None]
    assert len(failed) == 1
    assert failed[0].error.code == "KnowledgeSourceError"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"top_n": 2.5}, "top_n"),
        ({"max_subqueries": "3"}, "max_subqueries"),
        ({"knowledge_sources": "policies"}, "knowledge_sources"),
        ({"chat_model": 3}, "chat_model"),
        ({"routing_prompt": 'Answer as JSON {"queries": []} {sources}'}, "routing_prompt"),
        ({"answer_prompt": "Answer the question. {today}"}, "answer_prompt"),
    ],
)
def test_context_rejects_wrong_types_and_prompts_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Context(**kwargs)


def test_prompt_with_doubled_braces_is_fine():
    Context(routing_prompt='Reply as JSON {{"queries": []}} for {sources} on {today}.')


def test_blank_intent_is_a_validation_error_naming_it():
    with pytest.raises(InvalidRequestError, match=r"intents\.0\.search"):
        parse_request({"intents": [{"search": "   "}]})


def test_sdk_web_source_params_validate():
    request = RetrieveRequest.model_validate(
        {
            "intents": [{"search": "x"}],
            "knowledgeSourceParams": [
                {
                    "knowledgeSourceName": "web",
                    "kind": "web",
                    "count": 5,
                    "freshness": "Week",
                    "market": "en-US",
                }
            ],
        }
    )
    assert request.knowledge_source_params[0].count == 5


def test_unusable_model_is_a_request_error_not_a_crash(toy_source, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    from agentic_retrieval.llm.chat_models import _init_model

    _init_model.cache_clear()
    for spec in ("foo:bar", "openai:gpt-4.1-mini"):
        kb = KnowledgeBase([toy_source], chat_model=spec)
        with pytest.raises(InvalidRequestError, match="cannot be created"):
            kb.retrieve({"messages": [user("day pass?")]})
    kb = KnowledgeBase([toy_source], defaults=Context(chat_model="  "))
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    with pytest.raises(InvalidRequestError, match="AGENTIC_RETRIEVAL_CHAT_MODEL"):
        kb.retrieve({"messages": [user("day pass?")], "retrievalReasoningEffort": "low"})


def test_local_store_references_are_typed_search_index_references_in_the_sdk(tmp_path):
    from agentic_retrieval.sources.local import LocalKnowledgeSource

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.md").write_text("# Leave\n\nStaff get 25 vacation days a year.\n")
    source = LocalKnowledgeSource("handbook", tmp_path / "handbook.sqlite", create=True)
    source.index([docs])
    ours = KnowledgeBase([source]).retrieve({"intents": [{"search": "vacation days"}]})
    theirs = sdk.KnowledgeBaseRetrievalResponse(json.loads(json.dumps(ours.to_wire())))
    reference = theirs.references[0]
    assert isinstance(reference, sdk.KnowledgeBaseSearchIndexReference)
    assert reference.doc_key == "docs-leave-md-0"
    assert theirs.activity[0]["knowledgeSourceKind"] == "local"
    source.close()
