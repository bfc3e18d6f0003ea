"""``route_intent``: decide whether retrieval is needed, and what to ask for.

At ``minimal`` effort, or when the caller passes ``intents``, no model is called: the intents
(or the last user message) become the subqueries. At ``low`` and ``medium`` one structured
call does routing, planning and source selection together (one round trip instead of two);
``plan_queries`` then turns that plan into concrete per-source searches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from agentic_retrieval.activity import model_entry
from agentic_retrieval.bindings import Bindings
from agentic_retrieval.chat_models import structured_call
from agentic_retrieval.context import Context
from agentic_retrieval.conversation import (
    last_user_text,
    remaining_seconds,
    today,
    transcript,
)
from agentic_retrieval.llm_schemas import QueryPlan
from agentic_retrieval.state import RetrievalState, Subquery

NodeFn = Callable[..., Coroutine[Any, Any, dict[str, Any]]]


def make_route_intent(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def route_intent(
        state: RetrievalState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Route the request and plan the first retrieval round."""
        started_at = state.get("started_at") or time.time()
        context = runtime.context or Context()
        intents = [i for i in state.get("intents") or [] if i and i.strip()]
        messages = state.get("messages") or []
        question = last_user_text(messages)
        base = {"started_at": started_at, "iteration": 0, "timed_out": False, "partial": False}
        if intents or context.reasoning_effort == "minimal":
            texts = intents or ([question] if question else [])
            if not texts:
                raise ValueError("nothing to retrieve: pass 'messages' or 'intents'")
            planned = [Subquery(id=f"q0.{i}", text=t.strip()) for i, t in enumerate(texts)]
            return {**base, "needs_retrieval": True, "planned": planned}
        if not question:
            raise ValueError("nothing to retrieve: 'messages' holds no text")
        runtime.stream_writer({"event": "planning", "question": question})
        return {**base, **await _plan(bindings, state, context, config, question, started_at)}

    return route_intent


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
        [SystemMessage(prompt), HumanMessage(transcript(state.get("messages") or []))],
        config=config,
        timeout=remaining_seconds(started_at, context),
    )
    plan = result.value
    fallback = plan is None or (plan.needs_retrieval and not plan.queries)
    entry = model_entry(
        "plan",
        "modelQueryPlanning",
        started_wall=wall,
        started=clock,
        usage=result.usage,
        error=(result.error or "the plan had no queries") if fallback else None,
    )
    if plan is not None and not plan.needs_retrieval:
        reply = plan.assistant_message.strip() or "How can I help?"
        return {"needs_retrieval": False, "assistant_message": reply, "activity_log": [entry]}
    if fallback or plan is None:
        # Degrade rather than fail: search the question as asked.
        planned = [Subquery(id="q0.0", text=question)]
    else:
        planned = [
            Subquery(
                id=f"q0.{i}",
                text=q.query.strip(),
                goal=q.goal.strip() or None,
                filter=q.filter.strip() or None,
                sources=tuple(q.knowledge_sources),
            )
            for i, q in enumerate(plan.queries)
            if q.query.strip()
        ]
    return {"needs_retrieval": True, "planned": planned, "activity_log": [entry]}


def _describe_sources(bindings: Bindings, context: Context) -> str:
    lines = []
    for name, source in bindings.sources.items():
        if context.knowledge_sources is not None and name not in context.knowledge_sources:
            continue
        fields = getattr(source, "filterable_fields", None)
        suffix = f" (filterable fields: {', '.join(fields)})" if fields else ""
        lines.append(f"- {name}: {source.description or 'no description'}{suffix}")
    return "\n".join(lines) or "- (no sources)"
