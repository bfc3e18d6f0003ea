"""Chat completions in and out: OpenAI's request and response shapes, and the retrieve behind.

A chat completion runs the knowledge base named by ``model``: its ``messages`` become the
retrieve request's conversation (``system`` and ``developer`` as system turns; tool messages
and assistant turns without text are left out), ``reasoning_effort`` its effort (``minimal``,
``low``, ``medium`` or ``auto``). The knowledge base writes an answer (``answerSynthesis``,
its text keeping the ``[ref_id:N]`` markers) when it has a chat model for it, and otherwise
returns its passages, saying plainly that no answer was written. The references, activity
and status ride in the extension field :data:`EXTENSION` of the completion (of the last
chunk, when streaming); the same field in a request carries retrieve-request fields
(``knowledgeSourceParams``, ``outputMode``, ``maxOutputSize``...).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentic_retrieval.context import Context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.vocabulary import REQUESTED_EFFORTS
from agentic_retrieval.kb.definitions import MAX_NAME_CHARS
from agentic_retrieval.server.openai_errors import OpenAIError
from agentic_retrieval.wire.models import RetrieveResponse
from agentic_retrieval.wire.summary import failed_sources, passages_text

EXTENSION = "x_agentic_retrieval"
"""The extension field: in a response, ``{knowledgeBase, outputMode, statusCode, references,
activity}`` (plus ``answer`` when the streamed text differs from the checked answer); in a
request, retrieve-request fields in their wire (camelCase) names."""

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_RESERVED = ("messages", "intents")
"""Request-extension fields the chat request itself sets."""


class ContentPart(BaseModel):
    """One part of a message's content (only ``text`` parts are read)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(max_length=64)
    text: str | None = Field(default=None, max_length=200_000)


class ChatMessage(BaseModel):
    """One message of the conversation."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: (
        Annotated[str, Field(max_length=200_000)]
        | Annotated[list[ContentPart], Field(max_length=100)]
        | None
    ) = None

    @property
    def text(self) -> str:
        """The message's text (its text parts joined by newlines)."""
        if isinstance(self.content, str) or self.content is None:
            return self.content or ""
        return "\n".join(p.text for p in self.content if p.type == "text" and p.text)


