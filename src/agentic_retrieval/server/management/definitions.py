"""Create, read, replace and delete one kind of definition: the routes every collection shares.

Indexes, knowledge sources and knowledge bases are served alike: ``POST /<collection>``
creates (409 when the name is taken), ``GET``/``PUT``/``DELETE /<collection>/{name}`` (both
path forms) read, create or replace (``If-Match``/``If-None-Match``, 201 or 200/204) and
delete (204, or 404 in Azure's error shape). Each collection's module says what differs:
how a body is validated and stored (:mod:`agentic_retrieval.kb.management`), how a stored
definition reads back, and which names are read-only (knowledge bases served from ``--kb``
directories).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentic_retrieval.kb.graph_extraction import require_graph_version
from agentic_retrieval.kb.management import DefinitionLimits, refuse_reserved
from agentic_retrieval.kb.model_connections import require_version
from agentic_retrieval.kb.service import (
    Conditions,
    DefinitionKind,
    StoredDefinition,
)
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.kb.topic_profiles import require_topic_graph_version
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    conditions,
    definition_response,
    in_thread,
    not_found,
)
from agentic_retrieval.server.requests import read_json_object


class PutDefinition(Protocol):
    """Validates and stores a body (see :func:`agentic_retrieval.kb.management.put_index`)."""

    def __call__(
        self,
        service: ServiceState,
        body: dict[str, Any],
        name: str | None = None,
        conditions: Conditions = ...,
        *,
        creating: bool = False,
        limits: DefinitionLimits = ...,
    ) -> tuple[StoredDefinition, bool]:
        """Create or replace; returns the stored definition and whether it was created."""


DeleteDefinition = Callable[[ServiceState, str, Conditions], StoredDefinition | None]
"""Deletes by name (``None``: there was none); see ``kb.management.delete_index``."""


@dataclass(frozen=True)
class DefinitionRoutes:
    """How one collection of definitions is served.

    Attributes:
        kind: The stored kind.
        collection: The collection's path (``/indexes``).
        what: Its name in messages (``index``).
        put: Validates and stores a body.
        delete: Deletes by name.
        read: The body a read shows (``@odata.etag`` included).
        written: The body a create or replace answers with (default: ``read``).
        fixed: Read-only definitions served from elsewhere, by name (their read bodies).
        stored_hook: Called (on the event loop) after a create or replace is stored.
    """

    kind: DefinitionKind
    collection: str
    what: str
    put: PutDefinition
    delete: DeleteDefinition
    read: Callable[[StoredDefinition], dict[str, Any]]
    written: Callable[[StoredDefinition], dict[str, Any]] | None = None
    fixed: Callable[[], Mapping[str, dict[str, Any]]] = field(default=dict)
    stored_hook: Callable[[StoredDefinition], None] | None = None

    def stored(self, management: Management, name: str) -> StoredDefinition:
        """The stored definition called ``name``, or a 404."""
        stored = management.service.get(self.kind, name) if management.service else None
        if stored is None:
            raise not_found(self.what, name)
        return stored


def add_definition_routes(app: FastAPI, management: Management, routes: DefinitionRoutes) -> None:
    """Register create, read, replace and delete of ``routes`` (listing stays per collection)."""
    written = routes.written or routes.read

    def refuse_fixed(name: str | None) -> None:
        fixed: Collection[str] = routes.fixed()
        if name is not None:
            refuse_reserved(name, fixed)

    async def create(request: Request) -> Response:
        check_request(request, management.keys, "admin")
        body = await read_json_object(request)
        require_version(body, request.query_params.get("api-version"))
        require_graph_version(body, request.query_params.get("api-version"))
        require_topic_graph_version(body, request.query_params.get("api-version"))
        refuse_fixed(body.get("name") if isinstance(body.get("name"), str) else None)
        service, _ = management.require_service()
        stored, _ = await in_thread(
            routes.put, service, body, creating=True, limits=management.limits
        )
        if routes.stored_hook is not None:
            routes.stored_hook(stored)
        return definition_response(stored, written(stored), 201)

    async def get(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        fixed = routes.fixed().get(name)
        if fixed is not None:
            return JSONResponse(fixed)
        stored = routes.stored(management, name)
        return definition_response(stored, routes.read(stored), 200)

    async def put(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        body = await read_json_object(request)
        require_version(body, request.query_params.get("api-version"))
        require_graph_version(body, request.query_params.get("api-version"))
        require_topic_graph_version(body, request.query_params.get("api-version"))
        refuse_fixed(name)
        service, _ = management.require_service()
        stored, created = await in_thread(
            routes.put, service, body, name, conditions(request), limits=management.limits
        )
        if routes.stored_hook is not None:
            routes.stored_hook(stored)
        status = 201 if created else 200
        return definition_response(stored, written(stored), status, request=request)

    async def delete(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        refuse_fixed(name)
        service, _ = management.require_service()
        if await in_thread(routes.delete, service, name, conditions(request)) is None:
            raise not_found(routes.what, name)
        return Response(status_code=204)

    add_routes(app, routes.collection, create, ["POST"])
    item = f"{routes.collection}/{{name}}"
    add_routes(app, item, get, ["GET"])
    add_routes(app, item, put, ["PUT"])
    add_routes(app, item, delete, ["DELETE"])
