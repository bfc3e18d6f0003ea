"""Turns on a checkpointed thread: each request's inputs belong to the turn that sent them.

The per-turn rules come from the state schema (each field's ``Scope``), so these tests
derive the fields they check from the schema rather than from a list of keys.
"""

from __future__ import annotations

import dataclasses

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import MemorySaver
from tests.fakes import RecordingSource

from agentic_retrieval import Context, build_graph
from agentic_retrieval.checkpointing import checkpoint_serializer
from agentic_retrieval.state import InputState, RetrievalState, Scope, scope_of
from agentic_retrieval.testing import ScriptedChatModel

THREAD = {"configurable": {"thread_id": "thread-1"}}
MINIMAL = Context(reasoning_effort="minimal")


def checkpointed(*sources, **kwargs):
    return build_graph(sources, checkpointer=MemorySaver(serde=checkpoint_serializer()), **kwargs)


def test_a_turn_sending_only_messages_does_not_rerun_the_previous_turns_intents(toy_source):
    # issue 9 §1, as reproduced: turn 1's intents and filter came back in turn 2
    source = RecordingSource(toy_source)
    graph = checkpointed(source)
    first = graph.invoke(
        {
            "intents": ["bike late fee"],
            "knowledge_source_params": [
                {"knowledgeSourceName": "transit", "filterAddOn": "category eq 'bikes'"}
            ],
        },
        THREAD,
        context=MINIMAL,
    )
    assert [r["docKey"] for r in first["references"]] == ["bike-fees"]

    second = graph.invoke(
        {"messages": [HumanMessage("when do trams run")]}, THREAD, context=MINIMAL
    )
    assert [(q.text, q.filter) for q in source.queries] == [
        ("bike late fee", "category eq 'bikes'"),
        ("when do trams run", None),
    ]
    assert second["references"][0]["docKey"] == "hours"
    arguments = second["activity"][0]["searchIndexArguments"]
    assert (arguments["search"], arguments["filter"]) == ("when do trams run", None)


def test_after_a_caller_planned_turn_the_next_turn_is_planned_by_the_model(toy_source):
    source = RecordingSource(toy_source)
    plan = {"needs_retrieval": True, "queries": [{"query": "tram hours"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    graph = checkpointed(source, chat_model=model)
    low = Context(reasoning_effort="low")
    graph.invoke({"intents": ["bike late fee"]}, THREAD, context=low)
    assert model.script.count("QueryPlan") == 0  # the caller planned turn 1
    second = graph.invoke({"messages": [HumanMessage("when do trams run")]}, THREAD, context=low)
    assert model.script.count("QueryPlan") == 1
    assert [q.text for q in source.queries] == ["bike late fee", "tram hours"]
    assert [a["type"] for a in second["activity"]] == [
        "modelQueryPlanning",
        "searchIndex",
        "semanticReranker",
        "agenticReasoning",
    ]


def test_every_input_field_is_conversation_or_per_turn():
    for spec in dataclasses.fields(InputState):
        assert scope_of(spec.name) in (Scope.CONVERSATION, Scope.TURN), spec.name


@pytest.mark.parametrize(
    "name", [f.name for f in dataclasses.fields(InputState) if scope_of(f.name) is Scope.TURN]
)
def test_a_per_turn_input_never_reaches_the_threads_checkpoint(toy_source, name):
    """Fails for any input field added to the schema without being made per-turn."""
    spec = next(f for f in dataclasses.fields(InputState) if f.name == name)
    value = spec.default_factory() if spec.default_factory is not dataclasses.MISSING else None
    graph = checkpointed(toy_source)
    graph.invoke({"messages": [HumanMessage("lost items")], name: value}, THREAD, context=MINIMAL)
    stored = graph.get_state(THREAD).values
    assert "messages" in stored  # the conversation is kept: the check can see stored keys
    assert name not in stored


def test_a_turn_resets_every_run_field_it_does_not_write(toy_source, caplog):
    """After a medium turn with a follow-up round, a no-retrieval turn starts from defaults."""
    script = {
        "QueryPlan": [
            {"needs_retrieval": True, "queries": [{"query": "day pass price"}]},
            {"needs_retrieval": False, "assistant_message": "You're welcome!"},
        ],
        "EvidenceAssessment": [
            {"is_sufficient": False, "confidence": 0.2, "followup_queries": ["bike late fee"]},
            {"is_sufficient": True, "confidence": 0.9},
        ],
    }
    graph = checkpointed(toy_source, chat_model=ScriptedChatModel(script=script))
    medium = Context(reasoning_effort="medium")
    graph.invoke({"messages": [HumanMessage("day pass?")]}, THREAD, context=medium)
    after_first = graph.get_state(THREAD).values
    assert after_first["iteration"] == 1 and after_first["hits"]
    assert after_first["evidence"].confidence == 0.9  # read back typed from the checkpoint

    graph.invoke({"messages": [HumanMessage("thanks")]}, THREAD, context=medium)
    after_second = graph.get_state(THREAD).values
    written = {
        "started_at",
        "question",
        "planned_by",
        "effort",
        "requested_effort",
        "judging",
        "assistant_message",
        "activity_log",
        "response",
        "activity",
    }
    for spec in dataclasses.fields(RetrievalState):
        if scope_of(spec.name) is not Scope.RUN or spec.name in written:
            continue
        default = (
            spec.default_factory()
            if spec.default_factory is not dataclasses.MISSING
            else spec.default
        )
        assert after_second.get(spec.name, default) == default, spec.name
    # no retrieval needed: straight to the reply, nothing searched or judged
    assert [r["type"] for r in after_second["activity"]] == [
        "modelQueryPlanning",
        "agenticReasoning",
    ]
    assert after_second["planned_by"] == "model"
    assert [m.content for m in after_second["messages"]][-1] == "You're welcome!"
    assert len(after_second["messages"]) == 4
    # every state type is allowed by the strict serializer, none is blocked or warned about
    assert "unregistered type" not in caplog.text and "Blocked" not in caplog.text


def test_who_plans_is_recorded_once_per_turn(toy_source):
    plan = {"needs_retrieval": True, "queries": [{"query": "tram hours"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    graph = checkpointed(toy_source, chat_model=model)
    cases = [
        ({"intents": ["lost items"]}, Context(reasoning_effort="low"), "caller"),
        ({"messages": [HumanMessage("lost items")]}, MINIMAL, "question"),
        ({"messages": [HumanMessage("when do trams run")]}, Context(), "model"),
    ]
    for turn, context, planner in cases:
        graph.invoke(turn, THREAD, context=context)
        assert graph.get_state(THREAD).values["planned_by"] == planner
    assert model.script.count("QueryPlan") == 1
