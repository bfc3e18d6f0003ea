"""``/healthz``: whether the service still answers queries in time, not merely whether it runs.

A background task wakes every ``interval`` seconds and records two delays: how late the
event loop woke it (*event-loop lag*: every request waits that long for the loop) and how
long a no-op waited for a query thread (*query wait*: every search waits that long for a
thread). ``/healthz`` reads the worst of the recent samples (and the age of a probe still
waiting) and answers 503 ``starved`` when either is over its bound. It also reports the
request budgets (slots in use, callers holding their whole share, requests refused) and
answers 503 ``saturated`` while a budget is full, when any new request would get a 429: a
load balancer then sends traffic elsewhere. One caller at its share is reported, not
saturation: everyone else is still served. Answering costs a dictionary, never a search.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentic_retrieval.sources.local.query_threads import run_query

DEFAULT_MAX_LOOP_LAG_SECONDS = 1.0
DEFAULT_MAX_QUERY_WAIT_SECONDS = 2.0


class HealthMonitor:
    """Samples the event loop's lag and the query threads' wait.

    Args:
        max_loop_lag_seconds: Event-loop lag beyond which the service is starved.
        max_query_wait_seconds: Query-thread wait beyond which the service is starved.
        interval: Seconds between samples.
        window: Samples kept (the report uses the worst of them).
        extra: Adds to the report (the server adds its conversions, running and waiting).
        requests: Whether the request budgets are full, and their figures (reported under
            ``requests``; see :class:`~agentic_retrieval.server.limits.RequestBudget`).
    """

    def __init__(
        self,
        *,
        max_loop_lag_seconds: float = DEFAULT_MAX_LOOP_LAG_SECONDS,
        max_query_wait_seconds: float = DEFAULT_MAX_QUERY_WAIT_SECONDS,
        interval: float = 0.25,
        window: int = 8,
        extra: Callable[[], dict[str, Any]] | None = None,
        requests: Callable[[], tuple[bool, dict[str, Any]]] | None = None,
    ) -> None:
        self.max_loop_lag = max_loop_lag_seconds
        self.max_query_wait = max_query_wait_seconds
        self.interval = interval
        self.extra = extra
        self.requests = requests
        self._lags: deque[float] = deque(maxlen=window)
        self._waits: deque[float] = deque(maxlen=window)
        self._probe_since: float | None = None

    def report(self) -> tuple[bool, dict[str, Any]]:
        """Whether the service is healthy, and the figures behind it."""
        lag = max(self._lags, default=0.0)
        wait = max(self._waits, default=0.0)
        if self._probe_since is not None:  # a probe still waiting counts as long as it has
            wait = max(wait, time.monotonic() - self._probe_since)
        starved = lag > self.max_loop_lag or wait > self.max_query_wait
        saturated, requests = self.requests() if self.requests is not None else (False, None)
        body: dict[str, Any] = {
            "status": "starved" if starved else "saturated" if saturated else "ok",
            "eventLoopLagMs": round(lag * 1000),
            "queryWaitMs": round(wait * 1000),
        }
        if requests is not None:
            body["requests"] = requests
        if self.extra is not None:
            body.update(self.extra())
        return not (starved or saturated), body

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Sample in the background while the block runs."""
        task = asyncio.create_task(self._sample())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sample(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            self._lags.append(max(0.0, loop.time() - due))
            self._probe_since = time.monotonic()
            await run_query(_nothing)
            self._waits.append(time.monotonic() - self._probe_since)
            self._probe_since = None


def _nothing() -> None:
    """The probe: all its cost is the wait for a thread."""
