"""``search``: one subquery against one knowledge source (one ``Send`` task per pair).

The task never raises: a source that fails, times out or rejects its filter produces an
activity record with an ``error`` and marks the response partial, and the other tasks' hits
still flow to ``rerank``.

The caller's identity comes from the run's Context (never from the task, which the planner's
output shapes, nor from the state): it is handed to the source beside the query text and
filter. While the run enforces permissions, a source that cannot trim by permission is not
searched at all; its record carries a ``PermissionsNotEnforced`` error instead.
"""

from __future__ import annotations

import asyncio
import logging
import time

from langgraph.runtime import Runtime
from pydantic import ValidationError

from agentic_retrieval.context import Context
from agentic_retrieval.errors import ErrorCode, SourceError
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.events import begin
from agentic_retrieval.graph.records import (
    ErrorInfo,
    SearchActivity,
    SearchTask,
    SourceFailure,
)
from agentic_retrieval.nodes._shared import searched_update
from agentic_retrieval.odata import ODataError
from agentic_retrieval.sources.base import (
    Hit,
    KnowledgeSource,
    PermissionTrimmingKnowledgeSource,
    SearchQuery,
    TopicSamplingKnowledgeSource,
)
from agentic_retrieval.state import Update

logger = logging.getLogger(__name__)


async def search(task: SearchTask, runtime: Runtime[Context], bindings: Bindings) -> Update:
    """Run ``task`` and return its hits and activity record."""
    source = bindings.sources[task.source]
    key = f"search:{task.subquery.id}:{task.source}"
    step = begin(runtime, key, SearchActivity, source=source)
    query = SearchQuery(
        text=task.subquery.text,
        filter=task.filter,
        top=task.top,
        goal=task.subquery.goal,
        identity=runtime.context.identity,
        enforce_permissions=runtime.context.enforce_permissions,
        topic_graph=task.topic_graph,
    )
    hits, error, deadline_hit = await _run(source, query, task)
    record = SearchActivity(
        key=key,
        started=step.started,
        elapsed_ms=step.elapsed_ms(),
        error=error,
        source=source.name,
        source_kind=source.kind,
        search=query.text,
        filter=query.filter,
        top=query.top,
        count=len(hits),
        topic_graph=_topic_graph(source, query),
    )
    update = searched_update(
        runtime,
        record,
        hits,
        source=source.name,
        subquery_id=task.subquery.id,
        query=query.text,
        error=error,
    )
    if error and task.fail_on_error:
        failure = SourceFailure(source=source.name, code=error.code, message=error.message)
        update["failure"] = failure.model_dump()
    if deadline_hit:
        update["timed_out"] = True
    return update


async def _run(
    source: KnowledgeSource, query: SearchQuery, task: SearchTask
) -> tuple[list[Hit], ErrorInfo | None, bool]:
    """Search with the task's bounds; return hits, an error object, whether the run timed out."""
    run_left = task.deadline - time.time()
    bound = min(task.timeout, run_left)
    if bound <= 0:
        return (
            [],
            ErrorInfo.of(ErrorCode.TIMEOUT, "the run's time limit elapsed before searching"),
            True,
        )
    if query.enforce_permissions and not trims_by_permission(source):
        message = (
            f"knowledge source '{source.name}' cannot trim results by permission, and "
            "permissions are enforced: it was not searched"
        )
        return [], ErrorInfo.of(ErrorCode.PERMISSIONS_NOT_ENFORCED, message), False
    try:
        hits = await asyncio.wait_for(source.search(query), bound)
    except TimeoutError:
        deadline_hit = run_left <= task.timeout
        limit = "the run's time limit" if deadline_hit else f"its {task.timeout:g} s timeout"
        message = f"knowledge source '{source.name}' did not answer within {limit}"
        return [], ErrorInfo.of(ErrorCode.TIMEOUT, message), deadline_hit
    except SourceError as exc:
        return [], ErrorInfo.of_source(exc), False
    except ODataError as exc:
        return [], ErrorInfo.of(ErrorCode.INVALID_FILTER, str(exc)), False
    except Exception as exc:  # any source bug must become a partial response, not a crash
        _log_failure(source.name, exc)
        # the response names the source, never the exception: its text is the server's
        message = f"knowledge source '{source.name}' failed; the server log has the details"
        return [], ErrorInfo.of(ErrorCode.KNOWLEDGE_SOURCE_ERROR, message), False
    try:
        valid = [h if isinstance(h, Hit) else Hit.model_validate(h) for h in list(hits)]
    except (ValidationError, TypeError) as exc:
        _log_failure(source.name, exc)
        message = f"knowledge source '{source.name}' returned malformed hits"
        return [], ErrorInfo.of(ErrorCode.KNOWLEDGE_SOURCE_ERROR, message), False
    return valid[: query.top], None, False


_LOGGED_TRACEBACKS: set[tuple[str, str]] = set()
_MAX_LOGGED_TRACEBACKS = 256


def _log_failure(source_name: str, exc: BaseException) -> None:
    """Log a source's failure: a traceback the first time it fails this way, then one line.

    A source that fails on every request would otherwise fill the log with identical
    tracebacks.
    """
    kind = (source_name, type(exc).__qualname__)
    if kind in _LOGGED_TRACEBACKS:
        logger.error("knowledge source %r failed again: %s: %s", *kind, exc)
        return
    if len(_LOGGED_TRACEBACKS) < _MAX_LOGGED_TRACEBACKS:
        _LOGGED_TRACEBACKS.add(kind)
    logger.error("knowledge source %r failed", source_name, exc_info=exc)


def _topic_graph(source: KnowledgeSource, query: SearchQuery) -> dict[str, object] | None:
    """The topic-graph setting the search ran with, for its record (``None``: none to show).

    A source that cannot sample by topic ran the caller's setting as ``none``.
    """
    if isinstance(source, TopicSamplingKnowledgeSource):
        setting = source.topic_setting(query)
        return setting.to_wire() if setting is not None else None
    return {"kind": "none"} if query.topic_graph is not None else None


def trims_by_permission(source: KnowledgeSource) -> bool:
    """Whether ``source`` applies ``SearchQuery.identity`` itself (the optional capability)."""
    return isinstance(source, PermissionTrimmingKnowledgeSource) and bool(
        source.trims_by_permission
    )
