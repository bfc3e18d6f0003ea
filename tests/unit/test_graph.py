"""The graph's behaviour per effort level and output mode, with scripted models."""

from __future__ import annotations

import asyncio
import json

import pytest
from langchain_core.messages import HumanMessage
from tests.fakes import FailingSource, RecordingSource, SlowSource, user

from agentic_retrieval import (
    Context,
    InvalidRequestError,
    KnowledgeBase,
    RetrieveResponse,
    UnknownKnowledgeSourceError,
    build_graph,
)
from agentic_retrieval.testing import ScriptedChatModel

PLAN_TWO = {
    "needs_retrieval": True,
    "queries": [
        {"query": "day pass price", "goal": "fare", "knowledge_sources": ["transit"]},
        {"query": "bike late fee", "goal": "fee"},
    ],
}


def kb_with(sources, script, **kwargs) -> tuple[KnowledgeBase, ScriptedChatModel]:
    model = ScriptedChatModel(script=script)
    return KnowledgeBase(sources, chat_model=model, **kwargs), model


def types(response) -> list[str]:
    return [r.type for r in response.activity]


# --- minimal -------------------------------------------------------------------------------


def test_minimal_makes_no_llm_call_and_searches_every_source(toy_source, faq_source):
    model = ScriptedChatModel(script={})
    kb = KnowledgeBase([toy_source, faq_source], chat_model=model)
    response = kb.retrieve({"intents": [{"type": "semantic", "search": "day pass"}]})
    assert model.script.count() == 0
    assert response.status_code == 200
    assert types(response) == ["searchIndex", "searchIndex", "semanticReranker"]
    sources = {r.model_extra["knowledgeSourceName"] for r in response.activity[:2]}
    assert sources == {"transit", "faq"}
    grounding = json.loads(response.text)
    assert [item["ref_id"] for item in grounding] == list(range(len(grounding)))
    assert [r.doc_key for r in response.references] == ["faq-refund", "fares", "lost"]


def test_minimal_with_messages_uses_last_user_message(toy_source):
    kb = KnowledgeBase([toy_source])
    response = kb.retrieve(
        {
            "messages": [user("hello"), user("until when do trams run on saturdays")],
            "retrievalReasoningEffort": {"kind": "minimal"},
        }
    )
    search = response.activity[0].model_extra["searchIndexArguments"]["search"]
    assert search == "until when do trams run on saturdays"
    assert response.references[0].doc_key == "hours"


def test_minimal_works_without_any_model_configured(toy_source, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    kb = KnowledgeBase([toy_source])
    response = kb.retrieve({"intents": [{"search": "lost items"}]})
    assert response.references[0].doc_key == "lost"


# --- low -----------------------------------------------------------------------------------


def test_low_makes_exactly_one_planning_call_and_routes_sources(toy_source, faq_source):
    transit, faq = RecordingSource(toy_source), RecordingSource(faq_source)
    kb, model = kb_with([transit, faq], {"QueryPlan": [PLAN_TWO]})
    response = kb.retrieve({"messages": [user("How much is a day pass and the bike late fee?")]})
    assert model.script.count() == 1
    assert types(response)[0] == "modelQueryPlanning"
    planning = response.activity[0].model_extra
    assert (planning["inputTokens"], planning["outputTokens"]) == (120, 30)
    # "day pass price" was routed to transit only; "bike late fee" chose none -> all sources
    assert [q.text for q in transit.queries] == ["day pass price", "bike late fee"]
    assert [q.text for q in faq.queries] == ["bike late fee"]
    # "lost" (a tram, 30 days: 2.2) stays: the default threshold does not cut lexical scores
    assert [r.doc_key for r in response.references] == ["bike-fees", "fares", "lost"]
    assert "modelEvidenceAssessment" not in types(response)


def test_low_respects_max_subqueries_and_always_query_source(toy_source, faq_source):
    plan = {
        "needs_retrieval": True,
        "queries": [{"query": f"query {i}", "knowledge_sources": ["transit"]} for i in range(5)],
    }
    transit, faq = RecordingSource(toy_source), RecordingSource(faq_source)
    kb, _ = kb_with([transit, faq], {"QueryPlan": [plan]}, defaults=Context(max_subqueries=2))
    kb.retrieve(
        {
            "messages": [user("anything")],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "transit"},
                {"knowledgeSourceName": "faq", "alwaysQuerySource": True},
            ],
        }
    )
    assert [q.text for q in transit.queries] == ["query 0", "query 1"]
    assert [q.text for q in faq.queries] == ["query 0", "query 1"]


def test_no_retrieval_needed_replies_without_searching(toy_source):
    source = RecordingSource(toy_source)
    plan = {"needs_retrieval": False, "assistant_message": "Hello! Ask me about trams."}
    kb, _ = kb_with([source], {"QueryPlan": [plan, plan]})
    answer = kb.retrieve({"messages": [user("hi there")], "outputMode": "answerSynthesis"})
    assert answer.text == "Hello! Ask me about trams."
    assert answer.references == []
    # extractiveData callers parse the response as JSON: it stays an (empty) array
    grounding = kb.retrieve({"messages": [user("hi there")]})
    assert grounding.text == "[]"
    planning = grounding.activity[0].model_extra
    assert planning["retrievalNeeded"] is False
    assert planning["assistantMessage"] == "Hello! Ask me about trams."
    assert source.queries == []
    assert grounding.status_code == 200


