"""The retrieve event stream: Azure's server-sent events, built from a graph run's stream.

``Accept: text/event-stream`` on the retrieve route (2026-10-01 GA, 2026-08-01-preview), the
MCP tool's notifications and :meth:`KnowledgeBase.astream` all carry these events, in order:

1. ``retrieval.started``: ``{requestId, knowledgeBaseName, outputMode, reasoningEffort}``.
2. For each step as it happens: ``activity.started`` ``{id, type, startedAt,
   knowledgeSourceName?}``, then ``activity.completed``, the full record (the shape of the
   response's ``activity`` items). Ids are numbered as steps start; they are the ids the final
   response's records and references use.
3. ``answer.completed`` ``{messageIndex, message}`` (``answerSynthesis`` only), with the
   citations already checked.
4. ``references.completed``: the array of references.
5. ``response.completed`` ``{statusCode: 200 | 206, response}``, or ``error`` ``{error,
   activity}`` (the records completed before the failure) in its place.

Our extensions are off unless asked for (:data:`EXTENSIONS`): ``answer.delta``
``{messageIndex, delta, restart?}``, the answer's text as the model writes it (``restart``:
discard the text streamed so far, the model is writing it again), and ``progress``
``{step, ...}``, the nodes' own progress notes (``searching``, ``reranking``...).

The graph's stream (:mod:`agentic_retrieval.graph.events`) carries ``activity.started`` /
``activity.completed`` with a record key instead of an id (parallel searches cannot agree on
numbers); :class:`RetrieveEvents` numbers them as they arrive.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.utils.json import parse_partial_json

from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.graph.events import ACTIVITY_COMPLETED, ACTIVITY_STARTED
from agentic_retrieval.wire.models import RetrieveResponse

RETRIEVAL_STARTED = "retrieval.started"
ANSWER_COMPLETED = "answer.completed"
REFERENCES_COMPLETED = "references.completed"
RESPONSE_COMPLETED = "response.completed"
ERROR = "error"
ANSWER_DELTA = "answer.delta"
PROGRESS = "progress"

EXTENSIONS = frozenset({ANSWER_DELTA, PROGRESS})
"""Events beyond Azure's contract, sent only to callers who ask for them by name."""

ANSWER_NODE = "synthesize"
"""The node whose model call writes the answer (its tokens become ``answer.delta``)."""


class RetrieveEvent(TypedDict):
    """One event: its name and its JSON data (an SSE frame's ``event`` and ``data``)."""

    event: str
    data: Any


def extensions_from(names: Collection[str] | str | None) -> frozenset[str]:
    """The extensions a caller asked for (a collection, or a comma-separated header value).

    Raises:
        InvalidRequestError: An unknown name (the message lists the known ones).
    """
    if names is None:
        return frozenset()
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    chosen = frozenset(n for n in names if n)
    unknown = sorted(chosen - EXTENSIONS)
    if unknown:
        raise InvalidRequestError(
            f"unknown stream extension(s): {', '.join(unknown)}; "
            f"known: {', '.join(sorted(EXTENSIONS))}"
        )
    return chosen


