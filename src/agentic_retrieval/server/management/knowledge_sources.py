"""``/knowledgesources``: create, read, update, list and delete knowledge sources; status.

Kinds: ``searchIndex`` (over an index of this service) and ``file`` (files uploaded to the
source, see :mod:`~agentic_retrieval.server.management.files`). A source a knowledge base
still uses cannot be deleted (409), nor can its kind change (400). A file source's status
also says how it ranks: ``retrievalMode`` (``hybrid`` or ``lexical``), ``embeddingModel``
(``local``: the bundled model, or ``null``), ``embeddingProgress`` (``pendingChunks``: stored
and found by their words, their vectors still being made in the background;
``embeddedChunks``) and, when lexical or partly so while chunks are pending, ``retrievalNote``
(why).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentic_retrieval.kb.definitions import KnowledgeSourceDefinition
from agentic_retrieval.kb.management import delete_knowledge_source, put_knowledge_source
from agentic_retrieval.kb.model_connections import without_headers
from agentic_retrieval.kb.service import IngestionHistory, IngestionRun, StoredDefinition
from agentic_retrieval.kb.source_kinds import SOURCE_KINDS
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    in_store_thread,
    list_body,
    page,
)
from agentic_retrieval.server.management.definitions import (
    DefinitionRoutes,
    add_definition_routes,
)
from agentic_retrieval.sources.local.documents import DocumentStore


def add_knowledge_source_routes(app: FastAPI, management: Management) -> None:
    """Register the knowledge-source routes."""

    def synchronize_graph(stored: StoredDefinition) -> None:
        # an ontology attached to a source that holds files: read them now (a no-op when
        # the source has no graph, or its files were read already)
        if management.graphs is not None:
            management.graphs.schedule(stored.name)

    routes = DefinitionRoutes(
        "knowledgeSource",
        "/knowledgesources",
        "knowledge source",
        put_knowledge_source,
        delete_knowledge_source,
        _body,
        stored_hook=synchronize_graph,
    )

    async def list_sources(request: Request) -> Any:
        check_request(request, management.keys, "admin")
        defined = management.service.definitions("knowledgeSource") if management.service else []
        values, next_link = page(request, [(d.name, _body(d)) for d in defined])
        return list_body(values, next_link)

    async def status(name: str, request: Request) -> JSONResponse:
        check_request(request, management.keys, "admin")
        stored = routes.stored(management, name)
        body = await in_store_thread(
            management, "knowledgeSource", name, _status, management, stored
        )
        return JSONResponse(body)

    add_routes(app, "/knowledgesources", list_sources, ["GET"])
    add_routes(app, "/knowledgesources/{name}/status", status, ["GET"])
    add_definition_routes(app, management, routes)


def _body(stored: StoredDefinition) -> dict[str, Any]:
    definition = KnowledgeSourceDefinition.model_validate(stored.body)
    return {"@odata.etag": stored.etag, **without_headers(definition.to_wire())}


def _status(management: Management, stored: StoredDefinition) -> dict[str, Any]:
    service, catalog = management.require_service()
    definition = KnowledgeSourceDefinition.model_validate(stored.body)
    kind = SOURCE_KINDS[definition.kind]
    store_name = kind.store_name(service, definition, stored)
    documents = kind.documents(catalog, definition)
    count = documents.count() if documents is not None else 0
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
    if isinstance(documents, DocumentStore):  # a file source: how it ranks, and why
        retrieval = documents.retrieval_mode()
        body["retrievalMode"] = retrieval.mode
        body["embeddingModel"] = retrieval.model
        progress = documents.embedding_progress()
        body["embeddingProgress"] = {
            "pendingChunks": progress.pending,
            "embeddedChunks": progress.embedded,
        }
        if retrieval.note is not None:
            body["retrievalNote"] = retrieval.note
    if kind.owns_store:  # it takes uploads
        body["fileCapacity"] = {
            "maxFileCount": management.max_files,
            "remainingFileCount": max(management.max_files - count, 0),
            "maxFileSizeBytes": management.max_file_bytes,
        }
    graph = management.graphs.statistics(stored, definition) if management.graphs else None
    if graph is not None:
        body["graphStatistics"] = graph
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
