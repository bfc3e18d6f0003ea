"""``respond``: assemble the caller's output (response, references, activity).

Assigns activity ids in start order, links each reference to the activity record of the
search that found it, applies the per-source ``includeReferences`` /
``includeReferenceSourceData`` switches, and appends the reply to the conversation.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from agentic_retrieval.context import Context, current_context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.nodes._shared import NodeFn, remaining_seconds
from agentic_retrieval.state import ActivityEntry, RankedHit, RetrievalState
from agentic_retrieval.wire.activity import error_detail, finalize, total_usage, wire_kind
from agentic_retrieval.wire.models import KnowledgeSourceParams


def make_respond(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def respond(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Build the output state."""
        context = current_context(runtime)
        entries = list(state.activity_log)
        timed_out = state.timed_out or remaining_seconds(state.started_at, context) < 0
        entries += _summary_entries(state, context, timed_out)
        records, ids = finalize(entries)
        grounded = set(state.grounded_ref_ids)
        if not state.needs_retrieval:
            reply = state.assistant_message
            # extractiveData callers parse the response as a JSON array: keep it one (the
            # reply is in the planning record and in messages)
            text = reply if context.output_mode == "answerSynthesis" else "[]"
            references: list[dict[str, Any]] = []
        else:
            reply = text = state.response or "[]"
            ranked = [h for h in state.ranked if h.ref_id in grounded]
            references = _references(bindings, ranked, ids, state.source_params)
        runtime.stream_writer({"event": "done", "references": len(references)})
        return {
            "response": text,
            "references": references,
            "activity": records,
            "messages": [AIMessage(content=reply)],
            "passage_count": len(grounded),
            "timed_out": timed_out,
        }

    return respond


def _summary_entries(
    state: RetrievalState, context: Context, timed_out: bool
) -> list[ActivityEntry]:
    now = time.time()
    entries = []
    if state.planned_by == "model":
        usage = total_usage(state.activity_log)
        entries.append(
            ActivityEntry(
                key="reasoning",
                started=now,
                record={
                    "type": "agenticReasoning",
                    "retrievalReasoningEffort": {"kind": context.reasoning_effort},
                    "reasoningTokens": usage.reasoning_tokens,
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    "iterations": state.iteration,
                },
            )
        )
    if timed_out:
        message = (
            f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed; "
            "the response holds what was ready"
        )
        entries.append(
            ActivityEntry(
                key="timeout",
                started=now + 1e-6,
                record={"type": "runtimeLimit", "error": error_detail("Timeout", message)},
            )
        )
    return entries


def _references(
    bindings: Bindings,
    ranked: list[RankedHit],
    ids: dict[str, int],
    params: dict[str, KnowledgeSourceParams],
) -> list[dict[str, Any]]:
    references = []
    for hit in ranked:
        param = params.get(hit.source)
        if param is not None and param.include_references is False:
            continue
        source = bindings.sources.get(hit.source)
        reference: dict[str, Any] = {
            "type": wire_kind(source.kind) if source is not None else "searchIndex",
            "id": str(hit.ref_id),
            "activitySource": ids.get(hit.activity_key, 0),
            "docKey": hit.doc_key,
            "rerankerScore": hit.final_score,
        }
        if param is not None and param.include_reference_source_data:
            # metadata first: a metadata field must never replace the real key or text
            reference["sourceData"] = {
                **hit.metadata,
                "docKey": hit.doc_key,
                "title": hit.title,
                "content": hit.content,
            }
        references.append(reference)
    return references
