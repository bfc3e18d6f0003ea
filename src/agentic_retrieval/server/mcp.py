"""Each knowledge base as an MCP server exposing the tool ``knowledge_base_retrieve``.

Served over streamable HTTP at ``/knowledgebases/{name}/mcp`` by the REST app (same keys and
identity tokens: ``x-ms-query-source-authorization: Bearer <JWT>`` is validated before the MCP
SDK sees the request, and the tool retrieves as that identity), or over stdio for desktop
clients with ``agentic-retrieval mcp --kb DIR``. Built on the official ``mcp`` SDK (2.x:
``MCPServer``). The identity is never a tool argument: a model calling the tool cannot set it.

A call runs through the same event stream as the REST route's ``Accept: text/event-stream``
(:mod:`agentic_retrieval.wire.events`); a client that passes a ``progressToken`` receives each
event as a progress notification. Over HTTP a tool call's answer is therefore an SSE stream
(the transport's ``json_response`` is off): a plain JSON answer could not carry them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context as McpContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import BaseModel, Field, ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from agentic_retrieval.context import Context
from agentic_retrieval.errors import (
    IdentityRequiredError,
    InvalidRequestError,
    ModelRequiredError,
)
from agentic_retrieval.graph.vocabulary import OutputMode, RequestedEffort
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.permissions import Identity
from agentic_retrieval.server.auth import AccessPolicy, ApiKeys, require_role
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.server.mcp_errors import PlainTransportErrors, argument_problem
from agentic_retrieval.server.requests import path_name_error, public_base_url
from agentic_retrieval.wire.events import (
    ERROR,
    RESPONSE_COMPLETED,
    RetrieveEvent,
    completed_response,
)
from agentic_retrieval.wire.models import ActivityRecord
from agentic_retrieval.wire.retrieve import conversation_request, effort_warnings

logger = logging.getLogger(__name__)

TOOL_NAME = "knowledge_base_retrieve"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_OUTPUT_DOCUMENTS = next(
    int(f.metadata["le"]) for f in dataclasses.fields(Context) if f.name == "max_output_documents"
)
"""The tool's bound on ``max_output_documents``: the run setting's own (``Context``)."""
TOOL_TERMS = (
    (re.compile(r"knowledgeSourceParams\[[^\]]*\]\.filterAddOn"), "filter"),
    (re.compile(r"knowledgeSourceParams: neverQuerySource excludes"), "exclude_sources leaves out"),
    (re.compile(r"\bneverQuerySource\b"), "exclude_sources"),
    (re.compile(r"'?\bretrievalReasoningEffort\b'?"), "effort"),
    (re.compile(r"'?\boutputMode\b'?"), "output_mode"),
    (re.compile(r"\bmaxOutputDocuments\b"), "max_output_documents"),
    (re.compile(r"knowledgeSourceParams(\[[^\]]*\])?: "), ""),
)
"""REST field names (``filterAddOn``...) as the tool's arguments, for the messages of the
request checks the REST route shares: a model calling the tool knows only its arguments."""


class ChatMessage(BaseModel):
    """One turn of the conversation."""

    role: Literal["user", "assistant", "system"] = "user"
    content: str = Field(min_length=1, max_length=100_000)


class RetrieveToolResult(BaseModel):
    """What ``knowledge_base_retrieve`` returns."""

    response: str = Field(
        description="The grounding data (a JSON array of {ref_id, title, content}) or, with "
        "outputMode answerSynthesis, a Markdown answer citing [ref_id:N]."
    )
    references: list[dict[str, Any]] = Field(
        description="The retrieved documents, by ref_id, with docKey, rerankerScore and "
        "(over HTTP, for index sources) citationUrl."
    )
    partial: bool = Field(
        description="True when a knowledge source failed and only the others' results are in."
    )
    note: str | None = Field(
        default=None,
        description="Why the run's effort is not what was asked or expected (e.g. no chat "
        "model is configured, so the model-free tier ran).",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="Why retrieved documents were left out (under the reranker threshold, "
        "over maxOutputDocuments, over the output size), one line per search.",
    )


class RetrievalMcpServer(MCPServer[Any]):
    """The SDK's server, with invalid tool arguments said plainly.

    The SDK hands the model its validation library's text for arguments of the wrong type
    (class names, a documentation link, the value sent); the tool error names each argument
    and what it should be instead (:func:`~agentic_retrieval.server.mcp_errors.argument_problem`).
    """

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: McpContext[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Call a tool as the SDK does; invalid arguments fail with a plain ``ToolError``."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise ToolError(f"invalid arguments: {argument_problem(cause)}") from cause
            raise


IDENTITY_SCOPE_KEY = "agentic_retrieval.identity"
"""Where :class:`McpMounts` leaves the validated identity in the ASGI scope for the tool."""
ENDPOINT_SCOPE_KEY = "agentic_retrieval.endpoint"
"""Where :class:`McpMounts` leaves the service's public base URL (for ``citationUrl``)."""


