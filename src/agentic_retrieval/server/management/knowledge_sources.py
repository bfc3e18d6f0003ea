"""``/knowledgesources``: create, read, update, list and delete knowledge sources; status.

Kinds: ``searchIndex`` (over an index of this service) and ``file`` (files uploaded to the
source, see :mod:`~agentic_retrieval.server.management.files`). A source a knowledge base
still uses cannot be deleted (409), nor can its kind change (400).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentic_retrieval.errors import InvalidDefinitionError, ResourceConflictError
from agentic_retrieval.kb.definitions import KnowledgeSourceDefinition, parse_knowledge_source
from agentic_retrieval.kb.service import (
    Conditions,
    DefinitionView,
    IngestionHistory,
    IngestionRun,
    StoredDefinition,
)
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    conditions,
    definition_response,
    in_thread,
    json_body,
    list_body,
    not_found,
    page,
)


def add_knowledge_source_routes(app: FastAPI, management: Management) -> None:
    """Register the knowledge-source routes."""

    async def list_sources(request: Request) -> Any:
        check_request(request, management.keys, "admin")
        defined = management.service.definitions("knowledgeSource") if management.service else []
        values, next_link = page(request, [(d.name, _body(d)) for d in defined])
        return list_body(values, next_link)

    async def create(request: Request) -> Response:
        check_request(request, management.keys, "admin")
        body = await json_body(request)
        stored, _ = await in_thread(_put, management, body, None, Conditions(), creating=True)
        return definition_response(stored, _body(stored), 201)

    async def get(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        stored = _stored(management, name)
        return definition_response(stored, _body(stored), 200)

    async def put(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        body = await json_body(request)
        stored, created = await in_thread(_put, management, body, name, conditions(request))
        return definition_response(stored, _body(stored), 201 if created else 200, request=request)

    async def delete(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        service, _ = management.require_service()
        deleted = await in_thread(
            service.delete,
            "knowledgeSource",
            name,
            conditions=conditions(request),
            check=_unused(name),
        )
        return Response(status_code=204 if deleted is not None else 404)

    async def status(name: str, request: Request) -> JSONResponse:
        check_request(request, management.keys, "admin")
        stored = _stored(management, name)
        return JSONResponse(await in_thread(_status, management, stored))

    add_routes(app, "/knowledgesources", list_sources, ["GET"])
    add_routes(app, "/knowledgesources", create, ["POST"])
    add_routes(app, "/knowledgesources/{name}/status", status, ["GET"])
    add_routes(app, "/knowledgesources/{name}", get, ["GET"])
    add_routes(app, "/knowledgesources/{name}", put, ["PUT"])
    add_routes(app, "/knowledgesources/{name}", delete, ["DELETE"])


def _stored(management: Management, name: str) -> StoredDefinition:
    stored = management.service.get("knowledgeSource", name) if management.service else None
    if stored is None:
        raise not_found("knowledge source", name)
    return stored


def _put(
    management: Management,
    body: dict[str, Any],
    name: str | None,
    condition: Conditions,
    *,
    creating: bool = False,
) -> tuple[StoredDefinition, bool]:
    definition = parse_knowledge_source(body, name)
    service, _ = management.require_service()

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if creating and current is not None:
            raise ResourceConflictError(
                f"A knowledge source named '{definition.name}' already exists; update it "
                "with PUT or choose another name."
            )
        if current is not None and current.body.get("kind") != definition.kind:
            raise InvalidDefinitionError(
                f"kind: the knowledge source '{definition.name}' is of kind "
                f"{current.body.get('kind')!r}; a kind cannot change (delete and re-create it)"
            )
        index = definition.index_name
        if index is not None and view.get("index", index) is None:
            raise InvalidDefinitionError(
                f"searchIndexParameters.searchIndexName: no index named '{index}' exists; "
                "create it first"
            )

    body_to_store = definition.to_wire()
    body_to_store.pop("@odata.etag", None)
    if body_to_store.get("fileParameters") is not None:
        body_to_store["fileParameters"].pop("createdResources", None)
    return service.put(
        "knowledgeSource",
        definition.name,
        body_to_store,
        conditions=condition,
        check=check,
        with_store=definition.kind == "file",
    )


def _unused(name: str) -> Any:
    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        users = [
            d.name
            for d in view.definitions("knowledgeBase")
            if any(ref.get("name") == name for ref in d.body.get("knowledgeSources") or [])
        ]
        if users:
            raise ResourceConflictError(
                f"The knowledge source '{name}' is used by knowledge base(s) "
                f"{', '.join(users)}; remove it from them (or delete them) first."
            )

    return check


def _body(stored: StoredDefinition) -> dict[str, Any]:
    definition = KnowledgeSourceDefinition.model_validate(stored.body)
    return {"@odata.etag": stored.etag, **definition.to_wire()}


def _status(management: Management, stored: StoredDefinition) -> dict[str, Any]:
    service, catalog = management.require_service()
    definition = KnowledgeSourceDefinition.model_validate(stored.body)
    if definition.kind == "file":
        store_name = stored.store
        documents = catalog.file_documents(definition.name)
        count = documents.count() if documents is not None else 0
    else:
        index = service.get("index", definition.index_name or "")
        store_name = index.store if index is not None else None
        index_documents = catalog.index_documents(definition.index_name or "")
        count = index_documents.count() if index_documents is not None else 0
    history = service.ingestion(store_name) if store_name else IngestionHistory()
    body: dict[str, Any] = {
        "kind": definition.kind,
        "synchronizationStatus": "active",
        "synchronizationInterval": None,
        "currentSynchronizationState": _run(history.current) if history.current else None,
        "lastSynchronizationState": _run(history.last, done=True) if history.last else None,
        "statistics": _statistics(history),
        "documentCount": count,
    }
    if definition.kind == "file":
        body["fileCapacity"] = {
            "maxFileCount": management.max_files,
            "remainingFileCount": max(management.max_files - count, 0),
            "maxFileSizeBytes": management.max_file_bytes,
        }
    return body


def _run(run: IngestionRun, *, done: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"startTime": run.start_time}
    if done:
        body["endTime"] = run.end_time or run.start_time
    body.update(
        {
            "itemsUpdatesProcessed": run.processed,
            "itemsUpdatesFailed": run.failed,
            "itemsSkipped": run.skipped,
            "errors": list(run.errors),
        }
    )
    return body


def _statistics(history: IngestionHistory) -> dict[str, Any]:
    runs = history.runs
    average = history.total_seconds / runs if runs else 0.0
    return {
        "totalSynchronization": runs,
        "averageSynchronizationDuration": f"PT{average:.3f}S",
        "averageItemsProcessedPerSynchronization": round(history.total_items / runs) if runs else 0,
    }
