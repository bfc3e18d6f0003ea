"""What a run writes down: subqueries, hits, per-source parameters, decisions, activity.

Its subqueries and hits, the caller's per-source parameters, the ``auto`` effort's decisions
and the activity records.

The nodes keep these typed values in the state (:mod:`agentic_retrieval.state`). Each activity
record also knows its place in the retrieve API's ``activity`` array: its ``wire_type`` and its
fields (:meth:`Activity.render_fields`, abstract, so a record kind without a rendering cannot be
built and mypy says so). Adding a kind of record is one class here and one ``|`` in
:data:`AnyActivity`.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from agentic_retrieval.errors import ErrorCode, SourceError
from agentic_retrieval.graph.vocabulary import (
    DropReason,
    Effort,
    JudgedStep,
    ResultsProcessing,
    wire_kind,
)
from agentic_retrieval.llm.chat_models import ModelIdentity, Usage
from agentic_retrieval.sources.base import Hit
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

# --- what the caller asked, what the run searched and found ---------------------------------


class HydrateDocuments(BaseModel):
    """Which source documents a graph search hydrates its rows with."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    select: str | None = Field(default=None, max_length=1000)
    """Comma-separated fields of ``sourceData`` (``None``: every field)."""
    top: int = Field(default=50, ge=1, le=1000)
    """Most source chunks hydrated per graph search."""


class GraphProvenance(BaseModel):
    """How a graph search's rows point at their evidence: chunk ids, or the chunks themselves."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    kind: Literal["ids", "hydrate"] = "ids"
    hydrate_documents: HydrateDocuments | None = None


class GraphParameters(BaseModel):
    """``graphParameters`` of a source's params (2026-11-01-preview): search its entity graph."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    include_query: bool = False
    """Record the query that ran (``gql``) in the ``graphSearch`` activity."""
    provenance: GraphProvenance = Field(default_factory=GraphProvenance)


class KnowledgeSourceParams(BaseModel):
    """Per-request overrides for one knowledge source (the retrieve API's model).

    The graph's ``knowledge_source_params`` input, in the retrieve API's camelCase.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    knowledge_source_name: str = Field(min_length=1, max_length=256)
    kind: str = "searchIndex"
    filter_add_on: str | None = Field(default=None, max_length=32_000)
    include_references: bool | None = None
    include_reference_source_data: bool | None = None
    always_query_source: bool | None = None
    reranker_threshold: float | None = Field(default=None, ge=0.0, le=4.0)
    # 2026-05-01-preview / 2026-08-01-preview per-source controls (README: "Per-source controls")
    never_query_source: bool | None = None
    """Leave this source out of this request (cannot be combined with ``alwaysQuerySource``)."""
    results_processing: ResultsProcessing | None = None
    """``rerank`` (default) or ``none``: keep the source's own order, no reranker, no threshold."""
    fail_on_error: bool | None = None
    """When this source fails, the whole request fails with its error instead of a 206."""
    max_output_documents: int | None = Field(default=None, ge=1, le=1000)
    """Most of this source's documents in the response."""
    enable_image_serving: bool | None = None
    """Accepted for 2026-05-01-preview clients; this service serves no images."""
    query_hint_overrides: dict[str, Any] | None = None
    """Accepted for 2026-08-01-preview clients; query hints are not applied by this service."""
    # Web-source parameters the SDK defines (WebKnowledgeSourceParams): accepted so SDK
    # requests validate, unused by the sources this library ships.
    language: str | None = None
    market: str | None = None
    count: int | None = Field(default=None, ge=1, le=1000)
    freshness: str | None = None
    # 2025-05-01-preview (targetIndexParams): most candidates sent to the reranker
    max_docs_for_reranker: int | None = Field(default=None, ge=1, le=1000)
    # 2026-11-01-preview: search the source's entity graph too
    graph_parameters: GraphParameters | None = None
    topic_graph: TopicGraphSetting | None = None
    """2026-11-01-preview: sample this source's vector search across topics (``none``,
    ``diverse``, ``balanced``), over its index's topic graph profile."""

    def to_wire(self) -> dict[str, Any]:
        """The JSON a client sends (camelCase, no unset nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


SourceParams = dict[str, KnowledgeSourceParams]
"""A turn's per-source parameters, by source name."""

