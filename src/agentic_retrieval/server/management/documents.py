"""``/indexes/{name}/docs``: index batches, lookups, counts and searches of documents.

The paths the Azure SDK uses (``docs/search.index``, ``docs/search.post.search``,
``docs('key')``, ``docs/$count``) and the REST forms (``docs/index``, ``docs/search``,
``GET docs?search=``) are both served. Query keys may look up, count and search; only admin
keys write. Reads with a query key see only the documents the caller's identity token
(``x-ms-query-source-authorization``) may see; an admin key reads everything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from agentic_retrieval.errors import (
    PermissionsNotEnforceableError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from agentic_retrieval.kb.definitions import FLOAT32_MAX
from agentic_retrieval.kb.index_documents import (
    HEAVY_BATCH_VALUES,
    IndexDocuments,
    IndexingResult,
    SearchParameters,
)
from agentic_retrieval.kb.topic_profiles import TOPIC_GRAPH_VERSION
from agentic_retrieval.permissions import Access
from agentic_retrieval.server.auth import QUERY_BODY, UPLOAD_BODY
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    in_query_thread,
    in_store_thread,
    in_thread,
    not_found,
    read_access,
    store_is_gone,
)
from agentic_retrieval.server.requests import read_json_object
from agentic_retrieval.sources.topic_graph import TopicGraphSetting
from agentic_retrieval.wire.models import describe_validation_error

UNSUPPORTED_SEARCH = {
    "orderby": "$orderby",
    "facets": "facets",
    "highlight": "highlight",
    "scoringProfile": "scoringProfile",
}
"""Search parameters this service rejects rather than ignores (their results would differ)."""
_GET_NAMES = {
    "$filter": "filter",
    "$top": "top",
    "$skip": "skip",
    "$select": "select",
    "$count": "count",
    "$orderby": "orderby",
    "facet": "facets",
}


def add_document_routes(app: FastAPI, management: Management) -> None:
    """Register the document routes."""

    async def index_batch(name: str, request: Request) -> JSONResponse:
        check_request(request, management.keys, "admin")
        documents = _documents(management, name)
        body = await read_json_object(request)
        # checking 1,000 documents' values is seconds of work: off the event loop
        batch = await in_thread(documents.validate_batch, body.get("value"))
        with _heavy_turn(documents.collection_values(batch)):
            results = await in_store_thread(
                management, "index", name, _apply, management, name, documents, batch
            )
        status = 200 if all(r.succeeded for r in results) else 207
        return JSONResponse({"value": [r.to_wire() for r in results]}, status_code=status)

    async def count(name: str, request: Request) -> PlainTextResponse:
        grant = check_request(request, management.keys, "query")
        access = await read_access(request, management, grant)
        documents = _documents(management, name)
        with _permissions_named(name):
            visible = await in_query_thread(
                management, "index", name, documents.count_visible, access
            )
        return PlainTextResponse(str(visible))

    async def lookup(name: str, key: str, request: Request) -> JSONResponse:
        grant = check_request(request, management.keys, "query")
        access = await read_access(request, management, grant)
        documents = _documents(management, name)
        select = _names(request.query_params.get("$select"))
        found = await in_query_thread(
            management, "index", name, documents.lookup, key, select, access=access
        )
        if found is None:
            raise not_found("document", key)
        return JSONResponse(found)

    async def search_get(name: str, request: Request) -> JSONResponse:
        grant = check_request(request, management.keys, "query")
        access = await read_access(request, management, grant)
        params = {_GET_NAMES.get(k, k): v for k, v in request.query_params.items()}
        params.pop("api-version", None)
        return await _search(management, name, params, access)

    async def search_post(name: str, request: Request) -> JSONResponse:
        grant = check_request(request, management.keys, "query")
        access = await read_access(request, management, grant)
        body = await read_json_object(request)
        _require_topic_graph_version(body, request.query_params.get("api-version"))
        return await _search(management, name, body, access)

    for suffix in ("docs/index", "docs/search.index"):
        add_routes(app, f"/indexes/{{name}}/{suffix}", index_batch, ["POST"], UPLOAD_BODY)
    for suffix in ("docs/search", "docs/search.post.search"):
        add_routes(app, f"/indexes/{{name}}/{suffix}", search_post, ["POST"], QUERY_BODY)
    add_routes(app, "/indexes/{name}/docs/$count", count, ["GET"])
    add_routes(app, "/indexes/{name}/docs", search_get, ["GET"])
    add_routes(app, "/indexes/{name}/docs/{key}", lookup, ["GET"])


_heavy_batches = threading.BoundedSemaphore(1)
HEAVY_RETRY_SECONDS = 5


@contextmanager
def _heavy_turn(values: int) -> Iterator[None]:
    """Apply a heavy batch (:data:`HEAVY_BATCH_VALUES`) only while no other one is applied.

    Another meanwhile is a 503 with ``Retry-After``, as Azure answers an indexing load it
    throttles (its SDKs retry it): heavy batches take turns in each process instead of
    sharing the cores the queries need.
    """
    if values < HEAVY_BATCH_VALUES:
        yield
        return
    if not _heavy_batches.acquire(blocking=False):
        raise ApiError(
            503,
            f"value: this batch holds {values} collection values, and another batch of at "
            f"least {HEAVY_BATCH_VALUES} is being applied; large batches are applied one at "
            f"a time. Retry after {HEAVY_RETRY_SECONDS} seconds.",
            code="ServiceUnavailable",
            headers={"Retry-After": str(HEAVY_RETRY_SECONDS)},
        )
    try:
        yield
    finally:
        _heavy_batches.release()


def _documents(management: Management, name: str) -> IndexDocuments:
    _, catalog = management.require_service()
    try:
        documents = catalog.index_documents(name)
    except (StoreUnavailableError, StoreNotFoundError) as exc:
        if store_is_gone(management, "index", name, exc):  # deleted while being opened
            raise not_found("index", name) from None
        raise
    if documents is None:
        raise not_found("index", name)
    return documents


def _apply(
    management: Management,
    name: str,
    documents: IndexDocuments,
    batch: list[tuple[str, dict[str, Any]]],
) -> list[IndexingResult]:
    service, _ = management.require_service()
    stored = service.get("index", name)
    if stored is None or stored.store is None:
        raise not_found("index", name)
    with service.ingestion_run(stored.store) as run:
        results = documents.apply(batch)
        for result in results:
            if result.succeeded:
                run.processed += 1
            else:
                run.fail(result.key, result.error_message or "", result.status_code)
    return results


async def _search(
    management: Management, name: str, raw: Mapping[str, Any], access: Access
) -> JSONResponse:
    documents = _documents(management, name)
    params = search_parameters(raw)
    with _permissions_named(name):
        body = await in_query_thread(
            management, "index", name, documents.search, params, access=access
        )
    return JSONResponse(body)


@contextmanager
def _permissions_named(index: str) -> Iterator[None]:
    """The store's "no permission metadata" (403) said in the index's terms."""
    try:
        yield
    except PermissionsNotEnforceableError:
        raise PermissionsNotEnforceableError(
            f"index '{index}' holds no permission metadata (it has no permissionFilter "
            "fields), so a query key cannot read its documents while permissions are enforced"
        ) from None


def search_parameters(raw: Mapping[str, Any]) -> SearchParameters:
    """A search request (POST body, or GET parameters renamed) as :class:`SearchParameters`.

    Raises:
        ApiError: 400 for a parameter this service does not run or a malformed value.
    """
    for name, shown in UNSUPPORTED_SEARCH.items():
        if raw.get(name) not in (None, "", []):
            raise ApiError(400, f"{shown}: not supported by this service.")
    return SearchParameters(
        search=_text(raw, "search") or "*",
        filter=_text(raw, "filter"),
        top=_integer(raw, "top"),
        skip=_integer(raw, "skip") or 0,
        select=tuple(_names(raw.get("select")) or ()) or None,
        count=_flag(raw.get("count")),
        vector=_vector(raw.get("vectorQueries")),
        topic_graph=_topic_graph(raw.get("vectorQueries")),
        extra={
            k: v
            for k, v in raw.items()
            if v is not None
            and k not in ("search", "filter", "top", "skip", "select", "count", "vectorQueries")
        },
    )


def _text(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name}: expected a string.")
    return value


def _integer(raw: Mapping[str, Any], name: str) -> int | None:
    value = raw.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ApiError(400, f"{name}: expected an integer, got {value!r}.") from None
    if number < 0:
        raise ApiError(400, f"{name}: must not be negative.")
    return number


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _names(value: Any) -> list[str] | None:
    if value is None:
        return None
    parts = value if isinstance(value, list) else str(value).split(",")
    names = [str(part).strip() for part in parts if str(part).strip()]
    return names or None


def _vector(queries: Any) -> tuple[float, ...] | None:
    if not queries:
        return None
    if not isinstance(queries, list) or len(queries) != 1 or not isinstance(queries[0], dict):
        raise ApiError(400, "vectorQueries: this service runs one vector query per search.")
    query = queries[0]
    if query.get("kind", "vector") != "vector":
        raise ApiError(
            400,
            f"vectorQueries: kind {query.get('kind')!r} needs a vectorizer, which this service "
            "does not run; send the query's vector (kind 'vector').",
        )
    vector = query.get("vector")
    if not isinstance(vector, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and abs(v) <= FLOAT32_MAX
        for v in vector
    ):
        raise ApiError(400, "vectorQueries[0].vector: expected a list of finite numbers.")
    return tuple(float(v) for v in vector)


def _topic_graph(queries: Any) -> TopicGraphSetting | None:
    """The vector query's ``topicGraph`` (2026-11-01-preview), checked (``_vector`` ran first)."""
    raw = queries[0].get("topicGraph") if queries else None
    if raw is None:
        return None
    try:
        return TopicGraphSetting.model_validate(raw)
    except ValidationError as exc:
        detail = describe_validation_error(exc)
        raise ApiError(400, f"vectorQueries[0].topicGraph: {detail}") from None


def _require_topic_graph_version(body: Mapping[str, Any], api_version: str | None) -> None:
    """Refuse a vector query's ``topicGraph`` under a version before ``2026-11-01-preview``."""
    queries = body.get("vectorQueries")
    if api_version == TOPIC_GRAPH_VERSION or not isinstance(queries, list):
        return
    for position, query in enumerate(queries):
        if isinstance(query, Mapping) and query.get("topicGraph") is not None:
            raise ApiError(
                400,
                f"vectorQueries[{position}].topicGraph: topic graphs need api-version "
                f"{TOPIC_GRAPH_VERSION}.",
            )