def test_low_without_model_fails_naming_the_variable(toy_source, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    kb = KnowledgeBase([toy_source])
    with pytest.raises(ValueError, match="AGENTIC_RETRIEVAL_CHAT_MODEL"):
        kb.retrieve({"messages": [user("day pass?")], "retrievalReasoningEffort": "low"})


# --- medium --------------------------------------------------------------------------------


def test_medium_follows_up_once_then_answers(toy_source):
    source = RecordingSource(toy_source)
    script = {
        "QueryPlan": [PLAN_TWO],
        "EvidenceAssessment": [
            {
                "is_sufficient": False,
                "confidence": 0.3,
                "missing_information": ["saturday hours"],
                "followup_queries": ["tram hours saturday", "day pass price"],
            },
            {"is_sufficient": True, "confidence": 0.9},
        ],
    }
    kb, model = kb_with([source], script)
    response = kb.retrieve(
        {
            "messages": [user("Fares, fees and Saturday hours?")],
            "retrievalReasoningEffort": {"kind": "medium"},
        }
    )
    # the repeated "day pass price" follow-up is dropped; only the new query runs
    assert [q.text for q in source.queries] == [
        "day pass price",
        "bike late fee",
        "tram hours saturday",
    ]
    assert model.script.count("EvidenceAssessment") == 2
    assert types(response) == [
        "modelQueryPlanning",
        "searchIndex",
        "searchIndex",
        "semanticReranker",
        "modelEvidenceAssessment",
        "searchIndex",
        "semanticReranker",
        "modelEvidenceAssessment",
        "agenticReasoning",
    ]
    keys = [r.doc_key for r in response.references]
    assert keys == ["bike-fees", "hours", "fares", "lost"]
    reasoning = response.activity[-1].model_extra
    assert reasoning["iterations"] == 1
    assert reasoning["inputTokens"] == 3 * 120


def test_medium_loop_is_bounded_by_max_iterations(toy_source):
    insufficient = {"is_sufficient": False, "confidence": 0.1}
    script = {
        "QueryPlan": [PLAN_TWO],
        "EvidenceAssessment": [
            {**insufficient, "followup_queries": [f"follow up {i}"]} for i in range(10)
        ],
    }
    source = RecordingSource(toy_source)
    kb, model = kb_with([source], script, defaults=Context(max_iterations=2))
    response = kb.retrieve(
        {"messages": [user("q")], "retrievalReasoningEffort": {"kind": "medium"}}
    )
    assert model.script.count("EvidenceAssessment") == 3  # round 0, 1, 2 then stop
    assert [q.text for q in source.queries][2:] == ["follow up 0", "follow up 1"]
    assert response.status_code == 200


def test_medium_zero_iterations_never_loops(toy_source):
    script = {
        "QueryPlan": [PLAN_TWO],
        "EvidenceAssessment": [
            {"is_sufficient": False, "confidence": 0.1, "followup_queries": ["more"]}
        ],
    }
    source = RecordingSource(toy_source)
    kb, _ = kb_with([source], script, defaults=Context(max_iterations=0))
    kb.retrieve({"messages": [user("q")], "retrievalReasoningEffort": {"kind": "medium"}})
    assert "more" not in [q.text for q in source.queries]


# --- answer synthesis and citations ---------------------------------------------------------


def test_answer_synthesis_keeps_valid_citations_and_strips_invented_ones(toy_source):
    script = {
        "QueryPlan": [PLAN_TWO],
        "SynthesizedAnswer": [
            {
                "answer": "A day pass costs 6 euros [ref_id:1]. Late fee is 1 euro [ref_id:0] "
                "[ref_id:7]. Also [ref_id: 0, 1]."
            }
        ],
    }
    kb, _ = kb_with([toy_source], script)
    response = kb.retrieve(
        {"messages": [user("day pass and bike fee?")], "outputMode": "answerSynthesis"}
    )
    assert [(r.id, r.doc_key) for r in response.references] == [
        ("0", "bike-fees"),
        ("1", "fares"),
        ("2", "lost"),  # under 2.5, kept: the default threshold does not cut lexical scores
    ]
    assert response.text == (
        "A day pass costs 6 euros [ref_id:1]. Late fee is 1 euro [ref_id:0]. "
        "Also [ref_id:0][ref_id:1]."
    )
    synthesis = next(r for r in response.activity if r.type == "modelAnswerSynthesis")
    assert synthesis.model_extra["removedCitations"] == [7]


def test_answer_synthesis_with_no_evidence_says_so_without_a_model_call(toy_source):
    plan = {"needs_retrieval": True, "queries": [{"query": "zzzz qqqq"}]}
    kb, model = kb_with([toy_source], {"QueryPlan": [plan]})
    response = kb.retrieve({"messages": [user("zzzz qqqq?")], "outputMode": "answerSynthesis"})
    assert model.script.count("SynthesizedAnswer") == 0
    assert "could not find" in response.text
    assert response.references == []


def test_minimal_with_answer_synthesis_is_rejected(toy_source):
    kb = KnowledgeBase([toy_source])
    with pytest.raises(ValueError, match="minimal"):
        kb.retrieve(
            {
                "intents": [{"search": "x"}],
                "retrievalReasoningEffort": {"kind": "minimal"},
                "outputMode": "answerSynthesis",
            }
        )


# --- degradation on malformed output --------------------------------------------------------


def test_malformed_plan_is_retried_once_then_falls_back_to_the_question(toy_source):
    source = RecordingSource(toy_source)
    kb, model = kb_with([source], {"QueryPlan": ["not json", {"needs_retrieval": "maybe?"}]})
    response = kb.retrieve({"messages": [user("when do trams run")]})
    assert model.script.count("QueryPlan") == 2
    assert [q.text for q in source.queries] == ["when do trams run"]
    planning = response.activity[0]
    assert planning.type == "modelQueryPlanning"
    assert planning.error.code == "ModelOutputInvalid"
    assert planning.model_extra["inputTokens"] == 240  # both attempts are counted
    assert response.references[0].doc_key == "hours"


def test_malformed_plan_then_valid_retry_is_used(toy_source):
    source = RecordingSource(toy_source)
    kb, _ = kb_with([source], {"QueryPlan": ["oops", PLAN_TWO]})
    response = kb.retrieve({"messages": [user("q")]})
    assert [q.text for q in source.queries] == ["day pass price", "bike late fee"]
    assert response.activity[0].error is None


def test_malformed_evidence_degrades_to_sufficient(toy_source):
    script = {"QueryPlan": [PLAN_TWO], "EvidenceAssessment": ["x", "y"]}
    kb, _ = kb_with([toy_source], script)
    response = kb.retrieve(
        {"messages": [user("q")], "retrievalReasoningEffort": {"kind": "medium"}}
    )
    evidence = next(r for r in response.activity if r.type == "modelEvidenceAssessment")
    assert evidence.error.code == "ModelOutputInvalid"
    assert types(response).count("searchIndex") == 2  # no follow-up round
    assert response.status_code == 200


def test_malformed_answer_degrades_to_extractive(toy_source):
    script = {
        "QueryPlan": [PLAN_TWO],
        "SynthesizedAnswer": ["a", RuntimeError("500 from provider")],
    }
    kb, _ = kb_with([toy_source], script)
    response = kb.retrieve({"messages": [user("q")], "outputMode": "answerSynthesis"})
    grounding = json.loads(response.text)
    assert grounding[0]["ref_id"] == 0
    synthesis = next(r for r in response.activity if r.type == "modelAnswerSynthesis")
    # the provider's error stays in the server log, never in the response
    assert synthesis.error.message == "the model call failed; the server log has the details"


# --- failing and slow sources, runtime limit -------------------------------------------------


def test_failing_source_gives_partial_results_with_an_error_record(toy_source):
    broken = FailingSource()
    kb = KnowledgeBase([toy_source, broken])
    response = kb.retrieve({"intents": [{"search": "day pass"}]})
    assert response.partial and response.status_code == 206
    failed = [r for r in response.activity if r.error is not None]
    assert len(failed) == 1
    assert failed[0].model_extra["knowledgeSourceName"] == "broken"
    # the exception's own text ("backend unreachable") goes to the log, not the response
    assert (
        failed[0].error.message
        == "knowledge source 'broken' failed; the server log has the details"
    )
    assert response.references[0].doc_key == "fares"


def test_slow_source_is_cut_by_its_timeout(toy_source):
    kb = KnowledgeBase(
        [toy_source, SlowSource(delay=5)], defaults=Context(source_timeout_seconds=0.2)
    )
    response = kb.retrieve({"intents": [{"search": "day pass"}]})
    slow = next(r for r in response.activity if r.model_extra.get("knowledgeSourceName") == "slow")
    assert slow.error.code == "Timeout"
    assert response.status_code == 206
    assert next(r.doc_key for r in response.references) == "fares"


def test_max_runtime_bounds_the_whole_run(toy_source):
    kb = KnowledgeBase([toy_source, SlowSource(delay=30)])
    started = asyncio.new_event_loop().time()
    response = kb.retrieve({"intents": [{"search": "day pass"}], "maxRuntimeInSeconds": 1})
    elapsed = asyncio.new_event_loop().time() - started
    assert elapsed < 5
    assert response.timed_out
    assert response.status_code == 206  # the fast source's results are returned
    assert any(r.type == "runtimeLimit" for r in response.activity)
    assert response.references[0].doc_key == "fares"


def test_nothing_ready_before_max_runtime_is_a_408():
    kb = KnowledgeBase([SlowSource(delay=30)])
    response = kb.retrieve({"intents": [{"search": "x"}], "maxRuntimeInSeconds": 1})
    assert response.status_code == 408
    assert response.references == []


# --- filters ----------------------------------------------------------------------------------


def test_caller_filter_is_anded_with_planner_filter_never_replaced(toy_source):
    source = RecordingSource(toy_source)
    plan = {
        "needs_retrieval": True,
        "queries": [{"query": "tram", "filter": "year ge 2023"}, {"query": "bike"}],
    }
    kb, _ = kb_with([source], {"QueryPlan": [plan]})
    response = kb.retrieve(
        {
            "messages": [user("q")],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "transit", "filterAddOn": "category ne 'bikes'"}
            ],
        }
    )
    assert [q.filter for q in source.queries] == [
        "(category ne 'bikes') and (year ge 2023)",
        "category ne 'bikes'",
    ]
    assert "bike-fees" not in [r.doc_key for r in response.references]
    searched = [
        r.model_extra["searchIndexArguments"]["filter"]
        for r in response.activity
        if r.type == "searchIndex"
    ]
    assert searched[0] == "(category ne 'bikes') and (year ge 2023)"


