"""Checkpointing the graph's state: a serializer that knows this library's state types.

LangGraph's default checkpoint serializer accepts any type but warns about each one it does
not know ("Deserializing unregistered type ..."), and its strict mode refuses them. Pass
:func:`checkpoint_serializer` to a checkpointer to allow exactly these types, strictly::

    from langgraph.checkpoint.memory import MemorySaver
    graph = build_graph(sources, checkpointer=MemorySaver(serde=checkpoint_serializer()))
"""

from __future__ import annotations

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agentic_retrieval.graph.records import (
    ACTIVITY_TYPES,
    ErrorInfo,
    KnowledgeSourceParams,
    RankedHit,
    RetrievedHit,
    SearchTask,
    Subquery,
    TierDecision,
)
from agentic_retrieval.llm.chat_models import Usage
from agentic_retrieval.llm.schemas import EvidenceAssessment, SupportedPoint
from agentic_retrieval.sources.base import Hit

STATE_TYPES: tuple[type, ...] = (
    Subquery,
    SearchTask,
    Hit,
    RetrievedHit,
    RankedHit,
    SupportedPoint,
    EvidenceAssessment,
    *ACTIVITY_TYPES,
    ErrorInfo,
    TierDecision,
    Usage,
    KnowledgeSourceParams,
)
"""Every non-builtin type the graph writes into its state (and its Send payloads)."""


def checkpoint_serializer() -> JsonPlusSerializer:
    """A strict msgpack serializer allowing LangGraph's safe types plus :data:`STATE_TYPES`."""
    return JsonPlusSerializer(
        allowed_msgpack_modules=[(t.__module__, t.__name__) for t in STATE_TYPES]
    )
