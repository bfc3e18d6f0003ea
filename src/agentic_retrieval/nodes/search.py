"""``search``: one subquery against one knowledge source (one ``Send`` task per pair).

The task never raises: a source that fails, times out or rejects its filter produces an
activity record with an ``error`` and marks the response partial, and the other tasks' hits
still flow to ``rerank``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from typing import Any

from langgraph.runtime import Runtime
from pydantic import ValidationError

from agentic_retrieval.context import Context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.nodes._shared import NodeFn
from agentic_retrieval.odata import ODataError
from agentic_retrieval.sources.base import Hit, KnowledgeSource, SearchQuery, SourceError
from agentic_retrieval.state import ActivityEntry, RetrievedHit, SearchTask
from agentic_retrieval.wire.activity import elapsed_ms, error_detail, wire_kind

logger = logging.getLogger(__name__)


def make_search(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def search(task: SearchTask, runtime: Runtime[Context]) -> dict[str, Any]:
        """Run ``task`` and return its hits and activity record."""
        source = bindings.sources[task.source]
        key = f"search:{task.subquery.id}:{task.source}"
        wall, clock = time.time(), time.perf_counter()
        query = SearchQuery(
            text=task.subquery.text, filter=task.filter, top=task.top, goal=task.subquery.goal
        )
        hits, error, deadline_hit = await _run(source, query, task)
        record = _record(source, query, len(hits), wall, elapsed_ms(clock), error)
        runtime.stream_writer(
            {
                "event": "searched",
                "source": source.name,
                "query": query.text,
                "count": len(hits),
                "elapsedMs": record["elapsedMs"],
                "error": error["message"] if error else None,
            }
        )
        retrieved = [
            RetrievedHit(
                **hit.model_dump(exclude={"source"}),
                source=source.name,
                subquery_id=task.subquery.id,
                query=query.text,
                activity_key=key,
            )
            for hit in hits
        ]
        update: dict[str, Any] = {
            "hits": retrieved,
            "activity_log": [ActivityEntry(key=key, started=wall, record=record)],
        }
        if error:
            update["partial"] = True
        if deadline_hit:
            update["timed_out"] = True
        return update

    return search


def _record(
    source: KnowledgeSource,
    query: SearchQuery,
    count: int,
    wall: float,
    elapsed: int,
    error: dict[str, str] | None,
) -> dict[str, Any]:
    """The wire activity record of one source query."""
    kind = wire_kind(source.kind)
    record: dict[str, Any] = {
        "type": kind,
        "knowledgeSourceName": source.name,
        "queryTime": dt.datetime.fromtimestamp(wall, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "count": count,
        "elapsedMs": elapsed,
        f"{kind}Arguments": {"search": query.text, "filter": query.filter, "top": query.top},
    }
    if kind != source.kind:
        record["knowledgeSourceKind"] = source.kind
    if error:
        record["error"] = error
    return record


async def _run(
    source: KnowledgeSource, query: SearchQuery, task: SearchTask
) -> tuple[list[Hit], dict[str, str] | None, bool]:
    """Search with the task's bounds; return hits, an error object, whether the run timed out."""
    run_left = task.deadline - time.time()
    bound = min(task.timeout, run_left)
    if bound <= 0:
        return [], error_detail("Timeout", "the run's time limit elapsed before searching"), True
    try:
        hits = await asyncio.wait_for(source.search(query), bound)
    except TimeoutError:
        deadline_hit = run_left <= task.timeout
        limit = "the run's time limit" if deadline_hit else f"its {task.timeout:g} s timeout"
        message = f"knowledge source '{source.name}' did not answer within {limit}"
        return [], error_detail("Timeout", message), deadline_hit
    except SourceError as exc:
        return [], error_detail(exc.code, exc.message), False
    except ODataError as exc:
        return [], error_detail("InvalidFilter", str(exc)), False
    except Exception as exc:  # any source bug must become a partial response, not a crash
        logger.exception("knowledge source %r failed", source.name)
        return [], error_detail("KnowledgeSourceError", f"{type(exc).__name__}: {exc}"), False
    try:
        valid = [h if isinstance(h, Hit) else Hit.model_validate(h) for h in list(hits)]
    except (ValidationError, TypeError) as exc:
        message = f"knowledge source '{source.name}' returned malformed hits: {exc}"
        return [], error_detail("KnowledgeSourceError", message), False
    return valid[: query.top], None, False