class StreamOptions(BaseModel):
    """``stream_options``."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions`` (fields it does not use are accepted)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=MAX_NAME_CHARS)  # a knowledge base's name
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    reasoning_effort: str | None = Field(default=None, max_length=32)  # echoed when unknown
    response_format: dict[str, Any] | None = None
    tool_choice: Any = None
    extension: dict[str, Any] | None = Field(default=None, alias="x_agentic_retrieval")


def parse_chat_request(body: dict[str, Any]) -> ChatCompletionRequest:
    """Validate a chat completion request.

    Raises:
        OpenAIError: 400 naming the first invalid field as ``param``.
    """
    try:
        chat = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"] if _is_field(p))
        raise OpenAIError(
            400, f"{param}: {first['msg']}", code="invalid_value", param=param or None
        ) from None
    _refuse_what_cannot_be_honoured(chat)
    return chat


_TYPE_TAGS = frozenset({"str", "int", "bool", "float", "list", "dict", "none"})


def _is_field(part: str | int) -> bool:
    """Whether a part of a validation error's location names a field or an index.

    Pydantic adds the union member it tried (``constrained-str``), which no client sent.
    """
    if isinstance(part, int):
        return True
    return re.fullmatch(r"[a-z_]+", part) is not None and part not in _TYPE_TAGS


def _refuse_what_cannot_be_honoured(chat: ChatCompletionRequest) -> None:
    """Options that change what the answer must be, which a knowledge base cannot give."""
    if chat.n not in (None, 1):
        raise OpenAIError(400, "n: only one choice is returned; send n=1.", param="n")
    kind = (chat.response_format or {}).get("type")
    if kind not in (None, "text"):
        raise OpenAIError(
            400,
            "response_format: only the type 'text' is supported; the answer is text citing "
            "[ref_id:N] (its references are in the response's x_agentic_retrieval field).",
            param="response_format",
        )
    if chat.tool_choice not in (None, "auto", "none"):
        raise OpenAIError(
            400,
            "tool_choice: this endpoint answers from its knowledge base and never calls "
            "tools; leave tool_choice out (or 'auto').",
            param="tool_choice",
        )
    if chat.reasoning_effort is not None and chat.reasoning_effort not in REQUESTED_EFFORTS:
        raise OpenAIError(
            400,
            f"reasoning_effort: '{chat.reasoning_effort}' is not supported; use one of "
            f"{', '.join(REQUESTED_EFFORTS)} (the retrieval's effort: minimal uses no model).",
            param="reasoning_effort",
        )
    reserved = [k for k in _RESERVED if k in (chat.extension or {})]
    if reserved:
        raise OpenAIError(
            400,
            f"{EXTENSION}.{reserved[0]}: set by the chat request itself (send 'messages').",
            param=f"{EXTENSION}.{reserved[0]}",
        )


def retrieve_request(
    chat: ChatCompletionRequest, defaults: Context, bindings: Bindings
) -> dict[str, Any]:
    """The retrieve request (wire JSON) a chat completion runs.

    ``answerSynthesis`` when the knowledge base has a model to write the answer and its
    effort is not ``minimal``; ``extractiveData`` otherwise, or as the extension field says.

    Raises:
        OpenAIError: 400 when the conversation has no user text.
    """
    messages = [
        {"role": _ROLES[m.role], "content": [{"type": "text", "text": m.text}]}
        for m in chat.messages
        if m.role in _ROLES and m.text.strip()
    ]
    if not any(m["role"] == "user" for m in messages):
        raise OpenAIError(
            400, "messages: the conversation needs a user message with text.", param="messages"
        )
    request: dict[str, Any] = {"messages": messages}
    if chat.reasoning_effort:
        request["retrievalReasoningEffort"] = {"kind": chat.reasoning_effort}
    request.update(chat.extension or {})
    if "outputMode" not in request:
        request["outputMode"] = (
            "answerSynthesis" if writes_answers(request, defaults, bindings) else "extractiveData"
        )
    return request


def writes_answers(request: dict[str, Any], defaults: Context, bindings: Bindings) -> bool:
    """Whether a run of ``request`` can write an answer (a model for it, effort not minimal)."""
    effort = request.get("retrievalReasoningEffort")
    kind = effort.get("kind") if isinstance(effort, dict) else effort
    if (kind or defaults.reasoning_effort) == "minimal":
        return False
    return bindings.models.is_configured("answer", defaults)


def message_content(
    response: RetrieveResponse, knowledge_base: str, output_mode: str, has_model: bool
) -> str:
    """What the assistant message says: the answer, or the passages said to be passages.

    A partial response ends with a note naming the sources that failed.
    """
    if output_mode == "answerSynthesis":
        text = response.text
    elif not response.references:
        text = f"The knowledge base '{knowledge_base}' found nothing for this question."
    else:
        why = (
            f"No chat model is configured for the knowledge base '{knowledge_base}', so these "
            "are the passages it found, not a written answer:"
            if not has_model
            else f"The passages the knowledge base '{knowledge_base}' found (extractive data, "
            "not a written answer):"
        )
        text = f"{why}\n\n{passages_text(response.text)}"
    notes = [f"the source '{n}' failed ({m})" for n, m in failed_sources(response)]
    if notes:
        text += "\n\n(Note: " + "; ".join(notes) + ", so this comes from the others only.)"
    return text


def extension(response: RetrieveResponse, knowledge_base: str, output_mode: str) -> dict[str, Any]:
    """The extension field of a completion: references, activity and status."""
    wire = response.to_wire()
    return {
        "knowledgeBase": knowledge_base,
        "outputMode": output_mode,
        "statusCode": response.status_code,
        "references": wire.get("references") or [],
        "activity": wire.get("activity") or [],
    }


def usage(response: RetrieveResponse) -> dict[str, int]:
    """Token usage summed over the run's model calls (from its activity records)."""
    prompt = completion = 0
    for record in response.activity or []:
        if record.type == "agenticReasoning":  # a total of the others, not a call of its own
            continue
        extra = record.model_extra or {}
        prompt += int(extra.get("inputTokens") or 0)
        completion += int(extra.get("outputTokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class Completion:
    """The identity of one completion, shared by its chunks: id, creation time, model."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model

    def whole(
        self, content: str, extension_field: dict[str, Any], usage_counts: dict[str, int]
    ) -> dict[str, Any]:
        """The ``chat.completion`` object."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": [],
        }
        return {
            **self._base("chat.completion"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            ],
            "usage": usage_counts,
            EXTENSION: extension_field,
        }

    def chunk(
        self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        """One ``chat.completion.chunk``."""
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return {**self._base("chat.completion.chunk"), "choices": [choice], **extra}

    def usage_chunk(self, usage_counts: dict[str, int]) -> dict[str, Any]:
        """The last chunk of a stream that asked for usage (no choices)."""
        return {**self._base("chat.completion.chunk"), "choices": [], "usage": usage_counts}

    def _base(self, kind: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
        }
