"""``assess_evidence`` (medium effort): is the ranked evidence enough to answer?

One structured call judges sufficiency and confidence, extracts key points with their
ref_ids, and proposes follow-up queries for what is missing. While the evidence is
insufficient and the iteration budget allows, the follow-ups become the next retrieval round
(the routing function sends them to ``search``). When the output cannot be parsed twice the
node degrades to "sufficient" with an error record, so the run still answers.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import StreamWriter

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.graph.bindings import Bindings, allowed_sources
from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.llm.schemas import EvidenceAssessment
from agentic_retrieval.nodes._shared import (
    NodeFn,
    call_error,
    elapsed_ms,
    next_round,
    remaining_seconds,
    resolve_subqueries,
    step_completed,
    step_started,
    today,
)
from agentic_retrieval.state import EvidenceActivity, RetrievalState, Subquery
from agentic_retrieval.text import same_words_key
from agentic_retrieval.wire.grounding import format_passages

EVIDENCE_PASSAGE_CHARS = 24_000
"""Passage text shown to the evidence model (whole passages, best first)."""


def make_assess_evidence(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def assess_evidence(
        state: RetrievalState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Judge the evidence; plan a follow-up round when it falls short."""
        context = current_context(runtime)
        left = remaining_seconds(state.started_at, context)
        if left <= 0:
            return {"round_to_search": None, "timed_out": True}
        runtime.stream_writer({"event": "assessing", "passages": len(state.ranked)})
        result, entry = await _assess(bindings, state, context, config, left, runtime.stream_writer)
        step_completed(runtime.stream_writer, entry)
        evidence = _to_evidence(result)
        update: dict[str, Any] = {
            "evidence": evidence,
            "activity_log": [entry],
            "round_to_search": None,
        }
        iteration = state.iteration
        if evidence.is_sufficient or iteration >= context.max_iterations:
            return update
        round_no = next_round(state.subqueries)
        followups = _followups(bindings, state, context, evidence, round_no)
        if followups:
            runtime.stream_writer({"event": "following_up", "subqueries": len(followups)})
            update.update(subqueries=followups, iteration=iteration + 1, round_to_search=round_no)
        return update

    return assess_evidence


async def _assess(
    bindings: Bindings,
    state: RetrievalState,
    context: Context,
    config: RunnableConfig,
    left: float,
    writer: StreamWriter,
) -> tuple[EvidenceAssessment | None, EvidenceActivity]:
    model = bindings.models.resolve("evidence", context)
    previous = "; ".join(s.text for s in state.subqueries) or "none"
    prompt = context.evidence_prompt.format(
        today=today(), max_subqueries=context.max_subqueries, previous_queries=previous
    )
    passages, _ = format_passages(state.ranked, EVIDENCE_PASSAGE_CHARS)
    key = f"evidence:{state.iteration}"
    wall, clock = step_started(writer, "evidence", key)
    result = await structured_call(
        model,
        EvidenceAssessment,
        [
            SystemMessage(prompt),
            HumanMessage(f"Question: {state.question}\n\nPassages:\n{passages or '(none found)'}"),
        ],
        config=config,
        timeout=left,
    )
    value = result.value
    record = EvidenceActivity(
        key=key,
        started=wall,
        elapsed_ms=elapsed_ms(clock),
        usage=result.usage,
        model=result.model,
        error=call_error(result) if value is None else None,
        is_sufficient=value.is_sufficient if value else True,
        confidence=value.confidence if value else None,
        followup_queries=value.followup_queries if value else [],
    )
    return value, record


def _to_evidence(result: EvidenceAssessment | None) -> EvidenceAssessment:
    if result is None:  # degrade: treat as sufficient and answer from what we have
        return EvidenceAssessment(is_sufficient=True, confidence=0.0)
    return result


def _followups(
    bindings: Bindings,
    state: RetrievalState,
    context: Context,
    evidence: EvidenceAssessment,
    round_no: int,
) -> list[Subquery]:
    """The next round's subqueries: new texts only, over the sources the first round used."""
    params = state.source_params
    allowed = allowed_sources(bindings, context, params)
    used = {s for q in state.subqueries for s in q.sources}
    sources = tuple(n for n in allowed if n in used) or tuple(allowed)
    always = [n for n in allowed if n in params and params[n].always_query_source]
    asked = {same_words_key(q.text) for q in state.subqueries}
    fresh = [
        Subquery(id=f"q{round_no}.{i}", text=text.strip(), sources=sources, round=round_no)
        for i, text in enumerate(evidence.followup_queries)
        if text.strip() and same_words_key(text) not in asked
    ]
    return resolve_subqueries(fresh, sources, always, context.max_subqueries)
