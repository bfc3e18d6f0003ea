"""The knowledge service's data directory: definitions, document stores, ingestion history.

Layout::

    DIR/
      service.sqlite            # definitions (indexes, knowledge sources, knowledge bases)
                                # with their ETags, a generation counter, ingestion history,
                                # the last graph synchronisation of each source
      stores/<kind>-<name>-<token>.sqlite
                                # one embedded store per index and per file knowledge source
      runs/<run id>.lock        # held by the process running that ingestion run
      embedding/<store>.lock    # held by the process embedding that store's pending chunks
      graph-sync/<store>.lock   # held by the process synchronising that source's graph
                                # (both go with their store: kb/store_files.py)

Every definition change is one SQLite transaction (``BEGIN IMMEDIATE``): several processes
(``serve --workers N``) share the directory, one writer at a time, and a reader sees a
definition either before or after a change, never half of it. Each change bumps the
generation, so a process knows when its cached knowledge bases are stale. Checks that span
definitions (a source's index exists, a base's sources exist, nothing still uses what is
deleted) run inside the same transaction, so they cannot race.

A store file is named with a random token, so deleting and re-creating an index never hands
another process's open connection the new file; a file no definition names (left by a
process killed between creating it and committing) is removed by :meth:`remove_orphans`.

An ingestion run (a document batch, a file upload) is reported in progress only while the
process running it is alive: it holds ``runs/<run id>.lock`` for the run's length, and a run
whose lock nobody holds (its process was killed) is recorded as the last run, interrupted,
when a status is read (or at start-up, :meth:`reconcile_ingestion`). Its writes were one
transaction per document or file, so each is fully written or absent; the status never
shows a run in progress that nobody is running.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock, Timeout

from agentic_retrieval.errors import PreconditionFailedError, StoreClosedError
from agentic_retrieval.kb.store_files import remove_orphan_locks, unlink_store
from agentic_retrieval.sources.local.store import LocalStore
from agentic_retrieval.sources.local.store.lexical_index import DIRECTORY_SUFFIX

logger = logging.getLogger(__name__)

DefinitionKind = Literal["index", "knowledgeSource", "knowledgeBase"]
DATABASE_NAME = "service.sqlite"
STORES_DIR = "stores"
RUNS_DIR = "runs"
INTERRUPTED = (
    "interrupted: the service stopped before this run finished; each document or file it "
    "had not finished was rolled back, and what it had finished is stored"
)
"""The error an interrupted ingestion run is recorded with."""
_BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES ('generation', '0');
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
CREATE TABLE IF NOT EXISTS definitions (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    body TEXT NOT NULL,
    etag TEXT NOT NULL,
    store TEXT,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE TABLE IF NOT EXISTS ingestion (
    store TEXT PRIMARY KEY,
    runs INTEGER NOT NULL DEFAULT 0,
    total_seconds REAL NOT NULL DEFAULT 0,
    total_items INTEGER NOT NULL DEFAULT 0,
    current TEXT,
    last TEXT
);
CREATE TABLE IF NOT EXISTS ingestion_runs (
    run TEXT PRIMARY KEY,
    store TEXT NOT NULL,
    state TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS store_status (
    store TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (store, key)
);
"""


@dataclass(frozen=True, slots=True)
class StoredDefinition:
    """A definition as stored: its wire body, ETag and (for indexes and file sources) store."""

    kind: DefinitionKind
    name: str
    body: dict[str, Any]
    etag: str
    store: str | None
    created: str
    updated: str


@dataclass(frozen=True, slots=True)
class Conditions:
    """``If-Match`` / ``If-None-Match`` of a request (``*`` or an ETag, quotes allowed)."""

    if_match: str | None = None
    if_none_match: str | None = None

    def check(self, current: StoredDefinition | None, what: str) -> None:
        """Raise :class:`PreconditionFailedError` unless the conditions hold for ``current``."""
        if self.if_match is not None:
            wanted = _bare(self.if_match)
            if current is None:
                raise PreconditionFailedError(
                    f"If-Match: {what} does not exist, so it cannot match {self.if_match}"
                )
            if wanted != "*" and wanted != current.etag:
                raise PreconditionFailedError(
                    f"If-Match: {what} has changed (its ETag is now {current.etag}, "
                    f"not {wanted}); read it again and retry"
                )
        if self.if_none_match is not None and current is not None:
            wanted = _bare(self.if_none_match)
            if wanted == "*":
                raise PreconditionFailedError(f"If-None-Match: * but {what} already exists")
            if wanted == current.etag:
                raise PreconditionFailedError(
                    f"If-None-Match: {what} still has ETag {current.etag}"
                )


