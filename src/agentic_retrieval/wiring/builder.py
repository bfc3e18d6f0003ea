"""Wiring only: the nodes, the fixed edges, and the schemas the graph publishes.

The graph as built is drawn in ``tests/unit/snapshots/graph.mmd`` (a test keeps the two the
same). A node with several ways out returns a ``Command`` whose ``goto`` is its choice; its
return annotation (``Command[Literal[...]]``) lists where it may go, which is what the graph
draws and what mypy checks every ``goto`` against. The edges written here are the fixed ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentic_retrieval.context import Context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.records import GraphSearchTask, SearchTask
from agentic_retrieval.graph.schema import described
from agentic_retrieval.nodes.assess_evidence import assess_evidence
from agentic_retrieval.nodes.begin_turn import begin_turn
from agentic_retrieval.nodes.graph_search import graph_search
from agentic_retrieval.nodes.judge_question import judge_question
from agentic_retrieval.nodes.judge_results import judge_results
from agentic_retrieval.nodes.plan_queries import plan_queries
from agentic_retrieval.nodes.prepare_searches import prepare_searches
from agentic_retrieval.nodes.rerank import rerank
from agentic_retrieval.nodes.respond import respond
from agentic_retrieval.nodes.search import search
from agentic_retrieval.nodes.synthesize import synthesize
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.state import InputState, OutputState, RetrievalState
from agentic_retrieval.wiring.runtime import BoundNode, NodeBody, destinations

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
        # a TypedDict of Context's fields, not the dataclass: LangGraph would build a Context
        # from a dict context itself (Context(**given)), so the knowledge base's defaults
        # could not fill in what it leaves unset and a misspelt field would be a TypeError;
        # BoundNode builds it (resolve_context). The published schema is the same bar one
        # field (the dataclass's loses reranker_threshold's bounds and default).
        context_schema=described(Context),
    )

    def add(body: NodeBody, **options: Any) -> None:
        """Register ``body`` under its function's name, bound to ``bindings``."""
        builder.add_node(
            body.__name__, BoundNode(body, bindings), destinations=destinations(body), **options
        )

    add(begin_turn)
    add(judge_question)
    add(plan_queries)
    add(prepare_searches)
    add(search, input_schema=SearchTask)  # a Send payload: one subquery against one source
    add(graph_search, input_schema=GraphSearchTask)  # a Send payload, like search's
    add(rerank)
    add(judge_results)
    add(assess_evidence)
    add(synthesize)
    add(respond)

    builder.add_edge(START, "begin_turn")
    builder.add_edge("search", "rerank")
    builder.add_edge("graph_search", "rerank")
    builder.add_edge("synthesize", "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=checkpointer, name=name)


__all__ = ["GRAPH_NAME", "Context", "RetrievalGraph", "build_graph", "compile_graph"]
