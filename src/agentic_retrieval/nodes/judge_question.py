"""``judge_question`` (``auto`` effort): can the question be searched as it is?

No model call. Before anything is searched, the question's shape
(:func:`~agentic_retrieval.signals.question_signals`) decides whether the model-free tier can
handle it: a question with several distinct asks, a follow-up that only makes sense with the
earlier turns, or a message with no searchable words (a greeting, thanks) goes to the
planning tier (``plan_queries``); anything else is searched as asked. The decision and the
measured signals are recorded in ``tier_decisions`` (and in the ``agenticReasoning`` record).
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.signals import QuestionSignals, question_signals
from agentic_retrieval.state import RetrievalState, TierDecision


async def judge_question(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Decide whether the question is searched as asked or planned first."""
    context = current_context(runtime)
    signals = question_signals(state.messages, state.question)
    reason = needs_planning(signals, context)
    decision = TierDecision(
        step="question",
        tier="minimal",
        escalate_to="low" if reason else None,
        reason=reason or searchable_reason(signals),
        signals=signals.as_record(),
    )
    if reason:
        runtime.stream_writer({"event": "escalating", "to": "low", "reason": reason})
    return {"tier_decisions": [decision]}


def needs_planning(signals: QuestionSignals, context: Context) -> str | None:
    """Why the question cannot be searched as it is, or ``None`` when it can."""
    if signals.terms == 0:
        return "no searchable words: the planner decides whether retrieval is needed"
    if signals.asks > context.auto_max_asks:
        return (
            f"{signals.asks} distinct asks (auto_max_asks {context.auto_max_asks}): "
            "planned as one subquery each"
        )
    if signals.prior_turns and signals.refers_back:
        return (
            f"a follow-up referring to the {signals.prior_turns} earlier turn(s): the "
            "planner rewrites it with the conversation"
        )
    if signals.prior_turns and signals.terms <= context.auto_follow_up_max_terms:
        return (
            f"a follow-up of {signals.terms} content word(s) after {signals.prior_turns} "
            f"earlier turn(s) (auto_follow_up_max_terms {context.auto_follow_up_max_terms}): "
            "the planner rewrites it with the conversation"
        )
    return None


def searchable_reason(signals: QuestionSignals) -> str:
    """Why the question is searched as asked."""
    turns = "the first turn" if not signals.prior_turns else "it stands on its own"
    return f"searched as asked: one ask of {signals.terms} content word(s), {turns}"
