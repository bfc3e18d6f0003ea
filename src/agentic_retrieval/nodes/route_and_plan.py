"""``route_and_plan``: start the turn, decide whether retrieval is needed and plan it.

The first node of every turn: it resets the run fields of the state and records the turn's
question, per-source parameters and who plans it (:func:`begin_turn`). At ``minimal`` effort,
or when the caller passes ``intents``, no model is called: the intents (or the last user
message) become the subqueries. At ``low`` and ``medium`` one structured call does routing,
planning and source selection together (one round trip instead of two); ``prepare_searches``
then turns that plan into concrete per-source searches.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.llm.schemas import QueryPlan
from agentic_retrieval.nodes._shared import (
    NodeFn,
    call_error,
    elapsed_ms,
    last_user_text,
    parse_source_params,
    remaining_seconds,
    today,
    transcript,
)
from agentic_retrieval.odata import ODataError, parse_filter
from agentic_retrieval.sources.base import FilterableKnowledgeSource
from agentic_retrieval.state import (
    ErrorInfo,
    PlanningActivity,
    RetrievalState,
    Subquery,
    choose_effort,
    planner_for,
    run_reset,
)


def make_route_and_plan(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def route_and_plan(
        state: RetrievalState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Start the turn, route the request and plan the first retrieval round."""
        context = current_context(runtime)
        turn = begin_turn(
            state, context, can_plan=bindings.models.is_configured("planning", context)
        )
        if turn["planned_by"] != "model":
            texts = _intents(state) or ([turn["question"]] if turn["question"] else [])
            if not texts:
                raise ValueError("nothing to retrieve: pass 'messages' or 'intents'")
            planned = [Subquery(id=f"q0.{i}", text=t) for i, t in enumerate(texts)]
            return {**turn, "planned": planned}
        question = turn["question"]
        if not question:
            raise ValueError("nothing to retrieve: 'messages' holds no text")
        runtime.stream_writer({"event": "planning", "question": question})
        update = await _plan(bindings, state, context, config, question, turn["started_at"])
        return {**turn, **update, "activity_log": Overwrite(update["activity_log"])}

    return route_and_plan


def begin_turn(state: RetrievalState, context: Context, *, can_plan: bool) -> dict[str, Any]:
    """Reset every run field (see :mod:`agentic_retrieval.state`) and record this turn.

    A second turn on a checkpointed thread must not rerank the first turn's hits (which may
    have been retrieved under another security filter), re-run its subqueries, inherit its
    partial/timed-out flags or measure its time limit from the first turn; the turn's own
    inputs, its effort and who plans it, are recorded here once for the nodes that follow.
    """
    intents = _intents(state)
    choice = choose_effort(context.reasoning_effort, has_intents=bool(intents), can_plan=can_plan)
    return {
        **run_reset(),
        "started_at": time.time(),
        "question": last_user_text(state.messages) or "; ".join(intents),
        "effort": choice.effort,
        "effort_note": choice.note,
        "planned_by": planner_for(bool(intents), choice.effort),
        "source_params": parse_source_params(state.knowledge_source_params),
    }


def _intents(state: RetrievalState) -> list[str]:
    return [i.strip() for i in state.intents if i and i.strip()]


async def _plan(
    bindings: Bindings,
    state: RetrievalState,
    context: Context,
    config: RunnableConfig,
    question: str,
    started_at: float,
) -> dict[str, Any]:
    model = bindings.models.resolve("planning", context)
    prompt = context.routing_prompt.format(
        today=today(),
        max_subqueries=context.max_subqueries,
        sources=_describe_sources(bindings, context),
    )
    wall, clock = time.time(), time.perf_counter()
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
        error=call_error(result),
    )
    if plan is not None and not plan.needs_retrieval:
        reply = plan.assistant_message.strip() or "How can I help?"
        record = record.model_copy(update={"assistant_message": reply})
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


def _describe_sources(bindings: Bindings, context: Context) -> str:
    lines = []
    for name, source in bindings.sources.items():
        if context.knowledge_sources is not None and name not in context.knowledge_sources:
            continue
        fields = source.filterable_fields if isinstance(source, FilterableKnowledgeSource) else ()
        suffix = f" (filterable fields: {', '.join(fields)})" if fields else ""
        lines.append(f"- {name}: {source.description or 'no description'}{suffix}")
    return "\n".join(lines) or "- (no sources)"