@dataclass(frozen=True, slots=True)
class IngestionRun:
    """One ingestion run (a document batch, a file upload) as the status reports it."""

    start_time: str
    end_time: str | None = None
    processed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class IngestionHistory:
    """What a store's ingestion has done: totals, the run in progress, the last run."""

    runs: int = 0
    total_seconds: float = 0.0
    total_items: int = 0
    current: IngestionRun | None = None
    last: IngestionRun | None = None


class DefinitionView:
    """Read access to the definitions inside a write transaction (for cross-checks)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def get(self, kind: DefinitionKind, name: str) -> StoredDefinition | None:
        """The definition ``kind``/``name``, if it exists."""
        row = self._conn.execute(
            "SELECT kind, name, body, etag, store, created, updated FROM definitions "
            "WHERE kind = ? AND name = ?",
            (kind, name),
        ).fetchone()
        return _definition(row) if row else None

    def definitions(self, kind: DefinitionKind) -> list[StoredDefinition]:
        """Every definition of ``kind``, by name."""
        rows = self._conn.execute(
            "SELECT kind, name, body, etag, store, created, updated FROM definitions "
            "WHERE kind = ? ORDER BY name",
            (kind,),
        )
        return [_definition(row) for row in rows]

    def count(self, kind: DefinitionKind) -> int:
        """How many definitions of ``kind`` exist."""
        row = self._conn.execute("SELECT COUNT(*) FROM definitions WHERE kind = ?", (kind,))
        return int(row.fetchone()[0])


Check = Callable[[DefinitionView, StoredDefinition | None], None]
"""Called inside the write transaction with the current definition; raises to abort."""


class ServiceDirectory:
    """The data directory of a knowledge service (created when missing).

    Safe to share between threads and processes. Store objects are opened once per process
    and cached until their definition goes away.

    Args:
        path: The directory.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(f"{self.path} is not a directory")
        (self.path / STORES_DIR).mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._stores: dict[str, LocalStore] = {}
        self._deleted: set[str] = set()
        """Store files this process deleted: never opened again (their names are unique)."""
        self._connection().executescript(_SCHEMA)

    @property
    def database(self) -> Path:
        """The definitions database."""
        return self.path / DATABASE_NAME

    # --- reads ------------------------------------------------------------------------------

    def generation(self) -> int:
        """The counter bumped by every committed definition change (any process)."""
        row = self._connection().execute("SELECT value FROM meta WHERE key = 'generation'")
        return int(row.fetchone()[0])

    def get(self, kind: DefinitionKind, name: str) -> StoredDefinition | None:
        """The definition ``kind``/``name``, if it exists."""
        return DefinitionView(self._connection()).get(kind, name)

    def definitions(self, kind: DefinitionKind) -> list[StoredDefinition]:
        """Every definition of ``kind``, sorted by name."""
        return DefinitionView(self._connection()).definitions(kind)

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
        """Create or replace a definition in one transaction.

        Args:
            kind: What it defines.
            name: Its name.
            body: The wire body to store (without ``@odata.etag``).
            conditions: ``If-Match`` / ``If-None-Match``.
            check: Cross-checks run inside the transaction (raise to abort).
            with_store: Give a new definition its own embedded store file.

        Returns:
            The stored definition and whether it was created (else replaced).

        Raises:
            PreconditionFailedError: A condition does not hold.
        """
        conditions = conditions or Conditions()
        new_store = f"{kind}-{name}-{secrets.token_hex(4)}.sqlite" if with_store else None
        created_file = False
        try:
            with self._write() as conn:
                view = DefinitionView(conn)
                current = view.get(kind, name)
                conditions.check(current, f"{_label(kind)} '{name}'")
                if check is not None:
                    check(view, current)
                if current is None and new_store is not None:
                    # created inside the transaction: a crash leaves an orphan, never a
                    # definition without its file
                    LocalStore(self.path / STORES_DIR / new_store, create=True).close()
                    created_file = True
                store = current.store if current is not None else new_store
                stored = _upsert(conn, kind, name, body, store, current)
        except BaseException:
            if created_file and new_store is not None:
                unlink_store(self.path / STORES_DIR / new_store)
            raise
        return stored, current is None

    def delete(
        self,
        kind: DefinitionKind,
        name: str,
        *,
        conditions: Conditions | None = None,
        check: Check | None = None,
    ) -> StoredDefinition | None:
        """Delete a definition (and its store) in one transaction.

        Returns:
            The deleted definition, or ``None`` when there was none.

        Raises:
            PreconditionFailedError: A condition does not hold.
        """
        conditions = conditions or Conditions()
        with self._write() as conn:
            view = DefinitionView(conn)
            current = view.get(kind, name)
            if current is None and conditions.if_match is None:
                return None
            conditions.check(current, f"{_label(kind)} '{name}'")
            if check is not None:
                check(view, current)
            conn.execute("DELETE FROM definitions WHERE kind = ? AND name = ?", (kind, name))
            if current is not None and current.store is not None:
                conn.execute("DELETE FROM ingestion WHERE store = ?", (current.store,))
                conn.execute("DELETE FROM store_status WHERE store = ?", (current.store,))
            _bump_generation(conn)
        if current is not None and current.store is not None:
            # closed once the searches and writes under way on it finish (see LocalStore.lease)
            self._forget_store(current.store, deleted=True)
            unlink_store(self.path / STORES_DIR / current.store)
        return current

    # --- stores -----------------------------------------------------------------------------

    def store(self, definition: StoredDefinition) -> LocalStore:
        """The embedded store of an index or file source (opened once per process).

        Raises:
            StoreClosedError: This process deleted the definition meanwhile.
            StoreNotFoundError: Another process deleted it (its file is gone).
        """
        if definition.store is None:
            raise ValueError(f"{_label(definition.kind)} '{definition.name}' has no store")
        with self._lock:
            if definition.store in self._deleted:
                raise StoreClosedError(self.path / STORES_DIR / definition.store)
            store = self._stores.get(definition.store)
            if store is None:
                store = LocalStore(self.path / STORES_DIR / definition.store)
                self._stores[definition.store] = store
            return store

    def close_unused_stores(self) -> None:
        """Close this process's stores whose definitions are gone (deleted elsewhere)."""
        named = {
            d.store for d in [*self.definitions("index"), *self.definitions("knowledgeSource")]
        }
        with self._lock:
            gone = [name for name in self._stores if name not in named]
        for name in gone:  # not marked deleted: a definition created meanwhile may name it
            self._forget_store(name)

    def remove_orphans(self) -> list[str]:
        """Delete store files no definition names, and lock files of no store; their names.

        Call it before serving (no other process may be creating a store at that moment).
        """
        named = {
            d.store for d in [*self.definitions("index"), *self.definitions("knowledgeSource")]
        }
        removed = []
        for path in sorted((self.path / STORES_DIR).glob("*.sqlite")):
            if path.name not in named:
                unlink_store(path)
                removed.append(path.name)
        for lexical in (self.path / STORES_DIR).glob(f"*.sqlite{DIRECTORY_SUFFIX}"):
            if not lexical.with_suffix("").exists():  # its store was removed before a crash
                shutil.rmtree(lexical, ignore_errors=True)
        removed += remove_orphan_locks(self.path, self.path / STORES_DIR)
        if removed:
            logger.warning("removed %d orphaned store file(s): %s", len(removed), removed)
        return removed

    def close(self) -> None:
        """Close every connection and store this object opened."""
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    # --- other status of a store (the last graph synchronisation) ---------------------------

    def record_status(self, store: str, key: str, body: dict[str, Any]) -> None:
        """Keep ``body`` as ``store``'s ``key`` status, for every process (none once deleted)."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO store_status(store, key, body) SELECT ?, ?, ? WHERE EXISTS "
                "(SELECT 1 FROM definitions WHERE store = ?) "
                "ON CONFLICT(store, key) DO UPDATE SET body = excluded.body",
                (store, key, json.dumps(body), store),
            )

    def status(self, store: str, key: str) -> dict[str, Any] | None:
        """``store``'s ``key`` status as any process last recorded it."""
        row = self._connection().execute(
            "SELECT body FROM store_status WHERE store = ? AND key = ?", (store, key)
        )
        found = row.fetchone()
        return dict(json.loads(found[0])) if found else None

    # --- ingestion history ------------------------------------------------------------------

    @contextmanager
    def ingestion_run(self, store: str) -> Iterator[RunRecorder]:
        """Record one ingestion run of ``store``: in progress while the block runs.

        The run's lock is held from before it is recorded in progress until after it is
        recorded finished, so a reader that finds it in progress with its lock free knows
        its process died.
        """
        run_id = uuid.uuid4().hex
        lock = self._run_lock(run_id)
        lock.acquire()
        try:
            recorder = RunRecorder(start_time=_now())
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO ingestion_runs(run, store, state) VALUES (?, ?, ?)",
                    (run_id, store, _run_json(recorder.snapshot())),
                )
            started = datetime.now(UTC)
            try:
                yield recorder
            finally:
                elapsed = (datetime.now(UTC) - started).total_seconds()
                self._finish_run(store, recorder.snapshot(end_time=_now()), elapsed, run_id)
        finally:
            lock.release()
            Path(lock.lock_file).unlink(missing_ok=True)

    def ingestion(self, store: str) -> IngestionHistory:
        """The ingestion history of ``store``: the oldest run in progress, the last one.

        A run in progress whose process died is recorded as the last run, interrupted.
        """
        live = [
            state
            for run_id, state in self._runs_in_progress(store)
            if not self._settle_if_abandoned(store, run_id, state)
        ]
        row = (
            self._connection()
            .execute(
                "SELECT runs, total_seconds, total_items, current, last FROM ingestion "
                "WHERE store = ?",
                (store,),
            )
            .fetchone()
        )
        if row is not None and row[3]:  # recorded in progress by an earlier version
            self._settle_if_abandoned(store, None, row[3])
            return self.ingestion(store)
        current = _run(live[0]) if live else None
        if row is None:
            return IngestionHistory(current=current)
        return IngestionHistory(row[0], row[1], row[2], current, _run(row[4]))

    def reconcile_ingestion(self) -> list[str]:
        """Record every run in progress whose process died as interrupted; their stores.

        Reading a status does this for its store; call it at start-up to settle them all
        (and remove the lock files killed runs left).
        """
        rows = self._connection().execute(
            "SELECT run, store, state FROM ingestion_runs UNION ALL "
            "SELECT NULL, store, current FROM ingestion WHERE current IS NOT NULL"
        )
        settled = sorted(
            {
                store
                for run_id, store, state in rows.fetchall()
                if self._settle_if_abandoned(store, run_id, state)
            }
        )
        for leftover in (self.path / RUNS_DIR).glob("*.lock"):
            self._unowned(leftover.stem)  # removes the file when no process holds it
        if settled:
            logger.warning("ingestion interrupted by a stopped service in: %s", settled)
        return settled

    def _runs_in_progress(self, store: str) -> list[tuple[str, str]]:
        rows = self._connection().execute(
            "SELECT run, state FROM ingestion_runs WHERE store = ? ORDER BY rowid", (store,)
        )
        return [(str(run_id), str(state)) for run_id, state in rows.fetchall()]

    def _run_lock(self, run_id: str) -> FileLock:
        (self.path / RUNS_DIR).mkdir(exist_ok=True)
        return FileLock(self.path / RUNS_DIR / f"{run_id}.lock", timeout=0, thread_local=False)

    def _unowned(self, run_id: str) -> bool:
        """Whether no process holds run ``run_id``'s lock (then its lock file is removed)."""
        lock = self._run_lock(run_id)
        try:
            lock.acquire()
        except Timeout:
            return False  # its process holds it: the run is live
        lock.release()
        Path(lock.lock_file).unlink(missing_ok=True)
        return True

    def _settle_if_abandoned(self, store: str, run_id: str | None, state: str) -> bool:
        """Settle run ``run_id`` as the last run, interrupted, when no process runs it.

        ``None`` is a run an earlier version recorded in progress (without a lock). Returns
        whether the run was abandoned.
        """
        if run_id is not None and not self._unowned(run_id):
            return False
        with self._write() as conn:
            if run_id is None:
                settled = conn.execute(
                    "UPDATE ingestion SET current = NULL WHERE store = ? AND current = ?",
                    (store, state),
                )
            else:
                settled = conn.execute("DELETE FROM ingestion_runs WHERE run = ?", (run_id,))
            if settled.rowcount:  # not settled already by another reader
                conn.execute(
                    "INSERT INTO ingestion(store, last) VALUES (?, ?) "
                    "ON CONFLICT(store) DO UPDATE SET last = excluded.last",
                    (store, _interrupted(state)),
                )
        return True

    def _finish_run(self, store: str, run: IngestionRun, seconds: float, run_id: str) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM ingestion_runs WHERE run = ?", (run_id,))
            conn.execute(
                "INSERT INTO ingestion(store, runs, total_seconds, total_items, last) "
                "VALUES (?, 1, ?, ?, ?) ON CONFLICT(store) DO UPDATE SET "
                "runs = runs + 1, total_seconds = total_seconds + excluded.total_seconds, "
                "total_items = total_items + excluded.total_items, last = excluded.last",
                (store, seconds, run.processed + run.failed + run.skipped, _run_json(run)),
            )

    # --- plumbing ---------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.database,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _forget_store(self, store: str, *, deleted: bool = False) -> None:
        with self._lock:
            opened = self._stores.pop(store, None)
            if deleted:
                self._deleted.add(store)
        if opened is not None:
            opened.close()


