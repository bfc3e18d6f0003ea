"""Server-sent events for ``Accept: text/event-stream`` retrieve requests."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from agentic_retrieval.context import Context
from agentic_retrieval.knowledge_base import GRACE_SECONDS, KnowledgeBase
from agentic_retrieval.permissions import Identity
from agentic_retrieval.server.errors import api_error_for, error_body, internal_error
from agentic_retrieval.wire.api_versions import event_for_version
from agentic_retrieval.wire.events import ERROR, RetrieveEvent
from agentic_retrieval.wire.models import RetrieveRequest

logger = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"
EXTENSIONS_HEADER = "x-agentic-retrieval-events"
"""Names the extension events a streaming caller wants (``answer.delta, progress``)."""


def wants_event_stream(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for server-sent events."""
    return bool(accept) and EVENT_STREAM in (accept or "").lower()


def sse(event: str, data: Any) -> str:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def retrieve_events(
    kb: KnowledgeBase,
    request: RetrieveRequest,
    runtime_seconds: float,
    *,
    identity: Identity | None = None,
    defaults: Context | None = None,
    extensions: frozenset[str] = frozenset(),
    request_id: str | None = None,
) -> AsyncIterator[str]:
    """Stream ``kb``'s retrieve events (:mod:`agentic_retrieval.wire.events`) as SSE frames."""
    events = guarded_events(
        kb,
        request,
        runtime_seconds,
        identity=identity,
        defaults=defaults,
        extensions=extensions,
        request_id=request_id,
    )
    version = defaults.api_version if defaults is not None else None
    async with aclosing(events):
        async for event in events:
            shaped = event_for_version(event, version)
            yield sse(shaped["event"], shaped["data"])


async def guarded_events(
    kb: KnowledgeBase,
    request: RetrieveRequest,
    runtime_seconds: float,
    *,
    identity: Identity | None = None,
    defaults: Context | None = None,
    extensions: frozenset[str] = frozenset(),
    request_id: str | None = None,
) -> AsyncGenerator[RetrieveEvent]:
    """``kb``'s retrieve events, ending with ``response.completed`` or an ``error`` event.

    The run is driven by its own task feeding a queue, so a client that disconnects (the
    server cancels the consumer) or a run that overshoots ``maxRuntimeInSeconds`` plus a
    grace period only cancels that task; nothing is left running. A failure after the
    headers (200) went out travels as the terminal ``error`` event, in Azure's error shape.
    """
    queue: asyncio.Queue[RetrieveEvent | BaseException | None] = asyncio.Queue()
    producer = asyncio.create_task(
        _produce(kb, request, queue, identity, defaults, extensions, request_id)
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + runtime_seconds + GRACE_SECONDS + 1.0  # the run's own guard first
    try:
        while True:
            remaining = max(deadline - loop.time(), 0.001)
            try:
                item = await asyncio.wait_for(queue.get(), remaining)
            except TimeoutError:
                message = f"maxRuntimeInSeconds ({runtime_seconds:g} s) elapsed"
                yield {"event": ERROR, "data": error_body("RequestTimeout", message)}
                return
            if item is None:
                return
            if isinstance(item, BaseException):
                # headers (200) are already sent: the error must travel as an event
                error = api_error_for(item)
                if error is None:
                    request_id = uuid.uuid4().hex
                    logger.error("streamed run %s failed", request_id, exc_info=item)
                    error = internal_error(request_id)
                yield {"event": ERROR, "data": error.body()}
                return
            yield item
    finally:
        producer.cancel()


async def _produce(
    kb: KnowledgeBase,
    request: RetrieveRequest,
    queue: asyncio.Queue[RetrieveEvent | BaseException | None],
    identity: Identity | None,
    defaults: Context | None,
    extensions: frozenset[str],
    request_id: str | None,
) -> None:
    try:
        events = kb.astream(
            request,
            identity=identity,
            defaults=defaults,
            extensions=extensions,
            request_id=request_id,
        )
        async for event in events:
            queue.put_nowait(event)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # handed to the consumer, which reports or re-raises it
        queue.put_nowait(exc)
        return
    queue.put_nowait(None)