SourceParamsInput = Annotated[
    KnowledgeSourceParams | dict[str, Any],
    WithJsonSchema({"additionalProperties": True, "type": "object"}),
]
"""One source's overrides as the graph takes them: the retrieve API's validated model (passed
through as it is) or a wire-shaped dict (validated by ``begin_turn``). Published as an object,
the schema Studio's input form has always shown."""


def parse_source_params(raw: Iterable[Any]) -> SourceParams:
    """The caller's per-source overrides (wire-shaped dicts or models), by source name."""
    params = {}
    for item in raw:
        parsed = (
            item
            if isinstance(item, KnowledgeSourceParams)
            else KnowledgeSourceParams.model_validate(item)
        )
        params[parsed.knowledge_source_name] = parsed
    return params


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
    fail_on_error: bool = False
    """The caller's ``failOnError`` for this source: its failure fails the request."""
    topic_graph: TopicGraphSetting | None = None
    """The caller's ``topicGraph`` for this source (over the source's own default)."""


class GraphSearchTask(BaseModel):
    """Private input of the ``graph_search`` node: one subquery against one source's graph."""

    model_config = ConfigDict(frozen=True)

    subquery: Subquery
    source: str
    parameters: GraphParameters
    deadline: float
    timeout: float
    use_model: bool = True
    """Whether the planning model writes the query (``False`` at minimal effort: the graph is
    searched by the entities the question names, with no model call)."""


class RetrievedHit(Hit):
    """A hit together with the query and activity record that produced it."""

    subquery_id: str
    query: str
    activity_key: str
    graph_index: str | None = None
    """The entity graph a graph search found it in (a ``graphSearch`` reference); ``None``
    for a search's hit."""


class RankedHit(RetrievedHit):
    """A deduplicated, reranked candidate with its citation id."""

    ref_id: int
    final_score: float | None
    """Score on the 0-4 semantic scale (max over the subqueries that retrieved it); ``None``
    for a source whose results are not reranked (``resultsProcessing: none``)."""


Drops = dict[str, dict[DropReason, int]]
"""Documents dropped, by the key of the search record that found them, then by reason."""


class SourceFailure(BaseModel):
    """A failed source whose ``failOnError`` is set: the request fails with this error."""

    model_config = ConfigDict(frozen=True)

    source: str
    code: str
    message: str


# --- the activity log ------------------------------------------------------------------------


