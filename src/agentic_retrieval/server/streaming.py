"""Server-sent events for ``Accept: text/event-stream`` retrieve requests."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agentic_retrieval.context import Context
from agentic_retrieval.knowledge_base import GRACE_SECONDS, KnowledgeBase
from agentic_retrieval.permissions import Identity
from agentic_retrieval.server.errors import api_error_for, error_body, internal_error
from agentic_retrieval.wire.models import RetrieveRequest

logger = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"


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
) -> AsyncIterator[str]:
    """Stream ``kb``'s progress events, then a ``response`` event (or an ``error`` event).

    The run is driven by its own task feeding a queue, so a client that disconnects (the
    server cancels this generator) or a run that overshoots ``maxRuntimeInSeconds`` plus a
    grace period only cancels that task; nothing is left running.
    """
    queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
    producer = asyncio.create_task(_produce(kb, request, queue, identity, defaults))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + runtime_seconds + GRACE_SECONDS
    try:
        while True:
            remaining = max(deadline - loop.time(), 0.001)
            try:
                item = await asyncio.wait_for(queue.get(), remaining)
            except TimeoutError:
                message = f"maxRuntimeInSeconds ({runtime_seconds:g} s) elapsed"
                yield sse("error", {**error_body("RequestTimeout", message), "status": 408})
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
                yield sse("error", {**error.body(), "status": error.status})
                return
            yield sse(str(item.get("event", "progress")), item)
    finally:
        producer.cancel()


async def _produce(
    kb: KnowledgeBase,
    request: RetrieveRequest,
    queue: asyncio.Queue[dict[str, Any] | BaseException | None],
    identity: Identity | None,
    defaults: Context | None,
) -> None:
    try:
        async for event in kb.astream(request, identity=identity, defaults=defaults):
            queue.put_nowait(event)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # handed to the consumer, which reports or re-raises it
        queue.put_nowait(exc)
        return
    queue.put_nowait(None)
