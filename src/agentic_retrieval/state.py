"""The graph state: what a caller passes in, what comes out, and the scratch in between.

The schemas are dataclasses, so every field has its default on the schema and nodes read
``state.ranked`` rather than restating defaults. The values they hold are the typed records of
:mod:`agentic_retrieval.graph.records`. Each field declares its *scope* in its metadata, and the
scopes decide what a turn on a checkpointed thread (``thread_id``) keeps:

- ``conversation`` (``messages``): accumulates across turns.
- ``turn``: a per-request input (``intents``, ``knowledge_source_params``). Its channel is a
  LangGraph ``UntrackedValue``: it lasts for the run that received it and is never written
  to a checkpoint, so a later turn that does not send it does not inherit it. The first node
  records what later nodes need from it in ``run`` fields.
- ``run``: written by the nodes. The first node of every turn resets all of them to their
  defaults (:func:`agentic_retrieval.graph.schema.run_reset`, derived from this schema), so no
  hit, flag or time limit of one turn leaks into the next.

Each field is documented by the docstring under it; ``_documented`` copies it into the field's
metadata as its ``description``, which is what Studio shows for the input and output.

Every node returns an :class:`Update`: a partial state, typed field by field.

Everything here is serialisable (pydantic models, dicts, strings), so checkpointers and
LangGraph Studio work; live clients never enter the state. Channels that parallel search
branches write to have reducers.
"""

from __future__ import annotations

import ast
import inspect
import operator
import textwrap
from dataclasses import dataclass, field, fields
from enum import StrEnum
from itertools import pairwise
from types import MappingProxyType
from typing import Annotated, Any, TypeVar

from langchain_core.messages import AnyMessage
from langgraph.channels import UntrackedValue
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from agentic_retrieval.graph.records import (
    AnyActivity,
    Drops,
    RankedHit,
    RetrievedHit,
    SourceParams,
    SourceParamsInput,
    Subquery,
    TierDecision,
)
from agentic_retrieval.graph.vocabulary import Effort, Judging, Planner, RequestedEffort
from agentic_retrieval.llm.schemas import EvidenceAssessment

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


def _meta(scope: Scope) -> dict[str, Any]:
    return {"scope": scope}


Schema = TypeVar("Schema", bound=type[Any])


def _documented(schema: Schema) -> Schema:
    """Copy each field's attribute docstring into its metadata as its ``description``.

    The docstring under a field is where a reader looks; the metadata is where
    :func:`~agentic_retrieval.graph.schema.described` finds what Studio shows (LangGraph
    publishes no docstring of a dataclass field). Whitespace is collapsed, so a docstring
    wrapped over lines is one sentence, as before. Without the source (a frozen application)
    the descriptions are empty.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(schema)))
    except (OSError, TypeError):
        body: list[ast.stmt] = []
    else:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    docs = {
        first.target.id: " ".join(second.value.value.split())
        for first, second in pairwise(body)
        if isinstance(first, ast.AnnAssign)
        and isinstance(first.target, ast.Name)
        and isinstance(second, ast.Expr)
        and isinstance(second.value, ast.Constant)
        and isinstance(second.value.value, str)
    }
    declared_here = vars(schema).get("__annotations__", {})
    for spec in fields(schema):
        if spec.name not in declared_here:  # an inherited field was described by its class
            continue
        if body and spec.name not in docs:
            raise TypeError(f"state field {spec.name!r} needs a docstring (Studio shows it)")
        spec.metadata = MappingProxyType({**spec.metadata, "description": docs.get(spec.name, "")})
    return schema


# --- reducers --------------------------------------------------------------------------------


def first_failure(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Keep the first ``failOnError`` failure written (parallel searches may both fail).

    An empty dict means no failure (a constructible default: LangGraph's reducer channel
    applies ``Overwrite`` only over a value it could construct).
    """
    return left or right