class RunRecorder:
    """Counts what one ingestion run processed, failed and skipped."""

    def __init__(self, start_time: str) -> None:
        self.start_time = start_time
        self.processed = 0
        self.failed = 0
        self.skipped = 0
        self.errors: list[dict[str, Any]] = []

    def fail(self, doc_id: str, message: str, status_code: int) -> None:
        """Count a failed item (the first 20 are kept for the status)."""
        self.failed += 1
        if len(self.errors) < 20:
            self.errors.append(
                {"docId": doc_id, "errorMessage": message, "statusCode": status_code}
            )

    def snapshot(self, end_time: str | None = None) -> IngestionRun:
        """The run so far."""
        return IngestionRun(
            self.start_time,
            end_time,
            self.processed,
            self.failed,
            self.skipped,
            tuple(self.errors),
        )


def _definition(row: tuple[Any, ...]) -> StoredDefinition:
    return StoredDefinition(row[0], row[1], json.loads(row[2]), row[3], row[4], row[5], row[6])


def _upsert(
    conn: sqlite3.Connection,
    kind: DefinitionKind,
    name: str,
    body: dict[str, Any],
    store: str | None,
    current: StoredDefinition | None,
) -> StoredDefinition:
    etag = f"0x{_bump_generation(conn):016X}"
    now = _now()
    conn.execute(
        "INSERT INTO definitions(kind, name, body, etag, store, created, updated) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(kind, name) DO UPDATE SET "
        "body = excluded.body, etag = excluded.etag, updated = excluded.updated",
        (kind, name, json.dumps(body), etag, store, now, now),
    )
    created = current.created if current is not None else now
    return StoredDefinition(kind, name, body, etag, store, created, now)


def _bump_generation(conn: sqlite3.Connection) -> int:
    conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
    return int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])


def _run_json(run: IngestionRun) -> str:
    return json.dumps(
        {
            "startTime": run.start_time,
            "endTime": run.end_time,
            "processed": run.processed,
            "failed": run.failed,
            "skipped": run.skipped,
            "errors": list(run.errors),
        }
    )


def _interrupted(state: str) -> str:
    """A run's recorded state (JSON) as its last run, with the :data:`INTERRUPTED` error."""
    data = json.loads(state)
    data["errors"] = [*(data.get("errors") or []), {"errorMessage": INTERRUPTED}]
    return json.dumps(data)


def _run(text: str | None) -> IngestionRun | None:
    if not text:
        return None
    data = json.loads(text)
    return IngestionRun(
        data["startTime"],
        data.get("endTime"),
        data.get("processed", 0),
        data.get("failed", 0),
        data.get("skipped", 0),
        tuple(data.get("errors") or ()),
    )


def _bare(etag: str) -> str:
    value = etag.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def _label(kind: DefinitionKind) -> str:
    return {"index": "index", "knowledgeSource": "knowledge source"}.get(kind, "knowledge base")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
