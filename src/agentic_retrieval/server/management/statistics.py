"""``/servicestats`` and ``/indexstats``: what the service holds, as the SDK reads it.

``SearchIndexClient.get_service_statistics()`` and the newest SDK's
``list_index_stats_summary()`` read these. Counters of what this service cannot hold
(indexers, data sources, skillsets, synonym maps, aliases) are 0 with a quota of 0; the
others have no quota (``null``); no limits are claimed.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from agentic_retrieval.errors import (
    ResourceNotFoundError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from agentic_retrieval.kb.service import DefinitionKind
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    in_thread,
    list_body,
    page,
    store_is_gone,
)
from agentic_retrieval.server.management.indexes import index_statistics

_NONE_HERE = ("aliasesCount", "indexersCount", "dataSourcesCount", "synonymMaps", "skillsetCount")


def add_statistics_routes(app: FastAPI, management: Management) -> None:
    """Register ``/servicestats`` and ``/indexstats`` (admin keys)."""

    async def service_statistics(request: Request) -> dict[str, Any]:
        check_request(request, management.keys, "admin")
        return await in_thread(_service_statistics, management)

    async def index_summaries(request: Request) -> dict[str, Any]:
        check_request(request, management.keys, "admin")
        summaries = await in_thread(_summaries, management)
        values, next_link = page(request, [(s["name"], s) for s in summaries])
        return list_body(values, next_link)

    add_routes(app, "/servicestats", service_statistics, ["GET"])
    add_routes(app, "/indexstats", index_summaries, ["GET"])


def _summaries(management: Management) -> list[dict[str, Any]]:
    """Each index's statistics; an index deleted while they are read is left out."""
    if management.service is None:
        return []
    summaries = []
    for stored in management.service.definitions("index"):
        try:
            statistics = index_statistics(management, stored)
        except (ResourceNotFoundError, StoreUnavailableError, StoreNotFoundError) as exc:
            if isinstance(exc, ResourceNotFoundError) or store_is_gone(
                management, "index", stored.name, exc
            ):
                continue
            raise
        summaries.append({"name": stored.name, **statistics})
    return summaries


def _service_statistics(management: Management) -> dict[str, Any]:
    summaries = _summaries(management)

    def count(kind: DefinitionKind) -> int:
        service = management.service
        return len(service.definitions(kind)) if service is not None else 0

    counters = {
        "documentCount": _counter(sum(s["documentCount"] for s in summaries)),
        "indexesCount": _counter(len(summaries)),
        "storageSize": _counter(sum(s["storageSize"] for s in summaries)),
        "vectorIndexSize": _counter(sum(s["vectorIndexSize"] for s in summaries)),
        "knowledgeSourcesCount": _counter(count("knowledgeSource")),
        "knowledgeBasesCount": _counter(count("knowledgeBase")),
    }
    counters.update({name: _counter(0, quota=0) for name in _NONE_HERE})
    return {"counters": counters, "limits": {}}


def _counter(usage: int, quota: int | None = None) -> dict[str, int | None]:
    return {"usage": usage, "quota": quota}
