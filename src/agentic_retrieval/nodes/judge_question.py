"""``judge_question`` (``auto`` effort): can the question be searched as it is?

No model call. Before anything is searched, the question's shape
(:func:`~agentic_retrieval.graph.effort.question_signals`) decides whether the model-free tier can
handle it (:func:`~agentic_retrieval.graph.effort.needs_planning`): a question with several distinct
asks, a follow-up that only makes sense with the earlier turns, or a message with no
searchable words (a greeting, thanks) escalates to the planning tier (``plan_queries``);
anything else is searched as asked (``prepare_searches``). The decision and the measured
signals are recorded in ``tier_decisions`` (and in the ``agenticReasoning`` record).
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agentic_retrieval.context import Context
from agentic_retrieval.graph.effort import needs_planning, question_signals, searchable_reason
from agentic_retrieval.graph.events import Escalating, emit
from agentic_retrieval.graph.records import TierDecision
from agentic_retrieval.state import RetrievalState, Update


async def judge_question(
    state: RetrievalState, runtime: Runtime[Context]
) -> Command[Literal["plan_queries", "prepare_searches"]]:
    """Decide whether the question is searched as asked or planned first."""
    signals = question_signals(state.messages, state.question)
    reason = needs_planning(signals, runtime.context)
    decision = TierDecision(
        step="question",
        tier="minimal",
        escalate_to="low" if reason else None,
        reason=reason or searchable_reason(signals),
        signals=signals.as_record(),
    )
    if not reason:
        return Command(update=Update(tier_decisions=[decision]), goto="prepare_searches")
    emit(runtime, Escalating(to="low", reason=reason))
    escalated = Update(tier_decisions=[decision], effort="low", planned_by="model")
    return Command(update=escalated, goto="plan_queries")
