"""The knowledge service's state in PostgreSQL (``serve --data DIR --store postgresql://...``).

:class:`PostgresServiceDirectory` is :class:`~agentic_retrieval.kb.service.ServiceDirectory`'s
contract (:class:`~agentic_retrieval.kb.service_state.ServiceState`) on one database that any
number of replicas share: definitions with their ETags and the generation counter, ingestion
history and runs, each store's status, and every index's and file source's documents as a
:class:`~agentic_retrieval.sources.postgres.PostgresStore` in the same database. DIR holds
caches and locks only, so each replica (process or host) has its own.

Writes are serialised across replicas: every definition change takes the transaction-level
advisory lock :data:`DEFINITIONS_LOCK` first, then reads, checks (a source's index exists, the
50-index limit...), writes and bumps the generation in the same transaction, so two replicas
creating at once cannot both pass a check only one of them should. A new index's or file
source's store is created inside that transaction (nothing is left behind by a replica killed
meanwhile), and a deleted one's rows go with its definition.

The service's tables have their own versioned migrations (:data:`MIGRATIONS`), applied once
under :data:`MIGRATION_LOCK` however many replicas start together; the stores' tables are
:mod:`agentic_retrieval.sources.postgres.schema`'s.

An ingestion run is in progress while the replica running it holds a session advisory lock
named after it (on a connection of its own): a run whose lock nobody holds was left by a
replica that died, and is recorded as the last run, interrupted, when a status is read.

One :class:`~agentic_retrieval.sources.postgres.Database` per URL per process
(:func:`shared_database`): its connections (one per thread) reconnect after the database
returns; while it is down every operation raises
:class:`~agentic_retrieval.errors.DatabaseUnavailableError` (the server's 503).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentic_retrieval.errors import StoreClosedError, StoreError
from agentic_retrieval.kb.service import (
    Check,
    Conditions,
    DefinitionKind,
    DefinitionView,
    IngestionHistory,
    IngestionRun,
    RunRecorder,
    StoredDefinition,
    _definition,
    _interrupted,
    _label,
    _now,
    _run,
    _run_json,
)
from agentic_retrieval.sources.postgres.connections import Connection, Database
from agentic_retrieval.sources.postgres.store import PostgresStore

logger = logging.getLogger(__name__)

MIGRATION_LOCK = 0x61677274_73766331
"""The advisory lock the service's migrations take (``agrtsvc1``)."""
DEFINITIONS_LOCK = 0x61677274_64656673
"""The transaction-level advisory lock every definition write takes (``agrtdefs``)."""
RUN_LOCK_CLASS = 0x61727275
"""The first key of a run's session advisory lock (``arru``); the second is the run's."""
MIGRATIONS: tuple[str, ...] = (
    # 1: meta (the generation), definitions, ingestion totals and runs, store status
    """
    CREATE TABLE ar_service_meta (key text PRIMARY KEY, value bigint NOT NULL);
    INSERT INTO ar_service_meta (key, value) VALUES ('generation', 0);
    CREATE TABLE ar_service_definitions (
        kind text NOT NULL,
        name text NOT NULL,
        body text NOT NULL,
        etag text NOT NULL,
        store text,
        created text NOT NULL,
        updated text NOT NULL,
        PRIMARY KEY (kind, name)
    );
    CREATE TABLE ar_service_ingestion (
        store text PRIMARY KEY,
        runs integer NOT NULL DEFAULT 0,
        total_seconds double precision NOT NULL DEFAULT 0,
        total_items bigint NOT NULL DEFAULT 0,
        last text
    );
    CREATE TABLE ar_service_runs (
        seq bigserial,
        run text PRIMARY KEY,
        store text NOT NULL,
        state text NOT NULL
    );
    CREATE TABLE ar_service_status (
        store text NOT NULL,
        key text NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (store, key)
    );
    """,
)
"""Migration ``n`` is ``MIGRATIONS[n - 1]``; a released one is never edited, only added to."""
_COLUMNS = "kind, name, body, etag, store, created, updated"