def build_mcp_server(
    kb: KnowledgeBase,
    *,
    defaults: Context | None = None,
    resolve: Callable[[], tuple[KnowledgeBase, Context | None]] | None = None,
) -> MCPServer:
    """An MCP server for ``kb`` with the single tool ``knowledge_base_retrieve``.

    Args:
        kb: The knowledge base (its name, description and sources describe the tool).
        defaults: Run settings for every call (default: the knowledge base's).
        resolve: For a knowledge base that may change while the server runs (a service's):
            called on every tool call for the current knowledge base and run settings
            (raising ``KeyError`` once it is deleted) instead of ``kb`` and ``defaults``.
    """
    sources = ", ".join(f"{n} ({s.description or s.kind})" for n, s in kb.sources.items())
    with _no_root_logging_config():
        server = RetrievalMcpServer(
            name=f"agentic-retrieval: {kb.name}",
            instructions=f"Knowledge base '{kb.name}'. {kb.description} Sources: {sources}.",
        )

    async def knowledge_base_retrieve(
        query: Annotated[
            str | None, Field(description="The question to retrieve for.", max_length=10_000)
        ] = None,
        messages: Annotated[
            list[ChatMessage] | None,
            Field(description="The conversation so far (alternative to query).", max_length=200),
        ] = None,
        effort: Annotated[
            RequestedEffort | None,
            Field(
                description="Reasoning effort: minimal (no LLM), low, medium, or auto (starts "
                "without a model and escalates only when the question or its results call for "
                "it). Default: the "
                "knowledge base's default, else low with a chat model and minimal without "
                "one (the result's note says so)."
            ),
        ] = None,
        output_mode: Annotated[
            OutputMode | None,
            Field(description="extractiveData (grounding chunks) or answerSynthesis (answer)."),
        ] = None,
        filter: Annotated[  # the wire name users know
            str | None,
            Field(description="OData filter ANDed onto every source, e.g. year ge 2025."),
        ] = None,
        max_output_documents: Annotated[
            int | None,
            Field(
                description="Most documents in the response, all sources together.",
                ge=1,
                le=MAX_OUTPUT_DOCUMENTS,
            ),
        ] = None,
        exclude_sources: Annotated[
            list[str] | None,
            Field(
                description="Knowledge sources to leave out of this call (neverQuerySource).",
                max_length=100,
            ),
        ] = None,
        ctx: McpContext | None = None,
    ) -> RetrieveToolResult:
        try:
            current, run_defaults = resolve() if resolve is not None else (kb, defaults)
        except KeyError:
            raise ToolError(f"the knowledge base '{kb.name}' no longer exists") from None
        check_arguments(current, effort, output_mode, exclude_sources or ())
        request = tool_request(
            current,
            query,
            messages,
            effort,
            output_mode,
            filter,
            max_output_documents=max_output_documents,
            exclude=exclude_sources or (),
        )
        caller, run_defaults = _per_request(ctx, run_defaults)
        try:
            final = await _run(current, request, caller, run_defaults, ctx)
        except ModelRequiredError as exc:
            raise ToolError(model_required_message(exc)) from exc
        except (InvalidRequestError, IdentityRequiredError) as exc:
            raise ToolError(in_tool_terms(str(exc))) from exc
        except Exception as exc:  # a bug: its text goes to the log, never to the client
            request_id = uuid.uuid4().hex
            logger.error("MCP tool call %s failed", request_id, exc_info=exc)
            raise ToolError(
                f"An internal error occurred; quote request id {request_id} when reporting it."
            ) from None
        if final["event"] == ERROR:  # failOnError, or maxRuntimeInSeconds with nothing ready
            raise ToolError(final["data"]["error"]["message"])
        response = completed_response(final["data"])
        return RetrieveToolResult(
            response=response.text,
            references=[ref.to_wire() for ref in response.references],
            partial=response.partial,
            note=" ".join(effort_warnings(response)) or None,
            warnings=_warnings(response.activity or []),
        )

    server.add_tool(
        knowledge_base_retrieve,
        name=TOOL_NAME,
        description=f"Retrieve grounding passages (or a cited answer) from the knowledge base "
        f"'{kb.name}'. {kb.description}".strip(),
    )
    return server


