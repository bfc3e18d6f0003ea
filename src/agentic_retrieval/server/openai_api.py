"""The OpenAI-compatible API: ``GET /v1/models`` and ``POST /v1/chat/completions``.

Clients that speak only OpenAI's chat API (chat UIs, IDE assistants, proxies, the ``openai``
SDK, ``ChatOpenAI(base_url=...)``) use a knowledge base as a model: ``/v1/models`` lists the
knowledge bases the key may use, and a chat completion with ``model`` set to one runs its
retrieve (see :mod:`agentic_retrieval.server.openai_chat` for the mapping). Keys, scopes, the
identity header, limits and cancellation are the retrieve route's: the key in ``Authorization:
Bearer`` (as OpenAI clients send it) or ``api-key``; a scoped query key sees only its
knowledge bases, and the others do not exist for it (404 ``model_not_found``, as OpenAI
answers for a model a key has no access to). Errors are in OpenAI's shape
(:mod:`agentic_retrieval.server.openai_errors`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import aclosing
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentic_retrieval.context import Context
from agentic_retrieval.errors import AgenticRetrievalError, ModelRequiredError
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.permissions import Identity
from agentic_retrieval.server.auth import (
    CHAT_BODY,
    UNAUTHORIZED_MESSAGE,
    AccessPolicy,
    ApiKeys,
    Grant,
    accepts_body,
)
from agentic_retrieval.server.errors import ApiError, api_error_for
from agentic_retrieval.server.openai_chat import (
    EXTENSION,
    ChatCompletionRequest,
    Completion,
    extension,
    message_content,
    parse_chat_request,
    retrieve_request,
    usage,
)
from agentic_retrieval.server.openai_errors import (
    NO_RETRY,
    OpenAIError,
    openai_error_body,
    snake,
)
from agentic_retrieval.server.requests import public_base_url, read_json_object
from agentic_retrieval.server.streaming import EVENT_STREAM, guarded_events
from agentic_retrieval.wire.events import (
    ANSWER_DELTA,
    ERROR,
    RESPONSE_COMPLETED,
    completed_response,
)
from agentic_retrieval.wire.models import RetrieveRequest, RetrieveResponse
from agentic_retrieval.wire.retrieve import prepare

logger = logging.getLogger(__name__)

OWNER = "agentic-retrieval"


def add_openai_routes(
    app: FastAPI, registry: Mapping[str, KnowledgeBase], keys: ApiKeys, policy: AccessPolicy
) -> None:
    """Serve ``/v1/models`` and ``/v1/chat/completions`` over ``registry``."""
    started = int(time.time())

    @app.get("/v1/models")
    async def list_models(request: Request) -> Any:
        async def answer() -> Any:
            grant = _grant(keys, request)
            names = [n for n in registry if _may_use(grant, n)]
            return {"object": "list", "data": [_model(n, started) for n in names]}

        return await _answered(request, answer())

    @app.get("/v1/models/{model:path}")
    async def get_model(model: str, request: Request) -> Any:
        async def answer() -> Any:
            grant = _grant(keys, request)
            if not _may_use(grant, model) or model not in registry:
                raise _model_not_found(model)
            return _model(model, started)

        return await _answered(request, answer())

    @app.post("/v1/chat/completions")
    @accepts_body(CHAT_BODY)
    async def chat_completions(request: Request) -> Any:
        return await _answered(request, _chat(request, registry, keys, policy))


async def _answered(request: Request, answer: Awaitable[Any]) -> Any:
    """``answer``'s result, or its error in OpenAI's shape (a bug: a 500 with a request id)."""
    try:
        return await answer
    except OpenAIError as exc:
        return exc.response()
    except Exception as exc:  # a bug: its text goes to the log, never to the client
        request_id = getattr(request.state, "request_id", None) or uuid.uuid4().hex
        logger.error("OpenAI-compatible request %s failed", request_id, exc_info=exc)
        return OpenAIError(
            500,
            f"An internal error occurred; quote request id {request_id} when reporting it.",
            code="internal_error",
            headers=NO_RETRY,
        ).response()


async def _chat(
    request: Request, registry: Mapping[str, KnowledgeBase], keys: ApiKeys, policy: AccessPolicy
) -> Any:
    grant = _grant(keys, request)
    try:
        body = await read_json_object(request)
    except ApiError as exc:
        raise OpenAIError.from_api_error(exc) from None
    chat = parse_chat_request(body)
    name = chat.model
    kb = registry.get(name) if _may_use(grant, name) else None
    if kb is None:
        raise _model_not_found(name)
    try:
        identity = await policy.identity(request.headers, knowledge_base=name)
    except ApiError as exc:
        raise OpenAIError.from_api_error(exc) from None
    # citation URLs point back at this service, as on the retrieve route
    defaults = dataclasses.replace(
        policy.run_defaults(name, kb.defaults), service_endpoint=public_base_url(request)
    )
    wire = retrieve_request(chat, defaults, kb.bindings)
    try:
        parsed, context = prepare(wire, defaults, kb.bindings)
    except AgenticRetrievalError as exc:
        raise _openai_error(exc, chat) from exc
    has_model = kb.bindings.models.is_configured("answer", context)
    run = _Run(kb, parsed, context, identity, Completion(name), has_model)
    if chat.stream:
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        return StreamingResponse(
            _frames(run, include_usage),
            media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-cache"},
        )
    try:
        response = await kb.aretrieve(parsed, identity=identity, defaults=context)
    except AgenticRetrievalError as exc:
        raise _openai_error(exc, chat) from exc
    if response.status_code == 408:
        raise OpenAIError(
            408,
            f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed before any "
            "result was ready.",
            code="timeout",
        )
    return JSONResponse(run.completion.whole(*run.finish(response)))


@dataclasses.dataclass
class _Run:
    """One chat completion's retrieve: what it runs and how its answer is told."""

    kb: KnowledgeBase
    request: RetrieveRequest
    context: Context
    identity: Identity | None
    completion: Completion
    has_model: bool

    @property
    def output_mode(self) -> str:
        return self.context.output_mode

    def finish(self, response: RetrieveResponse) -> tuple[str, dict[str, Any], dict[str, int]]:
        """The message content, the extension field and the usage of a finished run."""
        content = message_content(response, self.kb.name, self.output_mode, self.has_model)
        return content, extension(response, self.kb.name, self.output_mode), usage(response)