_databases: dict[str, tuple[Database, int]] = {}
_databases_lock = threading.Lock()


def shared_database(url: str) -> Database:
    """This process's :class:`Database` for ``url`` (opened and migrated on first use).

    Each call is one user of it; :func:`release_database` ends that use, and the last one
    closes its connections.

    Raises:
        StoreError: Not a valid PostgreSQL URL.
        DatabaseUnavailableError: The database cannot be reached.
    """
    with _databases_lock:
        database, users = _databases.get(url) or (None, 0)
        if database is None:
            database = Database(url)
        _databases[url] = (database, users + 1)
        return database


def release_database(url: str) -> None:
    """End one use of :func:`shared_database`'s ``url``; the last one closes it."""
    with _databases_lock:
        database, users = _databases.get(url) or (None, 0)
        if database is None:
            return
        if users > 1:
            _databases[url] = (database, users - 1)
            return
        del _databases[url]
    database.close()


class PostgresDefinitionView(DefinitionView):
    """:class:`DefinitionView` inside a PostgreSQL write transaction."""

    def __init__(self, conn: Connection) -> None:
        self._pg = conn

    def get(self, kind: DefinitionKind, name: str) -> StoredDefinition | None:
        """The definition ``kind``/``name``, if it exists."""
        row = self._pg.execute(
            f"SELECT {_COLUMNS} FROM ar_service_definitions WHERE kind = %s AND name = %s",
            (kind, name),
        ).fetchone()
        return _definition(row) if row else None

    def definitions(self, kind: DefinitionKind) -> list[StoredDefinition]:
        """Every definition of ``kind``, by name."""
        rows = self._pg.execute(
            f"SELECT {_COLUMNS} FROM ar_service_definitions WHERE kind = %s "
            'ORDER BY name COLLATE "C"',
            (kind,),
        )
        return [_definition(row) for row in rows]

    def count(self, kind: DefinitionKind) -> int:
        """How many definitions of ``kind`` exist."""
        row = self._pg.execute(
            "SELECT count(*) FROM ar_service_definitions WHERE kind = %s", (kind,)
        ).fetchone()
        return int(row[0]) if row else 0