def test_malformed_planner_filter_is_dropped_but_caller_filter_kept(toy_source):
    source = RecordingSource(toy_source)
    plan = {"needs_retrieval": True, "queries": [{"query": "tram", "filter": "year >= 2023"}]}
    kb, _ = kb_with([source], {"QueryPlan": [plan]})
    response = kb.retrieve(
        {
            "messages": [user("q")],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "transit", "filterAddOn": "year eq 2024"}
            ],
        }
    )
    assert [q.filter for q in source.queries] == ["year eq 2024"]
    assert response.status_code == 200
    planning = response.activity[0]
    assert planning.error.code == "InvalidFilter" and "year >= 2023" in planning.error.message
    assert [r.doc_key for r in response.references] == ["hours", "fares"]


def test_invalid_caller_filter_is_a_request_error(toy_source):
    kb = KnowledgeBase([toy_source])
    with pytest.raises(ValueError, match="filterAddOn"):
        kb.retrieve(
            {
                "intents": [{"search": "x"}],
                "knowledgeSourceParams": [
                    {"knowledgeSourceName": "transit", "filterAddOn": "year eq"}
                ],
            }
        )


def test_unknown_source_is_rejected(toy_source):
    kb = KnowledgeBase([toy_source])
    with pytest.raises(LookupError, match="nope"):
        kb.retrieve(
            {
                "intents": [{"search": "x"}],
                "knowledgeSourceParams": [{"knowledgeSourceName": "nope"}],
            }
        )


