"""``respond``: assemble the caller's output (response, references, activity).

Adds the run's summary records (reasoning, runtime limit), renders the typed activity and the
grounded passages in the wire shape (each record's own rendering, ids in start
order, references linked to the search that found them, the per-source
``includeReferences`` / ``includeReferenceSourceData`` switches) and appends the reply to the
conversation.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from agentic_retrieval.context import Context, applied_threshold
from agentic_retrieval.errors import ErrorCode
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.events import Done, begin, complete, emit
from agentic_retrieval.graph.records import (
    Activity,
    AnyActivity,
    Drops,
    ErrorInfo,
    RankedHit,
    ReasoningActivity,
    RuntimeLimitActivity,
    SearchActivity,
    render_activity,
)
from agentic_retrieval.nodes._output import drop_warning, render_references
from agentic_retrieval.nodes._shared import remaining_seconds, total_usage
from agentic_retrieval.sources.base import NEWEST_GA_API_VERSION, CitableKnowledgeSource
from agentic_retrieval.state import RetrievalState, Update


async def respond(state: RetrievalState, runtime: Runtime[Context], bindings: Bindings) -> Update:
    """Build the output state."""
    context = runtime.context
    entries: list[Activity] = list(state.activity_log)
    timed_out = state.timed_out or remaining_seconds(state.started_at, context) < 0
    entries += _summary_entries(state, runtime, timed_out)
    grounded = set(state.grounded_ref_ids)
    records, ids = render_activity(entries, _warnings(state, context, grounded))
    if state.assistant_message:  # the planner found no retrieval needed
        reply = state.assistant_message
        # extractiveData callers parse the response as a JSON array: keep it one (the
        # reply is in the planning record and in messages)
        text = reply if context.output_mode == "answerSynthesis" else "[]"
        references: list[dict[str, Any]] = []
    else:
        reply = text = state.response or "[]"
        ranked = [h for h in state.ranked if h.ref_id in grounded]
        kinds = {name: source.kind for name, source in bindings.sources.items()}
        urls = _citation_urls(bindings, ranked, context)
        references = render_references(ranked, ids, state.source_params, kinds, urls)
    emit(runtime, Done(references=len(references)))
    return {
        "response": text,
        "references": references,
        "activity": records,
        "messages": [AIMessage(content=reply)],
        "passage_count": len(grounded),
        "timed_out": timed_out,
    }


def _warnings(state: RetrievalState, context: Context, grounded: set[int]) -> dict[str, str]:
    """A warning for each search record some of whose documents were dropped, by record key."""
    drops: Drops = {key: dict(reasons) for key, reasons in state.drops.items()}
    if not state.assistant_message and not state.failure:
        for hit in state.ranked:
            if hit.ref_id not in grounded:  # ranked, but over the output size budget
                reasons = drops.setdefault(hit.activity_key, {})
                reasons["outputSize"] = reasons.get("outputSize", 0) + 1
    sources = {e.key: e.source for e in state.activity_log if isinstance(e, SearchActivity)}
    warnings = {}
    for key, reasons in drops.items():
        source = sources.get(key)
        given = state.source_params.get(source) if source else None
        # only a threshold that applied drops: a default one, to calibrated scores only
        threshold = applied_threshold(
            given.reranker_threshold if given is not None else None,
            context.reranker_threshold,
            calibrated=True,
        )
        warning = drop_warning(reasons, threshold)
        if warning:
            warnings[key] = warning
    return warnings


def _citation_urls(
    bindings: Bindings, ranked: list[RankedHit], context: Context
) -> dict[tuple[str, str], str]:
    """``citationUrl`` of each passage whose source can point at its document."""
    version = context.api_version or NEWEST_GA_API_VERSION
    # a Protocol isinstance costs tens of microseconds: once per source, not once per passage
    citable = {
        name: source
        for name in {hit.source for hit in ranked}
        if isinstance(source := bindings.sources.get(name), CitableKnowledgeSource)
    }
    urls = {}
    for hit in ranked:
        source = citable.get(hit.source)
        if source is None:
            continue
        url = source.citation_url(hit, endpoint=context.service_endpoint, api_version=version)
        if url:
            urls[(hit.source, hit.doc_key)] = url
    return urls


def _summary_entries(
    state: RetrievalState, runtime: Runtime[Context], timed_out: bool
) -> list[AnyActivity]:
    """The run's closing records (reasoning summary, runtime limit), announced as they start."""
    entries: list[AnyActivity] = []
    if state.planned_by == "model" or state.effort_note or state.requested_effort == "auto":
        step = begin(runtime, "reasoning", ReasoningActivity)
        entries.append(
            ReasoningActivity(
                key="reasoning",
                started=step.started,
                effort=state.effort or "minimal",
                requested=state.requested_effort,
                usage=total_usage(state.activity_log),
                iterations=state.iteration,
                warning=state.effort_note,
                decisions=list(state.tier_decisions),
            )
        )
    if timed_out:
        message = (
            f"maxRuntimeInSeconds ({runtime.context.max_runtime_seconds:g} s) elapsed; "
            "the response holds what was ready"
        )
        step = begin(runtime, "timeout", RuntimeLimitActivity)
        entries.append(
            RuntimeLimitActivity(
                key="timeout", started=step.started, error=ErrorInfo.of(ErrorCode.TIMEOUT, message)
            )
        )
    for entry in entries:
        complete(runtime, entry)
    return entries
