"""``KnowledgeBase``: the retrieve API in Python, on top of the compiled graph.

It takes and returns the wire models of :mod:`agentic_retrieval.wire.models` (or plain dicts in
their JSON shape), so the same request works from Python, over HTTP and over MCP; the
translation between the two lives in :mod:`agentic_retrieval.wire.retrieve`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import StreamMode

from agentic_retrieval.context import Context
from agentic_retrieval.errors import (
    IdentityRequiredError,
    InvalidRequestError,
    KnowledgeSourceFailedError,
)
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.sync import run_sync
from agentic_retrieval.graph.vocabulary import OutputMode, RequestedEffort
from agentic_retrieval.permissions import Identity
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.retriever import KnowledgeBaseRetriever
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.tool import KnowledgeBaseTool, knowledge_base_tool
from agentic_retrieval.wire.events import RetrieveEvent, RetrieveEvents, extensions_from
from agentic_retrieval.wire.models import RetrieveRequest, RetrieveResponse
from agentic_retrieval.wire.retrieve import (
    effort_choice,
    graph_input,
    prepare,
    timed_out_response,
    to_response,
)
from agentic_retrieval.wiring.builder import RetrievalGraph, compile_graph

GRACE_SECONDS = 2.0
"""Extra time past ``maxRuntimeInSeconds`` before the outer guard abandons a run."""


class KnowledgeBase:
    """A named set of knowledge sources with a retrieval graph over them.

    Args:
        sources: The knowledge sources, or a mapping of them by name, kept as it is: a
            mapping that changes (a directory's live sources) changes what runs search.
        name: The knowledge base name (the ``{name}`` in the REST path).
        description: What the knowledge base holds.
        chat_model: Model for every LLM role (object or ``provider:model``); ``None`` uses
            ``$AGENTIC_RETRIEVAL_CHAT_MODEL`` when a request needs one.
        planning_model: Overrides ``chat_model`` for planning.
        evidence_model: Overrides ``chat_model`` for evidence assessment.
        answer_model: Overrides ``chat_model`` for answer synthesis.
        reranker: The reranker (default: passthrough of source scores, lexical otherwise).
        defaults: Context used where a request is silent (effort, limits, prompts...).
        enforce_permissions: Fail closed on permissions (``Context.enforce_permissions``):
            documents indexed without permissions are hidden, and a source that cannot trim
            by permission becomes an error record instead of answering unfiltered.
        require_identity: Refuse requests without an ``identity`` (implies
            ``enforce_permissions``); the server answers them 401.
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
        enforce_permissions: bool = False,
        require_identity: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.require_identity = require_identity
        """Whether every request must come with an identity."""
        self.defaults = defaults or Context()
        if enforce_permissions or require_identity:
            self.defaults = dataclasses.replace(self.defaults, enforce_permissions=True)
        self.bindings: Bindings = Bindings.create(
            sources,
            chat_model=chat_model,
            planning_model=planning_model,
            evidence_model=evidence_model,
            answer_model=answer_model,
            reranker=reranker,
        )
        """The sources, chat models and reranker the graph is bound to."""
        # checkpointer=False: a retrieve is one request, complete in itself; called from a
        # node or tool of a checkpointed graph (an agent), it must not write its internal
        # state into that graph's thread (types the agent's serializer does not know)
        self.graph: RetrievalGraph = compile_graph(self.bindings, checkpointer=False)
        """The compiled LangGraph graph every request runs (it never checkpoints)."""

    @property
    def sources(self) -> Mapping[str, KnowledgeSource]:
        """The knowledge sources by name."""
        sources: Mapping[str, KnowledgeSource] = self.bindings.sources
        return sources

    async def aretrieve(
        self,
        request: RetrieveRequest | Mapping[str, Any],
        *,
        identity: Identity | Mapping[str, Any] | None = None,
        config: RunnableConfig | None = None,
        defaults: Context | None = None,
    ) -> RetrieveResponse:
        """Run a retrieve request.

        Args:
            request: A :class:`RetrieveRequest` or its JSON shape.
            identity: Who is asking (``Identity(user_id=..., groups=[...])`` or its dict):
                sources that trim by permission return only what it may see. It goes into
                the run's Context, beside the request: the planner never sees it.
            config: Optional LangChain ``RunnableConfig`` (callbacks, tags...).
            defaults: Settings for this call where the request is silent (default: the
                knowledge base's ``defaults``).

        Returns:
            The response; ``.status_code`` is 200, 206 (a source failed) or 408.

        Raises:
            InvalidRequestError: For bad input (the message names the field).
            IdentityRequiredError: The knowledge base requires an identity and none was given.
        """
        parsed, context = self._prepare(request, identity, defaults)
        started = time.time()
        try:
            output = await asyncio.wait_for(
                self.graph.ainvoke(graph_input(parsed), config=config, context=context),
                context.max_runtime_seconds + GRACE_SECONDS,
            )
        except TimeoutError:
            return timed_out_response(context, started)
        return to_response(output, parsed)

    def retrieve(
        self,
        request: RetrieveRequest | Mapping[str, Any],
        *,
        identity: Identity | Mapping[str, Any] | None = None,
        config: RunnableConfig | None = None,
        defaults: Context | None = None,
    ) -> RetrieveResponse:
        """Synchronous :meth:`aretrieve` (safe to call where an event loop is running)."""
        return run_sync(
            self.aretrieve(request, identity=identity, config=config, defaults=defaults)
        )

    def _prepare(
        self,
        request: RetrieveRequest | Mapping[str, Any],
        identity: Identity | Mapping[str, Any] | None,
        defaults: Context | None,
    ) -> tuple[RetrieveRequest, Context]:
        """Validate the request and derive its run's Context, with the caller's identity."""
        caller = identity_of(identity)
        parsed, context = prepare(request, defaults or self.defaults, self.bindings)
        if caller is not None:
            context = dataclasses.replace(context, identity=caller)
        if self.require_identity:
            if context.identity is None:
                raise IdentityRequiredError(
                    f"the knowledge base '{self.name}' requires a caller identity"
                )
            context = dataclasses.replace(context, enforce_permissions=True)
        return parsed, context

    async def astream(
        self,
        request: RetrieveRequest | Mapping[str, Any],
        *,
        identity: Identity | Mapping[str, Any] | None = None,
        config: RunnableConfig | None = None,
        defaults: Context | None = None,
        extensions: Collection[str] = (),
        request_id: str | None = None,
    ) -> AsyncIterator[RetrieveEvent]:
        """Yield the retrieve events as the run makes progress (Azure's stream contract).

        Each event is ``{"event": name, "data": ...}``, in the order of
        :mod:`agentic_retrieval.wire.events`: ``retrieval.started``, ``activity.started`` /
        ``activity.completed`` per step, ``answer.completed``, ``references.completed``, then
        ``response.completed`` (``{"statusCode", "response"}``) or ``error``. A source
        whose ``failOnError`` is set failing, or ``maxRuntimeInSeconds`` plus a grace period
        elapsing, ends the stream with an ``error`` event rather than an exception.

        Args:
            request: A :class:`RetrieveRequest` or its JSON shape.
            identity: Who is asking (see :meth:`aretrieve`).
            config: Optional LangChain ``RunnableConfig`` (callbacks, tags...).
            defaults: Settings for this call where the request is silent.
            extensions: Extension events to add: ``answer.delta`` (the answer's text as it
                is written) and ``progress`` (the nodes' progress notes).
            request_id: The ``requestId`` of ``retrieval.started`` (default: a new UUID).

        Raises:
            InvalidRequestError: For bad input, before any event.
            IdentityRequiredError: The knowledge base requires an identity and none was given.
        """
        parsed, context = self._prepare(request, identity, defaults)
        choice = effort_choice(parsed, context, self.bindings)
        events = RetrieveEvents(
            knowledge_base=self.name,
            output_mode=context.output_mode,
            # the effort asked for (auto stays auto), else the tier an unset effort starts at
            reasoning_effort=choice.requested or choice.effort,
            include_activity=parsed.include_activity is not False,
            extensions=extensions_from(extensions),
            request_id=request_id or str(uuid.uuid4()),
        )
        yield events.started()
        output: dict[str, Any] = {}
        modes: list[StreamMode] = ["custom", "values"]
        if events.wants_answer_deltas:
            modes.append("messages")
        stream = self.graph.astream(
            graph_input(parsed), config=config, context=context, stream_mode=modes
        )
        loop = asyncio.get_running_loop()
        started, deadline = time.time(), loop.time() + context.max_runtime_seconds + GRACE_SECONDS
        while True:
            try:
                mode, chunk = await asyncio.wait_for(anext(stream), deadline - loop.time())
            except StopAsyncIteration:
                break
            except TimeoutError:
                closer = getattr(stream, "aclose", None)
                if closer is not None:
                    await closer()
                elapsed = time.time() - started
                message = (
                    f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed after "
                    f"{elapsed:.1f} s; the run was stopped"
                )
                yield events.failed({"code": "Timeout", "message": message})
                return
            if mode == "custom" and isinstance(chunk, Mapping):
                for event in events.on_custom(chunk):
                    yield event
            elif mode == "messages":
                token, metadata = cast(tuple[BaseMessage, dict[str, Any]], chunk)
                for event in events.on_message(token, metadata):
                    yield event
            elif mode == "values" and isinstance(chunk, Mapping):
                output = dict(chunk)
        try:
            response = to_response(output, parsed)
        except KnowledgeSourceFailedError as exc:
            yield events.failed(exc.detail())
            return
        for event in events.finished(response):
            yield event

    def as_retriever(self, **kwargs: Any) -> KnowledgeBaseRetriever:
        """A LangChain ``BaseRetriever`` over this knowledge base.

        Args:
            **kwargs: :class:`KnowledgeBaseRetriever` fields (``k``, ``reasoning_effort``,
                ``filter``, ``knowledge_sources``).
        """
        return KnowledgeBaseRetriever(knowledge_base=self, **kwargs)

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        effort: RequestedEffort | None = None,
        output_mode: OutputMode | None = None,
        identity: Identity | Mapping[str, Any] | None = None,
        filter: str | None = None,
        arguments: Collection[str] | None = None,
        **defaults: Any,
    ) -> KnowledgeBaseTool:
        """A LangChain tool an agent calls to search this knowledge base.

        The model fills ``query`` and, where this knowledge base supports them, ``filter``
        (when a source names its filterable fields) and ``sources`` (when there are several
        to choose from). The tool answers with ``content_and_artifact``: the passages with
        their ``ref_id`` s (or the cited answer) for the model, the :class:`RetrieveResponse`
        as the artifact. Settings are checked here, not at the first call.

        Args:
            name: The tool's name (default: ``search_<knowledge base name>``).
            description: What the model reads (default: from the knowledge base's and its
                sources' descriptions).
            effort: ``minimal``, ``low``, ``medium`` or ``auto`` (default: the knowledge
                base's: low with a chat model, minimal without).
            output_mode: ``extractiveData`` (passages) or ``answerSynthesis`` (an answer).
            identity: Who the agent acts for: every search returns only what it may see.
                Bound here; never an argument the model fills.
            filter: An OData filter every search applies; a model's ``filter`` can only
                narrow it (the two are ANDed).
            arguments: The optional arguments to offer the model (``filter``,
                ``sources``; default: those this knowledge base supports).
            **defaults: :class:`Context` fields for every call (``top_n=5``,
                ``max_output_size=8000``, ``knowledge_sources=[...]`` to limit the sources
                the tool may search...).

        Raises:
            IdentityRequiredError: The knowledge base requires an identity and none is given.
            InvalidRequestError: An effort or output mode that is not one of its values, a
                ``knowledge_sources`` name this knowledge base does not have
                (:class:`UnknownKnowledgeSourceError`), a bound filter that does not parse,
                or a setting the knowledge base cannot run with (e.g. an effort or output
                mode that needs a chat model there is none of).
            TypeError: A default that is not a :class:`Context` field.
        """
        return knowledge_base_tool(
            self,
            name,
            description,
            effort=effort,
            output_mode=output_mode,
            identity=identity_of(identity),
            filter=filter,
            arguments=arguments,
            defaults=defaults,
        )


def identity_of(identity: Identity | Mapping[str, Any] | None) -> Identity | None:
    """An :class:`Identity` from itself or its dict (``{"user_id", "groups"}``).

    Raises:
        InvalidRequestError: A dict that is not a valid identity (naming the field).
    """
    if identity is None or isinstance(identity, Identity):
        return identity
    try:
        return Identity.model_validate(identity)
    except ValueError as exc:
        raise InvalidRequestError(f"identity: {exc}") from exc
