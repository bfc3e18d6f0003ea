"""The server's conversions of uploaded files: their own pool, a bounded queue, killed on hang-up.

Converting a file is the one request whose cost depends on its content, so it never runs
where queries do: each conversion is a child process (:mod:`~agentic_retrieval.sources.local.
conversion`) bounded in time and memory, waited for by one of ``workers`` threads of this
pool's own (never asyncio's default pool, which searches and store writes share). At most
``queue`` more wait their turn; beyond that an upload is answered 429 with ``Retry-After``
at once, before it costs anything. When the client hangs up, the request is cancelled and
its child killed (or, still queued, never started).
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.sources.local.conversion import ChildConversion, zygote
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits
from agentic_retrieval.sources.local.loaders import LoadedDocument

DEFAULT_QUEUE = 16


def default_workers() -> int:
    """Conversions at once: half the CPUs (at least one, at most four), the rest for queries."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


class ConversionPool:
    """Conversions in child processes, ``workers`` at a time, ``queue`` more waiting.

    Args:
        limits: What one conversion may cost.
        workers: Conversions running at once.
        queue: Conversions waiting beyond those; more are refused (429).
        retry_after_seconds: The ``Retry-After`` of that 429.
    """

    def __init__(
        self,
        limits: ConversionLimits | None = None,
        *,
        workers: int | None = None,
        queue: int = DEFAULT_QUEUE,
        retry_after_seconds: int = 5,
    ) -> None:
        self.limits = limits or ConversionLimits()
        self.workers = workers or default_workers()
        self.queue = queue
        self.retry_after_seconds = retry_after_seconds
        if self.workers < 1 or queue < 0:
            raise ValueError("conversion workers must be at least 1 and the queue at least 0")
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._admitted = 0
        self._running: set[ChildConversion] = set()

    async def convert(
        self, file_name: str, data: bytes, chunking: tuple[int, int] | None = None
    ) -> LoadedDocument:
        """Convert ``data`` in a child process once a worker is free.

        ``chunking`` (chunk size, overlap): the child splits the text into chunks too, as the
        store would (see :class:`~agentic_retrieval.sources.local.chunking.SplitText`).

        Raises:
            ApiError: 429 when ``workers + queue`` conversions are already admitted.
            ConversionLimitError, MissingConverterError, LoaderError: As
                :func:`~agentic_retrieval.sources.local.conversion.convert_in_child`.
        """
        job = ChildConversion(file_name, data, self.limits, chunking)
        future = self._admit(job)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # still queued: it never starts
            job.cancel()  # running: its child is killed
            raise

    def stats(self) -> dict[str, int]:
        """Conversions running and waiting now."""
        with self._lock:
            running = len(self._running)
            return {"running": running, "queued": self._admitted - running}

    def warm_up(self) -> None:
        """Start the zygote now, so the first upload does not wait for its imports."""
        zygote()

    def close(self) -> None:
        """Kill running conversions and drop queued ones."""
        with self._lock:
            running = list(self._running)
            executor, self._executor = self._executor, None
        for job in running:
            job.cancel()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _admit(self, job: ChildConversion) -> Future[LoadedDocument]:
        with self._lock:
            if self._admitted >= self.workers + self.queue:
                raise ApiError(
                    429,
                    f"{self._admitted} file conversions are running or waiting, this server's "
                    f"capacity ({self.workers} at once, {self.queue} waiting); retry after "
                    f"{self.retry_after_seconds} s.",
                    headers={"Retry-After": str(self.retry_after_seconds)},
                )
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, "conversion")
            self._admitted += 1
            future = self._executor.submit(self._run, job)
        future.add_done_callback(self._release)  # also when cancelled while queued
        return future

    def _run(self, job: ChildConversion) -> LoadedDocument:
        with self._lock:
            self._running.add(job)
        try:
            return job.run()
        finally:
            with self._lock:
                self._running.discard(job)

    def _release(self, _: Future[LoadedDocument]) -> None:
        with self._lock:
            self._admitted -= 1
