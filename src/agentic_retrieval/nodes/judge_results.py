"""``judge_results`` (``auto`` effort): are a round's ranked passages strong enough?

No model call. After the model-free round, or the planned round, is reranked, the results'
strength (:func:`~agentic_retrieval.signals.result_signals`: the best passage's score, how far
it stands above the next ones, how much of the question's wording the top passages hold, how
many of the searched sources agree) is compared with the ``auto_*`` thresholds of the
Context. Weak model-free results escalate to planning (``plan_queries``); weak planned results
escalate to evidence assessment (``assess_evidence``, which may run follow-up rounds up to
``max_iterations``); strong results, or a run out of time, go to the output. Each decision is
recorded with its signals in ``tier_decisions``.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.nodes._shared import remaining_seconds, searched_sources, searched_text
from agentic_retrieval.signals import ResultSignals, result_signals
from agentic_retrieval.state import Effort, RetrievalState, TierDecision

NEXT_TIER: dict[str, Effort] = {"minimal": "low", "low": "medium"}
"""Where weak results escalate to, from the tier that produced them."""


async def judge_results(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Decide whether to stop here or escalate one tier."""
    context = current_context(runtime)
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
    update: dict[str, Any] = {"tier_decisions": [decision]}
    if escalate_to is not None:
        runtime.stream_writer({"event": "escalating", "to": escalate_to, "reason": reason})
    if escalate_to == "medium":
        update["effort"] = "medium"  # assess_evidence runs, and loops as at medium
    return update


def _threshold_dropped(state: RetrievalState) -> bool:
    """Whether the latest rerank dropped a candidate under its threshold."""
    return any(reasons.get("threshold") for reasons in state.drops.values())


def weaknesses(signals: ResultSignals, context: Context, *, cut: bool = True) -> list[str]:
    """What makes the results weak, one phrase per signal under its threshold.

    Args:
        signals: The round's measured results.
        context: The run's thresholds.
        cut: Whether the reranker threshold dropped candidates (else nothing was found).
    """
    if not signals.passages:
        return ["no passage passed the reranker threshold" if cut else "no passage was found"]
    found = []
    if signals.top_score < context.auto_min_top_score:
        found.append(
            f"best passage scores {signals.top_score:.2f} "
            f"(auto_min_top_score {context.auto_min_top_score:g})"
        )
    if signals.term_coverage < context.auto_min_term_coverage:
        found.append(
            f"top passages hold {signals.term_coverage:.0%} of the question's words "
            f"(auto_min_term_coverage {context.auto_min_term_coverage:g})"
        )
    if signals.passages > 1 and signals.score_spread < context.auto_min_score_spread:
        found.append(
            f"best passage stands {signals.score_spread:.2f} above the next "
            f"(auto_min_score_spread {context.auto_min_score_spread:g})"
        )
    if signals.source_agreement < context.auto_min_source_agreement:
        found.append(
            f"{signals.source_agreement:.0%} of the searched sources agree "
            f"(auto_min_source_agreement {context.auto_min_source_agreement:g})"
        )
    return found


def strong_reason(signals: ResultSignals) -> str:
    """Why the results are kept as they are."""
    return (
        f"results are strong: best passage {signals.top_score:.2f}, top passages hold "
        f"{signals.term_coverage:.0%} of the question's words"
    )