class ErrorInfo(BaseModel):
    """Why a step failed or degraded: a short code and a message safe to show a caller."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str

    @classmethod
    def of(cls, code: ErrorCode, message: str) -> ErrorInfo:
        """An error with ``code`` (its wire string) and ``message``."""
        return cls(code=str(code), message=message)

    @classmethod
    def of_source(cls, error: SourceError) -> ErrorInfo:
        """The error a source raised, with its own code (a custom source's may be any)."""
        return cls(code=error.code, message=error.message)

    def render(self) -> dict[str, str]:
        """The wire error object."""
        return {"code": self.code, "message": self.message}


class TierDecision(BaseModel):
    """One decision of the ``auto`` effort: stay at a tier or escalate, and why.

    ``signals`` are the measured facts (:mod:`agentic_retrieval.graph.effort`) the decision
    compared with the ``auto_*`` thresholds of the Context.
    """

    model_config = ConfigDict(frozen=True)

    step: JudgedStep
    """What was judged: the question before searching, or a round's reranked results."""
    tier: Effort
    """The tier that had run when the decision was taken."""
    escalate_to: Effort | None
    """The tier escalated to, or ``None`` when the run stops escalating here."""
    reason: str
    signals: dict[str, float] = Field(default_factory=dict)

    def render(self) -> dict[str, Any]:
        """The decision in ``agenticReasoning.effortDecisions`` (our extension)."""
        return {
            "step": self.step,
            "tier": self.tier,
            "escalateTo": self.escalate_to,
            "reason": self.reason,
            "signals": {to_camel(k): v for k, v in self.signals.items()},
        }


class Activity(BaseModel, ABC):
    """One step of the run, before ids are assigned (ids follow start order at the end).

    Subclasses name their wire ``type`` (``wire_type``) and render their own fields, so the
    record kinds, their wire types and their renderings cannot drift apart.
    """

    model_config = ConfigDict(frozen=True)

    wire_type: ClassVar[str]
    """The record's ``type`` in the wire ``activity`` array."""

    key: str
    """Stable within the run (``search:<subquery>:<source>``, ``rerank:<round>``...)."""
    started: float
    """``time.time()`` when the step started."""
    elapsed_ms: int | None = None
    error: ErrorInfo | None = None

    @classmethod
    def announced_type(cls, source_kind: str | None = None) -> str:
        """The wire ``type`` of a record of this class, before the record exists."""
        return cls.wire_type

    @abstractmethod
    def render_fields(self) -> dict[str, Any]:
        """The record in the wire shape, ``type`` first, without ``id`` and times."""

    def render(self, warning: str | None = None) -> dict[str, Any]:
        """The wire record, ``type`` first, with its times (and ``warning``), without ``id``."""
        record = self.render_fields()
        record["startedAt"] = timestamp(self.started)
        record["completedAt"] = timestamp(self.started + (self.elapsed_ms or 0) / 1000)
        if warning:
            record["warning"] = warning
        return record

    def _with_error(self, record: dict[str, Any]) -> dict[str, Any]:
        if self.error is not None:
            record["error"] = self.error.render()
        return record


class SearchActivity(Activity):
    """One subquery sent to one knowledge source."""

    wire_type: ClassVar[str] = "searchIndex"
    """The default; a record's type is its source's wire kind (:meth:`announced_type`)."""

    source: str
    source_kind: str
    search: str
    filter: str | None
    top: int
    count: int
    topic_graph: dict[str, Any] | None = None
    """The topic-graph setting the search ran with (shown as ``topicGraph`` in its
    arguments), when the source samples by topic or the caller asked for one."""

    @classmethod
    def announced_type(cls, source_kind: str | None = None) -> str:
        """The searched source's kind as the wire shows it."""
        return wire_kind(source_kind or cls.wire_type)

    def render_fields(self) -> dict[str, Any]:
        """``<kind>Arguments`` with the search, filter and top; the real kind when mapped."""
        kind = self.announced_type(self.source_kind)
        record: dict[str, Any] = {
            "type": kind,
            "knowledgeSourceName": self.source,
            "queryTime": timestamp(self.started),
            "count": self.count,
            "elapsedMs": self.elapsed_ms,
            f"{kind}Arguments": {"search": self.search, "filter": self.filter, "top": self.top},
        }
        if self.topic_graph is not None:
            record[f"{kind}Arguments"]["topicGraph"] = self.topic_graph
        if kind != self.source_kind:
            record["knowledgeSourceKind"] = self.source_kind
        return self._with_error(record)


class ModelCallActivity(Activity, ABC):
    """A step that may call a model: its token counts add up in the run's usage."""

    usage: Usage = Field(default_factory=Usage)
    model: ModelIdentity | None = None
    """The chat model called (``model: {modelName, deploymentId}`` on the wire)."""

    def _model_record(self, **fields: Any) -> dict[str, Any]:
        record: dict[str, Any] = {
            "type": self.wire_type,
            "inputTokens": self.usage.input_tokens,
            "outputTokens": self.usage.output_tokens,
            "elapsedMs": self.elapsed_ms,
            **fields,
        }
        if self.usage.reasoning_tokens:
            record["reasoningTokens"] = self.usage.reasoning_tokens
        if self.model is not None and self.model.model_name:
            record["model"] = render_model(self.model)
        return record


class PlanningActivity(ModelCallActivity):
    """The routing and planning model call."""

    wire_type: ClassVar[str] = "modelQueryPlanning"

    assistant_message: str | None = None
    """The planner's reply when it found no retrieval needed."""

    def render_fields(self) -> dict[str, Any]:
        """Tokens, time, model; ``retrievalNeeded: false`` with the reply when it replied."""
        record = self._with_error(self._model_record())
        if self.assistant_message is not None:
            record.update(retrievalNeeded=False, assistantMessage=self.assistant_message)
        return record


class EvidenceActivity(ModelCallActivity):
    """One evidence assessment (medium effort)."""

    wire_type: ClassVar[str] = "modelEvidenceAssessment"

    is_sufficient: bool
    confidence: float | None
    followup_queries: list[str] = Field(default_factory=list)

    def render_fields(self) -> dict[str, Any]:
        """Tokens, time, model, the verdict and the follow-up queries."""
        return self._with_error(
            self._model_record(
                isSufficient=self.is_sufficient,
                confidence=self.confidence,
                followupQueries=list(self.followup_queries),
            )
        )


class AnswerActivity(ModelCallActivity):
    """The answer synthesis model call."""

    wire_type: ClassVar[str] = "modelAnswerSynthesis"

    removed_citations: list[int] = Field(default_factory=list)
    """ref_ids the model cited that are not references (stripped from the answer)."""

    def render_fields(self) -> dict[str, Any]:
        """Tokens, time, model, and the citations removed from the answer."""
        record = self._with_error(self._model_record())
        if self.removed_citations:
            record["removedCitations"] = list(self.removed_citations)
        return record


class RerankActivity(ModelCallActivity):
    """One reranking of every candidate retrieved so far (tokens: an LLM grader's)."""

    wire_type: ClassVar[str] = "semanticReranker"

    reranker: str
    candidate_count: int
    kept_count: int
    calibrated_count: int = 0
    """Candidates whose score is calibrated relevance (the default threshold applies to
    these only); fewer than ``candidate_count`` means the rest were ranked, not judged."""
    threshold_rule: str | None = None
    """Which ``rerankerThreshold`` rule applied (the default on calibrated relevance, no
    cut-off and why, or a threshold as set); with several, each with its candidate count."""
    term_coverage: float | None = None
    """Share (0-1) of the searched words the top kept passages hold: a confidence figure that
    needs no calibrated score (``None`` when nothing was kept)."""

    def render_fields(self) -> dict[str, Any]:
        """The reranker, counts, coverage, and an LLM grader's tokens."""
        record: dict[str, Any] = {
            "type": self.wire_type,
            "reranker": self.reranker,
            "candidateCount": self.candidate_count,
            "keptCount": self.kept_count,
            "calibratedCount": self.calibrated_count,
            "elapsedMs": self.elapsed_ms,
        }
        if self.threshold_rule is not None:
            record["thresholdRule"] = self.threshold_rule
        if self.term_coverage is not None:
            record["termCoverage"] = self.term_coverage
        if self.usage.input_tokens:
            record["inputTokens"] = self.usage.input_tokens
        if self.usage.output_tokens:
            record["outputTokens"] = self.usage.output_tokens
        return self._with_error(record)


class ReasoningActivity(Activity):
    """The summary of a run's reasoning: effort, tokens, follow-up rounds.

    ``warning`` says why the effort is what it is when the run could not plan.
    """

    wire_type: ClassVar[str] = "agenticReasoning"

    effort: str
    """The tier the run ended at (``retrievalReasoningEffort``)."""
    requested: str | None = None
    """The effort the caller asked for (``logicalReasoningEffort``); ``None``: the default."""
    usage: Usage
    iterations: int
    warning: str | None = None
    decisions: list[TierDecision] = Field(default_factory=list)
    """The ``auto`` effort's decisions, in order."""

    def render_fields(self) -> dict[str, Any]:
        """Efforts, the run's tokens, rounds, the ``auto`` decisions and the warning."""
        record: dict[str, Any] = {
            "type": self.wire_type,
            "retrievalReasoningEffort": {"kind": self.effort},
            "reasoningTokens": self.usage.reasoning_tokens,
            "inputTokens": self.usage.input_tokens,
            "outputTokens": self.usage.output_tokens,
            "iterations": self.iterations,
        }
        if self.requested:
            record["logicalReasoningEffort"] = {"kind": self.requested}
        if self.decisions:
            record["effortDecisions"] = [d.render() for d in self.decisions]
        if self.warning:
            record["warning"] = self.warning
        return record


class GraphSearchActivity(ModelCallActivity):
    """One graph search: the query the model wrote (or entity matching), and its rows."""

    wire_type: ClassVar[str] = "graphSearch"

    source: str
    graph_index: str
    natural_language_query: str
    gql: str | None
    """The query that ran, when the caller asked for it (``includeQuery``)."""
    attempts: int
    outcome: str
    count: int
    model_elapsed_ms: int = 0

    def render_fields(self) -> dict[str, Any]:
        """The common search fields and ``graphSearchArguments``."""
        arguments: dict[str, Any] = {
            "naturalLanguageQuery": self.natural_language_query,
            "graphIndexName": self.graph_index,
            "attempts": self.attempts,
            "outcome": self.outcome,
            "inputTokens": self.usage.input_tokens,
            "outputTokens": self.usage.output_tokens,
            "modelElapsedMs": self.model_elapsed_ms,
        }
        if self.gql is not None:
            arguments["gql"] = self.gql
        if self.model is not None and self.model.model_name:
            arguments["modelName"] = self.model.model_name
        record: dict[str, Any] = {
            "type": self.wire_type,
            "knowledgeSourceName": self.source,
            "queryTime": timestamp(self.started),
            "count": self.count,
            "elapsedMs": self.elapsed_ms,
            "graphSearchArguments": arguments,
        }
        return self._with_error(record)


class RuntimeLimitActivity(Activity):
    """``max_runtime_seconds`` elapsed; the response holds what was ready."""

    wire_type: ClassVar[str] = "runtimeLimit"

    def render_fields(self) -> dict[str, Any]:
        """Only the type, and the timeout error."""
        return self._with_error({"type": self.wire_type})


AnyActivity = (
    SearchActivity
    | PlanningActivity
    | EvidenceActivity
    | AnswerActivity
    | RerankActivity
    | GraphSearchActivity
    | ReasoningActivity
    | RuntimeLimitActivity
)
ACTIVITY_TYPES: tuple[type[Activity], ...] = get_args(AnyActivity)


def render_activity(
    entries: Iterable[Activity], warnings: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Order records by start time, assign wire ids and render each.

    Parallel branches cannot agree on sequential ids while they run, so records are keyed by
    a stable string and numbered here. Start times come from a strictly increasing clock read
    as each step announces itself (:func:`agentic_retrieval.graph.events.step_clock`), so this
    order is also the order of the stream's ``activity.started`` events.

    Args:
        entries: The run's typed records.
        warnings: A ``warning`` for some records, by record key.

    Returns:
        The wire records (``type`` and ``id`` first) and a map from record key to id.
    """
    ordered = sorted(entries, key=lambda e: (e.started, e.key))
    records: list[dict[str, Any]] = []
    ids: dict[str, int] = {}
    for index, entry in enumerate(ordered):
        ids[entry.key] = index
        record = entry.render((warnings or {}).get(entry.key))
        records.append({"type": record.pop("type"), "id": index, **record})
    return records, ids


def render_model(model: ModelIdentity) -> dict[str, str]:
    """``{"modelName", "deploymentId"}`` (2026-08-01-preview), without unknown parts."""
    rendered = {"modelName": model.model_name, "deploymentId": model.deployment_id}
    return {key: value for key, value in rendered.items() if value}


def timestamp(seconds: float) -> str:
    """An epoch time as the wire writes it: ISO 8601 UTC with milliseconds and ``Z``."""
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
