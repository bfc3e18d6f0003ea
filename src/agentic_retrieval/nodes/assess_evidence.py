"""``assess_evidence`` (medium effort): is the ranked evidence enough to answer?

One structured call judges sufficiency and confidence, extracts key points with their
ref_ids, and proposes follow-up queries for what is missing. While the evidence is
insufficient and the iteration budget allows (:func:`~agentic_retrieval.graph.effort.within_budget`,
the one check of ``max_iterations``), the follow-ups become the next retrieval round, fanned
out to ``search``; otherwise the run goes on to ``synthesize``. When the output cannot be
parsed twice the node degrades to "sufficient" with an error record, so the run still
answers.
"""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from agentic_retrieval.context import Context
from agentic_retrieval.graph.bindings import Bindings, allowed_sources
from agentic_retrieval.graph.effort import within_budget
from agentic_retrieval.graph.events import Assessing, FollowingUp, begin, complete, emit
from agentic_retrieval.graph.records import EvidenceActivity, Subquery
from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.llm.schemas import EvidenceAssessment
from agentic_retrieval.nodes._output import format_passages
from agentic_retrieval.nodes._shared import (
    build_graph_tasks,
    build_tasks,
    call_error,
    next_round,
    remaining_seconds,
    resolve_subqueries,
    today,
)
from agentic_retrieval.state import RetrievalState, Update
from agentic_retrieval.text import same_words_key

EVIDENCE_PASSAGE_CHARS = 24_000
"""Passage text shown to the evidence model (whole passages, best first)."""


async def assess_evidence(
    state: RetrievalState, runtime: Runtime[Context], bindings: Bindings, config: RunnableConfig
) -> Command[Literal["search", "graph_search", "synthesize"]]:
    """Judge the evidence; schedule a follow-up round when it falls short and budget allows."""
    context = runtime.context
    left = remaining_seconds(state.started_at, context)
    if left <= 0:
        return Command(update=Update(timed_out=True), goto="synthesize")
    emit(runtime, Assessing(passages=len(state.ranked)))
    result, record = await _assess(state, runtime, bindings, config, left)
    complete(runtime, record)
    evidence = _to_evidence(result)
    update = Update(evidence=evidence, activity_log=[record])
    if evidence.is_sufficient or not within_budget(state.iteration, context):
        return Command(update=update, goto="synthesize")
    round_no = next_round(state.subqueries)
    followups = _followups(state, runtime.context, bindings, evidence, round_no)
    if not followups:
        return Command(update=update, goto="synthesize")
    emit(runtime, FollowingUp(subqueries=len(followups)))
    started, params = state.started_at or 0.0, state.source_params
    sends = [Send("search", t) for t in build_tasks(followups, params, context, started)]
    graph_tasks = build_graph_tasks(followups, params, bindings.sources, context, started, True)
    sends += [Send("graph_search", t) for t in graph_tasks]
    update["subqueries"], update["iteration"] = followups, state.iteration + 1
    return Command(update=update, goto=sends)


async def _assess(
    state: RetrievalState,
    runtime: Runtime[Context],
    bindings: Bindings,
    config: RunnableConfig,
    left: float,
) -> tuple[EvidenceAssessment | None, EvidenceActivity]:
    context = runtime.context
    model = bindings.models.resolve("evidence", context)
    previous = "; ".join(s.text for s in state.subqueries) or "none"
    prompt = context.evidence_prompt.format(
        today=today(), max_subqueries=context.max_subqueries, previous_queries=previous
    )
    passages, _ = format_passages(state.ranked, EVIDENCE_PASSAGE_CHARS)
    key = f"evidence:{state.iteration}"
    step = begin(runtime, key, EvidenceActivity)
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
        started=step.started,
        elapsed_ms=step.elapsed_ms(),
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
    state: RetrievalState,
    context: Context,
    bindings: Bindings,
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
