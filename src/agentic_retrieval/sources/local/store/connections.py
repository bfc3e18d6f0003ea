"""Connections, leases, the writer lock and transactions of one store file.

The database runs in WAL mode: readers (other threads, other processes) never block the
indexer and see each file either entirely old or entirely new. Connections are per thread and
hold nothing bound to an event loop, so the store can be searched from any thread or loop.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from filelock import FileLock, Timeout

from agentic_retrieval.errors import (
    StoreBusyError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
)
from agentic_retrieval.sources.local.health import StoreHealth

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="StoreConnections")

_BUSY_TIMEOUT_MS = 30_000
_WAL_CHECKPOINT_PAGES = 10_000
_WRITE_CACHE_KIB = 32 * 1024


def leased(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a store method under a lease: :meth:`StoreConnections.close` waits for it."""

    @functools.wraps(method)
    def run_leased(store: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with store.lease():
            return method(store, *args, **kwargs)

    return run_leased


class StoreConnections:
    """One connection per thread to a store file, leases that keep it open, transactions.

    Args:
        path: The database file.
        create: Whether connections may create the file (only while the store is created).
    """

    _health: StoreHealth | None = None

    def __init__(self, path: Path, *, create: bool) -> None:
        self.path = path
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._users = 0
        """Operations under way (leases); the last one out closes a closed store."""
        self._creating = create

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Set up a new connection (SQL functions, temporary tables); subclasses add theirs."""

    def _connection(self) -> sqlite3.Connection:
        if self._closed and not getattr(self._local, "leases", 0):
            raise StoreClosedError(self.path)
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        health = self._health
        if conn is not None and health is not None and self._local.epoch != health.epoch:
            # the file was replaced or damaged: never read its cached pages again
            with self._lock:
                self._connections.remove(conn)
            conn.close()
            conn = None
        if conn is None:
            conn = self._open_connection(create=self._creating)
            self._local.conn = conn
            self._local.epoch = health.epoch if health is not None else 0
            with self._lock:
                self._connections.append(conn)
        return conn

    def _open_connection(self, *, create: bool) -> sqlite3.Connection:
        """A new connection to the file; only a store being created may create the file.

        After opening, a missing file (deleted by another process) is reported as such
        instead of being replaced by a new empty database at the same path.
        """
        target = self.path.resolve().as_uri() + ("" if create else "?mode=rw")
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                target,
                uri=True,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                # used by its own thread only; close() may run on another thread, but only
                # once no operation is under way (see lease())
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            # statement journals (one per write statement inside a transaction) and sorts in
            # memory: as temporary files they were written and deleted again and again,
            # several times the database's size per indexing run (bench_store_writes.py)
            conn.execute("PRAGMA temp_store=MEMORY")
            # copy the log into the database every ~40 MB instead of every 4 MB: pages
            # written again between two checkpoints are copied once (measured: 2.8x -> 2.6x
            # the database's size written per indexing run of 123k chunks)
            conn.execute(f"PRAGMA wal_autocheckpoint={_WAL_CHECKPOINT_PAGES}")
            self._prepare(conn)
        except sqlite3.Error:
            if conn is not None:
                conn.close()
            if self.path.exists():
                raise
            # deleted (by another process) before or while this connection opened
            raise StoreUnavailableError(self.path, "its index file is missing") from None
        return conn

    @contextmanager
    def lease(self) -> Iterator[None]:
        """Keep the store open for the block (every public method takes one itself).

        A store is shared by the threads of a server: one may close it (its index was
        deleted) while others are searching it. Closing a SQLite connection while another
        thread runs a statement on it crashes the process, so :meth:`close` only marks the
        store closed while leases are out, and the last lease to end closes the
        connections. A lease asked for after :meth:`close` raises :class:`StoreClosedError`,
        except inside a lease the same thread holds: a multi-step read (a search, then its
        documents) that started before the close finishes.

        Raises:
            StoreClosedError: The store was closed.
        """
        held = getattr(self._local, "leases", 0)
        with self._lock:
            if self._closed and not held:
                raise StoreClosedError(self.path)
            self._users += 1
        self._local.leases = held + 1
        try:
            yield
        finally:
            self._local.leases = held
            with self._lock:
                self._users -= 1
                if self._closed and self._users == 0:
                    self._close_connections()

    @contextmanager
    def exclusive_writer(self) -> Iterator[None]:
        """Hold the store's writer lock (the file ``<store>.lock``) for the block.

        One indexing run per store at a time, across threads and processes: two runs with
        different metadata on the same files would otherwise leave a mix of both. Readers
        are never blocked (SQLite's WAL).

        Raises:
            StoreBusyError: Another run holds the lock (the caller is told at once).
        """
        lock = FileLock(f"{self.path}.lock", timeout=0, thread_local=False)
        try:
            lock.acquire()
        except Timeout:
            raise StoreBusyError(
                f"{self.path} is being written by another indexing run; try again when it finishes"
            ) from None
        try:
            yield
        finally:
            lock.release()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``, or a savepoint inside :meth:`transaction`.

        The block's writes are undone when it raises. However a statement fails (even one
        after which SQLite has already rolled the transaction back itself: a full disk, no
        memory, an interrupt), the connection leaves this block outside any transaction.
        """
        with self.lease():
            conn = self._connection()
            depth = getattr(self._local, "writes", 0)
            if depth and not conn.in_transaction:
                # SQLite rolled the outer batch back (see _immediate): writing on would
                # commit this part alone
                raise StoreError(
                    "the batch was rolled back by a failed statement; nothing was saved"
                )
            self._local.writes = depth + 1
            try:
                with _savepoint(conn) if depth else _immediate(conn):
                    yield conn
            finally:
                self._local.writes = depth
            if not depth:
                self._committed(conn)

    def _committed(self, conn: sqlite3.Connection) -> None:
        """Called after each outermost write transaction commits; subclasses add their work."""

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One transaction around several writes of this thread (each still all-or-nothing).

        Every write inside becomes a savepoint: a failed one is undone alone, and all commit
        together at the end (one commit instead of one per file: much faster for batches).
        Other writers wait meanwhile; readers never see the batch before it commits. The
        store stays open until the block ends (it holds a lease).
        """
        return self._write()

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Run the block's reads in one read transaction (one consistent view of the data)."""
        conn = self._connection()
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            # a failed statement may have ended the transaction already (SQLite rolls back
            # on some errors): end it only if it is still open, and never raise from here
            # over the statement's own error; a read transaction has nothing to save
            _rollback(conn)

    def close(self) -> None:
        """Close the store (from any thread): now, or when the last lease under way ends.

        Later operations raise :class:`StoreClosedError`; operations under way finish first.
        """
        with self._lock:
            self._closed = True
            if self._users == 0:
                self._close_connections()

    @property
    def label(self) -> str:
        """The store file's name, for logs."""
        return self.path.name

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _close_connections(self) -> None:
        """Close every connection this store opened (called under ``_lock``, none in use)."""
        for conn in self._connections:
            conn.close()
        self._connections.clear()


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction: committed when the block ends, rolled back when it raises.

    While it runs, the connection may cache :data:`_WRITE_CACHE_KIB` of pages: a batch that
    outgrows the default 2 MiB spills pages to the WAL and writes them again each time it
    touches them (1.5x the bytes at 122k chunks). The cache shrinks back afterwards.
    """
    (cache,) = conn.execute("PRAGMA cache_size").fetchone()
    conn.execute(f"PRAGMA cache_size=-{_WRITE_CACHE_KIB}")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            _rollback(conn)
            raise
        if not conn.in_transaction:
            # a failed statement made SQLite roll back everything and the block went on
            raise StoreError("the batch was rolled back by a failed statement; nothing was saved")
        try:
            conn.execute("COMMIT")
        except sqlite3.Error:
            _rollback(conn)
            raise
    finally:
        try:
            conn.execute(f"PRAGMA cache_size={int(cache)}")
        except sqlite3.Error as exc:  # never raised over the block's own error
            logger.warning("could not shrink the page cache again: %s", exc)


@contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write inside an outer transaction: undone alone when the block raises."""
    conn.execute("SAVEPOINT write")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # else SQLite already rolled back the outer transaction
            try:
                conn.execute("ROLLBACK TO write")
                conn.execute("RELEASE write")
            except sqlite3.Error:
                _rollback(conn)
        raise
    conn.execute("RELEASE write")


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back whatever transaction ``conn`` is in, never raising over the first error."""
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:  # the original error matters more; the log keeps this one
        logger.warning("rollback failed: %s", exc)
