"""``route_and_plan``: start the turn, decide whether retrieval is needed and plan it.

The first node of every turn: it resets the run fields of the state and records the turn's
question, per-source parameters, its effort and who plans it (:func:`begin_turn`). At
``minimal`` effort, at the start of ``auto``, or when the caller passes ``intents``, no model
is called: the intents (or the last user message) become the subqueries. At ``low`` and
``medium`` one structured call does routing, planning and source selection together (one
round trip instead of two, :func:`~agentic_retrieval.nodes._planning.plan_retrieval`);
``prepare_searches`` then turns that plan into concrete per-source searches.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.nodes._planning import plan_retrieval
from agentic_retrieval.nodes._shared import NodeFn, last_user_text, parse_source_params
from agentic_retrieval.state import (
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
                raise InvalidRequestError("nothing to retrieve: pass 'messages' or 'intents'")
            planned = [Subquery(id=f"q0.{i}", text=t) for i, t in enumerate(texts)]
            return {**turn, "planned": planned}
        question = turn["question"]
        if not question:
            raise InvalidRequestError("nothing to retrieve: 'messages' holds no text")
        runtime.stream_writer({"event": "planning", "question": question})
        update = await plan_retrieval(
            bindings,
            state,
            context,
            config,
            question,
            turn["started_at"],
            runtime.stream_writer,
            turn["source_params"],
        )
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
        "requested_effort": choice.requested,
        "auto": choice.auto,
        "effort_note": choice.note,
        "planned_by": planner_for(bool(intents), choice.effort),
        "source_params": parse_source_params(state.knowledge_source_params),
    }


def _intents(state: RetrievalState) -> list[str]:
    return [i.strip() for i in state.intents if i and i.strip()]
