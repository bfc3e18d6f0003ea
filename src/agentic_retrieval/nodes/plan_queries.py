"""``plan_queries``: route and plan the question with the planning model, in one call.

Reached when the planning model plans a turn: from ``begin_turn`` at ``low`` and ``medium``
effort, and from the ``auto`` effort's judges when they escalate to planning (the question
cannot be searched as it is, or the model-free round's results are weak: the passages that
round found stay candidates, and the plan is searched as the next round).

One structured call decides whether retrieval is needed and plans the subqueries with their
goals, optional OData filters and source selection (only the sources this run may query are
offered, with the knowledge base's retrieval instructions appended to the prompt as data).
Output that does not parse degrades to the question as asked, with an error record; a planner
filter that does not parse is dropped (the caller's filter still applies). The run goes on to
``prepare_searches``, or to ``respond`` when the planner found no retrieval needed.
"""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Command

from agentic_retrieval.context import Context
from agentic_retrieval.errors import ErrorCode
from agentic_retrieval.graph.bindings import Bindings, allowed_sources
from agentic_retrieval.graph.events import Planning, begin, complete, emit
from agentic_retrieval.graph.records import ErrorInfo, PlanningActivity, Subquery
from agentic_retrieval.llm import prompts
from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.llm.schemas import QueryPlan
from agentic_retrieval.nodes._shared import (
    call_error,
    remaining_seconds,
    today,
    transcript,
    with_instructions,
)
from agentic_retrieval.odata import ODataError, parse_filter
from agentic_retrieval.sources.base import FilterableKnowledgeSource
from agentic_retrieval.state import RetrievalState, Update


async def plan_queries(
    state: RetrievalState, runtime: Runtime[Context], bindings: Bindings, config: RunnableConfig
) -> Command[Literal["prepare_searches", "respond"]]:
    """Plan the question, or reply when no retrieval is needed."""
    context = runtime.context
    emit(runtime, Planning(question=state.question))
    model = bindings.models.resolve("planning", context)
    allowed = allowed_sources(bindings, context, state.source_params)
    prompt = context.routing_prompt.format(
        today=today(),
        max_subqueries=context.max_subqueries,
        sources=_describe_sources(bindings, allowed),
    )
    prompt = with_instructions(
        prompt, prompts.RETRIEVAL_INSTRUCTIONS_SECTION, context.retrieval_instructions
    )
    step = begin(runtime, "plan", PlanningActivity)
    result = await structured_call(
        model,
        QueryPlan,
        [SystemMessage(prompt), HumanMessage(transcript(state.messages))],
        config=config,
        timeout=remaining_seconds(state.started_at, context),
    )
    plan = result.value
    record = PlanningActivity(
        key="plan",
        started=step.started,
        elapsed_ms=step.elapsed_ms(),
        usage=result.usage,
        model=result.model,
        error=call_error(result),
    )
    if plan is not None and not plan.needs_retrieval:
        reply = plan.assistant_message.strip() or "How can I help?"
        record = record.model_copy(update={"assistant_message": reply})
        complete(runtime, record)
        return Command(
            update=Update(assistant_message=reply, activity_log=[record]), goto="respond"
        )
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
        planned = [Subquery(id="q0.0", text=state.question)]
        if plan is not None:
            degraded = ErrorInfo.of(
                ErrorCode.MODEL_OUTPUT_INVALID,
                "the plan asked for retrieval but had no usable query",
            )
    planned, dropped = _drop_malformed_filters(planned)
    if dropped and degraded is None:
        degraded = ErrorInfo.of(
            ErrorCode.INVALID_FILTER,
            "dropped the planner's malformed filter(s): " + "; ".join(dropped),
        )
    if record.error is None and degraded is not None:
        record = record.model_copy(update={"error": degraded})
    complete(runtime, record)
    return Command(update=Update(planned=planned, activity_log=[record]), goto="prepare_searches")


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