class PostgresServiceDirectory:
    """The service's state in the PostgreSQL database at ``url``; ``path`` for caches/locks.

    Args:
        path: This replica's local directory (created when missing).
        url: ``postgresql://user:password@host:port/dbname``.

    Raises:
        StoreError: An invalid URL, or a database migrated by a newer version.
        DatabaseUnavailableError: The database cannot be reached.
    """

    def __init__(self, path: str | Path, url: str) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(f"{self.path} is not a directory")
        self.url = url
        self.database = shared_database(url)
        self._closed = False
        self._lock = threading.Lock()
        self._stores: dict[str, PostgresStore] = {}
        self._deleted: set[str] = set()
        try:
            with self.database.connection() as conn:
                _migrate(conn)
        except BaseException:
            self.close()
            raise
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def label(self) -> str:
        """The database's URL without its password."""
        return self.database.label

    # --- reads ------------------------------------------------------------------------------

    def generation(self) -> int:
        """The counter bumped by every committed definition change (any replica)."""
        with self.database.connection() as conn:
            row = conn.execute(
                "SELECT value FROM ar_service_meta WHERE key = 'generation'"
            ).fetchone()
        return int(row[0]) if row else 0

    def get(self, kind: DefinitionKind, name: str) -> StoredDefinition | None:
        """The definition ``kind``/``name``, if it exists."""
        with self.database.connection() as conn:
            return PostgresDefinitionView(conn).get(kind, name)

    def definitions(self, kind: DefinitionKind) -> list[StoredDefinition]:
        """Every definition of ``kind``, sorted by name."""
        with self.database.connection() as conn:
            return PostgresDefinitionView(conn).definitions(kind)

    # --- writes -----------------------------------------------------------------------------

    def put(
        self,
        kind: DefinitionKind,
        name: str,
        body: dict[str, Any],
        *,
        conditions: Conditions | None = None,
        check: Check | None = None,
        with_store: bool = False,
    ) -> tuple[StoredDefinition, bool]:
        """Create or replace a definition in one transaction (see ``ServiceDirectory.put``).

        A new definition ``with_store`` gets its own store, created in the same transaction.

        Raises:
            PreconditionFailedError: A condition does not hold.
            DatabaseUnavailableError: The database cannot be reached.
        """
        conditions = conditions or Conditions()
        with self._write() as conn:
            view = PostgresDefinitionView(conn)
            current = view.get(kind, name)
            conditions.check(current, f"{_label(kind)} '{name}'")
            if check is not None:
                check(view, current)
            store = current.store if current is not None else None
            if current is None and with_store:
                store = _store_name(kind, name)
                PostgresStore(self.database, store, create=True)  # on this transaction
            stored = _upsert(conn, kind, name, body, store, current)
        return stored, current is None

    def delete(
        self,
        kind: DefinitionKind,
        name: str,
        *,
        conditions: Conditions | None = None,
        check: Check | None = None,
    ) -> StoredDefinition | None:
        """Delete a definition and its store's rows in one transaction.

        Raises:
            PreconditionFailedError: A condition does not hold.
            DatabaseUnavailableError: The database cannot be reached.
        """
        conditions = conditions or Conditions()
        with self._write() as conn:
            view = PostgresDefinitionView(conn)
            current = view.get(kind, name)
            if current is None and conditions.if_match is None:
                return None
            conditions.check(current, f"{_label(kind)} '{name}'")
            if check is not None:
                check(view, current)
            conn.execute(
                "DELETE FROM ar_service_definitions WHERE kind = %s AND name = %s", (kind, name)
            )
            if current is not None and current.store is not None:
                for table in ("ar_service_ingestion", "ar_service_status", "ar_service_runs"):
                    conn.execute(f"DELETE FROM {table} WHERE store = %s", (current.store,))
                _drop_store(self.database, current.store)
            _bump_generation(conn)
        if current is not None and current.store is not None:
            with self._lock:
                self._stores.pop(current.store, None)
                self._deleted.add(current.store)
        return current

    # --- stores -----------------------------------------------------------------------------

    def store(self, definition: StoredDefinition) -> PostgresStore:
        """The PostgreSQL store of an index or file source (one object per process).

        Raises:
            StoreClosedError: This process deleted the definition meanwhile.
            StoreNotFoundError: Another replica deleted it.
            DatabaseUnavailableError: The database cannot be reached.
        """
        if definition.store is None:
            raise ValueError(f"{_label(definition.kind)} '{definition.name}' has no store")
        with self._lock:
            if definition.store in self._deleted:
                raise StoreClosedError(f"{self.label}#{definition.store}")
            store = self._stores.get(definition.store)
        if store is None:
            store = PostgresStore(self.database, definition.store)
            with self._lock:
                store = self._stores.setdefault(definition.store, store)
        return store

    def close_unused_stores(self) -> None:
        """Forget this process's stores whose definitions are gone (deleted elsewhere)."""
        named = {
            d.store for d in [*self.definitions("index"), *self.definitions("knowledgeSource")]
        }
        with self._lock:
            for name in [n for n in self._stores if n not in named]:
                del self._stores[name]

    def remove_orphans(self) -> list[str]:
        """Nothing to remove: a store is created and dropped inside its definition's commit."""
        return []

    def close(self) -> None:
        """Forget the stores; end this object's use of the database (:func:`release_database`)."""
        with self._lock:
            self._stores.clear()
            closed, self._closed = self._closed, True
        if not closed:
            release_database(self.url)

    # --- other status of a store (the last graph synchronisation) ---------------------------

    def record_status(self, store: str, key: str, body: dict[str, Any]) -> None:
        """Keep ``body`` as ``store``'s ``key`` status, for every replica (none once deleted)."""
        with self.database.connection() as conn:
            conn.execute(
                "INSERT INTO ar_service_status (store, key, body) SELECT %s, %s, %s WHERE EXISTS "
                "(SELECT 1 FROM ar_service_definitions WHERE store = %s) "
                "ON CONFLICT (store, key) DO UPDATE SET body = EXCLUDED.body",
                (store, key, json.dumps(body), store),
            )

    def status(self, store: str, key: str) -> dict[str, Any] | None:
        """``store``'s ``key`` status as any replica last recorded it."""
        with self.database.connection() as conn:
            row = conn.execute(
                "SELECT body FROM ar_service_status WHERE store = %s AND key = %s", (store, key)
            ).fetchone()
        return dict(json.loads(row[0])) if row else None

    # --- ingestion history ------------------------------------------------------------------

    @contextmanager
    def ingestion_run(self, store: str) -> Iterator[RunRecorder]:
        """Record one ingestion run of ``store``: in progress while the block runs.

        The run's session lock is held from before it is recorded in progress until after it
        is recorded finished, on a connection of its own: a replica killed meanwhile loses
        its session, and with it the lock, so a reader knows the run was abandoned.
        """
        run_id = uuid.uuid4().hex
        session = self.database.session()
        try:
            session.execute("SELECT pg_advisory_lock(%s, %s)", (RUN_LOCK_CLASS, _run_key(run_id)))
            recorder = RunRecorder(start_time=_now())
            with self.database.connection() as conn:
                conn.execute(
                    "INSERT INTO ar_service_runs (run, store, state) VALUES (%s, %s, %s)",
                    (run_id, store, _run_json(recorder.snapshot())),
                )
            started = datetime.now(UTC)
            try:
                yield recorder
            finally:
                elapsed = (datetime.now(UTC) - started).total_seconds()
                self._finish_run(store, recorder.snapshot(end_time=_now()), elapsed, run_id)
        finally:
            session.close()

    def ingestion(self, store: str) -> IngestionHistory:
        """The ingestion history of ``store``: the oldest run in progress, the last one.

        A run in progress whose replica died is recorded as the last run, interrupted.
        """
        with self.database.connection() as conn:
            runs = conn.execute(
                "SELECT run, state FROM ar_service_runs WHERE store = %s ORDER BY seq", (store,)
            ).fetchall()
            live = [
                str(state)
                for run_id, state in runs
                if not self._settle_if_abandoned(conn, store, str(run_id), str(state))
            ]
            row = conn.execute(
                "SELECT runs, total_seconds, total_items, last FROM ar_service_ingestion "
                "WHERE store = %s",
                (store,),
            ).fetchone()
        current = _run(live[0]) if live else None
        if row is None:
            return IngestionHistory(current=current)
        return IngestionHistory(int(row[0]), float(row[1]), int(row[2]), current, _run(row[3]))

    def reconcile_ingestion(self) -> list[str]:
        """Record every run in progress whose replica died as interrupted; their stores."""
        with self.database.connection() as conn:
            rows = conn.execute("SELECT run, store, state FROM ar_service_runs").fetchall()
            settled = sorted(
                {
                    str(store)
                    for run_id, store, state in rows
                    if self._settle_if_abandoned(conn, str(store), str(run_id), str(state))
                }
            )
        if settled:
            logger.warning("ingestion interrupted by a stopped replica in: %s", settled)
        return settled

    def _settle_if_abandoned(self, conn: Connection, store: str, run_id: str, state: str) -> bool:
        """Settle run ``run_id`` as the last run, interrupted, when no replica holds its lock."""
        key = (RUN_LOCK_CLASS, _run_key(run_id))
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()
        if not row or not row[0]:
            return False  # its replica holds it: the run is live
        try:
            with conn.transaction():
                settled = conn.execute("DELETE FROM ar_service_runs WHERE run = %s", (run_id,))
                if settled.rowcount:  # not settled already by another reader
                    conn.execute(
                        "INSERT INTO ar_service_ingestion (store, last) VALUES (%s, %s) "
                        "ON CONFLICT (store) DO UPDATE SET last = EXCLUDED.last",
                        (store, _interrupted(state)),
                    )
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)
        return True

    def _finish_run(self, store: str, run: IngestionRun, seconds: float, run_id: str) -> None:
        with self.database.connection() as conn, conn.transaction():
            conn.execute("DELETE FROM ar_service_runs WHERE run = %s", (run_id,))
            conn.execute(
                "INSERT INTO ar_service_ingestion (store, runs, total_seconds, total_items, last) "
                "VALUES (%s, 1, %s, %s, %s) ON CONFLICT (store) DO UPDATE SET "
                "runs = ar_service_ingestion.runs + 1, "
                "total_seconds = ar_service_ingestion.total_seconds + EXCLUDED.total_seconds, "
                "total_items = ar_service_ingestion.total_items + EXCLUDED.total_items, "
                "last = EXCLUDED.last",
                (store, seconds, run.processed + run.failed + run.skipped, _run_json(run)),
            )

    # --- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A transaction holding the definitions lock: one definition writer at a time."""
        with self.database.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_signed(DEFINITIONS_LOCK),))
            yield conn