# --- output size, references ------------------------------------------------------------------


def test_max_output_size_drops_whole_lowest_ranked_chunks(toy_source):
    kb = KnowledgeBase([toy_source])
    full = kb.retrieve({"intents": [{"search": "tram day pass 30 minutes"}]})
    items = json.loads(full.text)
    assert [item["ref_id"] for item in items] == [0, 1, 2, 3]
    # hours scores under 2.5, but lexical scores are not cut by the default threshold
    assert [r.doc_key for r in full.references] == ["fares", "lost", "bike-fees", "hours"]
    limit = len(json.dumps(items[:2], separators=(",", ":"), ensure_ascii=False))
    cut = kb.retrieve({"intents": [{"search": "tram day pass 30 minutes"}], "maxOutputSize": limit})
    assert len(cut.text) <= limit
    assert json.loads(cut.text) == items[:2]
    assert [r.id for r in cut.references] == ["0", "1"]


def test_include_references_and_source_data_per_source(toy_source, faq_source):
    kb = KnowledgeBase([toy_source, faq_source])
    response = kb.retrieve(
        {
            "intents": [{"search": "day pass refunds"}],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "transit", "includeReferenceSourceData": True},
                {"knowledgeSourceName": "faq", "includeReferences": False},
            ],
        }
    )
    grounding = json.loads(response.text)
    # the faq hit is grounded, not referenced
    assert [(g["ref_id"], g["title"]) for g in grounding] == [
        (0, "Refunds"),
        (1, "Fares and passes"),
        (2, "Lost and found"),
    ]
    assert [(r.id, r.doc_key) for r in response.references] == [("1", "fares"), ("2", "lost")]
    assert all(r.source_data and r.source_data["content"] for r in response.references)
    activity = {r.id: r for r in response.activity}
    for reference in response.references:
        assert activity[reference.activity_source].model_extra["knowledgeSourceName"] == "transit"


def test_reranker_threshold_drops_weak_candidates(toy_source):
    kb = KnowledgeBase([toy_source])
    response = kb.retrieve(
        {
            "intents": [{"search": "tram day pass"}],
            "knowledgeSourceParams": [{"knowledgeSourceName": "transit", "rerankerThreshold": 3.0}],
        }
    )
    assert [r.doc_key for r in response.references] == ["fares"]
    assert all(r.reranker_score >= 3.0 for r in response.references)