def merge_hits(left: list[RetrievedHit], right: list[RetrievedHit]) -> list[RetrievedHit]:
    """Append hits from parallel branches, dropping exact repeats of (source, key, subquery).

    A chunk a search found and a graph search hydrated for the same subquery is kept twice
    (the graph's index is part of the key): ``rerank`` then keeps it as the graph's evidence,
    which it could not if the reducer had already dropped whichever branch wrote second.

    Args:
        left: Hits already in the channel.
        right: Hits written by one or more branches in this step.

    Returns:
        The union, first occurrence kept, order stable.
    """
    seen = {(h.source, h.doc_key, h.subquery_id, h.graph_index) for h in left}
    merged = list(left)
    for hit in right:
        key = (hit.source, hit.doc_key, hit.subquery_id, hit.graph_index)
        if key not in seen:
            seen.add(key)
            merged.append(hit)
    return merged


# --- schemas ---------------------------------------------------------------------------------


@_documented
@dataclass(kw_only=True)
class InputState:
    """What a caller passes: the conversation and/or explicit intents, per-source overrides."""

    messages: Annotated[list[AnyMessage], add_messages] = field(
        default_factory=list,
        metadata=_meta(Scope.CONVERSATION),
    )
    """The conversation; the last user message is the question."""
    intents: TurnInput[list[str]] = field(default_factory=list, metadata=_meta(Scope.TURN))
    """Search strings to run as-is (no planning): the retrieve API's intents[].search."""
    knowledge_source_params: TurnInput[list[SourceParamsInput]] = field(
        default_factory=list,
        metadata=_meta(Scope.TURN),
    )
    """Per-source overrides, wire shape (knowledgeSourceName, filterAddOn, includeReferences,
    includeReferenceSourceData, alwaysQuerySource, rerankerThreshold)."""


@_documented
@dataclass(kw_only=True)
class OutputState:
    """What a caller gets back."""

    messages: Annotated[list[AnyMessage], add_messages] = field(
        default_factory=list,
        metadata=_meta(Scope.CONVERSATION),
    )
    """The conversation with the assistant's reply (grounding string or answer) appended."""
    response: str = field(default="", metadata=_meta(Scope.RUN))
    """The grounding JSON string (extractiveData) or the Markdown answer (answerSynthesis)."""
    references: list[dict[str, Any]] = field(default_factory=list, metadata=_meta(Scope.RUN))
    """Wire references: type, id (ref_id), activitySource, docKey, rerankerScore, sourceData."""
    activity: list[dict[str, Any]] = field(default_factory=list, metadata=_meta(Scope.RUN))
    """Wire activity records in start order, ids 0..n."""
    passage_count: int = field(default=0, metadata=_meta(Scope.RUN))
    """Passages the response is built on (0 with a timeout means nothing was ready: 408)."""
    partial: Annotated[bool, operator.or_] = field(default=False, metadata=_meta(Scope.RUN))
    """True when a knowledge source failed (HTTP 206)."""
    timed_out: Annotated[bool, operator.or_] = field(default=False, metadata=_meta(Scope.RUN))
    """True when the run hit max_runtime_seconds."""
    failure: Annotated[dict[str, Any], first_failure] = field(
        default_factory=dict,
        metadata=_meta(Scope.RUN),
    )
    """A failed source whose failOnError is set (source, code, message): the request fails with this
    error instead of returning partial results."""


