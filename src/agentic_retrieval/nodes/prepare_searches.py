"""``prepare_searches``: turn planned subqueries into the searches of one round.

Deterministic: numbers the round (0, or the next one when the ``auto`` effort escalated to
planning after a model-free round), caps the number of subqueries, drops repeats, resolves
each subquery's knowledge sources (the planner's choice among the sources this run may use,
all of them when it chose none or only unknown ones), adds every ``alwaysQuerySource``
source, and writes one search task per (subquery, source). The graph fans the tasks out to
``search`` (one ``Send`` each), and, for a source with an entity graph whose params carry
``graphParameters``, one ``graph_search`` per subquery beside it; with none, the run goes
straight to ``rerank``.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from agentic_retrieval.context import Context
from agentic_retrieval.graph.bindings import Bindings, allowed_sources
from agentic_retrieval.graph.events import Searching, emit
from agentic_retrieval.nodes._shared import (
    build_graph_tasks,
    build_tasks,
    next_round,
    resolve_subqueries,
)
from agentic_retrieval.state import RetrievalState, Update


async def prepare_searches(
    state: RetrievalState, runtime: Runtime[Context], bindings: Bindings
) -> Command[Literal["search", "graph_search", "rerank"]]:
    """Resolve sources and limits for the planned subqueries of this round."""
    context = runtime.context
    params = state.source_params
    allowed = allowed_sources(bindings, context, params)
    always = [n for n in allowed if params.get(n) and params[n].always_query_source]
    # the caller's own plan (intents) runs in full
    limit = len(state.planned) if state.planned_by == "caller" else context.max_subqueries
    round_no = next_round(state.subqueries)
    planned = [
        s.model_copy(update={"id": f"q{round_no}.{i}", "round": round_no})
        for i, s in enumerate(state.planned)
    ]
    resolved = resolve_subqueries(planned, allowed, always, limit)
    emit(
        runtime, Searching(subqueries=len(resolved), searches=sum(len(s.sources) for s in resolved))
    )
    started = state.started_at or 0.0
    tasks = build_tasks(resolved, params, context, started)
    use_model = state.effort != "minimal"
    graph_tasks = build_graph_tasks(resolved, params, bindings.sources, context, started, use_model)
    update = Update(subqueries=resolved, planned=[])
    if not tasks and not graph_tasks:
        return Command(update=update, goto="rerank")
    sends = [Send("search", task) for task in tasks]
    sends += [Send("graph_search", task) for task in graph_tasks]
    return Command(update=update, goto=sends)
