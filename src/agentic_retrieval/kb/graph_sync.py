"""Entity-graph extraction of file knowledge sources, in the background of ``serve --data``.

After an upload, update or delete of a file in a source with ``graphExtractionParameters``
(:mod:`agentic_retrieval.kb.graph_extraction`), :meth:`GraphSynchronizer.schedule` starts a
synchronisation: the source's ingestion model (``chatCompletionModel``, through
:func:`~agentic_retrieval.kb.model_connections.chat_model`) reads the files changed since the
last one into the source's edge list, and the assertions of deleted files are removed
(:meth:`~agentic_retrieval.sources.graph.EntityGraphSource.extract`).

Bounded: one synchronisation per source at a time (uploads arriving meanwhile run one more
after it, not one each), each within :class:`~agentic_retrieval.entitygraph.ExtractionLimits`
(chunks per minute, tokens, attempts, time per chunk). A file whose chunk the model could not
read keeps its earlier assertions and is listed in the status's ``graphStatistics.errors``;
the graph never holds half a file.

The status shows the last finished synchronisation's ``graphStatistics`` (``ontologyName``,
``triplesWritten`` in that synchronisation, not the graph's size), recorded in the service's
database (:meth:`~agentic_retrieval.kb.service.ServiceDirectory.record_status`, one
transaction): every worker of ``serve --workers N`` shows the same, and a restart keeps it.
A synchronisation holds ``graph-sync/<store>.lock`` in the data directory while it runs, so
``synchronizing`` is true while any process runs one (released by the system if it dies),
and two workers never extract the same source at once: the second waits for the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock, Timeout

from agentic_retrieval.entitygraph import ExtractionLimits, ExtractionReport
from agentic_retrieval.kb.definitions import KnowledgeSourceDefinition
from agentic_retrieval.kb.graph_extraction import graph_extraction
from agentic_retrieval.kb.model_connections import chat_model
from agentic_retrieval.kb.service import StoredDefinition
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.kb.source_kinds import file_source
from agentic_retrieval.kb.store_files import GRAPH_SYNC_LOCKS_DIR
from agentic_retrieval.sources.graph import EntityGraphSource
from agentic_retrieval.sources.local.documents import DocumentStore

logger = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LISTED_ERRORS = 50
"""Most per-file failures a status lists."""
MAX_REMEMBERED = 256
"""Past this many sources remembered, those since deleted are forgotten."""
STATUS_KEY = "graphStatistics"
LOCKS_DIR = GRAPH_SYNC_LOCKS_DIR


@dataclass
class GraphSync:
    """One synchronisation of a source's graph with its files."""

    ontology_name: str
    start_time: str
    end_time: str | None = None
    triples_written: int = 0
    files_read: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        """``graphStatistics`` as the status shows it."""
        return {
            "ontologyName": self.ontology_name,
            "triplesWritten": self.triples_written,
            "filesRead": self.files_read,
            "startTime": self.start_time,
            "endTime": self.end_time,
            "errors": self.errors[:MAX_LISTED_ERRORS],
        }


