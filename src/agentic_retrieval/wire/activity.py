"""Building activity records and turning them into the wire ``activity`` array.

Parallel branches cannot agree on sequential ids while they run, so each node writes an
:class:`~agentic_retrieval.state.ActivityEntry` keyed by a stable string; the final node
orders entries by start time and assigns ids 0..n, and references are linked to those ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from agentic_retrieval.llm.chat_models import Usage
from agentic_retrieval.state import ActivityEntry

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


def elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a ``time.perf_counter()`` value)."""
    return round((time.perf_counter() - started) * 1000)


def error_detail(code: str, message: str) -> dict[str, str]:
    """An error object in the wire shape."""
    return {"code": code, "message": message}


def model_entry(
    key: str,
    record_type: str,
    *,
    started_wall: float,
    started: float,
    usage: Usage,
    error: str | None = None,
    error_code: str = "ModelOutputInvalid",
    **fields: Any,
) -> ActivityEntry:
    """An activity entry for one LLM step (planning, evidence, answer synthesis)."""
    record: dict[str, Any] = {
        "type": record_type,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "elapsedMs": elapsed_ms(started),
        **fields,
    }
    if usage.reasoning_tokens:
        record["reasoningTokens"] = usage.reasoning_tokens
    if error:
        record["error"] = error_detail(error_code, error)
    return ActivityEntry(key=key, started=started_wall, record=record)


def finalize(entries: Iterable[ActivityEntry]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Order entries by start time and assign wire ids.

    Returns:
        The wire records (``id`` first) and a map from entry key to id.
    """
    ordered = sorted(entries, key=lambda e: (e.started, e.key))
    records: list[dict[str, Any]] = []
    ids: dict[str, int] = {}
    for index, entry in enumerate(ordered):
        ids[entry.key] = index
        records.append({"type": entry.record["type"], "id": index, **entry.record})
    return records, ids


def total_usage(entries: Iterable[ActivityEntry]) -> Usage:
    """Sum the token counts of every model step."""
    usage = Usage()
    for entry in entries:
        usage.input_tokens += int(entry.record.get("inputTokens") or 0)
        usage.output_tokens += int(entry.record.get("outputTokens") or 0)
        usage.reasoning_tokens += int(entry.record.get("reasoningTokens") or 0)
    return usage
