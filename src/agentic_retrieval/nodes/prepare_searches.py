"""``prepare_searches``: turn planned subqueries into the searches of one round.

Deterministic: numbers the round (0, or the next one when the ``auto`` effort escalated to
planning after a model-free round), caps the number of subqueries, drops repeats, resolves
each subquery's knowledge sources (the planner's choice among the sources this run may use,
all of them when it chose none or only unknown ones) and adds every ``alwaysQuerySource``
source. The fan-out itself is the routing function
:func:`agentic_retrieval.graph.routing.dispatch_searches`.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.graph.bindings import Bindings, allowed_sources
from agentic_retrieval.nodes._shared import (
    NodeFn,
    next_round,
    resolve_subqueries,
)
from agentic_retrieval.state import RetrievalState


def make_prepare_searches(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def prepare_searches(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Resolve sources and limits for the planned subqueries of this round."""
        context = current_context(runtime)
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
        runtime.stream_writer(
            {
                "event": "searching",
                "subqueries": len(resolved),
                "searches": sum(len(s.sources) for s in resolved),
            }
        )
        return {"subqueries": resolved, "planned": [], "round_to_search": round_no}

    return prepare_searches
