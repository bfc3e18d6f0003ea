"""``/knowledgebases``: create, read, update, list and delete knowledge bases.

Knowledge bases from ``--kb`` directories are listed and readable but read-only; the
service's own (``--data``) are full definitions with ETags.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentic_retrieval.kb.definitions import KnowledgeBaseDefinition
from agentic_retrieval.kb.management import (
    delete_knowledge_base,
    put_knowledge_base,
    refuse_reserved,
)
from agentic_retrieval.kb.service import StoredDefinition
from agentic_retrieval.knowledge_base import KnowledgeBase
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


def add_knowledge_base_routes(app: FastAPI, management: Management) -> None:
    """Register the knowledge-base routes."""

    async def list_bases(request: Request) -> Any:
        check_request(request, management.keys, "admin")
        items: list[tuple[str, dict[str, Any]]] = [
            (name, describe_fixed(kb)) for name, kb in management.registry.fixed.items()
        ]
        if management.service is not None:
            items += [(d.name, _body(d)) for d in management.service.definitions("knowledgeBase")]
        values, next_link = page(request, items)
        return list_body(values, next_link)

    async def create(request: Request) -> Response:
        check_request(request, management.keys, "admin")
        body = await json_body(request)
        service, _ = management.require_service()
        stored, _ = await in_thread(
            put_knowledge_base, service, body, creating=True, reserved=management.registry.fixed
        )
        return definition_response(stored, _body(stored, redact=False), 201)

    async def get(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        fixed = management.registry.fixed.get(name)
        if fixed is not None:
            return JSONResponse(describe_fixed(fixed))
        stored = management.service.get("knowledgeBase", name) if management.service else None
        if stored is None:
            raise not_found("knowledge base", name)
        return definition_response(stored, _body(stored), 200)

    async def put(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        body = await json_body(request)
        service, _ = management.require_service()
        stored, created = await in_thread(
            put_knowledge_base,
            service,
            body,
            name,
            conditions(request),
            reserved=management.registry.fixed,
        )
        status = 201 if created else 200
        return definition_response(stored, _body(stored, redact=False), status, request=request)

    async def delete(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        refuse_reserved(name, management.registry.fixed)
        service, _ = management.require_service()
        deleted = await in_thread(
            delete_knowledge_base,
            service,
            name,
            conditions(request),
            reserved=management.registry.fixed,
        )
        return Response(status_code=204 if deleted is not None else 404)

    add_routes(app, "/knowledgebases", list_bases, ["GET"])
    add_routes(app, "/knowledgebases", create, ["POST"])
    add_routes(app, "/knowledgebases/{name}", get, ["GET"])
    add_routes(app, "/knowledgebases/{name}", put, ["PUT"])
    add_routes(app, "/knowledgebases/{name}", delete, ["DELETE"])


def describe_fixed(kb: KnowledgeBase) -> dict[str, Any]:
    """A knowledge base served from a directory: names, kinds and descriptions, no secrets."""
    effort = kb.defaults.reasoning_effort
    return {
        "name": kb.name,
        "description": kb.description or None,
        "knowledgeSources": [
            {"name": name, "kind": source.kind, "description": source.description or None}
            for name, source in kb.sources.items()
        ],
        # unset: decided per request (low with a chat model, else minimal), as Azure omits it
        **({"retrievalReasoningEffort": {"kind": effort}} if effort else {}),
        "outputMode": kb.defaults.output_mode,
    }


def _body(stored: StoredDefinition, *, redact: bool = True) -> dict[str, Any]:
    definition = KnowledgeBaseDefinition.model_validate(stored.body)
    body = definition.redacted() if redact else definition.to_wire()
    return {"@odata.etag": stored.etag, **body}
