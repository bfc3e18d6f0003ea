"""What every management route shares: path forms, checks, conditions, paging."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentic_retrieval.errors import (
    DatabaseUnavailableError,
    ResourceNotFoundError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from agentic_retrieval.kb.background_embedding import BackgroundEmbedder
from agentic_retrieval.kb.catalog import KnowledgeBaseRegistry, ServiceCatalog
from agentic_retrieval.kb.graph_sync import GraphSynchronizer
from agentic_retrieval.kb.management import DefinitionLimits
from agentic_retrieval.kb.service import (
    STORES_DIR,
    Conditions,
    DefinitionKind,
    StoredDefinition,
)
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.permissions import Access
from agentic_retrieval.server.auth import (
    AccessPolicy,
    ApiKeys,
    BodyAccess,
    Grant,
    Role,
    accepts_body,
    require_role,
)
from agentic_retrieval.server.conversions import ConversionPool
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.server.requests import check_api_version, public_base_url
from agentic_retrieval.sources.local.query_threads import run_query

T = TypeVar("T")

MAX_PAGE_SIZE = 3000
_PARAM = re.compile(r"/\{(\w+)\}")


@dataclass
class Management:
    """What the management routes work on.

    Attributes:
        registry: Every knowledge base served (fixed and the service's).
        keys: The accepted keys.
        service: The data directory (``None``: the server only serves fixed knowledge bases).
        catalog: Live objects built from the service's definitions.
        max_file_bytes: Largest file a file knowledge source accepts.
        max_files: Most files one file knowledge source holds.
        policy: Identity tokens and permission rules (document reads by query keys are
            trimmed to what the caller's identity may see).
        conversions: Where uploaded files are converted (child processes, bounded).
        limits: How many indexes, knowledge sources and knowledge bases may be created.
        graphs: Runs the entity-graph extraction of file sources after their uploads.
        embedder: Embeds file sources' chunks after their uploads (``None``: the server
            runs with ``--no-embeddings``).
    """

    registry: KnowledgeBaseRegistry
    keys: ApiKeys
    service: ServiceState | None = None
    catalog: ServiceCatalog | None = None
    max_file_bytes: int = 16 * 1024 * 1024
    max_files: int = 10_000
    policy: AccessPolicy = field(default_factory=AccessPolicy)
    conversions: ConversionPool = field(default_factory=ConversionPool)
    limits: DefinitionLimits = field(default_factory=DefinitionLimits)
    graphs: GraphSynchronizer | None = None
    embedder: BackgroundEmbedder | None = None

    def require_service(self) -> tuple[ServiceState, ServiceCatalog]:
        """The data directory, or a 400 explaining how to get one."""
        if self.service is None or self.catalog is None:
            raise ApiError(
                400,
                "This server has no data directory, so it cannot create, change or delete "
                "anything: its knowledge bases are served read-only.",
                code="ManagementNotEnabled",
            )
        return self.service, self.catalog


def path_forms(template: str) -> list[str]:
    """A route template in both forms Azure accepts.

    ``/indexes/{name}/docs`` gives itself and ``/indexes('{name}')/docs``.
    """
    return [template, _PARAM.sub(r"('{\1}')", template)]


def add_routes(
    app: FastAPI,
    template: str,
    endpoint: Callable[..., Any],
    methods: Sequence[str],
    body: BodyAccess | None = None,
) -> None:
    """Register ``endpoint`` under both path forms of ``template``.

    ``body`` declares who may send it a body (default: admin keys, up to the body limit).
    """
    if body is not None:
        accepts_body(body)(endpoint)
    for path in path_forms(template):
        app.add_api_route(path, endpoint, methods=list(methods), include_in_schema=False)


def check_request(request: Request, keys: ApiKeys, needed: Role) -> Grant:
    """Authorize (401/403) and check the ``api-version`` query parameter (400)."""
    grant = require_role(keys, request.headers, needed)
    check_api_version(request.query_params.get("api-version"))
    return grant


async def read_access(request: Request, management: Management, grant: Grant) -> Access:
    """What a document read may return to this caller (admin keys: everything).

    Raises:
        ApiError: 401 for an identity token that does not validate.
    """
    identity = await management.policy.identity(request.headers)
    return management.policy.read_access(grant, identity)


def conditions(request: Request) -> Conditions:
    """The request's ``If-Match`` / ``If-None-Match``."""
    return Conditions(request.headers.get("if-match"), request.headers.get("if-none-match"))


def definition_response(
    stored: StoredDefinition, body: dict[str, Any], status: int, *, request: Request | None = None
) -> Response:
    """A definition's body with its ``@odata.etag`` (and ``ETag`` header).

    With ``request`` (a PUT), the body is sent only when the client asked for it with
    ``Prefer: return=representation``; otherwise an update answers 204.
    """
    headers = {"ETag": f'"{stored.etag}"'}
    if request is not None and status == 200 and not _wants_representation(request):
        return Response(status_code=204, headers=headers)
    return JSONResponse({"@odata.etag": stored.etag, **body}, status_code=status, headers=headers)


def page(
    request: Request, items: Iterable[tuple[str, T]], *, by_name: bool = True
) -> tuple[list[T], str | None]:
    """One page of ``(name, item)`` pairs (sorted by name) and the next page's link.

    Reads ``search`` with ``searchType=prefix`` (names starting with it), ``pageSize``
    (1-3000; default: everything) and ``$skipToken`` (from a previous ``@odata.nextLink``).
    Without ``by_name`` the caller has applied ``search`` itself.
    """
    params = request.query_params
    search = (params.get("search") or "") if by_name else ""
    search_type = params.get("searchType") or "prefix"
    if search_type != "prefix":
        raise ApiError(400, f"searchType: {search_type[:40]!r} is not supported; use 'prefix'.")
    size = _page_size(params.get("pageSize"))
    after = params.get("$skipToken")
    chosen = [
        (name, item)
        for name, item in sorted(items, key=lambda pair: pair[0])
        if name.startswith(search) and (after is None or name > after)
    ]
    if size is None or len(chosen) <= size:
        return [item for _, item in chosen], None
    shown = chosen[:size]
    query = {k: v for k, v in params.items() if k != "$skipToken"}
    query["$skipToken"] = shown[-1][0]
    link = f"{public_base_url(request)}{request.url.path}?{urlencode(query)}"
    return [item for _, item in shown], link


def list_body(values: list[Any], next_link: str | None) -> dict[str, Any]:
    """``{"value": [...], "@odata.nextLink": ...}``."""
    body: dict[str, Any] = {"value": values}
    if next_link is not None:
        body["@odata.nextLink"] = next_link
    return body


async def in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking work (SQLite writes, file conversion) off the event loop."""
    return await asyncio.to_thread(function, *args, **kwargs)


async def in_store_thread(
    management: Management,
    kind: DefinitionKind,
    name: str,
    function: Callable[..., T],
    *args: Any,
    **kwargs: Any,
) -> T:
    """:func:`in_thread` for work on the store of index or knowledge source ``name``.

    When the definition was deleted (or deleted and re-created) while the work ran, in this
    process or another, its store is closed or its file gone: that is a 404, like a request
    that arrived a moment later, not a server error.
    """
    return await _on_store(management, kind, name, in_thread(function, *args, **kwargs))


async def in_query_thread(
    management: Management,
    kind: DefinitionKind,
    name: str,
    function: Callable[..., T],
    *args: Any,
    **kwargs: Any,
) -> T:
    """:func:`in_store_thread` for a read (search, lookup, count), on the query threads.

    Queries never wait behind writes or conversions for a thread (see
    :mod:`~agentic_retrieval.sources.local.query_threads`).
    """
    return await _on_store(management, kind, name, run_query(function, *args, **kwargs))


async def _on_store(
    management: Management, kind: DefinitionKind, name: str, work: Awaitable[T]
) -> T:
    try:
        return await work
    except (StoreUnavailableError, StoreNotFoundError, sqlite3.Error) as exc:
        if store_is_gone(management, kind, name, exc):
            raise not_found(_WHAT[kind], name) from None
        raise


def store_is_gone(management: Management, kind: DefinitionKind, name: str, exc: Exception) -> bool:
    """Whether ``exc`` came from a store that ``name``'s definition no longer names."""
    if management.service is None:
        return False
    current = management.service.get(kind, name)
    if current is None:
        return True
    if current.store is None:  # a searchIndex source: its index cannot go while it exists
        return False
    if isinstance(exc, DatabaseUnavailableError):  # serve --store: the database, not the store
        return False
    named = management.service.path / STORES_DIR / current.store
    if isinstance(exc, sqlite3.Error):  # on a store still defined: a real failure
        return False
    failed = getattr(exc, "path", None)
    if failed is None:  # a store that could not be opened: was it replaced meanwhile?
        return named.exists()
    return str(failed) != str(named)


_WHAT: dict[DefinitionKind, str] = {
    "index": "index",
    "knowledgeSource": "knowledge source",
    "knowledgeBase": "knowledge base",
}


def not_found(what: str, name: str) -> ResourceNotFoundError:
    """The 404 for a missing resource."""
    return ResourceNotFoundError(f"No {what} named '{name}' exists.")


def _page_size(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise ApiError(400, f"pageSize: must be an integer from 1 to {MAX_PAGE_SIZE}.")
    return size


def _wants_representation(request: Request) -> bool:
    return "return=representation" in (request.headers.get("prefer") or "").replace(" ", "")