@_documented
@dataclass(kw_only=True)
class RetrievalState(InputState, OutputState):
    """The internal state: input, output and the scratch the nodes share."""

    started_at: float | None = field(default=None, metadata=_meta(Scope.RUN))
    """time.time() when the run started; with max_runtime_seconds gives the deadline."""
    question: str = field(default="", metadata=_meta(Scope.RUN))
    """The question this turn asks: the last user message, else the intents joined."""
    planned_by: Planner | None = field(default=None, metadata=_meta(Scope.RUN))
    """Who planned this turn: caller (intents, no model call), model, or question (minimal effort:
    the question as asked)."""
    effort: Effort | None = field(default=None, metadata=_meta(Scope.RUN))
    """The tier this turn runs at (choose_effort): the requested one, else low with a planning
    model, else minimal; auto starts at minimal and raises it."""
    requested_effort: RequestedEffort | None = field(default=None, metadata=_meta(Scope.RUN))
    """The effort the caller asked for; None: the default."""
    tier_decisions: Annotated[list[TierDecision], operator.add] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN),
    )
    """The auto effort's decisions (tier, escalation, why)."""
    effort_note: str | None = field(default=None, metadata=_meta(Scope.RUN))
    """Said once in the activity log when the default fell back to minimal."""
    source_params: SourceParams = field(default_factory=dict, metadata=_meta(Scope.RUN))
    """This turn's knowledge_source_params, by source name."""
    assistant_message: str = field(default="", metadata=_meta(Scope.RUN))
    """The planner's reply when it found no retrieval needed (else empty)."""
    planned: list[Subquery] = field(default_factory=list, metadata=_meta(Scope.RUN))
    """Subqueries proposed for the first retrieval round (before source resolution)."""
    subqueries: Annotated[list[Subquery], operator.add] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN),
    )
    """Every subquery sent, all rounds."""
    hits: Annotated[list[RetrievedHit], merge_hits] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN),
    )
    """Everything retrieved, all rounds."""
    ranked: list[RankedHit] = field(default_factory=list, metadata=_meta(Scope.RUN))
    """The current reranked selection, best first."""
    drops: Drops = field(default_factory=dict, metadata=_meta(Scope.RUN))
    """Documents the latest rerank dropped (threshold, maxOutputDocuments), by search record key and
    reason; the response warns about them."""
    evidence: EvidenceAssessment | None = field(default=None, metadata=_meta(Scope.RUN))
    """The latest evidence assessment (medium effort)."""
    grounded_ref_ids: list[int] = field(default_factory=list, metadata=_meta(Scope.RUN))
    """ref_ids of the passages the response is built on (the references returned)."""
    iteration: int = field(default=0, metadata=_meta(Scope.RUN))
    """Follow-up rounds run so far."""
    judging: Judging | None = field(default=None, metadata=_meta(Scope.RUN))
    """How each reranked round is judged: 'evidence' (the evidence model: medium effort, a question
    the model planned), 'signals' (the auto effort's result signals), or None (not judged: straight
    to the output). Written when the turn begins and when auto escalates to medium."""
    activity_log: Annotated[list[AnyActivity], operator.add] = field(
        default_factory=list,
        metadata=_meta(Scope.RUN),
    )
    """Activity entries of every step, in completion order."""


class Update(TypedDict, total=False):
    """What a node returns: some of :class:`RetrievalState`'s fields (a partial state).

    The ``turn`` inputs are not here: nodes never write them. The reduced fields take what is
    added (``activity_log: [record]`` appends one record).
    """

    messages: list[AnyMessage]
    response: str
    references: list[dict[str, Any]]
    activity: list[dict[str, Any]]
    passage_count: int
    partial: bool
    timed_out: bool
    failure: dict[str, Any]
    started_at: float | None
    question: str
    planned_by: Planner | None
    effort: Effort | None
    requested_effort: RequestedEffort | None
    tier_decisions: list[TierDecision]
    effort_note: str | None
    source_params: SourceParams
    assistant_message: str
    planned: list[Subquery]
    subqueries: list[Subquery]
    hits: list[RetrievedHit]
    ranked: list[RankedHit]
    drops: Drops
    evidence: EvidenceAssessment | None
    grounded_ref_ids: list[int]
    iteration: int
    judging: Judging | None
    activity_log: list[AnyActivity]


def scope_of(name: str) -> Scope:
    """The declared scope of the state field ``name``.

    Raises:
        KeyError: ``name`` is not a field of :class:`RetrievalState`.
    """
    return _SCOPES[name]


def _declared_scope(spec: Any) -> Scope:
    scope = spec.metadata.get("scope")
    if not isinstance(scope, Scope):
        raise TypeError(f"state field {spec.name!r} must declare its Scope in its metadata")
    return scope


_SCOPES: dict[str, Scope] = {f.name: _declared_scope(f) for f in fields(RetrievalState)}
