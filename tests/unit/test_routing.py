"""Where the run goes next: the state a node leaves behind decides the next node.

Two tables. The first lists states and the node (or the fan-out) the graph's one edge function
sends them to. The second lists turns and the path of nodes each one takes end to end, so a
change to any decision (which node writes ``next_step`` and ``judge``, and from what) shows up
here as a changed row.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Send
from tests.fakes import FailingSource

from agentic_retrieval import Context, build_graph
from agentic_retrieval.graph.records import SearchTask, Subquery
from agentic_retrieval.graph.routing import follow
from agentic_retrieval.state import RetrievalState, Scope, Update, scope_of
from agentic_retrieval.testing import ScriptedChatModel

TASKS = [
    SearchTask(
        subquery=Subquery(id="q0.0", text="day pass"),
        source=name,
        filter=None,
        top=5,
        deadline=0.0,
        timeout=1.0,
    )
    for name in ("transit", "faq")
]

EDGES = [
    # (what the last node wrote, where the graph goes)
    ({"next_step": "judge_question"}, "judge_question"),
    ({"next_step": "plan_queries"}, "plan_queries"),
    ({"next_step": "prepare_searches"}, "prepare_searches"),
    ({"next_step": "respond"}, "respond"),
    ({"next_step": "rerank", "searches": []}, "rerank"),
    ({"next_step": "assess_evidence"}, "assess_evidence"),
    ({"next_step": "judge_results"}, "judge_results"),
    ({"next_step": "synthesize"}, "synthesize"),
    ({"next_step": "search", "searches": TASKS}, [Send("search", t) for t in TASKS]),
]


@pytest.mark.parametrize(("written", "goes_to"), EDGES, ids=[str(e[0]["next_step"]) for e in EDGES])
def test_the_graph_follows_the_step_the_deciding_node_wrote(written, goes_to):
    assert follow(RetrievalState(**written)) == goes_to


def test_a_node_that_forgot_to_decide_stops_the_run_loudly():
    with pytest.raises(RuntimeError, match="did not set next_step"):
        follow(RetrievalState())


PLAN = {"needs_retrieval": True, "queries": [{"query": "day pass price"}]}
NO_RETRIEVAL = {"needs_retrieval": False, "assistant_message": "Hello!"}
INSUFFICIENT = {"is_sufficient": False, "confidence": 0.2, "followup_queries": ["bike late fee"]}
SUFFICIENT = {"is_sufficient": True, "confidence": 0.9}
WEAK = {"auto_min_top_score": 4.0}  # no passage scores 4: every round's results are weak
STRONG = {"auto_min_top_score": 0.0, "auto_min_term_coverage": 0.0}
FOLLOW_UP = [
    HumanMessage("How much is a day pass?"),
    AIMessage("6 euros."),
    HumanMessage("and it?"),
]

PATHS = [
    # (turn, effort and settings, input, scripted model answers, path)
    (
        "minimal: the question as asked",
        {"reasoning_effort": "minimal"},
        {"messages": [HumanMessage("day pass price")]},
        {},
        "begin_turn prepare_searches search rerank synthesize respond",
    ),
    (
        "medium with intents: the caller planned, nothing is assessed",
        {"reasoning_effort": "medium"},
        {"intents": ["day pass price"]},
        {},
        "begin_turn prepare_searches search rerank synthesize respond",
    ),
    (
        "low: the model plans",
        {"reasoning_effort": "low"},
        {"messages": [HumanMessage("day pass price?")]},
        {"QueryPlan": [PLAN]},
        "begin_turn plan_queries prepare_searches search rerank synthesize respond",
    ),
    (
        "low: nothing to retrieve",
        {"reasoning_effort": "low"},
        {"messages": [HumanMessage("hello")]},
        {"QueryPlan": [NO_RETRIEVAL]},
        "begin_turn plan_queries respond",
    ),
    (
        "medium: insufficient, one follow-up round, then sufficient",
        {"reasoning_effort": "medium", "max_iterations": 1},
        {"messages": [HumanMessage("day pass price?")]},
        {"QueryPlan": [PLAN], "EvidenceAssessment": [INSUFFICIENT, SUFFICIENT]},
        "begin_turn plan_queries prepare_searches search rerank assess_evidence search rerank "
        "assess_evidence synthesize respond",
    ),
    (
        "medium: insufficient, no follow-up budget",
        {"reasoning_effort": "medium", "max_iterations": 0},
        {"messages": [HumanMessage("day pass price?")]},
        {"QueryPlan": [PLAN], "EvidenceAssessment": [INSUFFICIENT]},
        "begin_turn plan_queries prepare_searches search rerank assess_evidence synthesize respond",
    ),
    (
        "auto: a searchable question, strong results",
        {"reasoning_effort": "auto", **STRONG},
        {"messages": [HumanMessage("day pass price")]},
        {},
        "begin_turn judge_question prepare_searches search rerank judge_results synthesize respond",
    ),
    (
        "auto: weak results escalate to planning, then to assessment",
        {"reasoning_effort": "auto", **WEAK},
        {"messages": [HumanMessage("day pass price")]},
        {"QueryPlan": [PLAN], "EvidenceAssessment": [SUFFICIENT]},
        "begin_turn judge_question prepare_searches search rerank judge_results plan_queries "
        "prepare_searches search rerank judge_results assess_evidence synthesize respond",
    ),
    (
        "auto: a follow-up is planned before anything is searched",
        {"reasoning_effort": "auto", **STRONG},
        {"messages": FOLLOW_UP},
        {"QueryPlan": [PLAN]},
        "begin_turn judge_question plan_queries prepare_searches search rerank judge_results "
        "synthesize respond",
    ),
    (
        "nothing the run may search: straight to rerank",
        {"reasoning_effort": "minimal", "knowledge_sources": []},
        {"messages": [HumanMessage("day pass price")]},
        {},
        "begin_turn prepare_searches rerank synthesize respond",
    ),
    (
        "a failOnError source fails: the request fails, nothing is judged",
        {"reasoning_effort": "medium"},
        {
            "messages": [HumanMessage("day pass price?")],
            "knowledge_source_params": [{"knowledgeSourceName": "broken", "failOnError": True}],
        },
        {"QueryPlan": [PLAN]},
        "begin_turn plan_queries prepare_searches search rerank respond",
    ),
]


@pytest.mark.parametrize(
    ("turn", "settings", "given", "script", "path"), PATHS, ids=[p[0] for p in PATHS]
)
def test_each_kind_of_turn_takes_its_path(toy_source, turn, settings, given, script, path):
    graph = build_graph(
        [toy_source, FailingSource("broken")], chat_model=ScriptedChatModel(script=script)
    )
    visited: list[str] = []
    for chunk in graph.stream(given, context=Context(**settings), stream_mode="updates"):
        (node,) = chunk
        if not visited or visited[-1] != node:  # parallel searches: one step
            visited.append(node)
    assert " ".join(visited) == path


def test_a_node_update_names_only_state_fields_with_their_types():
    """``Update`` is every field a node may write (not the turn inputs), typed as in the state."""
    state = typing.get_type_hints(RetrievalState)
    update = typing.get_type_hints(Update)
    writable = {f.name for f in dataclasses.fields(RetrievalState)} - {
        f.name for f in dataclasses.fields(RetrievalState) if scope_of(f.name) is Scope.TURN
    }
    assert set(update) == writable
    for name, hint in update.items():
        assert hint == state[name], name  # the reducers' Annotated[...] stripped
