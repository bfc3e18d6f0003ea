"""``plan_queries``: turn planned subqueries into the searches of one round.

Deterministic: caps the number of subqueries, drops repeats, resolves each subquery's
knowledge sources (the planner's choice among the sources this run may use, all of them when
it chose none or only unknown ones) and adds every ``alwaysQuerySource`` source. The fan-out
itself is the routing function :func:`agentic_retrieval.graph.routing.dispatch_searches`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from agentic_retrieval.bindings import Bindings
from agentic_retrieval.context import Context, current_context
from agentic_retrieval.models import KnowledgeSourceParams
from agentic_retrieval.nodes.route_intent import NodeFn
from agentic_retrieval.state import RetrievalState, Subquery


def make_plan_queries(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def plan_queries(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Resolve sources and limits for the planned subqueries of this round."""
        context = current_context(runtime)
        params = source_params(state)
        allowed = allowed_sources(bindings, context, params)
        always = [n for n in allowed if params.get(n) and params[n].always_query_source]
        # explicit intents are the caller's own plan: run them all
        limit = len(state.get("intents") or []) or context.max_subqueries
        resolved = resolve_subqueries(state.get("planned") or [], allowed, always, limit)
        runtime.stream_writer(
            {
                "event": "searching",
                "subqueries": len(resolved),
                "searches": sum(len(s.sources) for s in resolved),
            }
        )
        return {"subqueries": resolved, "planned": [], "round_to_search": 0}

    return plan_queries


def source_params(state: RetrievalState) -> dict[str, KnowledgeSourceParams]:
    """The caller's per-source overrides, by source name."""
    params = {}
    for raw in state.get("knowledge_source_params") or []:
        item = raw if isinstance(raw, KnowledgeSourceParams) else (
            KnowledgeSourceParams.model_validate(raw)
        )
        params[item.knowledge_source_name] = item
    return params


def allowed_sources(
    bindings: Bindings, context: Context, params: dict[str, KnowledgeSourceParams]
) -> list[str]:
    """Sources this run may query: bound, allowed by the context, named by the caller.

    Raises:
        ValueError: When the caller names a source that is not bound.
    """
    unknown = sorted(set(params) - set(bindings.sources))
    if unknown:
        raise ValueError(f"unknown knowledge source(s): {', '.join(unknown)}")
    names = list(bindings.sources)
    if context.knowledge_sources is not None:
        names = [n for n in names if n in context.knowledge_sources]
    if params:
        names = [n for n in names if n in params]
    return names


def resolve_subqueries(
    planned: Sequence[Subquery], allowed: Sequence[str], always: Sequence[str], limit: int
) -> list[Subquery]:
    """Cap, dedupe and attach sources to ``planned`` subqueries.

    Args:
        planned: Subqueries as planned (``sources`` is the planner's selection, may be empty).
        allowed: Sources the run may use, in binding order.
        always: Sources to add to every subquery (``alwaysQuerySource``).
        limit: Most subqueries to keep.

    Returns:
        The subqueries to search, each with a non-empty ``sources`` unless nothing is allowed.
    """
    seen: set[str] = set()
    resolved: list[Subquery] = []
    for subquery in planned:
        key = " ".join(subquery.text.casefold().split())
        if not key or key in seen:
            continue
        seen.add(key)
        chosen = [n for n in allowed if n in subquery.sources] or list(allowed)
        chosen += [n for n in always if n not in chosen]
        resolved.append(subquery.model_copy(update={"sources": tuple(chosen)}))
        if len(resolved) == limit:
            break
    return resolved
