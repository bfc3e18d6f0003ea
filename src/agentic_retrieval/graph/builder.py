"""Wiring only: the graph as drawn in DESIGN.md §1.

```
START → route_intent ─┬→ plan_queries → search × N (Send) → rerank ─┬→ assess_evidence ─┐
                      │                                              │   ├→ search … (loop)  │
                      │                                              │   └→ synthesize ◄─────┘
                      │                                              └→ synthesize → respond → END
                      └→ respond
```
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph._internal._runnable import RunnableCallable
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentic_retrieval.bindings import Bindings
from agentic_retrieval.chat_models import ChatModels
from agentic_retrieval.context import Context
from agentic_retrieval.graph import routing
from agentic_retrieval.nodes.assess_evidence import make_assess_evidence
from agentic_retrieval.nodes.plan_queries import make_plan_queries
from agentic_retrieval.nodes.rerank import make_rerank
from agentic_retrieval.nodes.respond import make_respond
from agentic_retrieval.nodes.route_intent import make_route_intent
from agentic_retrieval.nodes.search import make_search
from agentic_retrieval.nodes.synthesize import make_synthesize
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.rerankers.passthrough import PassthroughReranker
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.state import InputState, OutputState, RetrievalState
from agentic_retrieval.sync import run_sync

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
    bindings = Bindings(
        sources=_by_name(sources),
        models=ChatModels(chat_model, planning_model, evidence_model, answer_model),
        reranker=reranker or PassthroughReranker(),
    )
    builder = StateGraph(
        RetrievalState, input_schema=InputState, output_schema=OutputState, context_schema=Context
    )
    builder.add_node("route_intent", _node(make_route_intent(bindings)))
    builder.add_node("plan_queries", _node(make_plan_queries(bindings)))
    builder.add_node("search", _node(make_search(bindings)))
    builder.add_node("rerank", _node(make_rerank(bindings)))
    builder.add_node("assess_evidence", _node(make_assess_evidence(bindings)))
    builder.add_node("synthesize", _node(make_synthesize(bindings)))
    builder.add_node("respond", _node(make_respond(bindings)))

    builder.add_edge(START, "route_intent")
    builder.add_conditional_edges("route_intent", routing.after_route_intent)
    builder.add_conditional_edges(
        "plan_queries", routing.dispatch_searches, ["search", "rerank"]
    )
    builder.add_edge("search", "rerank")
    builder.add_conditional_edges("rerank", routing.after_rerank)
    builder.add_conditional_edges(
        "assess_evidence", routing.after_assess_evidence, ["search", "synthesize"]
    )
    builder.add_edge("synthesize", "respond")
    builder.add_edge("respond", END)
    graph = builder.compile(checkpointer=checkpointer, name=name)
    graph.bindings = bindings  # type: ignore[attr-defined]  # for KnowledgeBase and tests
    return graph


def _by_name(
    sources: Iterable[KnowledgeSource] | Mapping[str, KnowledgeSource],
) -> dict[str, KnowledgeSource]:
    items = list(sources.values()) if isinstance(sources, Mapping) else list(sources)
    by_name: dict[str, KnowledgeSource] = {}
    for source in items:
        if source.name in by_name:
            raise ValueError(f"two knowledge sources are named {source.name!r}")
        by_name[source.name] = source
    return by_name


def _node(afunc: Callable[..., Any]) -> RunnableCallable:
    """Give an async node a sync twin so ``invoke``/``stream`` work as well as ``ainvoke``.

    The sync twin hands the coroutine to the library's background event loop (see
    :mod:`agentic_retrieval.sync`), so it also works when the caller's thread already runs a
    loop, as in Jupyter, and keeps the caller's context variables (callbacks, tracing).
    """

    @functools.wraps(afunc)
    def func(*args: Any, **kwargs: Any) -> Any:
        return run_sync(afunc(*args, **kwargs))

    return RunnableCallable(func, afunc, name=afunc.__name__)


__all__ = ["GRAPH_NAME", "Context", "RetrievalGraph", "build_graph"]
