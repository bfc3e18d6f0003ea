"""Where the run goes next: each deciding node returns it, from the facts in the state.

Two tables. The first lists, for each node with several ways out, states and the node (or
the fan-out) it sends the run to. The second lists turns and the path of nodes each one
takes end to end, so a change to any decision (which node decides, and from what) shows up
here as a changed row.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
import typing
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.runtime import Runtime
from langgraph.types import Command
from tests.fakes import TOY_DOCS, FailingSource

from agentic_retrieval import Context, InMemoryKnowledgeSource, build_graph
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.records import RankedHit, Subquery
from agentic_retrieval.nodes.assess_evidence import assess_evidence
from agentic_retrieval.nodes.begin_turn import begin_turn
from agentic_retrieval.nodes.judge_question import judge_question
from agentic_retrieval.nodes.judge_results import judge_results
from agentic_retrieval.nodes.plan_queries import plan_queries
from agentic_retrieval.nodes.prepare_searches import prepare_searches
from agentic_retrieval.nodes.rerank import rerank
from agentic_retrieval.state import RetrievalState, Scope, Update, scope_of
from agentic_retrieval.testing import ScriptedChatModel

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

ASKED = [Subquery(id="q0.0", text="day pass price", sources=("transit",))]
STRONG_HIT = RankedHit(
    doc_key="t1",
    content="A day pass costs 6 euros.",
    source="transit",
    subquery_id="q1.0",
    query="day pass price",
    activity_key="search:0",
    ref_id=0,
    final_score=3.9,
)
ROUND = {"subqueries": ASKED, "ranked": [STRONG_HIT], "question": "day pass price"}

DECISIONS: list[tuple[str, Any, dict[str, Any], dict[str, Any], dict[str, Any], Any]] = [
    # (case, node, state before it, settings, scripted model answers, where it sends the run)
    (
        "auto: judge the question",
        begin_turn,
        {"messages": [HumanMessage("day pass")]},
        {"reasoning_effort": "auto"},
        {},
        "judge_question",
    ),
    (
        "low: the model plans",
        begin_turn,
        {"messages": [HumanMessage("day pass")]},
        {"reasoning_effort": "low"},
        {},
        "plan_queries",
    ),
    (
        "minimal: searched as asked",
        begin_turn,
        {"messages": [HumanMessage("day pass")]},
        {"reasoning_effort": "minimal"},
        {},
        "prepare_searches",
    ),
    (
        "medium with intents: the caller planned",
        begin_turn,
        {"intents": ["day pass"]},
        {"reasoning_effort": "medium"},
        {},
        "prepare_searches",
    ),
    (
        "a searchable question",
        judge_question,
        {"question": "day pass price"},
        {},
        {},
        "prepare_searches",
    ),
    (
        "a follow-up is planned",
        judge_question,
        {"messages": FOLLOW_UP, "question": "and it?"},
        {},
        {},
        "plan_queries",
    ),
    (
        "a plan is searched",
        plan_queries,
        {"messages": [HumanMessage("day pass price?")]},
        {},
        {"QueryPlan": [PLAN]},
        "prepare_searches",
    ),
    (
        "nothing to retrieve",
        plan_queries,
        {"messages": [HumanMessage("hello")]},
        {},
        {"QueryPlan": [NO_RETRIEVAL]},
        "respond",
    ),
    (
        "one search per subquery and source",
        prepare_searches,
        {"planned": ASKED},
        {},
        {},
        [("search", "day pass price", "transit")],
    ),
    (
        "nothing the run may search",
        prepare_searches,
        {"planned": ASKED},
        {"knowledge_sources": []},
        {},
        "rerank",
    ),
    (
        "medium: the evidence model judges",
        rerank,
        {"judging": "evidence"},
        {},
        {},
        "assess_evidence",
    ),
    ("auto: the signals judge", rerank, {"judging": "signals"}, {}, {}, "judge_results"),
    ("nobody judges", rerank, {}, {}, {}, "synthesize"),
    (
        "a failOnError source failed",
        rerank,
        {"judging": "evidence", "failure": {"code": "x"}},
        {},
        {},
        "respond",
    ),
    ("strong results", judge_results, {**ROUND, "effort": "minimal"}, STRONG, {}, "synthesize"),
    (
        "weak at minimal: plan",
        judge_results,
        {**ROUND, "effort": "minimal"},
        WEAK,
        {},
        "plan_queries",
    ),
    ("weak at low: assess", judge_results, {**ROUND, "effort": "low"}, WEAK, {}, "assess_evidence"),
    (
        "insufficient, budget left: a follow-up round",
        assess_evidence,
        ROUND,
        {},
        {"EvidenceAssessment": [INSUFFICIENT]},
        [("search", "bike late fee", "transit")],
    ),
    ("sufficient", assess_evidence, ROUND, {}, {"EvidenceAssessment": [SUFFICIENT]}, "synthesize"),
]


def decide(node: Any, state: RetrievalState, context: Context, script: dict[str, Any]) -> Any:
    """Run one node as the graph would, and return where it sends the run."""
    bindings = Bindings.create(
        [InMemoryKnowledgeSource("transit", TOY_DOCS)], chat_model=ScriptedChatModel(script=script)
    )
    declared = inspect.signature(node).parameters
    given = {"bindings": bindings, "config": {}}
    runtime = Runtime(context=context, stream_writer=lambda _: None)
    extra = {name: value for name, value in given.items() if name in declared}
    command = asyncio.run(node(state, runtime, **extra))
    assert isinstance(command, Command)
    if isinstance(command.goto, list):
        return [(s.node, s.arg.subquery.text, s.arg.source) for s in command.goto]
    return command.goto


@pytest.mark.parametrize(
    ("case", "node", "state", "settings", "script", "goes_to"),
    DECISIONS,
    ids=[f"{d[1].__name__}: {d[0]}" for d in DECISIONS],
)
def test_each_deciding_node_sends_the_run_where_its_facts_say(
    case, node, state, settings, script, goes_to
):
    state = RetrievalState(**{"started_at": time.time(), **state})
    assert decide(node, state, Context(**settings), script) == goes_to


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
