"""``KnowledgeBase``: the retrieve API in Python, on top of the compiled graph.

It takes and returns the wire models of :mod:`agentic_retrieval.wire.models` (or plain dicts in
their JSON shape), so the same request works from Python, over HTTP and over MCP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.types import StreamMode
from pydantic import ValidationError

from agentic_retrieval.context import Context
from agentic_retrieval.errors import InvalidRequestError, UnknownKnowledgeSourceError
from agentic_retrieval.graph.builder import build_graph
from agentic_retrieval.graph.sync import run_sync
from agentic_retrieval.odata import ODataError, parse_filter
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.state import InputState, planner_for
from agentic_retrieval.wire.models import (
    ActivityRecord,
    MessageContent,
    Reference,
    ResponseMessage,
    RetrieveRequest,
    RetrieveResponse,
)

T = TypeVar("T")
GRACE_SECONDS = 2.0
"""Extra time past ``maxRuntimeInSeconds`` before the outer guard abandons a run."""


class KnowledgeBase:
    """A named set of knowledge sources with a retrieval graph over them.

    Args:
        sources: The knowledge sources.
        name: The knowledge base name (the ``{name}`` in the REST path).
        description: What the knowledge base holds.
        chat_model: Model for every LLM role (object or ``provider:model``); ``None`` uses
            ``$AGENTIC_RETRIEVAL_CHAT_MODEL`` when a request needs one.
        planning_model: Overrides ``chat_model`` for planning.
        evidence_model: Overrides ``chat_model`` for evidence assessment.
        answer_model: Overrides ``chat_model`` for answer synthesis.
        reranker: The reranker (default: passthrough of source scores, lexical otherwise).
        defaults: Context used where a request is silent (effort, limits, prompts...).
    """

    def __init__(
        self,
        sources: Iterable[KnowledgeSource] | Mapping[str, KnowledgeSource],
        *,
        name: str = "knowledge-base",
        description: str = "",
        chat_model: BaseChatModel | str | None = None,
        planning_model: BaseChatModel | str | None = None,
        evidence_model: BaseChatModel | str | None = None,
        answer_model: BaseChatModel | str | None = None,
        reranker: Reranker | None = None,
        defaults: Context | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.defaults = defaults or Context()
        self.graph = build_graph(
            sources,
            chat_model=chat_model,
            planning_model=planning_model,
            evidence_model=evidence_model,
            answer_model=answer_model,
            reranker=reranker,
        )
        self.bindings = self.graph.bindings  # type: ignore[attr-defined]

    @property
    def sources(self) -> Mapping[str, KnowledgeSource]:
        """The knowledge sources by name."""
        sources: Mapping[str, KnowledgeSource] = self.bindings.sources
        return sources

    # --- request preparation ----------------------------------------------------------------

    def parse_request(self, request: RetrieveRequest | Mapping[str, Any]) -> RetrieveRequest:
        """Validate ``request`` (a model or a JSON-shaped dict).

        Raises:
            InvalidRequestError: With a message naming the offending field.
        """
        if isinstance(request, RetrieveRequest):
            return request
        try:
            return RetrieveRequest.model_validate(request)
        except ValidationError as exc:
            raise InvalidRequestError(_describe(exc)) from exc

    def context_for(self, request: RetrieveRequest, defaults: Context | None = None) -> Context:
        """The run's Context: ``defaults`` (the KB's) overridden by what the request sets."""
        overrides: dict[str, Any] = {}
        if request.effort:
            overrides["reasoning_effort"] = request.effort
        if request.output_mode:
            overrides["output_mode"] = request.output_mode
        if request.max_runtime_in_seconds:
            overrides["max_runtime_seconds"] = float(request.max_runtime_in_seconds)
        if request.max_output_size:
            overrides["max_output_size"] = request.max_output_size
        if request.max_output_size_in_tokens:
            overrides["max_output_tokens"] = request.max_output_size_in_tokens
        limits = [
            p.max_docs_for_reranker
            for p in request.knowledge_source_params or []
            if p.max_docs_for_reranker
        ]
        if limits:
            overrides["max_docs_for_reranker"] = max(limits)
        try:
            return dataclasses.replace(defaults or self.defaults, **overrides)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc

    def check(self, request: RetrieveRequest, context: Context) -> None:
        """Reject what would fail later: unknown sources, bad filters, no model.

        Raises:
            UnknownKnowledgeSourceError: A named source does not exist.
            InvalidRequestError: A ``filterAddOn`` does not parse, or no chat model is
                configured for an effort/output mode that needs one.
        """
        for params in request.knowledge_source_params or []:
            if params.knowledge_source_name not in self.sources:
                raise UnknownKnowledgeSourceError(
                    f"knowledgeSourceParams: unknown knowledge source "
                    f"'{params.knowledge_source_name}' (this knowledge base has: "
                    f"{', '.join(self.sources) or 'none'})"
                )
            if params.filter_add_on:
                try:
                    parse_filter(params.filter_add_on)
                except ODataError as exc:
                    raise InvalidRequestError(
                        f"knowledgeSourceParams[{params.knowledge_source_name}].filterAddOn: {exc}"
                    ) from exc
        model_plans = planner_for(bool(request.intents), context.reasoning_effort) == "model"
        roles = (
            (["planning"] if model_plans else [])
            + (["evidence"] if model_plans and context.reasoning_effort == "medium" else [])
            + (["answer"] if context.output_mode == "answerSynthesis" else [])
        )
        for role in roles:
            try:
                self.bindings.models.resolve(role, context)  # builds it: surfaces bad config
            except ValueError as exc:  # ModelNotConfiguredError, ModelUnavailableError
                raise InvalidRequestError(str(exc)) from exc

    def request_for(
        self,
        turns: Sequence[tuple[str, str]],
        *,
        effort: str | None = None,
        output_mode: str | None = None,
        filter_add_on: str | None = None,
        source_data: bool = False,
    ) -> dict[str, Any]:
        """The wire request for a conversation, as the CLI and the MCP tool build it.

        Args:
            turns: ``(role, text)`` pairs, oldest first.
            effort: ``minimal``, ``low`` or ``medium`` (default: the knowledge base's).
            output_mode: ``extractiveData`` or ``answerSynthesis``.
            filter_add_on: An OData filter ANDed onto every source.
            source_data: Ask every source for ``sourceData`` on its references.
        """
        request: dict[str, Any] = {
            "messages": [
                {"role": role, "content": [{"type": "text", "text": text}]} for role, text in turns
            ]
        }
        if effort:
            request["retrievalReasoningEffort"] = {"kind": effort}
        if output_mode:
            request["outputMode"] = output_mode
        if filter_add_on or source_data:
            request["knowledgeSourceParams"] = [
                {
                    "knowledgeSourceName": name,
                    "kind": source.kind,
                    **({"filterAddOn": filter_add_on} if filter_add_on else {}),
                    **({"includeReferenceSourceData": True} if source_data else {}),
                }
                for name, source in self.sources.items()
            ]
        return request

    def graph_input(self, request: RetrieveRequest) -> InputState:
        """The graph input for ``request``."""
        return InputState(
            messages=[
                cast(AnyMessage, _to_message(m.role, m.text))
                for m in request.messages or []
                if m.text
            ],
            intents=[i.search for i in request.intents or []],
            knowledge_source_params=[
                p.model_dump(exclude_none=True) for p in request.knowledge_source_params or []
            ],
        )

    # --- running ------------------------------------------------------------------------------

    async def aretrieve(
        self,
        request: RetrieveRequest | Mapping[str, Any],
        *,
        config: RunnableConfig | None = None,
        defaults: Context | None = None,
    ) -> RetrieveResponse:
        """Run a retrieve request.

        Args:
            request: A :class:`RetrieveRequest` or its JSON shape.
            config: Optional LangChain ``RunnableConfig`` (callbacks, tags...).
            defaults: Settings for this call where the request is silent (default: the
                knowledge base's ``defaults``).

        Returns:
            The response; ``.status_code`` is 200, 206 (a source failed) or 408.

        Raises:
            InvalidRequestError: For bad input (the message names the field).
        """
        parsed = self.parse_request(request)
        context = self.context_for(parsed, defaults)
        self.check(parsed, context)
        started = time.time()
        try:
            output = await asyncio.wait_for(
                self.graph.ainvoke(self.graph_input(parsed), config=config, context=context),
                context.max_runtime_seconds + GRACE_SECONDS,
            )
        except TimeoutError:
            return _timed_out_response(context, started)
        return self.to_response(output, parsed)

    def retrieve(
        self, request: RetrieveRequest | Mapping[str, Any], *, config: RunnableConfig | None = None
    ) -> RetrieveResponse:
        """Synchronous :meth:`aretrieve` (safe to call where an event loop is running)."""
        return run_sync(self.aretrieve(request, config=config))

    async def astream(
        self, request: RetrieveRequest | Mapping[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield progress events as they happen, then ``{"event": "response", ...}``.

        Progress events are the nodes' stream-writer events (``planning``, ``searching``,
        ``searched``, ``reranking``, ``assessing``, ``answering``, ``done``). The stream is
        bounded like :meth:`aretrieve`: past ``maxRuntimeInSeconds`` plus a grace period it
        ends with a timed-out response.
        """
        parsed = self.parse_request(request)
        context = self.context_for(parsed)
        self.check(parsed, context)
        output: dict[str, Any] = {}
        modes: list[StreamMode] = ["custom", "values"]
        stream = self.graph.astream(self.graph_input(parsed), context=context, stream_mode=modes)
        loop = asyncio.get_running_loop()
        started, deadline = time.time(), loop.time() + context.max_runtime_seconds + GRACE_SECONDS
        response: RetrieveResponse | None = None
        while response is None:
            try:
                mode, chunk = await asyncio.wait_for(anext(stream), deadline - loop.time())
            except StopAsyncIteration:
                response = self.to_response(output, parsed)
            except TimeoutError:
                closer = getattr(stream, "aclose", None)
                if closer is not None:
                    await closer()
                response = _timed_out_response(context, started)
            else:
                if mode == "custom" and isinstance(chunk, Mapping):
                    yield dict(chunk)
                elif mode == "values" and isinstance(chunk, Mapping):
                    output = dict(chunk)
        yield {
            "event": "response",
            "status": response.status_code,
            "response": response.to_wire(),
        }

    def to_response(self, output: Mapping[str, Any], request: RetrieveRequest) -> RetrieveResponse:
        """Turn the graph output into the wire response."""
        response = RetrieveResponse(
            response=[
                ResponseMessage(
                    content=[MessageContent(type="text", text=output.get("response", ""))]
                )
            ],
            activity=(
                None
                if request.include_activity is False
                else [ActivityRecord.model_validate(r) for r in output.get("activity") or []]
            ),
            references=[Reference.model_validate(r) for r in output.get("references") or []],
        )
        response._partial = bool(output.get("partial"))
        response._timed_out = bool(output.get("timed_out"))
        response._has_results = bool(output.get("passage_count")) or bool(response.references)
        return response

    def as_retriever(self, **kwargs: Any) -> Any:
        """A LangChain ``BaseRetriever`` over this knowledge base (``KnowledgeBaseRetriever``)."""
        from agentic_retrieval.retriever import KnowledgeBaseRetriever

        return KnowledgeBaseRetriever(knowledge_base=self, **kwargs)


def _to_message(role: str | None, text: str) -> BaseMessage:
    if role == "assistant":
        return AIMessage(content=text)
    if role == "system":
        return SystemMessage(content=text)
    return HumanMessage(content=text)


def _timed_out_response(context: Context, started: float) -> RetrieveResponse:
    record = ActivityRecord.model_validate(
        {
            "type": "runtimeLimit",
            "id": 0,
            "elapsedMs": int((time.time() - started) * 1000),
            "error": {
                "code": "Timeout",
                "message": f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed "
                "before any result was ready",
            },
        }
    )
    response = RetrieveResponse(
        response=[ResponseMessage(content=[MessageContent(type="text", text="[]")])],
        activity=[record],
        references=[],
    )
    response._timed_out = True
    return response


def _describe(exc: ValidationError) -> str:
    """A one-line message naming each invalid field by its wire (camelCase) path."""
    parts = []
    for error in exc.errors()[:5]:
        location = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)