class GraphSynchronizer:
    """Runs the graph extraction of a service's file sources, one at a time per source.

    Args:
        service: The data directory.
        limits: What each synchronisation may spend (default: :class:`ExtractionLimits`).
    """

    def __init__(self, service: ServiceState, limits: ExtractionLimits | None = None) -> None:
        self.service = service
        self.limits = limits or ExtractionLimits()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()

    def schedule(self, name: str) -> None:
        """Synchronise ``name``'s graph soon (call from the event loop; no graph: nothing)."""
        task = self._tasks.get(name)
        if task is not None and not task.done():
            self._again.add(name)  # the running one may have read the files before the change
            return
        self._forget_deleted()
        self._tasks[name] = asyncio.get_running_loop().create_task(self._run(name))

    def _forget_deleted(self) -> None:
        """Drop what is kept about deleted sources, so creating and deleting never grows it."""
        if len(self._tasks) < MAX_REMEMBERED:
            return
        for name, task in list(self._tasks.items()):
            if task.done() and self.service.get("knowledgeSource", name) is None:
                self._tasks.pop(name, None)

    async def idle(self) -> None:
        """Wait for every synchronisation under way (shutdown and tests)."""
        while pending := [t for t in self._tasks.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    def statistics(
        self, stored: StoredDefinition, definition: KnowledgeSourceDefinition
    ) -> dict[str, Any] | None:
        """The source's ``graphStatistics``, as any process recorded them (``None``: no graph)."""
        ingestion = (
            definition.file_parameters.ingestion_parameters if definition.file_parameters else None
        )
        graph = graph_extraction(ingestion)
        if graph is None or stored.store is None:
            return None
        last = self.service.status(stored.store, STATUS_KEY)
        body = last or GraphSync(graph.ontology.name, "").to_wire()
        task = self._tasks.get(stored.name)  # set before the upload's response: never stale
        running_here = task is not None and not task.done()
        body["synchronizing"] = running_here or _held(self._lock(stored.store))
        return body

    def _lock(self, store: str) -> FileLock:
        """Held by the process synchronising ``store``'s graph (any worker)."""
        directory = self.service.path / LOCKS_DIR
        directory.mkdir(exist_ok=True)
        return FileLock(directory / f"{Path(store).name}.lock", thread_local=False)

    async def _run(self, name: str) -> None:
        while True:
            self._again.discard(name)
            await self._sync(name)
            if name not in self._again:
                return

    async def _sync(self, name: str) -> None:
        stored = self.service.get("knowledgeSource", name)
        if stored is None or stored.store is None:
            return
        definition = KnowledgeSourceDefinition.model_validate(stored.body)
        ingestion = (
            definition.file_parameters.ingestion_parameters if definition.file_parameters else None
        )
        graph = graph_extraction(ingestion)
        if graph is None or ingestion is None:
            return
        run = GraphSync(graph.ontology.name, _now())
        try:
            reports, names = await _in_daemon_thread(
                f"graph-sync-{name}",
                lambda: self._extract_alone(definition, stored, ingestion["chatCompletionModel"]),
            )
            _record(run, reports, names)
        except Exception as exc:  # a background run has no caller: its failure is its status
            logger.warning(
                "knowledge source %s: graph extraction failed: %s", name, type(exc).__name__
            )
            run.errors.append({"code": "GraphExtractionFailed", "message": _safe(exc)})
        finally:
            run.end_time = _now()
        store = stored.store
        try:  # for every worker and the next start (none if the source was deleted meanwhile)
            await asyncio.to_thread(self.service.record_status, store, STATUS_KEY, run.to_wire())
        except Exception as exc:
            logger.warning("knowledge source %s: graph statistics not recorded: %r", name, exc)

    def _extract_alone(
        self,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
        entry: Mapping[str, Any],
    ) -> tuple[list[ExtractionReport], dict[str, str]]:
        """:meth:`_extract` while holding the source's lock (another worker's run waits)."""
        with self._lock(str(stored.store)):
            return self._extract(definition, stored, entry)

    def _extract(
        self,
        definition: KnowledgeSourceDefinition,
        stored: StoredDefinition,
        entry: Mapping[str, Any],
    ) -> tuple[list[ExtractionReport], dict[str, str]]:
        """Runs in a worker thread, on a loop of its own (the model's client is made there).

        Returns:
            The reports, and the file name of each file whose extraction failed.
        """
        source = file_source(DocumentStore(self.service.store(stored)), definition)
        if not isinstance(source, EntityGraphSource):
            return [], {}
        try:
            reports = asyncio.run(source.extract(chat_model(entry), self.limits))
        finally:
            source.graph.store.close()
        documents = getattr(source.inner, "documents", None)
        names = {}
        for report in reports:
            described = documents.get(report.parent_id) if report.failures and documents else None
            if described:
                names[report.parent_id] = str(described.get("fileName"))
        return reports, names


def _held(lock: FileLock) -> bool:
    """Whether some process (this one included, through another handle) holds ``lock``."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def _record(run: GraphSync, reports: list[ExtractionReport], names: Mapping[str, str]) -> None:
    run.files_read = len(reports)
    run.triples_written = sum(r.triples_written for r in reports)
    for report in reports:
        for failure in report.failures:
            run.errors.append(
                {
                    "fileId": report.parent_id,
                    "fileName": names.get(report.parent_id),
                    "chunkId": failure.chunk_id,
                    "code": failure.code,
                    "message": failure.message,
                }
            )


async def _in_daemon_thread(name: str, work: Callable[[], T]) -> T:
    """``work()`` in a daemon thread: a server stopping never waits for an extraction.

    A synchronisation may run for minutes (paced model calls); killed with the process, it
    loses at most the file it was reading, whose assertions are written in one transaction
    and whose content hash has it read again by the next synchronisation.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:  # handed to the awaiting task, which records it
            failure = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(failure))
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future


def _safe(exc: Exception) -> str:
    """A failure's message without anything a model connection's headers could be in."""
    return f"{type(exc).__name__} while extracting (see the server log)"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
