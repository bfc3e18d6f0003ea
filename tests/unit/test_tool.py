"""``kb.as_tool()``: a LangChain tool for agents (arguments, content and artifact, errors,
identity), in LangChain's agent loop, a hand-built ToolNode loop, and the graph as a subgraph.

Expected doc keys follow from the toy corpora (tests/fakes.py) and TENANT_DOCS' visibility rule.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import wrap_model_call
from langchain_core.messages import AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.prebuilt import ToolNode
from tests.fakes import (
    FAQ_DOCS,
    TOY_DOCS,
    FilterableMemorySource,
    RecordingSource,
    SlowSource,
    tenant_source,
    unreachable_index,
)
from typing_extensions import TypedDict

from agentic_retrieval import (
    Context,
    InMemoryKnowledgeSource,
    KnowledgeBase,
    RetrieveResponse,
)
from agentic_retrieval.errors import (
    IdentityRequiredError,
    InvalidRequestError,
    UnknownKnowledgeSourceError,
)
from agentic_retrieval.permissions import Identity
from agentic_retrieval.testing import ScriptedChatModel, ScriptedToolCallingModel
from agentic_retrieval.tool import tool_name


def transit(**kwargs: Any) -> KnowledgeBase:
    return KnowledgeBase(
        [
            FilterableMemorySource("transit", TOY_DOCS, description="Fares, bikes and hours."),
            InMemoryKnowledgeSource("faq", FAQ_DOCS, description="Refund questions."),
        ],
        name="transit",
        description="Harborline rider help",
        **kwargs,
    )


def call(tool: BaseTool, **args: Any) -> ToolMessage:
    message = tool.invoke({"type": "tool_call", "id": "call_1", "name": tool.name, "args": args})
    assert isinstance(message, ToolMessage)
    return message


def doc_keys(response: RetrieveResponse) -> list[str]:
    return [ref.doc_key.partition("#")[0] for ref in response.references if ref.doc_key]


# --- what the model sees ---------------------------------------------------------------------


def test_name_description_and_arguments_come_from_the_knowledge_base():
    tool = transit().as_tool()
    assert isinstance(tool, BaseTool)
    assert tool.name == "search_transit"
    assert tool.response_format == "content_and_artifact"
    for text in ("'transit'", "Harborline rider help", "transit: Fares, bikes", "faq: Refund"):
        assert text in tool.description
    schema = tool.tool_call_schema.model_json_schema()
    assert schema["required"] == ["query"]
    assert set(schema["properties"]) == {"query", "filter", "sources"}
    assert "category, year" in schema["properties"]["filter"]["description"]
    sources = schema["properties"]["sources"]["anyOf"][0]
    assert sources["items"]["enum"] == ["transit", "faq"]


def test_only_what_the_knowledge_base_supports_is_offered():
    plain = KnowledgeBase([InMemoryKnowledgeSource("faq", FAQ_DOCS)], name="my kb.v2")
    tool = plain.as_tool()
    # one source (nothing to choose) that names no filterable field (nothing to filter on)
    assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {"query"}
    assert tool.name == tool_name("my kb.v2") == "search_my_kb_v2"
    forced = plain.as_tool(arguments=["filter"])
    assert set(forced.tool_call_schema.model_json_schema()["properties"]) == {"query", "filter"}
    # a knowledge_sources setting limits what the model may choose from
    limited = transit().as_tool(knowledge_sources=["faq"])
    assert "sources" not in limited.tool_call_schema.model_json_schema()["properties"]
    assert "transit:" not in limited.description


def test_the_identity_is_never_an_argument():
    tool = transit().as_tool(identity=Identity(user_id="ann"))
    assert "identity" not in json.dumps(tool.tool_call_schema.model_json_schema())
    refused = call(tool, query="day pass", identity={"user_id": "cfo"})
    assert refused.status == "error"
    assert "identity" in refused.content and "Extra inputs are not permitted" in refused.content


def test_name_and_description_can_be_given():
    tool = transit().as_tool("fares", "Look up fares.")
    assert (tool.name, tool.description) == ("fares", "Look up fares.")


# --- content and artifact --------------------------------------------------------------------


def test_content_is_the_passages_with_ref_ids_and_the_artifact_the_response():
    message = call(transit().as_tool(), query="day pass costs euros")
    assert message.status == "success"
    assert isinstance(message.artifact, RetrieveResponse)
    assert message.content == message.artifact.text
    passages = json.loads(message.content)
    assert passages[0]["ref_id"] == 0
    assert doc_keys(message.artifact)[0] == "fares"
    assert message.artifact.status_code == 200
    assert {a.type for a in message.artifact.activity or []} >= {"searchIndex"}


async def test_the_async_path_gives_the_same_answer():
    tool = transit().as_tool()
    message = await tool.ainvoke(
        {
            "type": "tool_call",
            "id": "c",
            "name": tool.name,
            "args": {"query": "day pass costs euros"},
        }
    )
    assert doc_keys(message.artifact)[0] == "fares"
    assert message.content == call(tool, query="day pass costs euros").content


def test_answer_synthesis_content_is_the_cited_answer():
    model = ScriptedChatModel(
        script={
            "QueryPlan": [
                {"needs_retrieval": True, "queries": [{"query": "day pass costs euros"}]}
            ],
            "SynthesizedAnswer": [{"answer": "A day pass costs 6 euros [ref_id:0]."}],
        }
    )
    tool = transit(chat_model=model).as_tool(output_mode="answerSynthesis")
    assert "Returns an answer citing" in tool.description
    message = call(tool, query="How much is a day pass?")
    assert message.content == "A day pass costs 6 euros [ref_id:0]."
    assert doc_keys(message.artifact)[0] == "fares"


def test_nothing_found_is_said_plainly():
    message = call(transit().as_tool(), query="zeppelin timetable")
    assert message.content == "Nothing in the knowledge base 'transit' matched this search."
    assert message.artifact.references == []


def test_settings_bound_to_the_tool_apply_to_every_call():
    tool = transit(defaults=Context(reranker_threshold=None)).as_tool(top_n=1)
    assert len(call(tool, query="tram day pass bikes").artifact.references) == 1


def test_the_artifact_round_trips_as_a_retrieve_response():
    artifact = call(transit().as_tool(), query="day pass costs euros").artifact
    wire = artifact.to_wire()
    assert RetrieveResponse.model_validate_json(json.dumps(wire)).to_wire() == wire
    # a checkpointer stores a message's artifact as its dump; it validates back the same
    assert RetrieveResponse.model_validate(artifact.model_dump()).to_wire() == wire


# --- what the model may narrow ----------------------------------------------------------------


def test_sources_restricts_the_search_to_the_chosen_ones():
    message = call(transit().as_tool(), query="refund day pass", sources=["faq"])
    searched = {
        (a.model_extra or {}).get("knowledgeSourceName")
        for a in message.artifact.activity or []
        if (a.model_extra or {}).get("count") is not None
    }
    assert searched == {"faq"}
    assert doc_keys(message.artifact) == ["faq-refund"]


def test_a_source_outside_the_choices_is_an_error_message():
    message = call(transit().as_tool(), query="refund", sources=["payroll"])
    assert message.status == "error"
    assert message.content.startswith("Invalid arguments: sources.0:")
    assert "'transit' or 'faq'" in message.content


def test_the_models_filter_narrows_the_bound_filter_never_replaces_it():
    recording = RecordingSource(FilterableMemorySource("transit", TOY_DOCS))
    recording.filterable_fields = ("category", "year")  # type: ignore[attr-defined]
    kb = KnowledgeBase([recording], name="transit", defaults=Context(reranker_threshold=None))
    unfiltered = kb.retrieve({"intents": [{"search": "tram"}]})
    assert doc_keys(unfiltered) == ["lost", "hours", "fares"]
    tool = kb.as_tool(filter="year ge 2024")
    # an "or" that would let everything through cannot escape its parentheses
    message = call(tool, query="tram", filter="category eq 'service' or year ge 2000")
    assert recording.queries[-1].filter == (
        "(year ge 2024) and (category eq 'service' or year ge 2000)"
    )
    assert doc_keys(message.artifact) == ["hours", "fares"]  # lost (2022) stays out


def test_a_bad_filter_is_an_error_message_naming_the_argument():
    message = call(transit().as_tool(), query="tram", filter="year >= 2024")
    assert message.status == "error"
    assert message.content.startswith("filter:")
    assert message.artifact is None


def test_the_local_store_checks_filter_fields(tmp_path):
    from agentic_retrieval.sources.local import LocalKnowledgeSource

    source = LocalKnowledgeSource("notes", tmp_path / "notes.sqlite", create=True)
    source.add_documents(
        [{"id": "a", "text": "The night tram runs every 30 minutes.", "year": 2024}]
    )
    tool = KnowledgeBase([source], name="notes").as_tool()
    assert (
        "year (number)"
        in tool.tool_call_schema.model_json_schema()["properties"]["filter"]["description"]
    )
    message = call(tool, query="night tram", filter="yaer ge 2024")
    assert message.status == "error"
    assert "yaer" in message.content and message.content.startswith("filter:")
    source.close()


# --- errors the model can act on --------------------------------------------------------------


def test_a_failing_source_gives_partial_results_naming_it():
    kb = KnowledgeBase(
        [InMemoryKnowledgeSource("transit", TOY_DOCS), unreachable_index("timetables")],
        name="transit",
    )
    message = call(kb.as_tool(), query="day pass costs euros")
    assert message.status == "success"
    assert message.artifact.status_code == 206
    assert message.content.startswith(
        "Note: the source 'timetables' failed (the index is unreachable), so these results "
        "come from the others only."
    )
    assert doc_keys(message.artifact)[0] == "fares"


def test_a_timeout_with_nothing_ready_is_an_error_message():
    kb = KnowledgeBase([SlowSource(delay=5.0)], name="slow")
    message = call(kb.as_tool(max_runtime_seconds=0.2), query="anything")
    assert message.status == "error"
    assert message.content.startswith("the search timed out after 0.2 s")


def test_invalid_arguments_come_back_naming_the_field():
    tool = transit().as_tool()
    assert call(tool, query="").content == (
        "Invalid arguments: query: String should have at least 1 character"
    )
    assert call(tool, query="   ").content == "query is empty: give the question to search for"


def test_settings_are_checked_when_the_tool_is_made():
    with pytest.raises(InvalidRequestError, match=r"as_tool\(effort='low'.*needs a chat model"):
        transit().as_tool(effort="low")
    with pytest.raises(InvalidRequestError, match="answerSynthesis"):
        transit().as_tool(output_mode="answerSynthesis")
    with pytest.raises(InvalidRequestError, match="filter"):
        transit().as_tool(filter="year >=")
    with pytest.raises(TypeError, match=r"unknown setting.*colour"):
        transit().as_tool(colour="red")
    with pytest.raises(TypeError, match=r"unknown argument.*identity"):
        transit().as_tool(arguments=["identity"])
    with pytest.raises(InvalidRequestError, match="top_n"):
        transit().as_tool(top_n=0)


def test_an_unknown_source_in_knowledge_sources_is_named_with_the_known_ones():
    with pytest.raises(UnknownKnowledgeSourceError) as raised:
        transit().as_tool(knowledge_sources=["trnasit", "faq"])
    assert str(raised.value) == (
        "as_tool: knowledge_sources names 'trnasit', which the knowledge base 'transit' "
        "does not have (it has: transit, faq)"
    )


@pytest.mark.parametrize(
    ("setting", "value", "choices"),
    [
        ("effort", "meduim", "minimal, low, medium, auto"),
        ("output_mode", "answer", "extractiveData, answerSynthesis"),
    ],
)
def test_a_misspelt_effort_or_output_mode_lists_the_allowed_values(setting, value, choices):
    with pytest.raises(InvalidRequestError) as raised:
        transit().as_tool(**{setting: value})
    assert str(raised.value) == f"as_tool: {setting}={value!r} is not one of {choices}"


def test_a_bad_bound_filter_is_reported_under_the_tools_argument_name():
    with pytest.raises(InvalidRequestError) as raised:
        transit().as_tool(filter="year >= 2024")
    message = str(raised.value)
    assert message.startswith(
        "as_tool(effort=None, output_mode=None, filter='year >= 2024'): filter: "
    )
    assert "filterAddOn" not in message and "knowledgeSourceParams" not in message


# --- identity ---------------------------------------------------------------------------------


@pytest.fixture
def policies(tmp_path):
    source = tenant_source(tmp_path / "policies.sqlite")
    yield source
    source.close()


@pytest.mark.parametrize(
    ("identity", "expected"),
    [
        (Identity(user_id="alice", groups=["acme"]), ["acme-ceo", "acme-leave", "holidays"]),
        (Identity(groups=["globex"]), ["globex-leave", "holidays"]),
        ({"user_id": "bob", "groups": ["globex"]}, ["globex-leave", "holidays"]),
        (None, ["holidays"]),
    ],
)
def test_identity_trims_exactly_as_retrieve_does(policies, identity, expected):
    kb = KnowledgeBase([policies], name="policies")
    through_tool = call(kb.as_tool(identity=identity), query="vacation days").artifact
    request = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "vacation days"}]}]
    }
    direct = kb.retrieve(request, identity=identity)
    assert doc_keys(through_tool) == doc_keys(direct)
    assert sorted(doc_keys(through_tool)) == expected


def test_a_knowledge_base_that_requires_identity_needs_one_bound(policies):
    kb = KnowledgeBase([policies], name="policies", require_identity=True)
    with pytest.raises(IdentityRequiredError, match="pass identity= to as_tool"):
        kb.as_tool()
    tool = kb.as_tool(identity=Identity(groups=["globex"]))
    assert sorted(doc_keys(call(tool, query="vacation days").artifact)) == [
        "globex-leave",
        "holidays",
    ]


# --- in agents ---------------------------------------------------------------------------------


def agent_script(answer: str = "A day pass costs 6 euros [ref_id:0].") -> list[Any]:
    return [
        {"tool_calls": [{"name": "search_transit", "args": {"query": "day pass costs euros"}}]},
        answer,
    ]


def test_create_agent_calls_the_tool_and_keeps_the_artifact():
    model = ScriptedToolCallingModel(turns=agent_script())
    agent = create_agent(model, tools=[transit().as_tool()], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    out = agent.invoke({"messages": [HumanMessage("How much is a day pass?")]}, config)
    kinds = [type(m).__name__ for m in out["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    tool_message = out["messages"][2]
    assert doc_keys(tool_message.artifact)[0] == "fares"
    assert out["messages"][-1].content == "A day pass costs 6 euros [ref_id:0]."
    # the model's second call saw the passages
    assert json.loads(model.calls[1]["messages"][-1].content)[0]["ref_id"] == 0
    assert model.calls[0]["tools"] == ["search_transit"]
    # the agent's thread holds the artifact (as its dump); the retrieval graph's own steps
    # are not checkpointed into the agent's thread
    stored = agent.get_state(config).values["messages"][2].artifact
    assert RetrieveResponse.model_validate(stored).to_wire() == tool_message.artifact.to_wire()
    namespaces = {c.config["configurable"]["checkpoint_ns"] for c in agent.checkpointer.list(None)}
    assert namespaces == {""}


async def test_create_agent_async():
    model = ScriptedToolCallingModel(turns=agent_script())
    agent = create_agent(model, tools=[transit().as_tool()])
    out = await agent.ainvoke({"messages": [HumanMessage("How much is a day pass?")]})
    assert doc_keys(out["messages"][2].artifact)[0] == "fares"


def test_an_error_message_lets_the_agent_go_on():
    turns = [
        {"tool_calls": [{"name": "search_transit", "args": {"query": "x", "filter": "year >="}}]},
        {"tool_calls": [{"name": "search_transit", "args": {"query": "day pass costs euros"}}]},
        "A day pass costs 6 euros [ref_id:0].",
    ]
    agent = create_agent(ScriptedToolCallingModel(turns=turns), tools=[transit().as_tool()])
    out = agent.invoke({"messages": [HumanMessage("How much is a day pass?")]})
    errors = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(errors) == 1 and errors[0].content.startswith("filter:")
    assert out["messages"][-1].content == "A day pass costs 6 euros [ref_id:0]."


def test_tool_choice_forces_the_first_call_in_create_agent():
    tool = transit().as_tool()

    @wrap_model_call
    def search_first(request, handler):
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            request = request.override(tool_choice=tool.name)
        return handler(request)

    model = ScriptedToolCallingModel(turns=agent_script())
    agent = create_agent(model, tools=[tool], middleware=[search_first])
    agent.invoke({"messages": [HumanMessage("Hi! day pass?")]})
    assert [c["tool_choice"] for c in model.calls] == ["search_transit", None]


def test_the_scripted_model_refuses_a_script_that_ignores_a_forced_tool():
    model = ScriptedToolCallingModel(turns=["I will not search."])
    forced = model.bind_tools([transit().as_tool()], tool_choice="any")
    with pytest.raises(ValueError, match="forces a tool call"):
        forced.invoke("day pass?")
    model = ScriptedToolCallingModel(turns=agent_script())
    with pytest.raises(ValueError, match="not among the bound tools"):
        model.bind_tools([]).invoke("day pass?")


class LoopState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_a_hand_built_tool_node_loop_with_tool_choice():
    tool = transit().as_tool()
    model = ScriptedToolCallingModel(turns=agent_script())

    def agent(state: LoopState) -> dict[str, Any]:
        searched = any(isinstance(m, ToolMessage) for m in state["messages"])
        bound = model.bind_tools([tool], tool_choice=None if searched else tool.name)
        return {"messages": [bound.invoke(state["messages"])]}

    def route(state: LoopState) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder = StateGraph(LoopState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    out = builder.compile().invoke({"messages": [HumanMessage("How much is a day pass?")]})
    assert doc_keys(out["messages"][2].artifact)[0] == "fares"
    assert out["messages"][-1].content == "A day pass costs 6 euros [ref_id:0]."
    assert [c["tool_choice"] for c in model.calls] == ["search_transit", None]


# --- the graph as a subgraph ------------------------------------------------------------------


class Parent(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    response: str
    references: list[dict[str, Any]]
    partial: bool
    summary: str


def test_the_compiled_graph_runs_as_a_subgraph_node():
    kb = transit()

    def summarise(state: Parent) -> dict[str, Any]:
        keys = [ref["docKey"] for ref in state["references"]]
        return {"summary": f"{len(keys)} reference(s), first {keys[0]}"}

    builder = StateGraph(Parent)
    builder.add_node("retrieve", kb.graph)
    builder.add_node("summarise", summarise)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "summarise")
    builder.add_edge("summarise", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "p"}}
    out = graph.invoke(
        {"messages": [HumanMessage("day pass costs euros")]},
        config,
        context=Context(reasoning_effort="minimal"),
    )
    # lexical scores under 2.5 are kept too: the default threshold cuts calibrated scores only
    assert out["summary"] == "4 reference(s), first fares"
    assert json.loads(out["response"])[0]["ref_id"] == 0
    assert out["partial"] is False
    # the subgraph appended its reply to the parent's conversation
    assert [type(m).__name__ for m in out["messages"]] == ["HumanMessage", "AIMessage"]
    assert out["messages"][-1].content == out["response"]
    second = graph.invoke(
        {"messages": [HumanMessage("refund of an unused day pass")]},
        config,
        context=Context(reasoning_effort="minimal"),
    )
    assert second["references"][0]["docKey"] == "faq-refund"
    assert len(second["messages"]) == 4