async def _run(
    kb: KnowledgeBase,
    request: dict[str, Any],
    identity: Identity | None,
    defaults: Context | None,
    ctx: McpContext | None,
) -> RetrieveEvent:
    """Run the request through the event stream; return its terminal event.

    Every event (:mod:`agentic_retrieval.wire.events`) goes to a client that asked for
    progress (a ``progressToken``) as a progress notification: ``progress`` counts the events
    and ``message`` is the event as JSON, ``{"event": name, "data": ...}``.
    """
    final: RetrieveEvent | None = None
    count = 0
    async for event in kb.astream(request, identity=identity, defaults=defaults):
        count += 1
        if ctx is not None:
            await ctx.report_progress(count, None, json.dumps(event, separators=(",", ":")))
        if event["event"] in (RESPONSE_COMPLETED, ERROR):
            final = event
    if final is None:
        raise RuntimeError("the event stream ended without response.completed or error")
    return final


def check_arguments(
    kb: KnowledgeBase, effort: str | None, output_mode: str | None, exclude: Sequence[str]
) -> None:
    """Refuse what cannot run, naming the tool's argument (not the REST field it becomes).

    The filter is checked by the request checks every interface shares (each source against
    its own fields), whose messages :func:`in_tool_terms` rewords.

    Raises:
        ToolError: ``answerSynthesis`` at ``minimal``, or ``exclude_sources`` naming an
            unknown source or every source.
    """
    if effort == "minimal" and output_mode == "answerSynthesis":
        raise ToolError(
            "output_mode 'answerSynthesis' writes an answer with a chat model: it cannot run "
            "with effort 'minimal' (use low or medium)"
        )
    names = ", ".join(kb.sources) or "none"
    unknown = [name for name in exclude if name not in kb.sources]
    if unknown:
        raise ToolError(
            f"exclude_sources: unknown knowledge source '{unknown[0]}' (this knowledge base "
            f"has: {names})"
        )
    if kb.sources and set(kb.sources) <= set(exclude):
        raise ToolError(
            f"exclude_sources leaves out every knowledge source of this knowledge base "
            f"({names}); leave at least one to query"
        )


def in_tool_terms(message: str) -> str:
    """A request check's message with the REST field names replaced by the tool's arguments."""
    for pattern, argument in TOOL_TERMS:
        message = pattern.sub(argument, message)
    return message


def model_required_message(exc: ModelRequiredError) -> str:
    """A chosen effort or output mode needs a chat model, said in the tool's argument names."""
    if exc.setting == "effort":
        return (
            f"effort '{exc.value}' needs a chat model ({exc.role}) and the server has none "
            f"configured: leave 'effort' out to search without one, or start the server "
            f"with {exc.env_var} set"
        )
    return (
        f"output_mode '{exc.value}' needs a chat model to write the answer and the server has "
        f"none configured: leave 'output_mode' out to get the ranked passages, or start the "
        f"server with {exc.env_var} set"
    )


def _warnings(activity: list[ActivityRecord]) -> list[str]:
    """``<source>: <warning>`` for every activity record that carries a warning."""
    lines = []
    for record in activity:
        extra = record.model_extra or {}
        if isinstance(extra.get("warning"), str):
            lines.append(f"{extra.get('knowledgeSourceName', record.type)}: {extra['warning']}")
    return lines


