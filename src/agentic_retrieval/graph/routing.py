"""Edge functions. Each returns the real node names so Studio draws the real edges."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Send

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.nodes._shared import build_tasks
from agentic_retrieval.state import RetrievalState


def after_route_and_plan(
    state: RetrievalState,
) -> Literal["judge_question", "prepare_searches", "respond"]:
    """``auto`` judges the question first; otherwise retrieve, or reply when not needed."""
    if state.auto:
        return "judge_question"
    return "prepare_searches" if state.needs_retrieval else "respond"


def after_judge_question(state: RetrievalState) -> Literal["plan_queries", "prepare_searches"]:
    """``auto``: plan a question that cannot be searched as it is; search the others."""
    latest = state.tier_decisions[-1] if state.tier_decisions else None
    return "plan_queries" if latest is not None and latest.escalate_to else "prepare_searches"


def after_plan_queries(state: RetrievalState) -> Literal["prepare_searches", "respond"]:
    """Retrieve what was planned, or reply when the planner found no need to."""
    return "prepare_searches" if state.needs_retrieval else "respond"


def _searches(state: RetrievalState, runtime: Runtime[Context]) -> list[Send]:
    round_no = state.round_to_search
    if round_no is None or state.started_at is None:
        return []
    context = current_context(runtime)
    subqueries = [s for s in state.subqueries if s.round == round_no]
    tasks = build_tasks(subqueries, state.source_params, context, state.started_at)
    return [Send("search", task) for task in tasks]


def dispatch_searches(
    state: RetrievalState, runtime: Runtime[Context]
) -> list[Send] | Literal["rerank"]:
    """Fan out one ``search`` task per (subquery, source); straight to rerank if none."""
    return _searches(state, runtime) or "rerank"


def after_rerank(
    state: RetrievalState, runtime: Runtime[Context]
) -> Literal["assess_evidence", "judge_results", "synthesize", "respond"]:
    """Medium effort assesses model-planned evidence; ``auto`` judges the results' strength.

    Everything else goes to the output. A failed ``failOnError`` source ends the run at
    once: the request fails with its error, so no evidence is judged and no answer is paid for.
    """
    if state.failure:
        return "respond"
    if state.effort == "medium" and state.planned_by == "model":
        return "assess_evidence"
    return "judge_results" if state.auto else "synthesize"


def after_judge_results(
    state: RetrievalState,
) -> Literal["plan_queries", "assess_evidence", "synthesize"]:
    """``auto``: escalate weak results one tier (planning, then assessment), else output."""
    latest = state.tier_decisions[-1] if state.tier_decisions else None
    escalate_to = latest.escalate_to if latest is not None else None
    if escalate_to == "low":
        return "plan_queries"
    return "assess_evidence" if escalate_to == "medium" else "synthesize"


def after_assess_evidence(
    state: RetrievalState, runtime: Runtime[Context]
) -> list[Send] | Literal["synthesize"]:
    """Loop back to ``search`` with follow-ups while insufficient and within budget.

    The budget (``Context.max_iterations``) is enforced by ``assess_evidence``, which only
    schedules a round while ``iteration < max_iterations``; this function dispatches it.
    """
    context = current_context(runtime)
    if state.iteration > context.max_iterations:
        return "synthesize"
    return _searches(state, runtime) or "synthesize"
