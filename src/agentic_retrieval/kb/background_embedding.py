"""Vectors of file sources' chunks, made in the background of ``serve --data``.

An upload to a file source that ranks hybrid answers as soon as its chunks are stored and
found by their words (:meth:`~agentic_retrieval.kb.files.SourceFiles.upload`, one
transaction); :class:`BackgroundEmbedder` gives them their vectors afterwards, a batch of
:data:`~agentic_retrieval.sources.local.documents.EMBED_BATCH` chunks at a time, each batch
written in its own transaction (:meth:`DocumentStore.embed_pending`). Until a chunk has its
vector, hybrid search fuses the vectors there are with the lexical ranking of every chunk.

Bounded: one thread per process, embedding with the server's one-thread copy of the model (so
queries never wait behind it); what it has been told about is a set of source names, at most
:data:`MAX_WAITING` (past that, every file source is scanned once instead).

Durable: the work waiting is the stores' chunks without vectors, not this object's memory. At
start every file source is scanned, so a process killed mid-way has its pending chunks
embedded by the next one. With ``serve --workers N`` every worker runs one, and a store is
embedded by one process at a time: the one holding ``embedding/<store>.lock`` in the data
directory (released by the system when its holder dies; the file goes with the store,
:mod:`~agentic_retrieval.kb.store_files`); a worker that finds it held tries
again every :data:`RETRY_SECONDS`, so a dead holder's chunks are taken up by another worker.

Progress goes to the server's log (INFO, once a store has embedded for
:data:`PROGRESS_AFTER_SECONDS`, at most every :data:`PROGRESS_EVERY_SECONDS`) with the time
left and the opt-out; the source's status route shows the counts.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Literal

from filelock import FileLock, Timeout

from agentic_retrieval.embeddings import NO_EMBEDDINGS_ENV_VAR
from agentic_retrieval.errors import AgenticRetrievalError
from agentic_retrieval.kb.catalog import ServiceCatalog
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.kb.store_files import EMBEDDING_LOCKS_DIR
from agentic_retrieval.sources.local.store import LocalStore

logger = logging.getLogger(__name__)

LOCKS_DIR = EMBEDDING_LOCKS_DIR
MAX_WAITING = 1024
"""Most source names remembered as waiting; past this, every file source is scanned."""
RETRY_SECONDS = 2.0
"""How often a source whose store another process is embedding is tried again."""
PROGRESS_AFTER_SECONDS = 5.0
PROGRESS_EVERY_SECONDS = 5.0

Outcome = Literal["done", "held"]


class BackgroundEmbedder:
    """One thread embedding the pending chunks of a service's file sources.

    Args:
        service: The data directory.
        catalog: Where each file source's store comes from (with the server's models).
        retry_seconds: How often a store another process holds is tried again.
    """

    def __init__(
        self,
        service: ServiceDirectory,
        catalog: ServiceCatalog,
        *,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.service = service
        self.catalog = catalog
        self.retry_seconds = retry_seconds
        self._condition = threading.Condition()
        self._waiting: dict[str, None] = {}  # an ordered set: first told, first embedded
        self._held: set[str] = set()
        self._scan = True  # every file source, once at start
        self._busy = False
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (it first scans every file source for pending chunks)."""
        with self._condition:
            if self._thread is not None or self._stopped:
                return
            self._thread = threading.Thread(
                target=self._run, name="background-embedding", daemon=True
            )
            self._thread.start()

    def notify(self, name: str) -> None:
        """The file source ``name`` has chunks to embed (after an upload or update)."""
        with self._condition:
            if name not in self._waiting and len(self._waiting) >= MAX_WAITING:
                self._scan = True
            else:
                self._waiting[name] = None
            self._condition.notify_all()
        self.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop after the batch under way (its chunks stay pending for the next start)."""
        with self._condition:
            self._stopped = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def idle(self, timeout: float) -> bool:
        """Wait until nothing is waiting here (benchmarks and tests); whether it is so."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while self._busy or self._waiting or self._scan or self._held:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._condition.wait(min(left, 0.1))
        return True

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while (names := self._next()) is not None:
            for name in names:
                if self._stopped:
                    break
                outcome = self._embed(name)
                with self._condition:
                    if outcome == "held":
                        self._held.add(name)
            with self._condition:
                self._busy = False
                self._condition.notify_all()

    def _next(self) -> list[str] | None:
        """The sources to embed next, once there are some (``None``: stopped)."""
        with self._condition:
            while not self._stopped:
                if self._scan or self._waiting:
                    break
                if self._held and not self._condition.wait(self.retry_seconds):
                    break  # time to try the held ones again
                if not self._held:
                    self._condition.wait()
            if self._stopped:
                return None
            scan, self._scan = self._scan, False
            names = [*self._waiting, *self._held]
            self._waiting.clear()
            self._held.clear()
            self._busy = True
        if scan:
            try:
                names += [d.name for d in self.service.definitions("knowledgeSource")]
            except Exception:  # no caller to tell: the next upload or start scans again
                logger.exception("could not list the knowledge sources to embed")
        return list(dict.fromkeys(names))

    def _embed(self, name: str) -> Outcome:
        """Embed every pending chunk of ``name``'s store, holding its lock."""
        try:
            stored = self.service.get("knowledgeSource", name)
            documents = self.catalog.file_documents(name)
            if stored is None or stored.store is None or documents is None:
                return "done"
            if documents.embedding_progress().pending == 0:
                return "done"
            lock = self._lock(stored.store)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                return "held"  # another process embeds it; tried again if that one dies
            try:
                progress = _Progress(name, documents.embedding_progress().pending)
                while not self._stopped and (done := documents.embed_pending()):
                    progress(done)
                if progress.done and not self._stopped and isinstance(documents.store, LocalStore):
                    documents.store.refresh_vectors()  # the next process loads their graph
            finally:
                lock.release()
        except AgenticRetrievalError as exc:  # deleted meanwhile, or its store is damaged
            logger.info("knowledge source %s: embedding stopped: %s", name, exc)
        except Exception:  # a background thread has no caller: the chunks stay pending
            logger.exception("knowledge source %s: embedding failed", name)
        return "done"

    def _lock(self, store: str) -> FileLock:
        """Held by the process embedding ``store`` (any worker)."""
        directory = self.service.path / LOCKS_DIR
        directory.mkdir(exist_ok=True)
        return FileLock(directory / f"{Path(store).name}.lock", thread_local=False)


class _Progress:
    """Logs how far a source's embedding has gone, with the time left and the opt-out.

    A server has no terminal for a progress bar: a store whose embedding takes longer than
    :data:`PROGRESS_AFTER_SECONDS` is reported in the log (INFO), at most every
    :data:`PROGRESS_EVERY_SECONDS`, never on stdout.
    """

    def __init__(self, name: str, total: int) -> None:
        self.name = name
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.last = self.started

    def __call__(self, embedded: int) -> None:
        """One batch of ``embedded`` chunks written."""
        self.done += embedded
        total = max(self.total, self.done)
        now = time.monotonic()
        elapsed = now - self.started
        if elapsed < PROGRESS_AFTER_SECONDS or (
            now - self.last < PROGRESS_EVERY_SECONDS and self.done < total
        ):
            return
        self.last = now
        left = elapsed / self.done * (total - self.done)
        logger.info(
            "embedding knowledge source %r: %d/%d chunks, %.0f s elapsed, about %.0f s left "
            "(found by their words meanwhile; serve --no-embeddings or $%s=1: lexical only)",
            self.name,
            self.done,
            total,
            elapsed,
            left,
            NO_EMBEDDINGS_ENV_VAR,
        )
