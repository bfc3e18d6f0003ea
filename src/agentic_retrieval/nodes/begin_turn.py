"""``begin_turn``: start the turn, decide its effort and who plans it, and where it goes first.

The first node of every turn, with no model call. It resets the run fields of the state
(:func:`~agentic_retrieval.graph.schema.run_reset`): a second turn on a checkpointed thread
must not rerank the first turn's hits (which may have been retrieved under another security
filter), re-run its subqueries, inherit its partial/timed-out flags or measure its time limit
from the first turn. It then records the turn once for the nodes that follow: its question,
per-source parameters, effort (:func:`~agentic_retrieval.graph.effort.choose_effort`) and who plans
it (:func:`~agentic_retrieval.graph.effort.planner_for`), and sends the run on:

- ``judge_question`` for the ``auto`` effort (which also judges every reranked round);
- ``plan_queries`` when the planning model plans (``low``, ``medium``; ``medium`` has the
  evidence assessed after each round);
- ``prepare_searches`` otherwise: the caller's intents, or the question as asked, are the
  subqueries.
"""

from __future__ import annotations

import time
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agentic_retrieval.context import Context
from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.effort import choose_effort, planner_for
from agentic_retrieval.graph.records import Subquery, parse_source_params
from agentic_retrieval.graph.schema import run_reset
from agentic_retrieval.nodes._shared import last_user_text
from agentic_retrieval.state import RetrievalState, Update


async def begin_turn(
    state: RetrievalState, runtime: Runtime[Context], bindings: Bindings
) -> Command[Literal["judge_question", "plan_queries", "prepare_searches"]]:
    """Reset the run fields, record this turn and choose the first step."""
    intents = [i.strip() for i in state.intents if i and i.strip()]
    can_plan = bindings.models.is_configured("planning", runtime.context)
    choice = choose_effort(
        runtime.context.reasoning_effort, has_intents=bool(intents), can_plan=can_plan
    )
    planner = planner_for(bool(intents), choice.effort)
    question = last_user_text(state.messages) or "; ".join(intents)
    update: Update = {
        **run_reset(),
        "started_at": time.time(),
        "question": question,
        "effort": choice.effort,
        "requested_effort": choice.requested,
        "effort_note": choice.note,
        "planned_by": planner,
        "source_params": parse_source_params(state.knowledge_source_params),
    }
    if planner == "model":
        if not question:
            raise InvalidRequestError("nothing to retrieve: 'messages' holds no text")
        if choice.effort == "medium":
            update["judging"] = "evidence"
        return Command(update=update, goto="plan_queries")
    texts = intents or ([question] if question else [])
    if not texts:
        raise InvalidRequestError("nothing to retrieve: pass 'messages' or 'intents'")
    planned = [Subquery(id=f"q0.{i}", text=t) for i, t in enumerate(texts)]
    update["planned"] = planned
    if choice.auto:
        update["judging"] = "signals"
        return Command(update=update, goto="judge_question")
    return Command(update=update, goto="prepare_searches")
