"""``judge_results`` (``auto`` effort): are a round's ranked passages strong enough?

No model call. After the model-free round, or the planned round, is reranked, the results'
strength (:func:`~agentic_retrieval.graph.effort.result_signals`: the best passage's score, how far
it stands above the next ones, how much of the question's wording the top passages hold, how
many of the searched sources agree) is compared with the ``auto_*`` thresholds of the
Context (:func:`~agentic_retrieval.graph.effort.weaknesses`). Weak model-free results escalate to
planning (``plan_queries``); weak planned results escalate to evidence assessment
(``assess_evidence``, which then judges every later round, with follow-up rounds up to
``max_iterations``); strong results, or a run out of time, go to the output
(``synthesize``). Each decision is recorded with its signals in ``tier_decisions``.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agentic_retrieval.context import Context
from agentic_retrieval.graph.effort import NEXT_TIER, result_signals, strong_reason, weaknesses
from agentic_retrieval.graph.events import Escalating, emit
from agentic_retrieval.graph.records import TierDecision
from agentic_retrieval.nodes._shared import remaining_seconds, searched_sources, searched_text
from agentic_retrieval.state import RetrievalState, Update


async def judge_results(
    state: RetrievalState, runtime: Runtime[Context]
) -> Command[Literal["synthesize", "plan_queries", "assess_evidence"]]:
    """Decide whether to stop here or escalate one tier."""
    context = runtime.context
    tier = state.effort or "minimal"
    signals = result_signals(
        state.ranked, searched_text(state), searched_sources(state), context.auto_top_k
    )
    weak = weaknesses(signals, context, cut=_threshold_dropped(state))
    escalate_to = NEXT_TIER.get(tier) if weak else None
    if escalate_to and remaining_seconds(state.started_at, context) <= 0:
        escalate_to, weak = None, [*weak, "but maxRuntimeInSeconds elapsed"]
    reason = "; ".join(weak) if weak else strong_reason(signals)
    decision = TierDecision(
        step="results",
        tier=tier,
        escalate_to=escalate_to,
        reason=reason,
        signals=signals.as_record(),
    )
    if escalate_to is None:
        return Command(update=Update(tier_decisions=[decision]), goto="synthesize")
    emit(runtime, Escalating(to=escalate_to, reason=reason))
    if escalate_to == "low":
        escalated = Update(tier_decisions=[decision], effort="low", planned_by="model")
        return Command(update=escalated, goto="plan_queries")
    # medium: the evidence is assessed, now and after every follow-up round
    escalated = Update(tier_decisions=[decision], effort="medium", judging="evidence")
    return Command(update=escalated, goto="assess_evidence")


def _threshold_dropped(state: RetrievalState) -> bool:
    """Whether the latest rerank dropped a candidate under its threshold."""
    return any(reasons.get("threshold") for reasons in state.drops.values())
