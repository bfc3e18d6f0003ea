"""Rendering the run's typed records into the wire shape: ``activity`` and ``references``.

This is the one place that knows the Azure ``retrieve`` response's record shapes (camelCase
keys, the ``<kind>Arguments`` object, error objects, reference types); the nodes keep typed
records (:mod:`agentic_retrieval.state`), and ``respond`` calls these functions at the end.
Parallel branches cannot agree on sequential ids while they run, so records are keyed by a
stable string; :func:`render_activity` orders them by start time and assigns ids 0..n, and
references link to those ids. Start times come from a strictly increasing clock
(:func:`agentic_retrieval.nodes._shared.step_clock`) read as each step announces itself on the
event stream, so that order is also the order of the stream's ``activity.started`` events
(:mod:`agentic_retrieval.wire.events` numbers them as they come).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from functools import singledispatch
from typing import Any

from agentic_retrieval.llm.chat_models import ModelIdentity, Usage
from agentic_retrieval.state import (
    Activity,
    AnswerActivity,
    DropReason,
    ErrorInfo,
    EvidenceActivity,
    ModelCallActivity,
    PlanningActivity,
    RankedHit,
    ReasoningActivity,
    RerankActivity,
    RuntimeLimitActivity,
    SearchActivity,
    TierDecision,
)
from agentic_retrieval.wire.models import KnowledgeSourceParams

WIRE_KINDS = frozenset({"searchIndex", "azureBlob", "indexedOneLake", "web"})
"""Knowledge-source kinds the Azure SDK (12.0.0) has typed reference models for."""


def wire_kind(kind: str) -> str:
    """The kind a source shows on the wire.

    Our own kinds (``local``, ``langchain``...) are search indexes to a client: mapping them
    to ``searchIndex`` lets the official SDK deserialize references as
    ``KnowledgeBaseSearchIndexReference`` (with ``doc_key``); the real kind is kept in the
    activity record's ``knowledgeSourceKind``.
    """
    return kind if kind in WIRE_KINDS else "searchIndex"


RECORD_TYPES: dict[str, str] = {
    "planning": "modelQueryPlanning",
    "evidence": "modelEvidenceAssessment",
    "answer": "modelAnswerSynthesis",
    "rerank": "semanticReranker",
    "reasoning": "agenticReasoning",
    "runtime_limit": "runtimeLimit",
}
"""The wire ``type`` of each record kind but ``search`` (whose type is its source's kind)."""


def record_type(kind: str, source_kind: str | None = None) -> str:
    """The wire ``type`` of a record of ``kind`` (a search's: its source's wire kind)."""
    return wire_kind(source_kind or "searchIndex") if kind == "search" else RECORD_TYPES[kind]


def render_error(error: ErrorInfo) -> dict[str, str]:
    """An error object in the wire shape."""
    return {"code": error.code, "message": error.message}


def render_activity(
    entries: Iterable[Activity], warnings: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Order records by start time, assign wire ids and render each.

    Args:
        entries: The run's typed records.
        warnings: A ``warning`` for some records, by record key (see :func:`drop_warning`).

    Returns:
        The wire records (``type`` and ``id`` first) and a map from record key to id.
    """
    ordered = sorted(entries, key=lambda e: (e.started, e.key))
    records: list[dict[str, Any]] = []
    ids: dict[str, int] = {}
    for index, entry in enumerate(ordered):
        ids[entry.key] = index
        record = render_entry(entry, (warnings or {}).get(entry.key))
        records.append({"type": record.pop("type"), "id": index, **record})
    return records, ids


def render_entry(entry: Activity, warning: str | None = None) -> dict[str, Any]:
    """One record in the wire shape, ``type`` first, with its times, without ``id``."""
    record = render_record(entry)
    record["startedAt"] = timestamp(entry.started)
    record["completedAt"] = timestamp(entry.started + (entry.elapsed_ms or 0) / 1000)
    if warning:
        record["warning"] = warning
    return {"type": record.pop("type"), **record}


def drop_warning(dropped: Mapping[DropReason, int], threshold: float | None) -> str | None:
    """The ``warning`` of a search record whose documents did not all reach the response.

    Azure drops such documents silently; saying how many, and why, tells a caller whether to
    lower ``rerankerThreshold`` or raise ``maxOutputDocuments`` / ``maxOutputSizeInTokens``.

    Args:
        dropped: How many documents were dropped, by reason.
        threshold: The source's effective ``rerankerThreshold``.
    """
    parts = []
    if dropped.get("threshold"):
        limit = f" ({threshold:g})" if threshold is not None else ""
        parts.append(f"{dropped['threshold']} scored under the rerankerThreshold{limit}")
    if dropped.get("maxOutputDocuments"):
        parts.append(f"{dropped['maxOutputDocuments']} exceeded maxOutputDocuments")
    if dropped.get("outputSize"):
        parts.append(
            f"{dropped['outputSize']} did not fit the output size limit "
            "(maxOutputSize / maxOutputSizeInTokens)"
        )
    total = sum(dropped.values())
    if not total:
        return None
    noun, verb = ("document", "was") if total == 1 else ("documents", "were")
    return f"{total} {noun} found by this query {verb} left out of the response: " + (
        "; ".join(parts) + "."
    )


def timestamp(seconds: float) -> str:
    """An epoch time as the wire writes it: ISO 8601 UTC with milliseconds and ``Z``."""
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@singledispatch
def render_record(entry: Activity) -> dict[str, Any]:
    """The wire record of one step, without ``id``."""
    raise TypeError(f"no wire rendering for {type(entry).__name__}")


@render_record.register
def _search(entry: SearchActivity) -> dict[str, Any]:
    kind = wire_kind(entry.source_kind)
    record: dict[str, Any] = {
        "type": kind,
        "knowledgeSourceName": entry.source,
        "queryTime": timestamp(entry.started),
        "count": entry.count,
        "elapsedMs": entry.elapsed_ms,
        f"{kind}Arguments": {"search": entry.search, "filter": entry.filter, "top": entry.top},
    }
    if kind != entry.source_kind:
        record["knowledgeSourceKind"] = entry.source_kind
    return _with_error(record, entry)


@render_record.register
def _planning(entry: PlanningActivity) -> dict[str, Any]:
    record = _with_error(_model_record(RECORD_TYPES["planning"], entry, entry.usage), entry)
    if entry.assistant_message is not None:
        record.update(retrievalNeeded=False, assistantMessage=entry.assistant_message)
    return record


@render_record.register
def _evidence(entry: EvidenceActivity) -> dict[str, Any]:
    record = _model_record(
        RECORD_TYPES["evidence"],
        entry,
        entry.usage,
        isSufficient=entry.is_sufficient,
        confidence=entry.confidence,
        followupQueries=list(entry.followup_queries),
    )
    return _with_error(record, entry)


@render_record.register
def _answer(entry: AnswerActivity) -> dict[str, Any]:
    record = _with_error(_model_record(RECORD_TYPES["answer"], entry, entry.usage), entry)
    if entry.removed_citations:
        record["removedCitations"] = list(entry.removed_citations)
    return record


@render_record.register
def _rerank(entry: RerankActivity) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": RECORD_TYPES["rerank"],
        "reranker": entry.reranker,
        "candidateCount": entry.candidate_count,
        "keptCount": entry.kept_count,
        "calibratedCount": entry.calibrated_count,
        "elapsedMs": entry.elapsed_ms,
    }
    if entry.term_coverage is not None:
        record["termCoverage"] = entry.term_coverage
    if entry.usage.input_tokens:
        record["inputTokens"] = entry.usage.input_tokens
    if entry.usage.output_tokens:
        record["outputTokens"] = entry.usage.output_tokens
    return _with_error(record, entry)


@render_record.register
def _reasoning(entry: ReasoningActivity) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": RECORD_TYPES["reasoning"],
        "retrievalReasoningEffort": {"kind": entry.effort},
        "reasoningTokens": entry.usage.reasoning_tokens,
        "inputTokens": entry.usage.input_tokens,
        "outputTokens": entry.usage.output_tokens,
        "iterations": entry.iterations,
    }
    if entry.requested:
        record["logicalReasoningEffort"] = {"kind": entry.requested}
    if entry.decisions:
        record["effortDecisions"] = [render_decision(d) for d in entry.decisions]
    if entry.warning:
        record["warning"] = entry.warning
    return record


def render_decision(decision: TierDecision) -> dict[str, Any]:
    """One ``auto`` decision, our extension of ``agenticReasoning``.

    What was judged at which tier, the tier escalated to (``null``: stopped there), why, and
    the measured signals.
    """
    return {
        "step": decision.step,
        "tier": decision.tier,
        "escalateTo": decision.escalate_to,
        "reason": decision.reason,
        "signals": {_camel(k): v for k, v in decision.signals.items()},
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@render_record.register
def _runtime_limit(entry: RuntimeLimitActivity) -> dict[str, Any]:
    return _with_error({"type": RECORD_TYPES["runtime_limit"]}, entry)


def _model_record(
    record_type: str, entry: ModelCallActivity, usage: Usage, **fields: Any
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": record_type,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "elapsedMs": entry.elapsed_ms,
        **fields,
    }
    if usage.reasoning_tokens:
        record["reasoningTokens"] = usage.reasoning_tokens
    if entry.model is not None and entry.model.model_name:
        record["model"] = render_model(entry.model)
    return record


def render_model(model: ModelIdentity) -> dict[str, str]:
    """``{"modelName", "deploymentId"}`` (2026-08-01-preview), without unknown parts."""
    rendered = {"modelName": model.model_name, "deploymentId": model.deployment_id}
    return {key: value for key, value in rendered.items() if value}


def _with_error(record: dict[str, Any], entry: Activity) -> dict[str, Any]:
    if entry.error is not None:
        record["error"] = render_error(entry.error)
    return record


def render_references(
    ranked: Sequence[RankedHit],
    ids: Mapping[str, int],
    params: Mapping[str, KnowledgeSourceParams],
    kinds: Mapping[str, str],
    citation_urls: Mapping[tuple[str, str], str] | None = None,
) -> list[dict[str, Any]]:
    """The wire references of the passages the response is built on.

    Args:
        ranked: The grounded passages, best first.
        ids: Activity ids by record key (from :func:`render_activity`).
        params: The caller's per-source parameters (``includeReferences``,
            ``includeReferenceSourceData``).
        kinds: Each source's kind, by name.
        citation_urls: ``citationUrl`` by (source, doc key), where the source gave one.
    """
    references = []
    for hit in ranked:
        param = params.get(hit.source)
        if param is not None and param.include_references is False:
            continue
        reference: dict[str, Any] = {
            "type": wire_kind(kinds.get(hit.source, "searchIndex")),
            "id": str(hit.ref_id),
            "activitySource": ids.get(hit.activity_key, 0),
            "docKey": hit.doc_key,
        }
        if hit.final_score is not None:  # None: resultsProcessing none, never reranked
            reference["rerankerScore"] = hit.final_score
        url = (citation_urls or {}).get((hit.source, hit.doc_key))
        if url:
            reference["citationUrl"] = url
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
