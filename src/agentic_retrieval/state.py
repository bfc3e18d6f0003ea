"""The graph state: what a caller passes in, what comes out, and the scratch in between.

The schemas are dataclasses, so every field has its default on the schema and nodes read
``state.ranked`` rather than restating defaults. Each field declares its *scope* in its
metadata, and the scopes decide what a turn on a checkpointed thread (``thread_id``) keeps:

- ``conversation`` (``messages``): accumulates across turns.
- ``turn``: a per-request input (``intents``, ``knowledge_source_params``). Its channel is a
  LangGraph ``UntrackedValue``: it lasts for the run that received it and is never written
  to a checkpoint, so a later turn that does not send it does not inherit it. The first node
  records what later nodes need from it in ``run`` fields.
- ``run``: written by the nodes. The first node of every turn resets all of them to their
  defaults (:func:`run_reset`, derived from this schema), so no hit, flag or time limit of
  one turn leaks into the next.

Everything here is serialisable (pydantic models, dicts, strings), so checkpointers and
LangGraph Studio work; live clients never enter the state. Channels that parallel search
branches write to have reducers.
"""

from __future__ import annotations

import operator
import types
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from typing import (
    Annotated,
    Any,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from langchain_core.messages import AnyMessage
from langgraph.channels import UntrackedValue
from langgraph.graph.message import add_messages
from langgraph.types import Overwrite
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from agentic_retrieval.llm.chat_models import MODEL_ENV_VAR, ModelIdentity, Usage
from agentic_retrieval.llm.schemas import EvidenceAssessment
from agentic_retrieval.sources.base import Hit
from agentic_retrieval.wire.models import KnowledgeSourceParams

T = TypeVar("T")

TurnInput = Annotated[T, UntrackedValue]
"""A per-request input: kept for the run that received it, never checkpointed."""


class Scope(StrEnum):
    """How long a state field lives on a checkpointed thread."""

    CONVERSATION = "conversation"
    """Kept and accumulated across turns."""
    TURN = "turn"
    """Sent by the caller for one turn; never checkpointed (a ``TurnInput`` channel)."""
    RUN = "run"
    """Written by the nodes; reset to its default when a turn starts."""


Planner = Literal["caller", "model", "question"]
"""Who planned a turn's retrieval: the caller (``intents``), the planning model, or nobody
(``minimal`` effort: the question as asked)."""


Effort = Literal["minimal", "low", "medium"]
"""A tier a turn runs at: no model, planning, planning plus evidence assessment."""
RequestedEffort = Literal["minimal", "low", "medium", "auto"]
"""An effort a caller may ask for: a tier, or ``auto`` (start at minimal, escalate)."""

NO_MODEL_NOTE = (
    "no chat model is configured, so the model-free tier ran (minimal effort: the question "
    f"searched as asked, no query planning); set {MODEL_ENV_VAR} (e.g. openai:gpt-4.1-mini) "
    "to plan at low or medium effort"
)
"""Said once, in the ``agenticReasoning`` record, when an unset effort ran without a model."""

INTENTS_AT_MEDIUM_NOTE = (
    "medium effort with intents: the intents were searched as given, and medium checks the "
    "evidence (with follow-up rounds) only for a question it plans itself, so no evidence "
    "check ran; send the conversation as messages to have it checked"
)
"""Said once when a caller chose medium and planned with ``intents``: it answers like low."""


@dataclass(frozen=True)
class EffortChoice:
    """The tier a turn starts at, what the caller asked for, and the note to show."""

    effort: Effort
    requested: RequestedEffort | None = None
    """The effort the caller chose (request, Context or configuration); ``None``: default."""
    note: str | None = None
    auto: bool = False
    """The ``auto`` effort may escalate: a planning model is configured and no caller plan."""


def choose_effort(
    requested: RequestedEffort | None, *, has_intents: bool, can_plan: bool
) -> EffortChoice:
    """Decide the tier a turn starts at; the one place this is decided (the result is in state).

    An effort the caller chose is kept, even when it needs a model there is not (that is the
    caller's error to hear, in its own interface). ``auto`` starts at the model-free tier and
    may escalate when a planning model is configured (and the caller did not plan with
    ``intents``). Left unset, the effort is ``low`` when a planning model is configured and
    otherwise the model-free tier (``minimal``). Whenever the model-free tier runs because
    there is no model, the note says so once in the activity log.

    Args:
        requested: The effort the caller set, or ``None`` for the default.
        has_intents: The caller passed ``intents`` (its own plan: no model would plan).
        can_plan: A planning model is configured.
    """
    # with intents nothing needed a model: the fallback changes nothing worth saying
    note = None if can_plan or has_intents else NO_MODEL_NOTE
    if requested == "auto":
        return EffortChoice("minimal", "auto", note, auto=can_plan and not has_intents)
    if requested == "medium" and has_intents:  # the caller planned: nothing to assess
        return EffortChoice("medium", "medium", INTENTS_AT_MEDIUM_NOTE)
    if requested is not None:
        return EffortChoice(requested, requested)
    if can_plan:
        return EffortChoice("low")
    return EffortChoice("minimal", note=note)


def planner_for(has_intents: bool, reasoning_effort: str) -> Planner:
    """Decide who plans a turn; the one place this is decided (the result is in state).

    Args:
        has_intents: The caller passed ``intents`` (its own plan: no model call).
        reasoning_effort: The run's effort; ``minimal`` never calls a model.
    """
    if has_intents:
        return "caller"
    return "question" if reasoning_effort == "minimal" else "model"


def _meta(scope: Scope, description: str) -> dict[str, Any]:
    return {"scope": scope, "description": description}


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


class RetrievedHit(Hit):
    """A hit together with the query and activity record that produced it."""

    subquery_id: str
    query: str
    activity_key: str


class RankedHit(RetrievedHit):
    """A deduplicated, reranked candidate with its citation id."""

    ref_id: int
    final_score: float | None
    """Score on the 0-4 semantic scale (max over the subqueries that retrieved it); ``None``
    for a source whose results are not reranked (``resultsProcessing: none``)."""


class ErrorInfo(BaseModel):
    """Why a step failed or degraded: a short code and a message safe to show a caller."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str

    @classmethod
    def of(cls, code: str, message: str) -> ErrorInfo:
        """An error with ``code`` and ``message``."""
        return cls(code=code, message=message)


class Activity(BaseModel):
    """One step of the run, before ids are assigned (ids follow start order at the end).

    Nodes write these typed records; :mod:`agentic_retrieval.wire.render` turns them into
    the wire ``activity`` array, so a new API version changes the rendering, not the nodes.
    """

    model_config = ConfigDict(frozen=True)

    key: str
    """Stable within the run (``search:<subquery>:<source>``, ``rerank:<round>``...)."""
    started: float
    """``time.time()`` when the step started."""
    elapsed_ms: int | None = None
    error: ErrorInfo | None = None


class SearchActivity(Activity):
    """One subquery sent to one knowledge source."""

    kind: Literal["search"] = "search"
    source: str
    source_kind: str
    search: str
    filter: str | None
    top: int
    count: int


class ModelCallActivity(Activity):
    """A step that may call a model: its token counts add up in the run's usage."""

    usage: Usage = Field(default_factory=Usage)
    model: ModelIdentity | None = None
    """The chat model called (``model: {modelName, deploymentId}`` on the wire)."""


class PlanningActivity(ModelCallActivity):
    """The routing and planning model call."""

    kind: Literal["planning"] = "planning"
    assistant_message: str | None = None
    """The planner's reply when it found no retrieval needed."""


class EvidenceActivity(ModelCallActivity):
    """One evidence assessment (medium effort)."""

    kind: Literal["evidence"] = "evidence"
    is_sufficient: bool
    confidence: float | None
    followup_queries: list[str] = Field(default_factory=list)


class AnswerActivity(ModelCallActivity):
    """The answer synthesis model call."""

    kind: Literal["answer"] = "answer"
    removed_citations: list[int] = Field(default_factory=list)
    """ref_ids the model cited that are not references (stripped from the answer)."""


class RerankActivity(ModelCallActivity):
    """One reranking of every candidate retrieved so far (tokens: an LLM grader's)."""

    kind: Literal["rerank"] = "rerank"
    reranker: str
    candidate_count: int
    kept_count: int
    calibrated_count: int = 0
    """Candidates whose score is calibrated relevance (the default threshold applies to
    these only); fewer than ``candidate_count`` means the rest were ranked, not judged."""
    term_coverage: float | None = None
    """Share (0-1) of the searched words the top kept passages hold: a confidence figure that
    needs no calibrated score (``None`` when nothing was kept)."""


class TierDecision(BaseModel):
    """One decision of the ``auto`` effort: stay at a tier or escalate, and why.

    ``signals`` are the measured facts (:mod:`agentic_retrieval.signals`) the decision
    compared with the ``auto_*`` thresholds of the Context.
    """

    model_config = ConfigDict(frozen=True)

    step: Literal["question", "results"]
    """What was judged: the question before searching, or a round's reranked results."""
    tier: Effort
    """The tier that had run when the decision was taken."""
    escalate_to: Effort | None
    """The tier escalated to, or ``None`` when the run stops escalating here."""
    reason: str
    signals: dict[str, float] = Field(default_factory=dict)


class ReasoningActivity(Activity):
    """The summary of a run's reasoning: effort, tokens, follow-up rounds.

    ``warning`` says why the effort is what it is when the run could not plan.
    """

    kind: Literal["reasoning"] = "reasoning"
    effort: str
    """The tier the run ended at (``retrievalReasoningEffort``)."""
    requested: str | None = None
    """The effort the caller asked for (``logicalReasoningEffort``); ``None``: the default."""
    usage: Usage
    iterations: int
    warning: str | None = None
    decisions: list[TierDecision] = Field(default_factory=list)
    """The ``auto`` effort's decisions, in order."""


class RuntimeLimitActivity(Activity):
    """``max_runtime_seconds`` elapsed; the response holds what was ready."""

    kind: Literal["runtime_limit"] = "runtime_limit"


AnyActivity = (
    SearchActivity
    | PlanningActivity
    | EvidenceActivity
    | AnswerActivity
    | RerankActivity
    | ReasoningActivity
    | RuntimeLimitActivity
)
ACTIVITY_TYPES: tuple[type[Activity], ...] = (
    SearchActivity,
    PlanningActivity,
    EvidenceActivity,
    AnswerActivity,
    RerankActivity,
    ReasoningActivity,
    RuntimeLimitActivity,
)


DropReason = Literal["threshold", "maxOutputDocuments", "outputSize"]
"""Why a retrieved document is not in the response: it scored under ``rerankerThreshold``, a
``maxOutputDocuments`` cap cut it, or it did not fit the output size budget."""

Drops = dict[str, dict[DropReason, int]]
"""Documents dropped, by the key of the search record that found them, then by reason."""


class SourceFailure(BaseModel):
    """A failed source whose ``failOnError`` is set: the request fails with this error."""

    model_config = ConfigDict(frozen=True)

    source: str
    code: str
    message: str


def first_failure(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Keep the first ``failOnError`` failure written (parallel searches may both fail).

    An empty dict means no failure (a constructible default: LangGraph's reducer channel
    applies ``Overwrite`` only over a value it could construct).
    """
    return left or right


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


@dataclass(kw_only=True)
class InputState:
    """What a caller passes: the conversation and/or explicit intents, per-source overrides."""

    messages: Annotated[list[AnyMessage], add_messages] = field(
        default_factory=list,
        metadata=_meta(
            Scope.CONVERSATION, "The conversation; the last user message is the question."
        ),
    )
    intents: TurnInput[list[str]] = field(
        default_factory=list,
        metadata=_meta(
            Scope.TURN,
            "Search strings to run as-is (no planning): the retrieve API's intents[].search.",
        ),
    )
    knowledge_source_params: TurnInput[list[dict[str, Any]]] = field(
        default_factory=list,
        metadata=_meta(
            Scope.TURN,
            "Per-source overrides, wire shape (knowledgeSourceName, filterAddOn, "
            "includeReferences, includeReferenceSourceData, alwaysQuerySource, "
            "rerankerThreshold).",
        ),
    )


@dataclass(kw_only=True)
class OutputState:
    """What a caller gets back."""

    messages: Annotated[list[AnyMessage], add_messages] = field(
        default_factory=list,
        metadata=_meta(
            Scope.CONVERSATION,
            "The conversation with the assistant's reply (grounding string or answer) appended.",
        ),
    )
    response: str = field(
        default="",
        metadata=_meta(
            Scope.RUN,
            "The grounding JSON string (extractiveData) or the Markdown answer (answerSynthesis).",
        ),
    )
    references: list[dict[str, Any]] = field(
        default_factory=list,
        metadata=_meta(
            Scope.RUN,
            "Wire references: type, id (ref_id), activitySource, docKey, rerankerScore, "
            "sourceData.",
        ),
    )
    activity: list[dict[str, Any]] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN, "Wire activity records in start order, ids 0..n."),
    )
    passage_count: int = field(
        default=0,
        metadata=_meta(
            Scope.RUN,
            "Passages the response is built on (0 with a timeout means nothing was ready: 408).",
        ),
    )
    partial: Annotated[bool, operator.or_] = field(
        default=False,
        metadata=_meta(Scope.RUN, "True when a knowledge source failed (HTTP 206)."),
    )
    timed_out: Annotated[bool, operator.or_] = field(
        default=False,
        metadata=_meta(Scope.RUN, "True when the run hit max_runtime_seconds."),
    )
    failure: Annotated[dict[str, Any], first_failure] = field(
        default_factory=dict,
        metadata=_meta(
            Scope.RUN,
            "A failed source whose failOnError is set (source, code, message): the request "
            "fails with this error instead of returning partial results.",
        ),
    )


@dataclass(kw_only=True)
class RetrievalState(InputState, OutputState):
    """The internal state: input, output and the scratch the nodes share."""

    started_at: float | None = field(
        default=None,
        metadata=_meta(
            Scope.RUN,
            "time.time() when the run started; with max_runtime_seconds gives the deadline.",
        ),
    )
    question: str = field(
        default="",
        metadata=_meta(
            Scope.RUN,
            "The question this turn asks: the last user message, else the intents joined.",
        ),
    )
    planned_by: Planner | None = field(
        default=None,
        metadata=_meta(
            Scope.RUN,
            "Who planned this turn: caller (intents, no model call), model, or question "
            "(minimal effort: the question as asked).",
        ),
    )
    effort: Effort | None = field(
        default=None,
        metadata=_meta(
            Scope.RUN,
            "The tier this turn runs at (choose_effort): the requested one, else low with "
            "a planning model, else minimal; auto starts at minimal and raises it.",
        ),
    )
    requested_effort: RequestedEffort | None = field(
        default=None,
        metadata=_meta(Scope.RUN, "The effort the caller asked for; None: the default."),
    )
    auto: bool = field(
        default=False,
        metadata=_meta(
            Scope.RUN,
            "auto effort that may escalate (a planning model, no caller plan): the "
            "judge_question and judge_results nodes decide the tier.",
        ),
    )
    tier_decisions: Annotated[list[TierDecision], operator.add] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN, "The auto effort's decisions (tier, escalation, why)."),
    )
    effort_note: str | None = field(
        default=None,
        metadata=_meta(
            Scope.RUN, "Said once in the activity log when the default fell back to minimal."
        ),
    )
    source_params: dict[str, KnowledgeSourceParams] = field(
        default_factory=dict,
        metadata=_meta(Scope.RUN, "This turn's knowledge_source_params, by source name."),
    )
    needs_retrieval: bool = field(
        default=True,
        metadata=_meta(Scope.RUN, "False when the planner answers without retrieving."),
    )
    assistant_message: str = field(
        default="",
        metadata=_meta(Scope.RUN, "The planner's reply when no retrieval is needed."),
    )
    planned: list[Subquery] = field(
        default_factory=list,
        metadata=_meta(
            Scope.RUN,
            "Subqueries proposed for the first retrieval round (before source resolution).",
        ),
    )
    subqueries: Annotated[list[Subquery], operator.add] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN, "Every subquery sent, all rounds."),
    )
    hits: Annotated[list[RetrievedHit], merge_hits] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN, "Everything retrieved, all rounds."),
    )
    ranked: list[RankedHit] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN, "The current reranked selection, best first."),
    )
    drops: Drops = field(
        default_factory=dict,
        metadata=_meta(
            Scope.RUN,
            "Documents the latest rerank dropped (threshold, maxOutputDocuments), by search "
            "record key and reason; the response warns about them.",
        ),
    )
    evidence: EvidenceAssessment | None = field(
        default=None,
        metadata=_meta(Scope.RUN, "The latest evidence assessment (medium effort)."),
    )
    grounded_ref_ids: list[int] = field(
        default_factory=list,
        metadata=_meta(
            Scope.RUN,
            "ref_ids of the passages the response is built on (the references returned).",
        ),
    )
    iteration: int = field(
        default=0,
        metadata=_meta(Scope.RUN, "Follow-up rounds run so far."),
    )
    round_to_search: int | None = field(
        default=None,
        metadata=_meta(
            Scope.RUN,
            "The round whose subqueries the next fan-out searches; None when none is due.",
        ),
    )
    activity_log: Annotated[list[AnyActivity], operator.add] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN, "Activity entries of every step, in completion order."),
    )


def scope_of(name: str) -> Scope:
    """The declared scope of the state field ``name``.

    Raises:
        KeyError: ``name`` is not a field of :class:`RetrievalState`.
    """
    return _SCOPES[name]


def run_reset() -> dict[str, Any]:
    """The update that resets every ``run`` field to its schema default.

    Reduced channels get :class:`~langgraph.types.Overwrite`, so their reducer does not
    append the default to the previous turn's value.
    """
    return {
        name: (Overwrite(factory()) if reduced else factory())
        for name, factory, reduced in _RUN_DEFAULTS
    }


def described(schema: type) -> type[Any]:
    """``schema`` (input, output or :class:`Context`) as a described TypedDict.

    The graph publishes this as its input/output JSON schema: what LangGraph Studio's input
    form and the server's ``/assistants/{id}/schemas`` show. LangGraph derives that schema
    from a dataclass by channel type alone (the fields' descriptions are lost); from a
    TypedDict it keeps each field's ``Field(description=..., default=...)``. Each field's
    reducer or channel stays the last ``Annotated`` item, where LangGraph looks for it, so
    the channels are the same as the dataclass's, and so is what a run reads and returns.
    """
    hints = get_type_hints(schema, include_extras=True)
    items: dict[str, Any] = {}
    for spec in fields(schema):
        bounds = {k: spec.metadata[k] for k in ("ge", "le") if k in spec.metadata}
        hint = hints[spec.name]
        words = _with_words(hint, bounds)
        if words is not None:  # the bounds go on the number, not on the words beside it
            hint, bounds = words, {}
        info = Field(
            default=_default_factory(spec)(), description=spec.metadata["description"], **bounds
        )
        if get_origin(hint) is Annotated:
            base, *extras = get_args(hint)
            items[spec.name] = Annotated.__class_getitem__((base, info, *extras))
        else:
            items[spec.name] = Annotated[hint, info]
    # the functional form, with fields computed from the dataclass (mypy wants literals)
    typed: type[Any] = TypedDict(schema.__name__, items, total=False)  # type: ignore[misc]
    typed.__doc__ = schema.__doc__
    return typed


def _with_words(hint: Any, bounds: dict[str, Any]) -> Any:
    """``float | Literal["default"] | None`` with ``bounds`` on ``float`` (``None``: not such)."""
    if not bounds or get_origin(hint) not in (Union, types.UnionType):
        return None
    args = get_args(hint)
    typed = [a for a in args if a is not type(None) and get_origin(a) is not Literal]
    if len(typed) != 1 or len(typed) == len([a for a in args if a is not type(None)]):
        return None
    bounded = tuple(Annotated[a, Field(**bounds)] if a is typed[0] else a for a in args)
    return Union.__getitem__(bounded)


def _default_factory(spec: Any) -> Any:
    if spec.default_factory is not MISSING:
        return spec.default_factory
    value = spec.default
    return lambda: value


def _is_reduced(annotation: Any) -> bool:
    """Whether an ``Annotated`` state type carries a reducer (a function, not a channel)."""
    metadata = getattr(annotation, "__metadata__", ())
    return any(callable(m) and not isinstance(m, type) for m in metadata)


def _declared_scope(spec: Any) -> Scope:
    scope = spec.metadata.get("scope")
    if not isinstance(scope, Scope):
        raise TypeError(f"state field {spec.name!r} must declare its Scope in its metadata")
    return scope


_HINTS = get_type_hints(RetrievalState, include_extras=True)
_SCOPES: dict[str, Scope] = {f.name: _declared_scope(f) for f in fields(RetrievalState)}
_RUN_DEFAULTS = [
    (f.name, _default_factory(f), _is_reduced(_HINTS[f.name]))
    for f in fields(RetrievalState)
    if _SCOPES[f.name] is Scope.RUN
]
