"""Wire models of the knowledge-base ``retrieve`` API (request, response, errors).

Field names and shapes follow ``azure.search.documents.knowledgebases.models`` in
``azure-search-documents==12.0.0`` (api-version ``2026-04-01``), with camelCase aliases, and
accept the preview fields clients still send (``messages``, ``retrievalReasoningEffort``,
``outputMode``, ``maxOutputSize``, ``alwaysQuerySource``...). Python code uses snake_case
names; ``model_dump(by_alias=True)`` / :meth:`to_wire` gives the JSON a client expects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from agentic_retrieval.graph.records import KnowledgeSourceParams
from agentic_retrieval.graph.vocabulary import OutputMode, RequestedEffort, ResultsProcessing

SUPPORTED_API_VERSIONS = (
    "2026-04-01",
    "2026-10-01",
    "2026-11-01-preview",
    "2026-08-01-preview",
    "2026-05-01-preview",
    "2025-11-01-preview",
    "2025-08-01-preview",
    "2025-05-01-preview",
)
"""api-versions the HTTP server accepts: the GA versions first, then the previews."""


class WireModel(BaseModel):
    """Base for wire models: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_wire(self) -> dict[str, Any]:
        """Return the JSON-ready dict a client expects (camelCase, no unset nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- request -------------------------------------------------------------------------------


class ImageContent(WireModel):
    """An image referenced by URL."""

    url: str


class MessageContent(WireModel):
    """One content part of a message: ``text`` or ``image``."""

    type: Literal["text", "image"] = "text"
    text: str | None = Field(default=None, max_length=200_000)
    image: ImageContent | None = None

    @model_validator(mode="after")
    def _text_or_image(self) -> MessageContent:
        if self.type == "text" and self.text is None:
            raise ValueError("a content part of type 'text' needs 'text'")
        if self.type == "image" and self.image is None:
            raise ValueError("a content part of type 'image' needs 'image'")
        return self


class Message(WireModel):
    """A chat message (``KnowledgeBaseMessage``)."""

    role: str | None = "user"
    content: list[MessageContent]

    @property
    def text(self) -> str:
        """The message's text parts joined by newlines."""
        return "\n".join(part.text for part in self.content if part.text)


class SemanticIntent(WireModel):
    """A query to run without model query planning (``KnowledgeRetrievalSemanticIntent``)."""

    type: Literal["semantic"] = "semantic"
    search: str = Field(min_length=1, max_length=10_000)

    @field_validator("search")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


class ReasoningEffort(WireModel):
    """``retrievalReasoningEffort``: how much LLM work the retrieval may do."""

    kind: RequestedEffort = "low"


class RetrieveRequest(WireModel):
    """The body of ``POST /knowledgebases/{name}/retrieve``."""

    messages: list[Message] | None = Field(default=None, max_length=1000)
    intents: list[SemanticIntent] | None = Field(default=None, max_length=10)
    retrieval_reasoning_effort: ReasoningEffort | None = None
    output_mode: OutputMode | None = None
    include_activity: bool | None = None
    max_runtime_in_seconds: int | None = Field(default=None, ge=1, le=300)
    max_output_size: int | None = Field(default=None, ge=1, le=10_000_000)
    max_output_size_in_tokens: int | None = Field(default=None, ge=1, le=2_500_000)
    max_output_documents: int | None = Field(default=None, ge=1, le=1000)
    knowledge_source_params: list[KnowledgeSourceParams] | None = Field(
        default=None, max_length=100
    )

    @model_validator(mode="before")
    @classmethod
    def _preview_target_index_params(cls, data: Any) -> Any:
        # 2025-05-01-preview named per-source parameters targetIndexParams[{indexName, ...}]
        if not isinstance(data, dict) or "targetIndexParams" not in data:
            return data
        data = dict(data)
        targets = data.pop("targetIndexParams") or []
        if not isinstance(targets, list) or not all(isinstance(t, dict) for t in targets):
            raise ValueError("targetIndexParams must be a list of objects")
        converted = [_from_target_index(target) for target in targets]
        data["knowledgeSourceParams"] = list(data.get("knowledgeSourceParams") or []) + converted
        return data

    @field_validator("retrieval_reasoning_effort", mode="before")
    @classmethod
    def _effort_from_string(cls, value: Any) -> Any:
        # Some clients send "low" rather than {"kind": "low"}.
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_consistency(self) -> RetrieveRequest:
        has_text = any(m.text.strip() for m in self.messages or [])
        if not has_text and not self.intents:
            raise ValueError(
                "the request needs 'messages' with at least one text part or 'intents'"
            )
        if self.effort == "minimal" and self.output_mode == "answerSynthesis":
            raise ValueError(
                "'outputMode' answerSynthesis needs an LLM: 'retrievalReasoningEffort' "
                "minimal cannot be combined with it (use low or medium)"
            )
        names = [p.knowledge_source_name for p in self.knowledge_source_params or []]
        if len(names) != len(set(names)):
            raise ValueError("'knowledgeSourceParams' names a knowledge source twice")
        for params in self.knowledge_source_params or []:
            check_source_params(params)
        return self

    @property
    def effort(self) -> RequestedEffort | None:
        """The requested reasoning effort kind, if any."""
        effort = self.retrieval_reasoning_effort
        return effort.kind if effort else None