def _migrate(conn: Connection) -> None:
    """Apply the service migrations this database lacks, once across every replica.

    Raises:
        StoreError: The database was migrated by a newer version of the library.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_signed(MIGRATION_LOCK),))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS agentic_retrieval_service_migrations ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute(
            "SELECT max(version) FROM agentic_retrieval_service_migrations"
        ).fetchone()
        current = int(row[0]) if row and row[0] is not None else 0
        if current > len(MIGRATIONS):
            raise StoreError(
                f"the service's tables are at version {current}, newer than this library "
                f"knows ({len(MIGRATIONS)}): upgrade agentic-retrieval; nothing was changed"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            conn.execute(MIGRATIONS[version - 1])
            conn.execute(
                "INSERT INTO agentic_retrieval_service_migrations (version) VALUES (%s)",
                (version,),
            )


def _drop_store(database: Database, name: str) -> None:
    """Delete a store's rows (inside the caller's transaction); nothing when it is gone."""
    try:
        store = PostgresStore(database, name)
    except StoreError:
        return
    store.drop()


def _store_name(kind: DefinitionKind, name: str) -> str:
    """A new store's name: the definition's (made safe), and a token never reused."""
    prefix = "index" if kind == "index" else "source"
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:80]
    return f"{prefix}-{safe}-{secrets.token_hex(4)}"


def _upsert(
    conn: Connection,
    kind: DefinitionKind,
    name: str,
    body: dict[str, Any],
    store: str | None,
    current: StoredDefinition | None,
) -> StoredDefinition:
    etag = f"0x{_bump_generation(conn):016X}"
    now = _now()
    conn.execute(
        f"INSERT INTO ar_service_definitions ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (kind, name) DO UPDATE SET body = EXCLUDED.body, etag = EXCLUDED.etag, "
        "updated = EXCLUDED.updated",
        (kind, name, json.dumps(body), etag, store, now, now),
    )
    created = current.created if current is not None else now
    return StoredDefinition(kind, name, body, etag, store, created, now)


def _bump_generation(conn: Connection) -> int:
    row = conn.execute(
        "UPDATE ar_service_meta SET value = value + 1 WHERE key = 'generation' RETURNING value"
    ).fetchone()
    return int(row[0]) if row else 0


def _signed(key: int) -> int:
    """A 64-bit advisory key as PostgreSQL's signed ``bigint``."""
    return key - (1 << 64) if key >= 1 << 63 else key


def _run_key(run_id: str) -> int:
    """The second (signed 32-bit) key of a run's advisory lock."""
    return int.from_bytes(hashlib.sha1(run_id.encode()).digest()[:4], "big", signed=True)
