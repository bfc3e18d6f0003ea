"""Server-sent events for ``Accept: text/event-stream`` retrieve requests."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.knowledge_base import GRACE_SECONDS, KnowledgeBase
from agentic_retrieval.models import RetrieveRequest
from agentic_retrieval.server.errors import error_body

logger = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"


def wants_event_stream(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for server-sent events."""
    return bool(accept) and EVENT_STREAM in (accept or "").lower()


def sse(event: str, data: Any) -> str:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def retrieve_events(
    kb: KnowledgeBase, request: RetrieveRequest, runtime_seconds: float
) -> AsyncIterator[str]:
    """Stream ``kb``'s progress events, then a ``response`` event (or an ``error`` event).

    The whole stream is bounded by ``runtime_seconds`` plus a grace period, so a client is
    never left waiting on a run that went past its ``maxRuntimeInSeconds``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + runtime_seconds + GRACE_SECONDS
    events = kb.astream(request).__aiter__()
    try:
        while True:
            remaining = max(deadline - loop.time(), 0.001)
            try:
                event = await asyncio.wait_for(events.__anext__(), remaining)
            except StopAsyncIteration:
                return
            except TimeoutError:
                message = f"maxRuntimeInSeconds ({runtime_seconds:g} s) elapsed"
                yield sse("error", {**error_body("RequestTimeout", message), "status": 408})
                return
            except InvalidRequestError as exc:
                yield sse("error", {**error_body("InvalidRequest", str(exc)), "status": 400})
                return
            yield sse(str(event.get("event", "progress")), event)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
