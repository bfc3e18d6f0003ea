"""Running the library's coroutines from synchronous code.

``asyncio.run`` waits, on exit, for every worker thread its loop started (``to_thread``,
sync-only chat models), so a sync call would outlive ``maxRuntimeInSeconds`` by however long
an abandoned source query runs. Instead, sync entry points submit their coroutine to one
long-lived event loop in a daemon thread and wait only for the coroutine itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="agentic-retrieval-loop", daemon=True
            )
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code and return its result.

    Works whether or not the calling thread runs an event loop (scripts, Jupyter, worker
    threads), and carries the caller's context variables (callbacks, tracing) into the run.
    """
    loop = _background_loop()
    if threading.current_thread() is _thread:
        # A sync call made from inside our own loop would block it: use a private loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coro).result()
    context = contextvars.copy_context()
    result: concurrent.futures.Future[T] = concurrent.futures.Future()

    def start() -> None:
        task = loop.create_task(coro, context=context)
        task.add_done_callback(lambda done: _copy_outcome(done, result))

    loop.call_soon_threadsafe(start)
    return result.result()


def _copy_outcome(task: asyncio.Task[T], result: concurrent.futures.Future[T]) -> None:
    if task.cancelled():
        result.cancel()
    elif task.exception() is not None:
        result.set_exception(task.exception())
    else:
        result.set_result(task.result())
