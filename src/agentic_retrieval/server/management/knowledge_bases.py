"""``/knowledgebases``: create, read, update, list and delete knowledge bases.

Knowledge bases from ``--kb`` directories are listed and readable but read-only; the
service's own (``--data``) are full definitions with ETags.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentic_retrieval.errors import InvalidDefinitionError, ResourceConflictError
from agentic_retrieval.kb.definitions import KnowledgeBaseDefinition, parse_knowledge_base
from agentic_retrieval.kb.service import Conditions, DefinitionView, StoredDefinition
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
        stored, _ = await in_thread(_put, management, body, None, Conditions(), creating=True)
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
        stored, created = await in_thread(_put, management, body, name, conditions(request))
        status = 201 if created else 200
        return definition_response(stored, _body(stored, redact=False), status, request=request)

    async def delete(name: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        _refuse_fixed(management, name)
        service, _ = management.require_service()
        deleted = await in_thread(
            service.delete, "knowledgeBase", name, conditions=conditions(request)
        )
        return Response(status_code=204 if deleted is not None else 404)

    add_routes(app, "/knowledgebases", list_bases, ["GET"])
    add_routes(app, "/knowledgebases", create, ["POST"])
    add_routes(app, "/knowledgebases/{name}", get, ["GET"])
    add_routes(app, "/knowledgebases/{name}", put, ["PUT"])
    add_routes(app, "/knowledgebases/{name}", delete, ["DELETE"])


def describe_fixed(kb: KnowledgeBase) -> dict[str, Any]:
    """A knowledge base served from a directory: names, kinds and descriptions, no secrets."""
    return {
        "name": kb.name,
        "description": kb.description or None,
        "knowledgeSources": [
            {"name": name, "kind": source.kind, "description": source.description or None}
            for name, source in kb.sources.items()
        ],
        "retrievalReasoningEffort": {"kind": kb.defaults.reasoning_effort},
        "outputMode": kb.defaults.output_mode,
    }


def _put(
    management: Management,
    body: dict[str, Any],
    name: str | None,
    condition: Conditions,
    *,
    creating: bool = False,
) -> tuple[StoredDefinition, bool]:
    definition = parse_knowledge_base(body, name)
    _refuse_fixed(management, definition.name)
    service, _ = management.require_service()

    def check(view: DefinitionView, current: StoredDefinition | None) -> None:
        if creating and current is not None:
            raise ResourceConflictError(
                f"A knowledge base named '{definition.name}' already exists; update it with "
                "PUT or choose another name."
            )
        missing = [n for n in definition.source_names if view.get("knowledgeSource", n) is None]
        if missing:
            raise InvalidDefinitionError(
                f"knowledgeSources: no knowledge source named {', '.join(map(repr, missing))} "
                "exists; create it first"
            )

    return service.put(
        "knowledgeBase",
        definition.name,
        _stored_body(definition),
        conditions=condition,
        check=check,
    )


def _stored_body(definition: KnowledgeBaseDefinition) -> dict[str, Any]:
    body = definition.to_wire()
    body.pop("@odata.etag", None)
    return body


def _body(stored: StoredDefinition, *, redact: bool = True) -> dict[str, Any]:
    definition = KnowledgeBaseDefinition.model_validate(stored.body)
    body = definition.redacted() if redact else definition.to_wire()
    return {"@odata.etag": stored.etag, **body}


def _refuse_fixed(management: Management, name: str) -> None:
    if name in management.registry.fixed:
        raise ResourceConflictError(
            f"The knowledge base '{name}' is served from a directory (--kb) and is read-only "
            "over REST; change it with the command line."
        )
