"""Searches of the embedded store run on threads of their own, never behind other work.

SQLite releases the GIL while it searches, so searches run in worker threads. They used
asyncio's default pool, which store writes and (before it had a pool of its own) file
conversion shared: eight slow uploads filled it and every search waited behind them. This
pool serves searches, lookups and counts only, so a query waits at most for other queries.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

QUERY_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""Searches running at once (asyncio's default pool size)."""
_EXECUTOR: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def query_executor() -> ThreadPoolExecutor:
    """The process's query threads (started on first use)."""
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(QUERY_THREADS, "query")
        return _EXECUTOR


async def run_query(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking search on the query threads (context variables carried along)."""
    call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(query_executor(), call)
