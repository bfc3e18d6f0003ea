"""The graph state: what a caller passes in, what comes out, and the scratch in between.

Everything here is serialisable (pydantic models, dicts, strings), so checkpointers and
LangGraph Studio work; live clients never enter the state. Channels that parallel search
branches write to have reducers.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from pydantic import BaseModel, ConfigDict, Field

from agentic_retrieval.sources.base import Hit


class Subquery(BaseModel):
    """A focused query the planner (or the caller's intents) asked for."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Stable id within the run: ``q<round>.<n>``."""
    text: str
    goal: str | None = None
    filter: str | None = None
    """The planner's own OData filter (narrows the caller's, never replaces it)."""
    sources: tuple[str, ...] = ()
    """Knowledge sources this subquery is sent to."""
    round: int = 0
    """0 for the first retrieval round, 1.. for follow-ups."""


class SearchTask(BaseModel):
    """Private input of the ``search`` node: one subquery against one source."""

    model_config = ConfigDict(frozen=True)

    subquery: Subquery
    source: str
    filter: str | None
    """The composed filter: caller's ``filterAddOn`` AND planner's filter."""
    top: int
    deadline: float
    """Wall-clock time (``time.time()``) after which the search is abandoned."""
    timeout: float
    """Per-source bound in seconds."""


class RetrievedHit(Hit):
    """A hit together with the query and activity record that produced it."""

    subquery_id: str
    query: str
    activity_key: str


class RankedHit(RetrievedHit):
    """A deduplicated, reranked candidate with its citation id."""

    ref_id: int
    final_score: float
    """Score on the 0-4 semantic scale (max over the subqueries that retrieved it)."""


class KeyPoint(BaseModel):
    """A fact the evidence establishes, with the passages supporting it."""

    point: str
    ref_ids: list[int] = Field(default_factory=list)


class Evidence(BaseModel):
    """The evidence assessment of one round."""

    is_sufficient: bool = True
    confidence: float = 1.0
    key_points: list[KeyPoint] = Field(default_factory=list)
    missing_information: list[str] = Field(default_factory=list)
    followup_queries: list[str] = Field(default_factory=list)


class ActivityEntry(BaseModel):
    """An activity record before ids are assigned (ids follow start order at the end)."""

    key: str
    started: float
    record: dict[str, Any]
    """The wire record without ``id`` (camelCase keys)."""


def merge_hits(left: list[RetrievedHit], right: list[RetrievedHit]) -> list[RetrievedHit]:
    """Append hits from parallel branches, dropping exact repeats of (source, key, subquery).

    Args:
        left: Hits already in the channel.
        right: Hits written by one or more branches in this step.

    Returns:
        The union, first occurrence kept, order stable.
    """
    seen = {(h.source, h.doc_key, h.subquery_id) for h in left}
    merged = list(left)
    for hit in right:
        key = (hit.source, hit.doc_key, hit.subquery_id)
        if key not in seen:
            seen.add(key)
            merged.append(hit)
    return merged


class InputState(TypedDict, total=False):
    """What a caller passes: the conversation and/or explicit intents, per-source overrides."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation; the last user message is the question."""
    intents: list[str]
    """Search strings to run as-is (no planning): the retrieve API's ``intents[].search``."""
    knowledge_source_params: list[dict[str, Any]]
    """Per-source overrides, wire shape (``knowledgeSourceName``, ``filterAddOn``,
    ``includeReferences``, ``includeReferenceSourceData``, ``alwaysQuerySource``,
    ``rerankerThreshold``)."""


class OutputState(TypedDict, total=False):
    """What a caller gets back."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation with the assistant's reply (grounding string or answer) appended."""
    response: str
    """The grounding JSON string (extractiveData) or the Markdown answer (answerSynthesis)."""
    references: list[dict[str, Any]]
    """Wire references: ``type``, ``id`` (ref_id), ``activitySource``, ``docKey``,
    ``rerankerScore``, ``sourceData``."""
    activity: list[dict[str, Any]]
    """Wire activity records in start order, ids 0..n."""
    passage_count: int
    """Passages the response is built on (0 with a timeout means nothing was ready: 408)."""
    partial: Annotated[bool, operator.or_]
    """True when a knowledge source failed (HTTP 206)."""
    timed_out: Annotated[bool, operator.or_]
    """True when the run hit ``max_runtime_seconds``."""


class RetrievalState(InputState, OutputState, total=False):
    """The internal state: input, output and the scratch the nodes share."""

    started_at: float
    """``time.time()`` when the run started; with ``max_runtime_seconds`` gives the deadline."""
    needs_retrieval: bool
    assistant_message: str
    """The planner's reply when no retrieval is needed."""
    planned: list[Subquery]
    """Subqueries proposed for the next retrieval round (before source resolution)."""
    subqueries: Annotated[list[Subquery], operator.add]
    """Every subquery sent, all rounds."""
    hits: Annotated[list[RetrievedHit], merge_hits]
    """Everything retrieved, all rounds."""
    ranked: list[RankedHit]
    """The current reranked selection, best first."""
    evidence: Evidence | None
    grounded_ref_ids: list[int]
    """ref_ids of the passages the response is built on (the references returned)."""
    iteration: int
    """Follow-up rounds run so far."""
    round_to_search: int | None
    """The round whose subqueries the next fan-out searches; ``None`` when none is due."""
    activity_log: Annotated[list[ActivityEntry], operator.add]
