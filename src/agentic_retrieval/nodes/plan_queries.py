"""``plan_queries`` (``auto`` effort): escalate to the planning tier and plan the retrieval.

Reached only from the ``auto`` effort's judges: when the question cannot be searched as it is
(``judge_question``), or when the model-free round's results are weak (``judge_results``). It
makes the same routing and planning call as ``low`` effort
(:func:`~agentic_retrieval.nodes._planning.plan_retrieval`); the passages the model-free round
already found stay candidates, and the planned subqueries are searched as the next round.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.nodes._planning import plan_retrieval
from agentic_retrieval.nodes._shared import NodeFn
from agentic_retrieval.state import RetrievalState


def make_plan_queries(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def plan_queries(
        state: RetrievalState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Run at the planning tier: route and plan with the planning model."""
        context = current_context(runtime)
        runtime.stream_writer({"event": "planning", "question": state.question})
        update = await plan_retrieval(
            bindings,
            state,
            context,
            config,
            state.question,
            state.started_at or 0.0,
            runtime.stream_writer,
        )
        return {**update, "effort": "low", "planned_by": "model"}

    return plan_queries