@dataclass
class RetrieveEvents:
    """Turns one run's graph stream into the retrieve events.

    Args:
        knowledge_base: The knowledge base's name.
        output_mode: The run's effective output mode.
        reasoning_effort: The run's effective effort (``auto`` stays ``auto``).
        request_id: The id ``retrieval.started`` reports.
        include_activity: ``False``: no ``activity.*`` events (as no ``activity`` array).
        extensions: Extension events to send (see :data:`EXTENSIONS`).
    """

    knowledge_base: str
    output_mode: str
    reasoning_effort: str
    request_id: str
    include_activity: bool = True
    extensions: frozenset[str] = frozenset()
    ids: dict[str, int] = field(default_factory=dict)
    """Activity ids by record key, in the order the steps started."""
    activity: list[dict[str, Any]] = field(default_factory=list)
    """The completed records sent so far (what an ``error`` event carries)."""
    _deltas: _AnswerDeltas = field(default_factory=lambda: _AnswerDeltas())

    def started(self) -> RetrieveEvent:
        """``retrieval.started``."""
        return _event(
            RETRIEVAL_STARTED,
            {
                "requestId": self.request_id,
                "knowledgeBaseName": self.knowledge_base,
                "outputMode": self.output_mode,
                "reasoningEffort": {"kind": self.reasoning_effort},
            },
        )

    @property
    def wants_answer_deltas(self) -> bool:
        """Whether the run should stream its answer model's tokens (``messages`` mode)."""
        return ANSWER_DELTA in self.extensions and self.output_mode == "answerSynthesis"

    def on_custom(self, chunk: Mapping[str, Any]) -> list[RetrieveEvent]:
        """The events for one custom-stream item a node wrote."""
        name = chunk.get("event")
        if name == ACTIVITY_STARTED:
            return self._activity_started(chunk)
        if name == ACTIVITY_COMPLETED:
            return self._activity_completed(chunk)
        if PROGRESS in self.extensions and isinstance(name, str):
            return [
                _event(PROGRESS, {"step": name, **{k: v for k, v in chunk.items() if k != "event"}})
            ]
        return []

    def on_message(self, message: BaseMessage, metadata: Mapping[str, Any]) -> list[RetrieveEvent]:
        """The ``answer.delta`` events for one streamed model message (``messages`` mode)."""
        if not self.wants_answer_deltas or metadata.get("langgraph_node") != ANSWER_NODE:
            return []
        delta = self._deltas.feed(message)
        if delta is None:
            return []
        text, restart = delta
        data: dict[str, Any] = {"messageIndex": 0, "delta": text}
        if restart:
            data["restart"] = True
        return [_event(ANSWER_DELTA, data)]

    def finished(self, response: RetrieveResponse) -> list[RetrieveEvent]:
        """The closing events for a finished run (an ``error`` for a 408)."""
        wire = response.to_wire()
        if response.status_code == 408:
            limits = [r for r in wire.get("activity") or [] if r.get("type") == "runtimeLimit"]
            error = limits[0]["error"] if limits and limits[0].get("error") else None
            return [self.failed(error or {"code": "Timeout", "message": "the run timed out"})]
        events = []
        if self.output_mode == "answerSynthesis" and wire.get("response"):
            events.append(
                _event(ANSWER_COMPLETED, {"messageIndex": 0, "message": wire["response"][0]})
            )
        events.append(_event(REFERENCES_COMPLETED, list(wire.get("references") or [])))
        events.append(
            _event(RESPONSE_COMPLETED, {"statusCode": response.status_code, "response": wire})
        )
        return events

    def failed(self, error: Mapping[str, Any]) -> RetrieveEvent:
        """The terminal ``error`` event: the error detail and the records completed so far."""
        data: dict[str, Any] = {"error": dict(error)}
        if self.include_activity:
            data["activity"] = list(self.activity)
        return _event(ERROR, data)

    def _activity_started(self, chunk: Mapping[str, Any]) -> list[RetrieveEvent]:
        key = str(chunk.get("key"))
        index = self.ids.setdefault(key, len(self.ids))
        if not self.include_activity:
            return []
        data = {"id": index, "type": chunk.get("type"), "startedAt": chunk.get("startedAt")}
        if chunk.get("knowledgeSourceName") is not None:
            data["knowledgeSourceName"] = chunk["knowledgeSourceName"]
        return [_event(ACTIVITY_STARTED, data)]

    def _activity_completed(self, chunk: Mapping[str, Any]) -> list[RetrieveEvent]:
        key = str(chunk.get("key"))
        index = self.ids.setdefault(key, len(self.ids))
        rendered = dict(chunk.get("record") or {})
        record = {"type": rendered.pop("type", None), "id": index, **rendered}
        self.activity.append(record)
        return [_event(ACTIVITY_COMPLETED, record)] if self.include_activity else []


@dataclass
class _AnswerDeltas:
    """The answer text streamed so far, from the answer model's partial structured output.

    The answer model returns ``SynthesizedAnswer`` as a tool call (or JSON text): its
    ``answer`` field is read from the partial JSON as it grows, and each event carries what is
    new. A new model call (a retry) restarts the text.
    """

    sent: str = ""
    message_id: str | None = None
    buffer: str = ""
    restart: bool = False
    """Text was sent for an earlier model call: the next delta starts the text again."""

    def feed(self, message: BaseMessage) -> tuple[str, bool] | None:
        if not isinstance(message, AIMessage):
            return None
        if message.id != self.message_id:
            self.restart = self.restart or bool(self.sent)
            self.message_id, self.buffer, self.sent = message.id, "", ""
        text = self._answer_text(message)
        if text is None:
            return None
        if text.startswith(self.sent):
            delta = text[len(self.sent) :]
        else:  # the partial parse changed its mind about text already sent
            delta, self.restart = text, True
        self.sent = text
        if not delta and not self.restart:
            return None
        restart, self.restart = self.restart, False
        return delta, restart

    def _answer_text(self, message: AIMessage) -> str | None:
        if isinstance(message, AIMessageChunk) and message.tool_call_chunks:
            self.buffer += "".join(c.get("args") or "" for c in message.tool_call_chunks)
            parsed = parse_partial_json(self.buffer) if self.buffer else None
        elif message.tool_calls:  # a whole message (a model that does not stream)
            parsed = message.tool_calls[0].get("args")
        elif isinstance(message.content, str) and message.content:  # JSON mode
            self.buffer += message.content if isinstance(message, AIMessageChunk) else ""
            parsed = parse_partial_json(self.buffer or message.content)
        else:
            return None
        answer = parsed.get("answer") if isinstance(parsed, dict) else None
        return answer if isinstance(answer, str) else None


def completed_response(data: Mapping[str, Any]) -> RetrieveResponse:
    """The response a ``response.completed`` event carries, keeping its 206.

    The wire shape has no status: the event's ``statusCode`` is carried over so that a
    partial response is not read as a 200.
    """
    response = RetrieveResponse.model_validate(data["response"])
    response._partial = data["statusCode"] == 206
    return response


def _event(name: str, data: Any) -> RetrieveEvent:
    return {"event": name, "data": data}
