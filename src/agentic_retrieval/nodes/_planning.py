"""Routing and planning with the planning model: one structured call.

Shared by ``route_and_plan`` (low and medium effort) and ``plan_queries`` (the ``auto``
effort escalating to planning).

One structured call decides whether retrieval is needed and plans the subqueries with their
goals, optional OData filters and source selection. Output that does not parse degrades to
the question as asked, with an error record; a planner filter that does not parse is dropped
(the caller's filter still applies).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import StreamWriter

from agentic_retrieval import prompts
from agentic_retrieval.context import Context
from agentic_retrieval.graph.bindings import Bindings, allowed_sources
from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.llm.schemas import QueryPlan
from agentic_retrieval.nodes._shared import (
    call_error,
    elapsed_ms,
    remaining_seconds,
    step_completed,
    step_started,
    today,
    transcript,
    with_instructions,
)
from agentic_retrieval.odata import ODataError, parse_filter
from agentic_retrieval.sources.base import FilterableKnowledgeSource
from agentic_retrieval.state import ErrorInfo, PlanningActivity, RetrievalState, Subquery
from agentic_retrieval.wire.models import KnowledgeSourceParams


async def plan_retrieval(
    bindings: Bindings,
    state: RetrievalState,
    context: Context,
    config: RunnableConfig,
    question: str,
    started_at: float,
    writer: StreamWriter,
    source_params: dict[str, KnowledgeSourceParams] | None = None,
) -> dict[str, Any]:
    """Route and plan ``question`` with the planning model.

    ``source_params`` are the turn's per-source parameters (default: ``state.source_params``;
    ``route_and_plan`` passes them before they are in state): only the sources the run may
    query are offered to the planner, and the knowledge base's retrieval instructions are
    appended to its prompt as data.

    Returns:
        The state update: ``needs_retrieval``, then ``assistant_message`` (no retrieval)
        or ``planned`` (the subqueries), and the planning record in ``activity_log``.
    """
    model = bindings.models.resolve("planning", context)
    params = state.source_params if source_params is None else source_params
    allowed = allowed_sources(bindings, context, params)
    prompt = context.routing_prompt.format(
        today=today(),
        max_subqueries=context.max_subqueries,
        sources=_describe_sources(bindings, allowed),
    )
    prompt = with_instructions(
        prompt, prompts.RETRIEVAL_INSTRUCTIONS_SECTION, context.retrieval_instructions
    )
    wall, clock = step_started(writer, "planning", "plan")
    result = await structured_call(
        model,
        QueryPlan,
        [SystemMessage(prompt), HumanMessage(transcript(state.messages))],
        config=config,
        timeout=remaining_seconds(started_at, context),
    )
    plan = result.value
    record = PlanningActivity(
        key="plan",
        started=wall,
        elapsed_ms=elapsed_ms(clock),
        usage=result.usage,
        model=result.model,
        error=call_error(result),
    )
    if plan is not None and not plan.needs_retrieval:
        reply = plan.assistant_message.strip() or "How can I help?"
        record = record.model_copy(update={"assistant_message": reply})
        step_completed(writer, record)
        return {"needs_retrieval": False, "assistant_message": reply, "activity_log": [record]}
    planned = [
        Subquery(
            id=f"q0.{i}",
            text=q.query.strip(),
            goal=q.goal.strip() or None,
            filter=q.filter.strip() or None,
            sources=tuple(q.knowledge_sources),
        )
        for i, q in enumerate(plan.queries if plan is not None else [])
        if q.query.strip()
    ]
    degraded = None
    if not planned:
        # Degrade rather than fail: search the question as asked.
        planned = [Subquery(id="q0.0", text=question)]
        if plan is not None:
            degraded = ErrorInfo.of(
                "ModelOutputInvalid", "the plan asked for retrieval but had no usable query"
            )
    planned, dropped = _drop_malformed_filters(planned)
    if dropped and degraded is None:
        degraded = ErrorInfo.of(
            "InvalidFilter", "dropped the planner's malformed filter(s): " + "; ".join(dropped)
        )
    if record.error is None and degraded is not None:
        record = record.model_copy(update={"error": degraded})
    step_completed(writer, record)
    return {"needs_retrieval": True, "planned": planned, "activity_log": [record]}


def _drop_malformed_filters(planned: list[Subquery]) -> tuple[list[Subquery], list[str]]:
    """Remove planner filters that do not parse (the caller's filter still applies).

    The plan is the only producer of subquery filters (intents and follow-ups carry none),
    so this is the one place they are checked.
    """
    kept, dropped = [], []
    for subquery in planned:
        if subquery.filter:
            try:
                parse_filter(subquery.filter)
            except ODataError as exc:
                dropped.append(f"{subquery.filter!r} ({exc})")
                subquery = subquery.model_copy(update={"filter": None})
        kept.append(subquery)
    return kept, dropped


def _describe_sources(bindings: Bindings, allowed: list[str]) -> str:
    """The sources the planner may choose from (excluded ones are not even named)."""
    lines = []
    for name in allowed:
        source = bindings.sources[name]
        fields = source.filterable_fields if isinstance(source, FilterableKnowledgeSource) else ()
        suffix = f" (filterable fields: {', '.join(fields)})" if fields else ""
        lines.append(f"- {name}: {source.description or 'no description'}{suffix}")
    return "\n".join(lines) or "- (no sources)"
