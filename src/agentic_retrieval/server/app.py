"""The REST API: ``POST /knowledgebases/{name}/retrieve`` and friends, MCP, and ``/v1``.

``/v1`` is the OpenAI-compatible API (:mod:`agentic_retrieval.server.openai_api`).

One :class:`KnowledgeBase` object per knowledge base is shared by all requests; requests run
on the event loop end to end (``graph.ainvoke``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentic_retrieval.embeddings import local_embeddings
from agentic_retrieval.kb.background_embedding import BackgroundEmbedder
from agentic_retrieval.kb.catalog import KnowledgeBaseRegistry, ServiceCatalog
from agentic_retrieval.kb.graph_sync import GraphSynchronizer
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.rerankers.registry import reranker_by_name
from agentic_retrieval.server.auth import (
    RETRIEVE_BODY,
    AccessPolicy,
    ApiKeys,
    accepts_body,
    require_role,
)
from agentic_retrieval.server.conversions import ConversionPool
from agentic_retrieval.server.errors import REQUEST_ID_HEADER, ApiError, install_error_handlers
from agentic_retrieval.server.health import HealthMonitor
from agentic_retrieval.server.limits import GuardMiddleware, RequestBudget
from agentic_retrieval.server.management import Management, add_management_routes
from agentic_retrieval.server.openai_api import add_openai_routes
from agentic_retrieval.server.openai_errors import OpenAIErrorShape
from agentic_retrieval.server.requests import (
    check_api_version,
    check_path_names,
    public_base_url,
    read_json_object,
)
from agentic_retrieval.server.settings import ServerSettings
from agentic_retrieval.server.streaming import (
    EVENT_STREAM,
    EXTENSIONS_HEADER,
    retrieve_events,
    wants_event_stream,
)
from agentic_retrieval.wire.api_versions import check_request_fields, response_for_version
from agentic_retrieval.wire.events import extensions_from
from agentic_retrieval.wire.retrieve import prepare

logger = logging.getLogger(__name__)

ApiVersion = Query(default=None, alias="api-version")

KnowledgeBases = KnowledgeBase | Iterable[KnowledgeBase] | Mapping[str, KnowledgeBase]


def create_app(
    knowledge_bases: KnowledgeBases = (),
    *,
    settings: ServerSettings | None = None,
    mcp: bool = True,
    service: ServiceState | None = None,
    openai: bool = True,
) -> FastAPI:
    """Build the ASGI app serving ``knowledge_bases`` and, with ``service``, managing more.

    Args:
        knowledge_bases: One knowledge base, several, or a mapping of name to knowledge base
            (served as they are; read-only over REST).
        settings: Keys and limits (default: :class:`ServerSettings` defaults, keys from the
            environment).
        mcp: Also serve each knowledge base (a service's too) as an MCP server at
            ``/knowledgebases/{name}/mcp``.
        service: A data directory: indexes, knowledge sources and knowledge bases created,
            changed and deleted over the management REST API (``serve --data DIR``).
        openai: Also serve the OpenAI-compatible API (``/v1/models``,
            ``/v1/chat/completions``: each knowledge base is a model).

    Returns:
        The FastAPI application (run it with uvicorn).
    """
    settings = settings or ServerSettings()
    fixed = _registry(knowledge_bases)
    catalog = (
        ServiceCatalog(
            service,
            reranker=reranker_by_name(None),
            # file sources embed with the bundled model unless the server opts out; uploads
            # on an instance of their own, on one thread: queries never wait behind them
            embeddings=local_embeddings() if settings.embeddings else None,
            ingestion=local_embeddings(threads=1) if settings.embeddings else None,
        )
        if service
        else None
    )
    registry = KnowledgeBaseRegistry(fixed, catalog)
    # uploads answer once stored; their vectors are made afterwards, one thread a process
    # (the embedded store's: a PostgreSQL store's uploads are embedded before their write)
    embedder = (
        BackgroundEmbedder(service, catalog)
        if isinstance(service, ServiceDirectory) and catalog is not None and settings.embeddings
        else None
    )
    keys = settings.keys()
    policy = settings.access_policy()
    # every knowledge base, a service's included (its MCP server starts on first use)
    serves_mcp = mcp and (bool(fixed) or catalog is not None)
    mounts = _mcp_mounts(registry, keys, policy, settings.host) if serves_mcp else None
    conversions = ConversionPool(
        settings.conversion_limits,
        workers=settings.conversion_workers,
        queue=settings.conversion_queue,
    )
    budget = RequestBudget(
        max_in_flight=settings.max_in_flight,
        max_receiving=settings.max_receiving_bodies,
        caller_share=settings.caller_share,
    )
    health = HealthMonitor(
        max_loop_lag_seconds=settings.health_max_loop_lag_seconds,
        max_query_wait_seconds=settings.health_max_query_wait_seconds,
        extra=lambda: {"conversions": conversions.stats()},
        requests=budget.report,
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            stack.callback(conversions.close)
            await stack.enter_async_context(health.running())
            if service is not None:  # uploads convert through it: start it before the first
                asyncio.get_running_loop().run_in_executor(None, conversions.warm_up)
            if embedder is not None:  # chunks a stopped server left without vectors first
                embedder.start()
                stack.callback(embedder.close)
            if mounts is not None:
                await stack.enter_async_context(mounts.running())
            yield

    app = FastAPI(
        title="agentic-retrieval",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
        dependencies=[Depends(check_path_names)],  # before any route looks a name up
    )
    app.state.knowledge_bases = registry
    app.state.keys = keys
    app.state.settings = settings  # serving.py reads the connection-level limits here
    app.state.access_policy = policy
    install_error_handlers(app)
    app.add_middleware(
        GuardMiddleware,
        keys=keys,
        router=app.router,  # read per request: the routes added below count
        budget=budget,
        max_header_bytes=settings.max_header_bytes,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_seconds=settings.body_timeout_seconds,
        retry_after_seconds=settings.retry_after_seconds,
        max_upload_bytes=settings.max_upload_bytes,
    )
    add_management_routes(
        app,
        Management(
            registry,
            keys,
            service,
            catalog,
            max_file_bytes=settings.max_upload_bytes,
            policy=policy,
            conversions=conversions,
            limits=settings.definition_limits(),
            graphs=GraphSynchronizer(service) if service is not None else None,
            embedder=embedder,
        ),
    )
    _add_routes(app, registry, keys, policy, health)
    if openai:
        add_openai_routes(app, registry, keys, policy)
        app.add_middleware(OpenAIErrorShape)  # outermost: the guard's refusals too
    if mounts is not None:
        accepts_body(RETRIEVE_BODY)(mounts)
        app.add_route("/knowledgebases/{name}/mcp", mounts, include_in_schema=False)
        app.add_route("/knowledgebases('{name}')/mcp", mounts, include_in_schema=False)
    return app


def _add_routes(
    app: FastAPI,
    registry: Mapping[str, KnowledgeBase],
    keys: ApiKeys,
    policy: AccessPolicy,
    health: HealthMonitor,
) -> None:
    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        healthy, body = health.report()
        return JSONResponse(body, status_code=200 if healthy else 503)

    @accepts_body(RETRIEVE_BODY)
    async def retrieve(name: str, request: Request, api_version: str | None = ApiVersion) -> Any:
        require_role(keys, request.headers, "query", knowledge_base=name)
        identity = await policy.identity(request.headers, knowledge_base=name)
        check_api_version(api_version)
        kb = lookup(registry, name)
        # citation URLs point back at this service, with the caller's api-version
        defaults = dataclasses.replace(
            policy.run_defaults(name, kb.defaults),
            service_endpoint=public_base_url(request),
            api_version=api_version,
        )
        asked = await read_json_object(request)
        check_request_fields(asked, api_version)
        parsed, context = prepare(asked, defaults, kb.bindings)
        if wants_event_stream(request.headers.get("accept")):
            extensions = extensions_from(request.headers.get(EXTENSIONS_HEADER))
            request_id = str(uuid.uuid4())
            return StreamingResponse(
                retrieve_events(
                    kb,
                    parsed,
                    context.max_runtime_seconds,
                    identity=identity,
                    defaults=defaults,
                    extensions=extensions,
                    request_id=request_id,
                ),
                media_type=EVENT_STREAM,
                headers={"Cache-Control": "no-cache", REQUEST_ID_HEADER: request_id},
            )
        response = await kb.aretrieve(parsed, identity=identity, defaults=context)
        if response.status_code == 408:
            raise ApiError(
                408,
                f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed before any "
                "result was ready.",
            )
        body = response_for_version(response.to_wire(), api_version)
        return JSONResponse(body, status_code=response.status_code)

    retrieve_paths = (
        "/knowledgebases/{name}/retrieve",
        "/knowledgebases('{name}')/retrieve",
        # the preview generations called knowledge bases agents
        "/agents/{name}/retrieve",
        "/agents('{name}')/retrieve",
    )
    for path in retrieve_paths:
        app.add_api_route(path, retrieve, methods=["POST"])


def lookup(registry: Mapping[str, KnowledgeBase], name: str) -> KnowledgeBase:
    """The knowledge base called ``name``, or a 404."""
    kb = registry.get(name)
    if kb is None:
        raise ApiError(
            404, f"No knowledge base named '{name}' exists.", code="KnowledgeBaseNotFound"
        )
    return kb


def _registry(knowledge_bases: KnowledgeBases) -> dict[str, KnowledgeBase]:
    if isinstance(knowledge_bases, KnowledgeBase):
        return {knowledge_bases.name: knowledge_bases}
    if isinstance(knowledge_bases, Mapping):
        return dict(knowledge_bases)
    registry: dict[str, KnowledgeBase] = {}
    for kb in knowledge_bases:
        if kb.name in registry:
            raise ValueError(f"two knowledge bases are named {kb.name!r}")
        registry[kb.name] = kb
    return registry


def _mcp_mounts(
    registry: Mapping[str, KnowledgeBase], keys: ApiKeys, policy: AccessPolicy, host: str
) -> Any:
    from agentic_retrieval.server.mcp import McpMounts

    return McpMounts(registry, keys, policy=policy, host=host)