def test_the_default_threshold_cuts_calibrated_scores_only_and_0_keeps_every_candidate(
    toy_source,
):
    kb = KnowledgeBase([toy_source])
    by_default = kb.retrieve({"intents": [{"search": "tram day pass"}]})
    # lexical scores order candidates, they do not judge them: "hours" (1.90: trams, but no
    # day pass) is kept, ranked last
    assert [(r.doc_key, r.reranker_score) for r in by_default.references] == [
        ("fares", 3.5979),
        ("lost", 2.7773),
        ("hours", 1.9001),
    ]
    rerank = next(r for r in by_default.activity if r.type == "semanticReranker")
    assert rerank.model_extra["calibratedCount"] == 0
    explicit = KnowledgeBase([toy_source], defaults=Context(reranker_threshold=2.5))
    assert [
        r.doc_key for r in explicit.retrieve({"intents": [{"search": "tram day pass"}]}).references
    ] == ["fares", "lost"]
    everything = kb.retrieve(
        {
            "intents": [{"search": "tram day pass"}],
            "knowledgeSourceParams": [{"knowledgeSourceName": "transit", "rerankerThreshold": 0}],
        }
    )
    assert [r.doc_key for r in everything.references] == ["fares", "lost", "hours"]
    unset = KnowledgeBase([toy_source], defaults=Context(reranker_threshold=None))
    assert len(unset.retrieve({"intents": [{"search": "tram day pass"}]}).references) == 3


def test_include_activity_false_omits_activity(toy_source):
    response = KnowledgeBase([toy_source]).retrieve(
        {"intents": [{"search": "x tram"}], "includeActivity": False}
    )
    assert response.activity is None
    assert "activity" not in response.to_wire()


# --- the graph as a runnable ------------------------------------------------------------------


def test_graph_invoke_stream_and_ainvoke(toy_source):
    graph = build_graph([toy_source])
    state = {"messages": [HumanMessage("day pass")]}
    context = Context(reasoning_effort="minimal")
    out = graph.invoke(state, context=context)
    assert out["references"][0]["docKey"] == "fares"
    assert out["messages"][-1].content == out["response"]
    streamed = list(graph.stream(state, context=context, stream_mode="custom"))
    events = [e["event"] for e in streamed]
    assert events == [
        "searching",
        "activity.started",  # the search
        "activity.completed",
        "searched",
        "activity.started",  # the reranking
        "reranking",
        "activity.completed",
        "done",
    ]
    completed = [e for e in streamed if e["event"] == "activity.completed"]
    assert [e["record"]["type"] for e in completed] == ["searchIndex", "semanticReranker"]
    assert [e["key"] for e in completed] == ["search:q0.0:transit", "rerank:0"]
    assert asyncio.run(graph.ainvoke(state, context=context))["references"] == out["references"]
    batch = graph.batch([state, state], context=context)
    assert len(batch) == 2


@pytest.mark.parametrize(
    ("state", "effort", "message"),
    [
        ({}, "minimal", "pass 'messages' or 'intents'"),
        ({"intents": ["  "]}, "minimal", "pass 'messages' or 'intents'"),
        ({"messages": [HumanMessage(" ")]}, "low", "'messages' holds no text"),
    ],
)
def test_graph_input_with_nothing_to_retrieve_is_an_invalid_request(
    toy_source, state, effort, message
):
    graph = build_graph([toy_source], chat_model=ScriptedChatModel(script={}))
    with pytest.raises(InvalidRequestError, match=f"nothing to retrieve: {message}"):
        graph.invoke(state, context=Context(reasoning_effort=effort))


def test_graph_input_naming_an_unbound_source_is_an_unknown_source_error(toy_source):
    graph = build_graph([toy_source])
    state = {
        "intents": ["day pass"],
        "knowledge_source_params": [{"knowledgeSourceName": "nope"}],
    }
    with pytest.raises(UnknownKnowledgeSourceError, match=r"unknown knowledge source.*: nope"):
        graph.invoke(state, context=Context(reasoning_effort="minimal"))


async def test_sync_invoke_works_inside_a_running_loop(toy_source):
    kb = KnowledgeBase([toy_source])
    response = kb.retrieve({"intents": [{"search": "lost items"}]})
    assert response.references[0].doc_key == "lost"


async def test_astream_yields_azure_events_then_the_response(toy_source):
    script = {"QueryPlan": [PLAN_TWO, PLAN_TWO]}
    kb, _ = kb_with([toy_source], script)
    events = [e async for e in kb.astream({"messages": [user("q")]})]
    names = [e["event"] for e in events]
    assert names[0] == "retrieval.started"
    assert events[0]["data"]["reasoningEffort"] == {"kind": "low"}
    assert names.count("activity.started") == names.count("activity.completed") == 5
    assert names[-2:] == ["references.completed", "response.completed"]
    assert "progress" not in names  # an extension: only when asked for
    final = events[-1]["data"]
    assert final["statusCode"] == 200
    completed = [e["data"] for e in events if e["event"] == "activity.completed"]
    # the same records with the same ids; a drop warning is known only once ranking is done
    final_records = [
        {k: v for k, v in r.items() if k != "warning"} for r in final["response"]["activity"]
    ]
    assert final_records == completed

    progress = [e async for e in kb.astream({"messages": [user("q")]}, extensions={"progress"})]
    steps = [e["data"]["step"] for e in progress if e["event"] == "progress"]
    assert steps[0] == "planning" and steps.count("searched") == 2