def _per_request(
    ctx: McpContext | None, defaults: Context | None
) -> tuple[Identity | None, Context | None]:
    """Who is calling and the run settings, as :class:`McpMounts` left them for this request.

    The identity it validated, and the run settings with this service's public base URL, so
    that references get a ``citationUrl`` as on the REST route (neither over stdio).
    """
    scope = _request_scope(ctx)
    identity = scope.get(IDENTITY_SCOPE_KEY)
    endpoint = scope.get(ENDPOINT_SCOPE_KEY)
    if defaults is not None and isinstance(endpoint, str):
        defaults = dataclasses.replace(defaults, service_endpoint=endpoint)
    return (identity if isinstance(identity, Identity) else None), defaults


def _request_scope(ctx: McpContext | None) -> Mapping[str, Any]:
    """The ASGI scope :class:`McpMounts` passed for this HTTP request (empty over stdio)."""
    if ctx is None:
        return {}
    try:
        request = ctx.request_context.request
    except ValueError:  # no request context (a direct call)
        return {}
    scope = getattr(request, "scope", None)
    return scope if isinstance(scope, Mapping) else {}


def tool_request(
    kb: KnowledgeBase,
    query: str | None,
    messages: list[ChatMessage] | None,
    effort: str | None,
    output_mode: str | None,
    filter_text: str | None,
    *,
    max_output_documents: int | None = None,
    exclude: Sequence[str] = (),
) -> dict[str, Any]:
    """The retrieve request (wire JSON) for one tool call."""
    turns = [m.model_dump() for m in messages or [] if m.content.strip()]
    if query and query.strip():
        turns.append({"role": "user", "content": query})
    if not turns:
        raise ToolError("give 'query' or 'messages' holding the question to retrieve for")
    return conversation_request(
        [(t["role"], t["content"]) for t in turns],
        kb.sources,
        effort=effort,
        output_mode=output_mode,
        filter_add_on=filter_text,
        max_output_documents=max_output_documents,
        exclude=exclude,
    )


