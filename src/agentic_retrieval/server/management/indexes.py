"""``/indexes``: create, read, update, list and delete indexes; statistics.

An existing index may gain fields; its existing fields keep their type, key, searchable,
filterable and vector settings (their chunks were built from them), as in Azure. An index a
``searchIndex`` knowledge source reads cannot be deleted (409).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentic_retrieval.errors import StoreUnavailableError
from agentic_retrieval.kb.definitions import IndexDefinition
from agentic_retrieval.kb.management import delete_index, put_index
from agentic_retrieval.kb.service import StoredDefinition
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    in_store_thread,
    list_body,
    not_found,
    page,
)
from agentic_retrieval.server.management.definitions import (
    DefinitionRoutes,
    add_definition_routes,
)
from agentic_retrieval.sources.local.store import LocalStore

_PROPERTIES = frozenset(f.alias or n for n, f in IndexDefinition.model_fields.items())


def add_index_routes(app: FastAPI, management: Management) -> None:
    """Register the index routes."""
    routes = DefinitionRoutes("index", "/indexes", "index", put_index, delete_index, _body)

    async def list_indexes(request: Request) -> Any:
        check_request(request, management.keys, "admin")
        defined = management.service.definitions("index") if management.service else []
        select = _select(request.query_params.get("$select"))
        items = [(d.name, _project(_body(d), select)) for d in defined]
        values, next_link = page(request, items)
        return list_body(values, next_link)

    async def statistics(name: str, request: Request) -> JSONResponse:
        check_request(request, management.keys, "admin")
        stored = routes.stored(management, name)
        body = await in_store_thread(
            management, "index", name, index_statistics, management, stored
        )
        return JSONResponse(body)

    add_routes(app, "/indexes", list_indexes, ["GET"])
    add_routes(app, "/indexes/{name}/search.stats", statistics, ["GET"])
    add_routes(app, "/indexes/{name}/stats", statistics, ["GET"])
    add_definition_routes(app, management, routes)


def _body(stored: StoredDefinition) -> dict[str, Any]:
    return {"@odata.etag": stored.etag, **IndexDefinition.model_validate(stored.body).to_wire()}


def _select(raw: str | None) -> list[str] | None:
    if raw is None or raw.strip() in ("", "*"):
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def _project(body: dict[str, Any], select: list[str] | None) -> dict[str, Any]:
    if select is None:
        return body
    unknown = [name for name in select if name not in _PROPERTIES]
    if unknown:
        raise ApiError(400, f"$select: unknown index property {', '.join(unknown)}.")
    return {k: v for k, v in body.items() if k in select or k == "name"}


def index_statistics(management: Management, stored: StoredDefinition) -> dict[str, Any]:
    """An index's ``documentCount``, ``storageSize`` and ``vectorIndexSize``.

    Raises:
        ResourceNotFoundError: The index was deleted meanwhile.
        StoreUnavailableError: Its file is gone (deleted meanwhile by another worker).
    """
    _, catalog = management.require_service()
    documents = catalog.index_documents(stored.name)
    if documents is None:
        raise not_found("index", stored.name)
    store = documents.documents.store
    with store.lease():
        count = documents.count()
        if not isinstance(store, LocalStore):  # serve --store: its rows in the database
            size = store.storage_size()
        else:
            try:
                size = store.path.stat().st_size
            except FileNotFoundError:
                raise StoreUnavailableError(store.path, "its index file is missing") from None
    vector = documents.index.vector_field
    return {
        "documentCount": count,
        "storageSize": size,
        "vectorIndexSize": count * (vector.dimensions or 0) * 4 if vector is not None else 0,
    }