def test_searches_run_concurrently(toy_source):
    sources = [SlowSource(name=f"slow{i}", delay=0.3) for i in range(3)]
    plan = {"needs_retrieval": True, "queries": [{"query": f"q{i}"} for i in range(3)]}
    kb, _ = kb_with(sources, {"QueryPlan": [plan]})
    loop = asyncio.new_event_loop()
    started = loop.time()
    response = kb.retrieve({"messages": [user("q")]})
    elapsed = loop.time() - started
    assert sum(1 for r in response.activity if r.type == "searchIndex") == 9
    assert elapsed < 9 * 0.3 / 2  # sequential would take 2.7 s


def test_retriever_returns_documents_with_ref_metadata(toy_source, faq_source):
    retriever = KnowledgeBase([toy_source, faq_source]).as_retriever(k=2)
    docs = retriever.invoke("day pass refund")
    assert len(docs) == 2
    assert docs[0].metadata["ref_id"] == 0
    assert [(d.metadata["doc_key"], d.metadata["knowledge_source"]) for d in docs] == [
        ("faq-refund", "faq"),
        ("fares", "transit"),
    ]
    assert all(d.page_content and d.metadata["reranker_score"] is not None for d in docs)
    assert docs[0].id == docs[0].metadata["doc_key"]


# --- runs on a checkpointed thread, configurable, time limits in the sync path --------------


def test_second_turn_on_a_checkpointed_thread_starts_clean(toy_source, faq_source, caplog):
    from langgraph.checkpoint.memory import MemorySaver

    from agentic_retrieval.checkpointing import checkpoint_serializer

    transit, faq = RecordingSource(toy_source), RecordingSource(faq_source)
    saver = MemorySaver(serde=checkpoint_serializer())
    graph = build_graph([transit, faq], checkpointer=saver)
    config = {"configurable": {"thread_id": "conversation-1"}}
    context = Context(reasoning_effort="minimal", max_runtime_seconds=1)
    first = graph.invoke({"intents": ["bike late fee"]}, config, context=context)
    assert "bike-fees" in [r["docKey"] for r in first["references"]]
    import time as _time

    _time.sleep(1.1)  # longer than the time limit: the second turn has its own clock
    second = graph.invoke(
        {
            "intents": ["day pass"],
            "knowledge_source_params": [
                {"knowledgeSourceName": "transit", "filterAddOn": "category eq 'fares'"}
            ],
        },
        config,
        context=context,
    )
    assert [r["docKey"] for r in second["references"]] == ["fares"]
    assert [q.text for q in transit.queries] == ["bike late fee", "day pass"]
    assert [q.text for q in faq.queries] == ["bike late fee"]  # not asked again
    assert not second["timed_out"] and not second["partial"]
    assert [a["type"] for a in second["activity"]] == ["searchIndex", "semanticReranker"]
    assert len(second["messages"]) == 2  # the conversation itself does carry over
    assert "unregistered type" not in caplog.text


def test_configurable_settings_are_honoured_without_a_context(toy_source, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    graph = build_graph([toy_source])
    out = graph.invoke(
        {"messages": [HumanMessage("lost items")]},
        {"configurable": {"reasoning_effort": "minimal", "top_n": 1}},
    )
    assert [r["docKey"] for r in out["references"]] == ["lost"]


def test_plan_with_only_blank_queries_falls_back_with_an_error(toy_source):
    source = RecordingSource(toy_source)
    plan = {"needs_retrieval": True, "queries": [{"query": "  "}, {"query": ""}]}
    kb, _ = kb_with([source], {"QueryPlan": [plan]})
    response = kb.retrieve({"messages": [user("lost items on a tram")]})
    assert [q.text for q in source.queries] == ["lost items on a tram"]
    assert response.activity[0].error.code == "ModelOutputInvalid"


class SlowReranker:
    name = "slow-grader"

    async def ascore(self, query, hits):
        await asyncio.sleep(30)
        return [4.0] * len(hits)


def test_slow_reranker_keeps_the_search_results(toy_source):
    kb = KnowledgeBase([toy_source], reranker=SlowReranker())
    response = kb.retrieve({"intents": [{"search": "day pass"}], "maxRuntimeInSeconds": 1})
    assert response.status_code == 206
    assert response.references[0].doc_key == "fares"
    rerank = next(r for r in response.activity if r.type == "semanticReranker")
    assert rerank.error.code == "Timeout"


def test_sync_retrieve_returns_at_the_limit_even_when_a_source_thread_lingers(toy_source):
    import threading
    import time as _time

    from agentic_retrieval.sources.base import Hit

    workers: list[threading.Thread] = []

    class BlockingThreadSource:
        name, kind, description = "blocking", "searchIndex", "sync client in a thread"

        async def search(self, query):
            def blocking():
                workers.append(threading.current_thread())
                _time.sleep(4)
                return [Hit(doc_key="late", content="late")]

            return await asyncio.to_thread(blocking)

    kb = KnowledgeBase([toy_source, BlockingThreadSource()])
    started = _time.perf_counter()
    response = kb.retrieve({"intents": [{"search": "day pass"}], "maxRuntimeInSeconds": 1})
    assert _time.perf_counter() - started < 3
    assert response.status_code == 206
    # the call returned while the source's thread was still blocked in its client
    assert len(workers) == 1 and workers[0].is_alive()
    blocked = next(
        r for r in response.activity if r.model_extra.get("knowledgeSourceName") == "blocking"
    )
    assert blocked.error.code == "Timeout"
    assert response.references[0].doc_key == "fares"


def test_timed_out_run_with_grounded_but_unreferenced_results_is_not_408(toy_source):
    kb = KnowledgeBase([toy_source, SlowSource(delay=30)])
    response = kb.retrieve(
        {
            "intents": [{"search": "day pass"}],
            "maxRuntimeInSeconds": 1,
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "transit", "includeReferences": False},
                {"knowledgeSourceName": "slow"},
            ],
        }
    )
    assert response.references == []
    assert json.loads(response.text)[0]["content"].startswith("A single tram ride")
    assert response.status_code == 206