async def _frames(run: _Run, include_usage: bool) -> AsyncIterator[str]:
    """The completion as ``chat.completion.chunk`` frames, then ``data: [DONE]``.

    With ``answerSynthesis`` the answer's text is sent as the model writes it
    (``answer.delta``). Citations are checked only once it is written: when the checked
    answer is not the streamed text plus more (a citation was removed, or the model was asked
    again), the rest is not sent and the last chunk's extension carries the checked answer as
    ``answer``.
    """
    completion = run.completion
    yield _frame(completion.chunk({"role": "assistant", "content": ""}))
    streamed, diverged = "", False
    events = guarded_events(
        run.kb,
        run.request,
        run.context.max_runtime_seconds,
        identity=run.identity,
        defaults=run.context,
        extensions=_answer_deltas(run.output_mode),
    )
    async with aclosing(events):
        async for event in events:
            if event["event"] == ANSWER_DELTA and not diverged:
                if event["data"].get("restart") and streamed:
                    diverged = True  # sent text cannot be taken back
                    continue
                streamed += event["data"]["delta"]
                yield _frame(completion.chunk({"content": event["data"]["delta"]}))
            elif event["event"] == RESPONSE_COMPLETED:
                response = completed_response(event["data"])
                content, ext, counts = run.finish(response)
                if content.startswith(streamed) and not diverged:
                    if content[len(streamed) :]:
                        yield _frame(completion.chunk({"content": content[len(streamed) :]}))
                else:
                    ext["answer"] = content
                yield _frame(completion.chunk({}, "stop", **{EXTENSION: ext}))
                if include_usage:
                    yield _frame(completion.usage_chunk(counts))
            elif event["event"] == ERROR:
                yield _frame(_stream_error(event["data"]))
                return
    yield "data: [DONE]\n\n"


def _answer_deltas(output_mode: str) -> frozenset[str]:
    """The answer's text as it is written (``answer.delta``), when there is an answer."""
    return frozenset({ANSWER_DELTA}) if output_mode == "answerSynthesis" else frozenset()


def _frame(data: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


_STREAM_STATUS = {"Timeout": 408, "RequestTimeout": 408, "KnowledgeSourceFailed": 424}


def _stream_error(data: Mapping[str, Any]) -> dict[str, Any]:
    """An ``error`` event (Azure's error in its data) as OpenAI's stream error frame."""
    error = data.get("error") or {}
    code = str(error.get("code") or "InternalServerError")
    status = _STREAM_STATUS.get(code, 500 if code == "InternalServerError" else 400)
    return openai_error_body(
        status, str(error.get("message") or "the run failed"), code=snake(code)
    )


def _grant(keys: ApiKeys, request: Request) -> Grant:
    """What the request's key allows (the server's guard has already refused a bad key)."""
    grant = keys.grant_of(request.headers)
    if grant is None:
        raise OpenAIError(401, UNAUTHORIZED_MESSAGE, code="invalid_api_key")
    return grant


def _may_use(grant: Grant, name: str) -> bool:
    return grant.knowledge_bases is None or name in grant.knowledge_bases


def _model(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


def _model_not_found(name: str) -> OpenAIError:
    return OpenAIError(
        404,
        f"The model '{name}' does not exist or you do not have access to it: models are "
        "this service's knowledge bases (GET /v1/models lists yours).",
        code="model_not_found",
        param="model",
    )


def _openai_error(exc: AgenticRetrievalError, chat: ChatCompletionRequest) -> OpenAIError:
    """A library error in OpenAI's terms, naming the chat request's field where it can."""
    if isinstance(exc, ModelRequiredError):
        return _model_required(exc, chat)
    api_error = api_error_for(exc)
    if api_error is None:
        raise exc  # the service's problem: answered as a 500 by the route
    return OpenAIError.from_api_error(api_error, param=EXTENSION if chat.extension else None)


def _model_required(exc: ModelRequiredError, chat: ChatCompletionRequest) -> OpenAIError:
    if exc.setting == "effort" and chat.reasoning_effort:
        field, fix = "reasoning_effort", "leave reasoning_effort out (or send minimal)"
    elif exc.setting == "effort":
        field, fix = f"{EXTENSION}.retrievalReasoningEffort", "leave it out"
    else:
        field, fix = f"{EXTENSION}.outputMode", "send extractiveData, or leave it out"
    return OpenAIError(
        400,
        f"{field} '{exc.value}' needs a chat model for {exc.role}, and this service has none "
        f"configured: {fix}, or start the service with {exc.env_var} set.",
        code="model_required",
        param=field,
    )