def check_source_params(
    params: KnowledgeSourceParams, stored: ResultsProcessing = "rerank"
) -> None:
    """Reject per-source settings that contradict each other.

    Args:
        params: One entry of ``knowledgeSourceParams``.
        stored: The source's own ``resultsProcessing`` (what applies when ``params`` is silent).

    Raises:
        ValueError: ``neverQuerySource`` with ``alwaysQuerySource``, or a
            ``rerankerThreshold`` for a source whose results are not reranked.
    """
    name = params.knowledge_source_name
    if params.never_query_source and params.always_query_source:
        raise ValueError(
            f"knowledgeSourceParams[{name}]: neverQuerySource cannot be combined with "
            "alwaysQuerySource on the same knowledge source"
        )
    processing = params.results_processing or stored
    if processing == "none" and params.reranker_threshold is not None:
        raise ValueError(
            f"knowledgeSourceParams[{name}]: rerankerThreshold cannot be combined with "
            "resultsProcessing 'none' (the source's results are not reranked)"
        )


def _from_target_index(target: dict[str, Any]) -> dict[str, Any]:
    """A 2025-05-01-preview ``targetIndexParams`` entry as ``knowledgeSourceParams``."""
    renames = {
        "indexName": "knowledgeSourceName",
        "IncludeReferenceSourceData": "includeReferenceSourceData",
    }
    converted: dict[str, Any] = {"kind": "searchIndex"}
    for key, value in target.items():
        converted[renames.get(key.strip(), key.strip())] = value
    return converted


# --- response ------------------------------------------------------------------------------


class ErrorDetail(WireModel):
    """An error (``KnowledgeBaseErrorDetail``), in activity records and HTTP error bodies."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    code: str | None = None
    message: str | None = None
    target: str | None = None
    details: list[ErrorDetail] | None = None


class ActivityRecord(WireModel):
    """One step of the run (``KnowledgeBaseActivityRecord`` and its subtypes).

    Type-specific fields (``inputTokens``, ``knowledgeSourceName``, ``count``...) are kept as
    extra fields, already in their camelCase wire names.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    type: str
    id: int
    elapsed_ms: int | None = None
    error: ErrorDetail | None = None


class Reference(WireModel):
    """One retrieved document cited by ``ref_id`` (``KnowledgeBaseReference`` subtypes)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    type: str
    id: str
    activity_source: int
    doc_key: str | None = None
    reranker_score: float | None = None
    source_data: dict[str, Any] | None = None


class ResponseMessage(WireModel):
    """The assistant message carrying the grounding string or the answer."""

    role: str = "assistant"
    content: list[MessageContent]


class RetrieveResponse(WireModel):
    """The body of a ``retrieve`` response (``KnowledgeBaseRetrievalResponse``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    response: list[ResponseMessage] = Field(default_factory=list)
    activity: list[ActivityRecord] | None = None
    references: list[Reference] = Field(default_factory=list)

    _partial: bool = PrivateAttr(default=False)
    _timed_out: bool = PrivateAttr(default=False)
    _has_results: bool | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _status_from_activity(self) -> RetrieveResponse:
        """Read the 206/408 back from the activity log, which the wire form carries.

        A response rebuilt from its JSON (a checkpoint, a cache, a tool artifact, a log) has
        no status of its own: a search record with an ``error`` (every search record names its
        ``<kind>Arguments``) made it partial, a ``runtimeLimit`` record timed it out. Errors
        of planning or grading (the run fell back and went on) leave it a 200, as the run did.
        Without an activity log (``includeActivity: false``) nothing can be read back.
        """
        for record in self.activity or ():
            if record.type == "runtimeLimit":
                self._timed_out = True
            elif record.error is not None and any(
                name.endswith("Arguments") for name in record.model_extra or {}
            ):
                self._partial = True
        return self

    @property
    def text(self) -> str:
        """The response text: the grounding JSON string or the synthesized answer."""
        parts = (part for message in self.response for part in message.content)
        return "\n".join(part.text for part in parts if part.text)

    @property
    def partial(self) -> bool:
        """True when a knowledge source failed and only the others' results are included."""
        return self._partial

    @property
    def timed_out(self) -> bool:
        """True when ``maxRuntimeInSeconds`` elapsed before the run finished."""
        return self._timed_out

    @property
    def status_code(self) -> int:
        """The HTTP status this response maps to: 200, 206 (partial) or 408 (nothing ready)."""
        has_results = bool(self.references) if self._has_results is None else self._has_results
        if self._timed_out and not has_results:
            return 408
        if self._partial or self._timed_out:
            return 206
        return 200


class ErrorResponse(WireModel):
    """The Azure error body: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorDetail


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming each invalid field by its wire (camelCase) path (at most five)."""
    parts = []
    for error in exc.errors()[:5]:
        location = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown property"
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)