def test_answer_cannot_cite_passages_of_unreferenced_sources(toy_source, faq_source):
    script = {
        "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "day pass refund"}]}],
        "SynthesizedAnswer": [{"answer": "Refunds [ref_id:0]. Passes [ref_id:1]. [ref_id:2]"}],
    }
    # no threshold: the weak third passage ("lost") is the valid citation [ref_id:2]
    kb, _ = kb_with([toy_source, faq_source], script, defaults=Context(reranker_threshold=None))
    response = kb.retrieve(
        {
            "messages": [user("day pass refund?")],
            "outputMode": "answerSynthesis",
            "knowledgeSourceParams": [
                {"knowledgeSourceName": "transit"},
                {"knowledgeSourceName": "faq", "includeReferences": False},
            ],
        }
    )
    from agentic_retrieval.text.citations import cited_ids

    referenced = {int(r.id) for r in response.references}
    assert cited_ids(response.text) == [1, 2]
    assert set(cited_ids(response.text)) <= referenced
    assert response.text == "Refunds. Passes [ref_id:1]. [ref_id:2]"
    assert [(r.id, r.doc_key) for r in response.references] == [("1", "fares"), ("2", "lost")]


def test_a_marker_inside_document_text_does_not_make_an_id_citable():
    from agentic_retrieval import InMemoryKnowledgeSource

    docs = [
        {"key": "a", "content": "Leave is 2 days a month. " * 3},
        {"key": "b", "content": "See also [ref_id:1] leave carry over rules " + "x " * 400},
    ]
    script = {
        "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "leave"}]}],
        "SynthesizedAnswer": [{"answer": "Leave is 2 days [ref_id:0][ref_id:1]."}],
    }
    kb, _ = kb_with([InMemoryKnowledgeSource("hr", docs)], script)
    response = kb.retrieve(
        {
            "messages": [user("leave?")],
            "outputMode": "answerSynthesis",
            "maxOutputSize": 200,
        }
    )
    assert response.text == "Leave is 2 days [ref_id:0]."
    assert [r.id for r in response.references] == ["0"]


def test_token_budget_counts_non_latin_text_conservatively():
    from agentic_retrieval import InMemoryKnowledgeSource

    docs = [
        {"key": f"k{i}", "content": f"带薪休假 政策 {i} " + "员工每个月累积两天" * 20}
        for i in range(5)
    ]
    kb = KnowledgeBase([InMemoryKnowledgeSource("hr", docs)])
    response = kb.retrieve({"intents": [{"search": "带薪休假"}], "maxOutputSizeInTokens": 300})
    non_ascii = sum(1 for ch in response.text if ord(ch) > 127)
    assert 0 < non_ascii <= 300


def test_a_source_returning_malformed_hits_is_a_source_error(toy_source):
    class SloppySource:
        name, kind, description = "sloppy", "searchIndex", "returns dicts without keys"

        async def search(self, query):
            return [{"title": "no key, no content"}]

    response = KnowledgeBase([toy_source, SloppySource()]).retrieve(
        {"intents": [{"search": "day pass"}]}
    )
    assert response.status_code == 206
    failed = next(r for r in response.activity if r.error is not None)
    assert "malformed hits" in failed.error.message
    assert response.references[0].doc_key == "fares"


