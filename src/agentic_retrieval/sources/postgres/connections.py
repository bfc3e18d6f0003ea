"""Connections to one PostgreSQL database: a bounded pool, reopened after the server returns.

Every store operation runs through :meth:`Database.connection`, which lends the calling thread
one connection of a pool of at most :data:`POOL_SIZE_ENV` (default
:data:`DEFAULT_POOL_SIZE`) for the outermost block, and the same one to every block nested in
it (a transaction and the writes inside it share it); a server's many request threads so never
hold more connections than that, however many replicas share the database. A connection the
server dropped (restart, failover, network) is discarded and the next operation opens a fresh
one, so a process recovers by itself once the database is back. While it cannot connect, the
operation raises :class:`~agentic_retrieval.errors.StoreUnavailableError` with a one-line
reason and never the driver's traceback; the password of the URL is never shown.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from agentic_retrieval.errors import DatabaseUnavailableError, StoreError, StoreUnavailableError
from agentic_retrieval.sources.postgres import schema

CONNECT_TIMEOUT_SECONDS = 5
POOL_SIZE_ENV = "AGENTIC_RETRIEVAL_POSTGRES_POOL"
"""The environment variable bounding each process's connections to one database."""
DEFAULT_POOL_SIZE = 16
POOL_WAIT_SECONDS = 30
"""How long an operation waits for a free connection before it is refused (503)."""
URL_SCHEMES = ("postgresql://", "postgres://")

Connection = psycopg.Connection[tuple[Any, ...]]
P = ParamSpec("P")
R = TypeVar("R")


def is_postgres_url(text: str) -> bool:
    """Whether ``text`` names a PostgreSQL database (``postgresql://...``)."""
    return text.startswith(URL_SCHEMES)


def safe_url(url: str) -> str:
    """``url`` without its password, for messages and logs.

    Raises:
        StoreError: ``url`` is not a valid PostgreSQL URL (the message says why, one line).
    """
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise StoreError(f"invalid PostgreSQL URL: {str(exc).splitlines()[0]}") from None
    if not all(p.strip().isdigit() for p in str(parts.get("port") or "0").split(",")):
        raise StoreError(f"invalid PostgreSQL URL: the port {parts['port']!r} is not a number")
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"


def unavailable(where: str, exc: psycopg.Error) -> DatabaseUnavailableError:
    """The driver's error as one line a user can act on."""
    detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return DatabaseUnavailableError(where, f"the database is unreachable ({detail.strip()})")


class Database:
    """One database URL, its connections (one per thread) and its migrated schema.

    Args:
        url: ``postgresql://user:password@host:port/dbname`` (libpq parameters allowed).

    Raises:
        StoreError: A URL that is not one.
        StoreUnavailableError: The database cannot be reached.
    """

    def __init__(self, url: str) -> None:
        if not is_postgres_url(url):
            raise StoreError(f"not a PostgreSQL URL: {url!r} (expected postgresql://...)")
        self.url = url
        self.label = safe_url(url)
        self._local = threading.local()
        self._all: list[Connection] = []
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.pool_size = _pool_size()
        self._slots = threading.BoundedSemaphore(self.pool_size)
        with self.connection() as conn:
            schema.migrate(conn)

    def _open(self, *, shared: bool = True) -> Connection:
        try:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            )
        except psycopg.OperationalError as exc:
            raise unavailable(self.label, exc) from None
        except psycopg.ProgrammingError as exc:  # a malformed URL reaches here too
            raise StoreError(f"invalid PostgreSQL URL: {str(exc).splitlines()[0]}") from None
        # a plan must see each query's own store name and filter values (partial indexes)
        conn.prepare_threshold = None
        if shared:
            with self._lock:
                self._all.append(conn)
        return conn

    def session(self) -> Connection:
        """A new connection of the caller's own (a session-level lock's), not this thread's.

        Raises:
            StoreUnavailableError: The database cannot be reached.
        """
        return self._open(shared=False)

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection of the pool for this thread's block (the same one inside it).

        Raises:
            StoreUnavailableError: The database cannot be reached (the connection is dropped,
                so the next call tries again), or every connection stayed busy for
                :data:`POOL_WAIT_SECONDS`.
        """
        if self._closed:
            raise StoreUnavailableError(self.label, "it was closed")
        held: Connection | None = getattr(self._local, "conn", None)
        if held is not None:  # nested in this thread's block: its connection
            with self._converted(held):
                yield held
            return
        if not self._slots.acquire(timeout=POOL_WAIT_SECONDS):
            raise DatabaseUnavailableError(
                self.label, f"all {self.pool_size} connections stayed busy; retry shortly"
            )
        try:
            conn = self._take()
            self._local.conn = conn
            try:
                with self._converted(conn):
                    yield conn
            finally:
                self._local.conn = None
                self._give_back(conn)
        finally:
            self._slots.release()

    @contextmanager
    def _converted(self, conn: Connection) -> Iterator[None]:
        """The driver's connection errors as :class:`DatabaseUnavailableError`."""
        try:
            yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise unavailable(self.label, exc) from None

    def _take(self) -> Connection:
        """An idle connection that still works, or a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._open()
            if conn.closed or conn.broken:
                self._drop(conn)
                continue
            return conn

    def _give_back(self, conn: Connection) -> None:
        """Keep ``conn`` for the next block, unless it broke or was left in a transaction."""
        if conn.closed or conn.broken or self._closed:
            self._drop(conn)
            return
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            self._drop(conn)
            return
        with self._lock:
            self._idle.append(conn)

    def _drop(self, conn: Connection) -> None:
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        conn.close()

    def close(self) -> None:
        """Close every connection this object opened."""
        self._closed = True
        with self._lock:
            connections, self._all, self._idle = self._all, [], []
        for conn in connections:
            conn.close()


def _pool_size() -> int:
    """The pool's bound: ``$AGENTIC_RETRIEVAL_POSTGRES_POOL``, else :data:`DEFAULT_POOL_SIZE`.

    Raises:
        StoreError: A value that is not a positive whole number.
    """
    text = os.environ.get(POOL_SIZE_ENV, "").strip()
    if not text:
        return DEFAULT_POOL_SIZE
    if not text.isdigit() or int(text) < 1:
        raise StoreError(f"${POOL_SIZE_ENV} must be a whole number of at least 1, not {text!r}")
    return int(text)


class _HasDatabase(Protocol):
    database: Database


S = TypeVar("S", bound=_HasDatabase)


def connected(
    method: Callable[Concatenate[S, Connection, P], R],
) -> Callable[Concatenate[S, P], R]:
    """Run ``method`` with this thread's connection as its first argument after ``self``."""

    @wraps(method)
    def run(store: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with store.database.connection() as conn:
            return method(store, conn, *args, **kwargs)

    return run
