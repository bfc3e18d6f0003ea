"""Wiring only: the graph as drawn in DESIGN.md §1.

```
START → route_and_plan → prepare_searches → search × N (Send) → rerank → synthesize → respond → END
        route_and_plan → respond                    (no retrieval needed)
                                                    rerank → assess_evidence (medium)
                                  assess_evidence → search × N (follow-ups) | synthesize
auto:   route_and_plan → judge_question → prepare_searches | plan_queries (not searchable as is)
        plan_queries → prepare_searches | respond
        rerank → judge_results → synthesize | plan_queries (weak at minimal)
                               | assess_evidence (weak at low)
```
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentic_retrieval.context import Context
from agentic_retrieval.graph import routing
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.sync import with_sync_twin
from agentic_retrieval.nodes.assess_evidence import make_assess_evidence
from agentic_retrieval.nodes.judge_question import judge_question
from agentic_retrieval.nodes.judge_results import judge_results
from agentic_retrieval.nodes.plan_queries import make_plan_queries
from agentic_retrieval.nodes.prepare_searches import make_prepare_searches
from agentic_retrieval.nodes.rerank import make_rerank
from agentic_retrieval.nodes.respond import make_respond
from agentic_retrieval.nodes.route_and_plan import make_route_and_plan
from agentic_retrieval.nodes.search import make_search
from agentic_retrieval.nodes.synthesize import make_synthesize
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.state import InputState, OutputState, RetrievalState, described

GRAPH_NAME = "agentic_retrieval"

RetrievalGraph = CompiledStateGraph[RetrievalState, Context, InputState, OutputState]
"""The compiled graph's type."""


def build_graph(
    sources: Iterable[KnowledgeSource] | Mapping[str, KnowledgeSource],
    *,
    chat_model: BaseChatModel | str | None = None,
    planning_model: BaseChatModel | str | None = None,
    evidence_model: BaseChatModel | str | None = None,
    answer_model: BaseChatModel | str | None = None,
    reranker: Reranker | None = None,
    checkpointer: Any = None,
    name: str = GRAPH_NAME,
) -> RetrievalGraph:
    """Build and compile the agentic retrieval graph.

    Args:
        sources: The knowledge sources (names must be unique).
        chat_model: Model for every role: a ``BaseChatModel`` or a ``provider:model``
            string. ``None`` falls back to ``$AGENTIC_RETRIEVAL_CHAT_MODEL`` at run time.
        planning_model: Overrides ``chat_model`` for routing and planning.
        evidence_model: Overrides ``chat_model`` for evidence assessment.
        answer_model: Overrides ``chat_model`` for answer synthesis.
        reranker: Scores candidates on the 0-4 scale (default: source semantic scores
            passed through, lexical coverage for the rest).
        checkpointer: Optional LangGraph checkpointer.
        name: The compiled graph's name.

    Returns:
        The compiled graph: a Runnable (``invoke``, ``ainvoke``, ``stream``, ``batch``...)
        taking :class:`InputState` and a :class:`Context`.
    """
    bindings = Bindings.create(
        sources,
        chat_model=chat_model,
        planning_model=planning_model,
        evidence_model=evidence_model,
        answer_model=answer_model,
        reranker=reranker,
    )
    return compile_graph(bindings, checkpointer=checkpointer, name=name)


def compile_graph(
    bindings: Bindings, *, checkpointer: Any = None, name: str = GRAPH_NAME
) -> RetrievalGraph:
    """Wire and compile the graph over ``bindings`` (what :func:`build_graph` does).

    Args:
        bindings: The sources, chat models and reranker every run uses.
        checkpointer: Optional LangGraph checkpointer.
        name: The compiled graph's name.
    """
    builder = StateGraph(
        RetrievalState,
        input_schema=described(InputState),  # Studio's input form shows field descriptions
        output_schema=described(OutputState),
        # a TypedDict, not the dataclass: LangGraph would build a Context from a dict context
        # itself, and current_context could no longer fill in what it leaves unset
        context_schema=described(Context),
    )
    builder.add_node("route_and_plan", with_sync_twin(make_route_and_plan(bindings)))
    builder.add_node("judge_question", with_sync_twin(judge_question))
    builder.add_node("plan_queries", with_sync_twin(make_plan_queries(bindings)))
    builder.add_node("prepare_searches", with_sync_twin(make_prepare_searches(bindings)))
    builder.add_node("search", with_sync_twin(make_search(bindings)))
    builder.add_node("rerank", with_sync_twin(make_rerank(bindings)))
    builder.add_node("judge_results", with_sync_twin(judge_results))
    builder.add_node("assess_evidence", with_sync_twin(make_assess_evidence(bindings)))
    builder.add_node("synthesize", with_sync_twin(make_synthesize(bindings)))
    builder.add_node("respond", with_sync_twin(make_respond(bindings)))

    builder.add_edge(START, "route_and_plan")
    builder.add_conditional_edges("route_and_plan", routing.after_route_and_plan)
    builder.add_conditional_edges("judge_question", routing.after_judge_question)
    builder.add_conditional_edges("plan_queries", routing.after_plan_queries)
    builder.add_conditional_edges(
        "prepare_searches", routing.dispatch_searches, ["search", "rerank"]
    )
    builder.add_edge("search", "rerank")
    builder.add_conditional_edges("rerank", routing.after_rerank)
    builder.add_conditional_edges("judge_results", routing.after_judge_results)
    builder.add_conditional_edges(
        "assess_evidence", routing.after_assess_evidence, ["search", "synthesize"]
    )
    builder.add_edge("synthesize", "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=checkpointer, name=name)


__all__ = ["GRAPH_NAME", "Context", "RetrievalGraph", "build_graph", "compile_graph"]
