"""``/knowledgebases``: create, read, update, list and delete knowledge bases.

Knowledge bases from ``--kb`` directories are listed and readable but read-only; the
service's own (``--data``) are full definitions with ETags.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from agentic_retrieval.kb.definitions import KnowledgeBaseDefinition
from agentic_retrieval.kb.management import (
    UNCONDITIONAL,
    UNLIMITED,
    DefinitionLimits,
    delete_knowledge_base,
    put_knowledge_base,
)
from agentic_retrieval.kb.model_connections import without_headers
from agentic_retrieval.kb.service import (
    Conditions,
    StoredDefinition,
)
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    list_body,
    page,
)
from agentic_retrieval.server.management.definitions import (
    DefinitionRoutes,
    add_definition_routes,
)


def add_knowledge_base_routes(app: FastAPI, management: Management) -> None:
    """Register the knowledge-base routes."""
    reserved = management.registry.fixed

    def put(
        service: ServiceState,
        body: dict[str, Any],
        name: str | None = None,
        conditions: Conditions = UNCONDITIONAL,
        *,
        creating: bool = False,
        limits: DefinitionLimits = UNLIMITED,
    ) -> tuple[StoredDefinition, bool]:
        return put_knowledge_base(
            service, body, name, conditions, creating=creating, reserved=reserved, limits=limits
        )

    def delete(service: ServiceState, name: str, conditions: Conditions) -> StoredDefinition | None:
        return delete_knowledge_base(service, name, conditions, reserved=reserved)

    def fixed() -> dict[str, dict[str, Any]]:
        return {name: describe_fixed(kb) for name, kb in reserved.items()}

    routes = DefinitionRoutes(
        "knowledgeBase",
        "/knowledgebases",
        "knowledge base",
        put,
        delete,
        _body,
        written=lambda stored: _body(stored, redact=False),  # the caller sent the keys
        fixed=fixed,
    )

    async def list_bases(request: Request) -> Any:
        check_request(request, management.keys, "admin")
        items = list(fixed().items())
        if management.service is not None:
            items += [(d.name, _body(d)) for d in management.service.definitions("knowledgeBase")]
        values, next_link = page(request, items)
        return list_body(values, next_link)

    add_routes(app, "/knowledgebases", list_bases, ["GET"])
    add_definition_routes(app, management, routes)


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
    body = definition.redacted() if redact else without_headers(definition.to_wire())
    return {"@odata.etag": stored.etag, **body}