class McpMounts:
    """ASGI endpoint dispatching ``/knowledgebases/{name}/mcp`` to that KB's MCP server.

    Requests are authenticated with the REST keys (query keys suffice; a scoped query key only
    for its knowledge bases) and their identity token validated before the MCP SDK sees
    them; the tool then retrieves as that identity.

    Args:
        registry: Knowledge bases by name.
        keys: The accepted keys.
        policy: Identity tokens and permission rules.
        host: The interface the server listens on (loopback turns on the SDK's
            DNS-rebinding guard).
    """

    def __init__(
        self,
        registry: Mapping[str, KnowledgeBase],
        keys: ApiKeys,
        *,
        policy: AccessPolicy | None = None,
        host: str,
    ) -> None:
        self.registry = registry
        self.policy = policy or AccessPolicy()
        self.keys = keys
        self.host = host
        self._managers: dict[str, tuple[StreamableHTTPSessionManager, asyncio.Event]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        self._stop: asyncio.Event | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve MCP while this is entered (the app's lifespan); stop every server after.

        A knowledge base's MCP server starts on its first request, so a knowledge base a
        service creates while the server runs (``serve --data``) is served too; each tool
        call then retrieves from the knowledge base as it is at that moment.
        """
        self._stop = asyncio.Event()
        try:
            yield
        finally:
            self._stop.set()
            for _, stop in self._managers.values():
                stop.set()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks, self._managers, self._stop = [], {}, None

    def _current(self, name: str) -> tuple[KnowledgeBase, Context | None]:
        """The knowledge base ``name`` now and its run settings (``KeyError``: deleted)."""
        kb = self.registry[name]
        return kb, self.policy.run_defaults(name, kb.defaults)

    async def _manager(self, name: str) -> StreamableHTTPSessionManager | None:
        """The session manager of ``name``'s MCP server, started on first use."""
        try:
            kb = self.registry[name]
        except KeyError:
            return None
        async with self._lock:
            running = self._managers.get(name)
            if running is not None or self._stop is None:
                return running[0] if running is not None else None
            self._stop_deleted()
            server = build_mcp_server(kb, resolve=lambda: self._current(name))
            server.streamable_http_app(
                stateless_http=True,
                json_response=False,  # an SSE answer: progress notifications reach it
                transport_security=_transport_security(self.host),
            )
            manager = server.session_manager
            ready, stop = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(_serve(manager, ready, stop))
            waiting = asyncio.create_task(ready.wait())
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if task.done():  # it could not start: say so as a server error
                task.result()
            self._tasks.append(task)
            self._managers[name] = (manager, stop)
            return manager

    def _stop_deleted(self) -> None:
        """Stop the servers of knowledge bases deleted since they started.

        Run before each new server starts, so servers never outnumber the knowledge bases
        (plus one): a service that creates and deletes knowledge bases does not pile them up.
        """
        for gone in [name for name in self._managers if name not in self.registry]:
            _, stop = self._managers.pop(gone)
            stop.set()
        self._tasks = [task for task in self._tasks if not task.done()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate, find the KB's session manager, and hand the request to it.

        A ``GET`` (a standalone server-to-client stream) is a 405, as the MCP spec allows: a
        stateless server has nothing to push, and an idle stream would hold a connection and
        a request slot for as long as the client cares to keep it open.
        """
        headers = Headers(scope=scope)
        name = scope.get("path_params", {}).get("name", "")
        # (a missing or wrong key is a 401 from GuardMiddleware before this runs); a name
        # too long to exist is refused before a 403 could echo it
        too_long = path_name_error("name", name)
        if too_long is not None:
            await _send(send, too_long)
            return
        try:
            require_role(self.keys, headers, "query", knowledge_base=name)
        except ApiError as refused:
            await _send(send, refused)
            return
        if scope.get("method") == "GET":
            error = ApiError(
                405,
                "This MCP endpoint is stateless and offers no server-to-client stream: "
                "send JSON-RPC requests with POST.",
                headers={"Allow": "POST"},
            )
            await _send(send, error)
            return
        try:
            identity = await self.policy.identity(headers, knowledge_base=name)
        except ApiError as refused:
            await _send(send, refused)
            return
        manager = await self._manager(name)
        if manager is None:
            missing = ApiError(
                404, f"No knowledge base named '{name}' exists.", code="KnowledgeBaseNotFound"
            )
            await _send(send, missing)
            return
        # a fresh scope per request: the identity cannot leak into another request
        plain = PlainTransportErrors(receive, send)
        endpoint = public_base_url(Request(scope))
        scope = {**scope, IDENTITY_SCOPE_KEY: identity, ENDPOINT_SCOPE_KEY: endpoint}
        await manager.handle_request(scope, plain.receive, plain.send)


async def _serve(
    manager: StreamableHTTPSessionManager, ready: asyncio.Event, stop: asyncio.Event
) -> None:
    """Run ``manager`` (its task group serves the requests) until ``stop`` is set."""
    async with manager.run():
        ready.set()
        await stop.wait()


def run_stdio(kb: KnowledgeBase) -> None:
    """Serve ``kb`` over stdio until the client disconnects (for desktop MCP clients)."""
    import anyio

    anyio.run(build_mcp_server(kb).run_stdio_async)


@contextmanager
def _no_root_logging_config() -> Iterator[None]:
    """Keep ``MCPServer()`` from calling ``logging.basicConfig`` on the root logger.

    A library must not configure the application's logging (and an INFO handler on stdout
    would corrupt the stdio transport); ``basicConfig`` is a no-op while root has a handler.
    """
    root = logging.getLogger()
    placeholder = logging.NullHandler()
    added = not root.handlers
    if added:
        root.addHandler(placeholder)
    try:
        yield
    finally:
        if added:
            root.removeHandler(placeholder)


def _transport_security(host: str) -> TransportSecuritySettings:
    if host in _LOOPBACK:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    # Listening beyond loopback is a deliberate choice; the API keys protect the endpoint.
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


async def _send(send: Send, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