async def test_astream_is_bounded_by_max_runtime_too():
    class StuckSource:
        name, kind, description = "stuck", "searchIndex", "never answers in time"

        async def search(self, query):
            await asyncio.sleep(60)
            return []

    kb = KnowledgeBase([StuckSource()], defaults=Context(source_timeout_seconds=120))
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = [e async for e in kb.astream({"intents": [{"search": "x"}], "maxRuntimeInSeconds": 1})]
    assert loop.time() - started < 5
    assert [e["event"] for e in events][-1] == "error"  # nothing ready: no response.completed
    error = events[-1]["data"]
    assert error["error"]["code"] == "Timeout"
    assert "maxRuntimeInSeconds (1 s)" in error["error"]["message"]
    # what completed before the limit: the search that ran out of time, the summary records
    assert error["activity"][0]["type"] == "searchIndex"
    assert error["activity"][0]["error"]["code"] == "Timeout"
    assert error["activity"][-1]["type"] == "runtimeLimit"
    assert [r["id"] for r in error["activity"]] == list(range(len(error["activity"])))


# --- the facade: per-call defaults and config, typed retriever ---------------------------------


def test_retrieve_takes_per_call_defaults_like_aretrieve(toy_source):
    kb = KnowledgeBase([toy_source])
    request = {"intents": [{"search": "tram day pass"}]}
    assert len(kb.retrieve(request).references) > 1
    response = kb.retrieve(request, defaults=Context(top_n=1))
    assert [r.doc_key for r in response.references] == ["fares"]


async def test_astream_forwards_config_callbacks_to_the_graph(toy_source):
    from langchain_core.callbacks import AsyncCallbackHandler

    class Names(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.names: list[str] = []

        async def on_chain_start(self, serialized, inputs, *, name=None, **kwargs):
            self.names.append(name)

    handler = Names()
    kb = KnowledgeBase([toy_source])
    request = {"intents": [{"search": "lost items"}]}
    events = [e async for e in kb.astream(request, config={"callbacks": [handler]})]
    assert events[-1]["data"]["response"]["references"][0]["docKey"] == "lost"
    nodes = [n for n in handler.names if n in ("begin_turn", "rerank", "respond")]
    assert list(dict.fromkeys(nodes)) == ["begin_turn", "rerank", "respond"]


def test_as_retriever_is_typed_and_the_graph_carries_no_extra_attribute(toy_source):
    from agentic_retrieval import KnowledgeBaseRetriever

    kb = KnowledgeBase([toy_source])
    assert isinstance(kb.as_retriever(k=1), KnowledgeBaseRetriever)
    assert not hasattr(kb.graph, "bindings")
    assert kb.bindings.sources == {"transit": toy_source}


def test_a_partial_response_read_back_from_its_json_keeps_its_206(toy_source):
    """A 206 survives a round trip through JSON (a checkpoint, a tool artifact, a cache)."""
    kb = KnowledgeBase([toy_source, FailingSource()])
    response = kb.retrieve({"intents": [{"search": "day pass"}]})
    assert response.status_code == 206
    again = RetrieveResponse.model_validate_json(response.model_dump_json(by_alias=True))
    assert again.partial and again.status_code == 206
    assert again.references == response.references and response.references
    # the same after the run's own JSON form (what a checkpointer or a cache stores)
    assert RetrieveResponse.model_validate(json.loads(response.model_dump_json())).partial


def test_a_response_whose_planning_fell_back_reads_back_as_200():
    """Only a failed search makes a response partial; a planning error the run survived
    (the conversation was searched as it stands) does not."""
    data = {
        "response": [],
        "activity": [
            {"type": "modelQueryPlanning", "id": 0, "error": {"code": "x", "message": "bad"}},
            {"type": "searchIndex", "id": 1, "searchIndexArguments": {"search": "q"}, "count": 3},
        ],
        "references": [],
    }
    assert RetrieveResponse.model_validate(data).status_code == 200
    data["activity"].append({"type": "runtimeLimit", "id": 2})
    assert RetrieveResponse.model_validate(data).status_code == 408  # timed out, nothing in


def test_per_source_parameters_are_validated_once_with_the_request(toy_source, monkeypatch):
    from agentic_retrieval.graph.records import KnowledgeSourceParams
    from agentic_retrieval.wire.models import RetrieveRequest
    from agentic_retrieval.wire.retrieve import graph_input

    body = {
        "intents": [{"search": "day pass refunds"}],
        "knowledgeSourceParams": [{"knowledgeSourceName": "transit", "includeReferences": False}],
    }
    request = RetrieveRequest.model_validate(body)
    given = graph_input(request).knowledge_source_params
    assert given == request.knowledge_source_params  # the models themselves, not dumps
    assert given[0] is request.knowledge_source_params[0]
    parsed_again = []
    validate = KnowledgeSourceParams.model_validate

    def counting(*args, **kwargs):
        parsed_again.append(args)
        return validate(*args, **kwargs)

    monkeypatch.setattr(KnowledgeSourceParams, "model_validate", counting)
    response = KnowledgeBase([toy_source]).retrieve(body)
    assert parsed_again == []
    assert response.references == []  # includeReferences: false still applies
    assert "Fares and passes" in response.text
    # a wire-shaped dict given to the graph directly is still validated there
    state = {"intents": ["day pass"], "knowledge_source_params": [{"knowledgeSourceName": "nope"}]}
    with pytest.raises(UnknownKnowledgeSourceError):
        build_graph([toy_source]).invoke(state, context=Context(reasoning_effort="minimal"))
    assert len(parsed_again) == 1
