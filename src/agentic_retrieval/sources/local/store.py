"""The on-disk index of one local knowledge source: a single SQLite file.

Tables:

- ``files``: one row per indexed file (absolute path, the slug its chunk ids start with,
  content hash, a fingerprint of everything that shaped its chunks, mtime, size, metadata);
  a record (see :mod:`~agentic_retrieval.sources.local.records`) is a row whose path and slug
  are ``record:<id>`` (no file path or file slug contains ``:``) and whose metadata holds
  the records file it came from (``origin``), if any;
- ``chunks``: one row per chunk (id, file, ordinal, title, content, page, metadata JSON with
  the filterable fields of this chunk alone (its number, its page), optional float32 vector);
  the fields every chunk of a file shares live once in ``files.fields``, so storage stays
  linear in a document's size however many chunks it has (``document_fields`` and ``fields``
  name the fields found at each level);
- ``chunks_fts``: an FTS5 index over ``title`` and ``content`` (external content, kept in sync
  by triggers), ranked by ``bm25`` with the title weighted 3x;
- ``meta``: a ``generation`` counter bumped by every write, so readers know when their
  in-memory vector matrix is stale, plus the embedding dimension and the ``schema_version``;
- ``file_principals``: the users (``u:<id>``) and groups (``g:<id>``) allowed to see each
  file or record whose ``files.access`` is ``restricted``; ``access`` is ``public``, or
  ``NULL`` for a document ingested without permissions (see :mod:`agentic_retrieval.permissions`).

Permission trimming runs inside the SQL of every search (lexical, vector, browse, count),
before ranking and ``top``: a chunk is a candidate only if its file is in the set the caller
may see, built from ``file_principals`` (indexed by principal) with the caller's principals as
bound parameters. The predicate is never text a filter could be concatenated into.

The database runs in WAL mode: readers (other threads, other processes) never block the
indexer and see each file either entirely old or entirely new. Connections are per thread and
hold nothing bound to an event loop, so the store can be searched from any thread or loop.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
from filelock import FileLock, Timeout

from agentic_retrieval.errors import (
    PermissionsNotEnforceableError,
    StoreBusyError,
    StoreClosedError,
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from agentic_retrieval.odata import Expr, to_sql
from agentic_retrieval.permissions import ANONYMOUS, Access, Permissions
from agentic_retrieval.sources.local.health import StoreHealth, is_damage
from agentic_retrieval.text import MAX_QUERY_TERMS

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

TITLE_WEIGHT = 3.0
CONTENT_WEIGHT = 1.0
RRF_K = 60
_BUSY_TIMEOUT_MS = 30_000
_WAL_CHECKPOINT_PAGES = 10_000
_WRITE_CACHE_KIB = 32 * 1024
_CANCEL_CHECK_STEPS = 10_000
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
# Dropped from queries only (the index keeps every word): on a large corpus a term that occurs
# in nearly every chunk costs a full posting-list scan and adds almost nothing to BM25.
QUERY_STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from had has have how i if in into is it
    its me my of on or our so than that the their them then there these they this to was we
    were what when where which who why will with you your""".split()
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    slug TEXT NOT NULL UNIQUE,
    content_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    chunk_count INTEGER NOT NULL,
    indexed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    rid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    file_id INTEGER NOT NULL REFERENCES files(id),
    ordinal INTEGER NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL,
    page INTEGER,
    metadata TEXT NOT NULL DEFAULT '{}',
    vector BLOB
);
CREATE INDEX IF NOT EXISTS chunks_by_file ON chunks(file_id, ordinal);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    title, content, content='chunks', content_rowid='rid',
    tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, title, content)
    VALUES (new.rid, fts_segment(new.title), fts_segment(new.content));
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, title, content)
    VALUES ('delete', old.rid, fts_segment(old.title), fts_segment(old.content));
END;
CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE OF title, content ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, title, content)
    VALUES ('delete', old.rid, fts_segment(old.title), fts_segment(old.content));
    INSERT INTO chunks_fts(rowid, title, content)
    VALUES (new.rid, fts_segment(new.title), fts_segment(new.content));
END;
CREATE TABLE IF NOT EXISTS fields (
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (name, kind)
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta(key, value) VALUES ('generation', '0');
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
"""

SCHEMA_VERSION = 3
"""Version 2 added permissions (``files.access`` and ``file_principals``), version 3 the
fields shared by a file's chunks (``files.fields``, ``document_fields``)."""
_PERMISSIONS_SCHEMA = """
ALTER TABLE files ADD COLUMN access TEXT;
CREATE TABLE IF NOT EXISTS file_principals (
    file_id INTEGER NOT NULL,
    principal TEXT NOT NULL,
    PRIMARY KEY (file_id, principal)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS file_principals_by_principal ON file_principals(principal, file_id);
CREATE INDEX IF NOT EXISTS files_by_access ON files(access);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
"""
_DOCUMENT_FIELDS_SCHEMA = """
ALTER TABLE files ADD COLUMN fields TEXT NOT NULL DEFAULT '{}';
CREATE TABLE IF NOT EXISTS document_fields (
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (name, kind)
) WITHOUT ROWID;
UPDATE meta SET value = '3' WHERE key = 'schema_version';
UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
"""
_MIGRATIONS = ((2, "access", _PERMISSIONS_SCHEMA), (3, "fields", _DOCUMENT_FIELDS_SCHEMA))
"""(version reached, the ``files`` column it adds, its statements), oldest first."""
PUBLIC = "public"
RESTRICTED = "restricted"


RECORD_PREFIX = "record:"
"""Path (and slug) prefix of the ``files`` rows that hold records rather than files."""

_FIELDS_OF_CHUNKS = "SELECT DISTINCT j.key, j.type FROM chunks c, json_each(c.metadata) j"
"""The (field, JSON type) pairs of chunk metadata; recorded in ``fields`` as chunks are written."""

SELECTIVE_MIN_CHUNKS = 20_000
"""Index size from which candidate generation skips very common query terms."""
SELECTIVE_MAX_SHARE = 0.25
"""A query term in more than this share of the chunks counts as very common."""


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A chunk ready to be written."""

    id: str
    ordinal: int
    title: str
    content: str
    page: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FileState:
    """What the store remembers about an indexed file."""

    path: str
    slug: str
    content_hash: str
    fingerprint: str
    mtime: float
    size: int
    chunk_count: int


@dataclass(frozen=True, slots=True)
class StoredHit:
    """One search result, straight from the store."""

    id: str
    title: str
    content: str
    page: int | None
    metadata: dict[str, Any]
    score: float
    similarity: float | None = None
    """Cosine of the chunk's vector and the query's (hybrid search; ``None`` otherwise)."""


@dataclass(frozen=True, slots=True)
class AccessSummary:
    """How many documents of a store are public, restricted (named principals) or unmarked."""

    public: int = 0
    restricted: int = 0
    unmarked: int = 0

    @property
    def has_permissions(self) -> bool:
        """Whether any document was ingested with permissions."""
        return bool(self.public or self.restricted)


@dataclass(slots=True)
class _VectorCache:
    generation: int = -1
    rids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))


def json_default(value: Any) -> Any:
    """Serialise metadata values JSON does not know (dates as ISO 8601, sets as lists)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON serialisable")


def metadata_column(path: str, level: str = "chunk") -> str:
    """Map an OData field path (already validated as ``ident(/ident)*``) to SQL.

    ``level`` says where the field is stored: ``chunk`` (the chunk's ``c.metadata``),
    ``document`` (the shared ``f.fields`` of its file) or ``both`` (the chunk's value when
    it has one).
    """
    json_path = "'$." + path.replace("/", ".") + "'"
    chunk, document = (
        f"json_extract(c.metadata, {json_path})",
        f"json_extract(f.fields, {json_path})",
    )
    return {"chunk": chunk, "document": document}.get(level, f"coalesce({chunk}, {document})")


def fts_segment(text: str | None) -> str | None:
    """Text as the FTS index sees it: runs of CJK characters split into spaced bigrams.

    Chinese and Japanese are written without spaces, so FTS5's ``unicode61`` tokenizer would
    index a whole sentence as one token and no word inside it could be found. Other text is
    returned unchanged. Registered as the SQL function ``fts_segment`` used by the triggers.
    """
    if text is None or text.isascii():
        return text
    return _CJK_RUN.sub(lambda m: f" {_bigrams(m.group(0))} ", text)


def _bigrams(run: str) -> str:
    if len(run) == 1:
        return run
    return " ".join(run[i : i + 2] for i in range(len(run) - 1))


def fts_match_expression(text: str, *, segmented: bool = True) -> str | None:
    """Turn arbitrary user text into a safe FTS5 query: quoted terms joined by ``OR``.

    Operators (``AND``, ``NEAR``, ``-``, ``*``, ``:``, quotes, parentheses) in the user's text
    become plain words or separators; nothing the user types can change the query's syntax.
    With ``segmented`` (indexes whose triggers use :func:`fts_segment`), a CJK run becomes the
    phrase of its bigrams, so a word inside an unspaced sentence matches.

    Only the first ``MAX_QUERY_TERMS`` distinct terms count; the scan stops there, so the
    cost is linear in the text read and bounded however long the text is.

    Returns:
        The MATCH expression, or ``None`` when the text has no word at all.

    """
    # dicts as ordered sets: first appearance order, O(1) membership
    content: dict[str, None] = {}
    stopwords: dict[str, None] = {}
    for match in _TOKEN.finditer(text):
        for term in _query_terms(match.group().casefold(), segmented):
            if term not in QUERY_STOPWORDS:
                content[term] = None
            elif len(stopwords) < MAX_QUERY_TERMS:
                stopwords[term] = None
        if len(content) >= MAX_QUERY_TERMS:
            break
    terms = list(content or stopwords)[:MAX_QUERY_TERMS]
    if not terms:
        return None
    return " OR ".join(f'"{term}"' for term in terms)


def _query_terms(token: str, segmented: bool) -> list[str]:
    """A query token as index terms: CJK runs become bigram phrases when segmented."""
    if not segmented or token.isascii() or not _CJK_RUN.search(token):
        return [token]
    terms = []
    position = 0
    for match in _CJK_RUN.finditer(token):
        if match.start() > position:
            terms.append(token[position : match.start()])
        terms.append(_bigrams(match.group(0)))
        position = match.end()
    if position < len(token):
        terms.append(token[position:])
    return terms


def _leased(
    method: Callable[Concatenate[LocalStore, P], R],
) -> Callable[Concatenate[LocalStore, P], R]:
    """Run a store method under a lease: :meth:`LocalStore.close` waits for it to finish."""

    @functools.wraps(method)
    def leased(store: LocalStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with store.lease():
            return method(store, *args, **kwargs)

    return leased


class LocalStore:
    """A SQLite-backed chunk index with BM25 and optional dense-vector search.

    Args:
        path: The database file.
        create: Create the file (and its parent directories) when it is missing. Without it,
            opening never creates anything: a mistyped path is an error, not a new empty
            index.

    Raises:
        StoreNotFoundError: ``path`` does not exist and ``create`` is false.
        StoreError: ``path`` is a directory, or a file that is not a local source index.

    """

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise StoreError(
                f"{self.path} is a directory: a local source is one SQLite file (e.g. "
                f"{self.path / 'handbook.sqlite'}); for a knowledge-base directory use "
                "KnowledgeBaseDirectory or kb.loader.open_knowledge_base"
            )
        if not self.path.exists():
            if not create:
                raise StoreNotFoundError(
                    f"no local source index at {self.path} (nothing was created): check the "
                    "path, or pass create=True to start a new one"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._vectors = _VectorCache()
        self._vector_lock = threading.Lock()
        self._closed = False
        self._users = 0
        """Operations under way (leases); the last one out closes a closed store."""
        self._creating = create
        if not create and not self._is_store():
            raise StoreError(
                f"{self.path} is not a local source index (it has no chunks table); "
                "nothing was changed"
            )
        self._connection().executescript(_SCHEMA)
        self._migrate()
        trigger = (
            self._connection()
            .execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'chunks_ai'")
            .fetchone()
        )
        # indexes built before CJK segmentation keep their triggers: query them unsegmented
        self.segmented = bool(trigger) and "fts_segment" in trigger[0]
        self._health = StoreHealth(self.path)
        with self._write() as conn:
            configured = conn.execute("SELECT v FROM chunks_fts_config WHERE k = 'rank'")
            if configured.fetchone() is None:
                conn.execute(
                    "INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('rank', ?)",
                    (f"bm25({TITLE_WEIGHT}, {CONTENT_WEIGHT})",),
                )
            scanned = conn.execute("SELECT 1 FROM meta WHERE key = 'fields_recorded'")
            if scanned.fetchone() is None:  # an index written before fields were recorded
                conn.execute(f"INSERT OR IGNORE INTO fields(name, kind) {_FIELDS_OF_CHUNKS}")
                conn.execute("INSERT INTO meta(key, value) VALUES ('fields_recorded', '1')")
        self._creating = False  # from now on a missing file was deleted: never re-create it

    # ------------------------------------------------------------------ connections

    def _connection(self) -> sqlite3.Connection:
        if self._closed and not getattr(self._local, "leases", 0):
            raise StoreClosedError(self.path)
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        health = getattr(self, "_health", None)
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
            conn.create_function("fts_segment", 1, fts_segment, deterministic=True)
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_vocab "
                "USING fts5vocab(main, chunks_fts, 'row')"
            )
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

    def _is_store(self) -> bool:
        row = (
            self._connection()
            .execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunks'")
            .fetchone()
        )
        return row is not None

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

    def _migrate(self) -> None:
        """Bring a store written by an earlier version to :data:`SCHEMA_VERSION`.

        Stores from before permissions existed open as they were: their documents are
        unmarked, hence hidden wherever permissions are enforced (fail closed) and visible
        elsewhere, as before. Stores from before ``files.fields`` keep every field in their
        chunks' metadata, where filters keep finding them. Safe when several processes open
        one old store at once: each check and change runs in one write transaction.
        """
        if self._schema_version() >= SCHEMA_VERSION:
            return
        for version, column, statements in _MIGRATIONS:
            with self._write() as conn:
                columns = {row[1] for row in conn.execute("PRAGMA table_info(files)")}
                if column in columns:  # done before, or by another process meanwhile
                    continue
                for statement in statements.strip().split(";\n"):
                    conn.execute(statement)
            logger.info("migrated %s to schema version %d", self.path, version)

    def _schema_version(self) -> int:
        row = (
            self._connection()
            .execute("SELECT value FROM meta WHERE key = 'schema_version'")
            .fetchone()
        )
        return int(row[0]) if row else 1

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One transaction around several writes of this thread (each still all-or-nothing).

        Every write inside becomes a savepoint: a failed one is undone alone, and all commit
        together at the end (one commit instead of one per file: much faster for batches).
        Other writers wait meanwhile; readers never see the batch before it commits. The
        store stays open until the block ends (it holds a lease).
        """
        return self._write()

    def close(self) -> None:
        """Close the store (from any thread): now, or when the last lease under way ends.

        Later operations raise :class:`StoreClosedError`; operations under way finish first.
        """
        with self._lock:
            self._closed = True
            if self._users == 0:
                self._close_connections()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _close_connections(self) -> None:
        """Close every connection this store opened (called under ``_lock``, none in use)."""
        for conn in self._connections:
            conn.close()
        self._connections.clear()

    # ------------------------------------------------------------------ bookkeeping

    @_leased
    def generation(self) -> int:
        """Return the counter bumped by every committed write."""
        row = (
            self._connection().execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        )
        return int(row[0])

    @_leased
    def file_state(self, path: str) -> FileState | None:
        """Return what was indexed for ``path`` (an absolute path string), if anything."""
        row = (
            self._connection()
            .execute(
                "SELECT path, slug, content_hash, fingerprint, mtime, size, chunk_count "
                "FROM files WHERE path = ?",
                (path,),
            )
            .fetchone()
        )
        return FileState(*row) if row else None

    @_leased
    def indexed_paths(self) -> list[str]:
        """Every indexed file path, sorted."""
        rows = self._connection().execute("SELECT path FROM files ORDER BY path")
        return [r[0] for r in rows]

    @_leased
    def record_ids(self, origin: str | None = None) -> list[str]:
        """Ids of the indexed records (only those read from ``origin``, when given), sorted."""
        sql = "SELECT path FROM files WHERE substr(path, 1, ?) = ?"
        params: list[Any] = [len(RECORD_PREFIX), RECORD_PREFIX]
        if origin is not None:
            sql += " AND json_extract(metadata, '$.origin') = ?"
            params.append(origin)
        rows = self._connection().execute(sql + " ORDER BY path", params)
        return [r[0][len(RECORD_PREFIX) :] for r in rows]

    @_leased
    def document_keys(self) -> set[str]:
        """Every document's key: a record's id, a file's slug (its chunk ids' prefix)."""
        rows = self._connection().execute("SELECT slug FROM files")
        return {r[0].removeprefix(RECORD_PREFIX) for r in rows}

    @_leased
    def stored_metadata(self, path: str) -> dict[str, Any] | None:
        """The metadata stored with ``path`` when it was indexed, or ``None`` if it is not."""
        row = (
            self._connection()
            .execute("SELECT metadata FROM files WHERE path = ?", (path,))
            .fetchone()
        )
        return json.loads(row[0]) if row else None

    @_leased
    def count_files(self, prefix: str = "") -> int:
        """How many indexed paths start with ``prefix``."""
        row = (
            self._connection()
            .execute(
                "SELECT count(*) FROM files WHERE substr(path, 1, ?) = ?", (len(prefix), prefix)
            )
            .fetchone()
        )
        return int(row[0])

    @_leased
    def files_page(
        self, prefix: str, after: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` (path, stored metadata) pairs whose path starts with ``prefix``.

        In path order, starting after the path ``after``.
        """
        rows = self._connection().execute(
            "SELECT path, metadata FROM files WHERE substr(path, 1, ?) = ? AND path > ? "
            "ORDER BY path LIMIT ?",
            (len(prefix), prefix, after or "", limit),
        )
        return [(row[0], json.loads(row[1])) for row in rows]

    @_leased
    def count_matching_files(
        self, text: str, filter_expr: Expr | None = None, *, access: Access = ANONYMOUS
    ) -> int:
        """How many files the caller may see have a chunk matching ``text`` and ``filter_expr``.

        Text matches as in :meth:`search` (``*`` or empty: every chunk passing the filter).

        Raises:
            PermissionsNotEnforceableError: As for :meth:`search`.
        """
        match = fts_match_expression(text, segmented=self.segmented)
        if match is None and text.strip() not in ("", "*") and filter_expr is None:
            return 0
        with self._snapshot():
            where, params = self._where(filter_expr, access)
            if match is None:
                sql = f"SELECT count(DISTINCT c.file_id) FROM chunks c WHERE {where}"
                row = self._connection().execute(sql, params).fetchone()
            else:
                sql = (
                    "SELECT count(DISTINCT c.file_id) FROM chunks_fts JOIN chunks c "
                    f"ON c.rid = chunks_fts.rowid WHERE chunks_fts MATCH ? AND {where}"
                )
                row = self._connection().execute(sql, [match, *params]).fetchone()
        return int(row[0])

    @_leased
    def slug_owner(self, slug: str) -> str | None:
        """Return the path whose chunks use ``slug``, if any."""
        row = (
            self._connection().execute("SELECT path FROM files WHERE slug = ?", (slug,)).fetchone()
        )
        return row[0] if row else None

    @_leased
    def chunk_ids(self) -> list[str]:
        """Every chunk id, in file then chunk order."""
        rows = self._connection().execute(
            "SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY f.path, c.ordinal"
        )
        return [r[0] for r in rows]

    @_leased
    def count_chunks(self) -> int:
        """Return the number of chunks in the index."""
        return int(self._connection().execute("SELECT count(*) FROM chunks").fetchone()[0])

    @_leased
    def metadata_kinds(self) -> dict[str, frozenset[str]]:
        """Every top-level metadata field written to the chunks, with its values' JSON types.

        Types are SQLite's ``json_type`` names (``integer``, ``real``, ``text``, ``true``,
        ``false``, ``null``, ``array``, ``object``). Recorded by every write (in the ``fields``
        table), so reading them is one small query; a field stays known after the last chunk
        holding it is deleted.
        """
        kinds: dict[str, set[str]] = {}
        rows = self._connection().execute(
            "SELECT name, kind FROM fields UNION SELECT name, kind FROM document_fields"
        )
        for name, kind in rows:
            kinds.setdefault(str(name), set()).add(str(kind))
        return {name: frozenset(found) for name, found in kinds.items()}

    @_leased
    def has_vectors(self) -> bool:
        """Whether any chunk carries a vector."""
        row = (
            self._connection()
            .execute("SELECT 1 FROM chunks WHERE vector IS NOT NULL LIMIT 1")
            .fetchone()
        )
        return row is not None

    # ------------------------------------------------------------------ writes

    @_leased
    def replace_file(
        self,
        state: FileState,
        metadata: Mapping[str, Any],
        chunks: Sequence[ChunkRecord],
        vectors: Sequence[Sequence[float]] | None = None,
        permissions: Permissions | None = None,
        *,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Replace everything indexed for ``state.path`` in one transaction.

        Args:
            state: The file's new bookkeeping row (its ``chunk_count`` is ignored).
            metadata: The user metadata given at ingest time (stored for reference).
            chunks: The file's chunks, in order; each one's ``metadata`` holds the fields
                of that chunk alone.
            vectors: One vector per chunk, or ``None`` for a lexical-only index.
            permissions: Who may see the file. ``None`` keeps the permissions it had (a
                re-index that does not mention permissions never widens access); a new
                file without any is unmarked.
            fields: Filterable fields every chunk of the file shares, stored once (a
                chunk's own field of the same name wins). Searches and filters see each
                chunk with both.

        Raises:
            StoreError: When the vectors' dimension differs from the index's.

        """
        blobs = self._vector_blobs(vectors, len(chunks))
        meta_json = json.dumps(dict(metadata), default=json_default, sort_keys=True)
        fields_json = json.dumps(dict(fields or {}), default=json_default, sort_keys=True)
        with self._write() as conn:
            if permissions is None:
                permissions = _read_permissions(conn, state.path)
            self._delete_file_rows(conn, state.path)
            cursor = conn.execute(
                "INSERT INTO files(path, slug, content_hash, fingerprint, mtime, size, metadata, "
                "fields, chunk_count, indexed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, datetime('now'))",
                (
                    state.path,
                    state.slug,
                    state.content_hash,
                    state.fingerprint,
                    state.mtime,
                    state.size,
                    meta_json,
                    fields_json,
                    len(chunks),
                ),
            )
            file_id = cursor.lastrowid
            conn.executemany(
                "INSERT INTO chunks(id, file_id, ordinal, title, content, page, metadata, vector) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        c.id,
                        file_id,
                        c.ordinal,
                        c.title,
                        c.content,
                        c.page,
                        json.dumps(dict(c.metadata), default=json_default, sort_keys=True),
                        blob,
                    )
                    for c, blob in zip(chunks, blobs, strict=True)
                ],
            )
            conn.execute(
                f"INSERT OR IGNORE INTO fields(name, kind) {_FIELDS_OF_CHUNKS} WHERE c.file_id = ?",
                (file_id,),
            )
            conn.execute(
                "INSERT OR IGNORE INTO document_fields(name, kind) "
                "SELECT key, type FROM json_each(?)",
                (fields_json,),
            )
            if vectors:
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('dimension', ?)",
                    (str(len(vectors[0])),),
                )
            if permissions is not None:
                _write_permissions(conn, int(file_id or 0), permissions)
            _bump_generation(conn)

    @_leased
    def permissions_of(self, path: str) -> Permissions | None:
        """Who may see the indexed ``path``; ``None`` when unmarked (or not indexed)."""
        return _read_permissions(self._connection(), path)

    @_leased
    def set_permissions(self, path: str, permissions: Permissions) -> bool:
        """Give the indexed ``path`` new permissions (its chunks stay as they are).

        Returns:
            Whether anything changed (``False`` also when ``path`` is not indexed).
        """
        with self._write() as conn:
            row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
            if row is None or _read_permissions(conn, path) == permissions:
                return False
            conn.execute("DELETE FROM file_principals WHERE file_id = ?", (row[0],))
            _write_permissions(conn, int(row[0]), permissions)
            _bump_generation(conn)
        return True

    @_leased
    def access_summary(self) -> AccessSummary:
        """How many documents are public, restricted and unmarked (cached per generation)."""
        generation = self.generation()
        cached = getattr(self._local, "access", None)
        if cached is None or cached[0] != generation:
            counts = dict(
                self._connection().execute("SELECT access, count(*) FROM files GROUP BY access")
            )
            summary = AccessSummary(
                public=int(counts.get(PUBLIC, 0)),
                restricted=int(counts.get(RESTRICTED, 0)),
                unmarked=int(counts.get(None, 0)),
            )
            cached = (generation, summary)
            self._local.access = cached
        result: AccessSummary = cached[1]
        return result

    @_leased
    def touch_file(self, path: str, mtime: float) -> None:
        """Record a new mtime for an unchanged file (no generation bump: no content changed)."""
        with self._write() as conn:
            conn.execute("UPDATE files SET mtime = ? WHERE path = ?", (mtime, path))

    @_leased
    def delete_file(self, path: str) -> int:
        """Remove a file and its chunks; returns the number of chunks removed."""
        with self._write() as conn:
            removed = self._delete_file_rows(conn, path)
            _bump_generation(conn)
        return removed

    def _delete_file_rows(self, conn: sqlite3.Connection, path: str) -> int:
        row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            return 0
        removed = conn.execute("DELETE FROM chunks WHERE file_id = ?", (row[0],)).rowcount
        conn.execute("DELETE FROM file_principals WHERE file_id = ?", (row[0],))
        conn.execute("DELETE FROM files WHERE id = ?", (row[0],))
        return int(removed)

    def _vector_blobs(
        self, vectors: Sequence[Sequence[float]] | None, count: int
    ) -> list[bytes | None]:
        if vectors is None:
            return [None] * count
        if len(vectors) != count:
            raise StoreError(f"{len(vectors)} vectors for {count} chunks")
        array = np.asarray(vectors, dtype=np.float32)
        if count and array.ndim != 2:
            raise StoreError("vectors must all have the same dimension")
        expected = self.dimension()
        if count and expected is not None and array.shape[1] != expected:
            raise StoreError(
                f"embedding dimension {array.shape[1]} differs from the index's {expected}; "
                "re-create the index to change embedding models"
            )
        return [row.tobytes() for row in array]

    @_leased
    def dimension(self) -> int | None:
        """The dimension of the index's vectors, once any were written."""
        row = (
            self._connection().execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
        )
        return int(row[0]) if row else None

    # ------------------------------------------------------------------ reads

    @_leased
    def search(
        self,
        text: str,
        *,
        top: int = 50,
        filter_expr: Expr | None = None,
        query_vector: Sequence[float] | None = None,
        cancel: threading.Event | None = None,
        access: Access = ANONYMOUS,
    ) -> list[StoredHit]:
        """Search the index: BM25 alone, or BM25 and cosine fused by reciprocal rank.

        Args:
            text: The user's query; any characters are allowed.
            top: Maximum number of hits.
            filter_expr: A parsed OData filter over the chunk metadata.
            query_vector: The embedded query; enables hybrid search when the index has vectors.
            cancel: Set from another thread to abort the search mid-query (its caller has
                gone); the search then raises ``sqlite3.OperationalError`` (interrupted).
            access: Who is asking: only chunks of documents they may see are candidates
                (see :mod:`agentic_retrieval.permissions`); the default is an anonymous
                caller, permissions not enforced.

        Returns:
            Hits, best first. Scores are ``-bm25`` (higher is better) for lexical search and
            RRF sums for hybrid search; a hybrid search's hits also carry the cosine of their
            vector and the query's (``similarity``), whichever list found them. For ``*``, an
            empty text or a filter-only query, the first chunks (in file order) that pass the
            filter, scored 0; for text with no word at all (only punctuation), nothing.

        Raises:
            StoreUnavailableError: The file is damaged or missing (see
                :mod:`~agentic_retrieval.sources.local.health`).
            PermissionsNotEnforceableError: ``access`` enforces permissions and no document of
                this store has any (it was indexed without permissions).

        """
        if top <= 0:
            return []
        if not self._closed:  # closed (deleted) under this lease: not damage, finish reading
            self._health.check(self._recover)
        conn = self._connection()
        if cancel is not None:
            # SQLite calls this every few thousand steps; non-zero aborts the statement
            conn.set_progress_handler(cancel.is_set, _CANCEL_CHECK_STEPS)
        try:
            return self._search(text, top, filter_expr, query_vector, access)
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise self._health.damaged(exc) from None
            raise
        finally:
            if cancel is not None:
                conn.set_progress_handler(None, 0)

    def _search(
        self,
        text: str,
        top: int,
        filter_expr: Expr | None,
        query_vector: Sequence[float] | None,
        access: Access,
    ) -> list[StoredHit]:
        depth = max(top, 50)
        with self._snapshot():  # the permission check and the query see the same data
            where, params = self._where(filter_expr, access)
            lexical = self._lexical(text, depth, where, params)
            if query_vector is not None and self.has_vectors():
                dense = self._dense(query_vector, depth, where, params)
                ranked = reciprocal_rank_fusion([lexical, dense])[:top]
                return self._fetch(ranked, self._similarities(query_vector, ranked))
            elif lexical is None:
                # "*" or "" (Azure's match-all) or a filter-only query browses; words that
                # are all punctuation ("^", "((( )))") match nothing rather than any chunk
                browse = text.strip() in ("", "*") or filter_expr is not None
                ranked = self._browse(top, where, params) if browse else []
            else:
                ranked = lexical[:top]
            return self._fetch(ranked)

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

    def _where(self, filter_expr: Expr | None, access: Access) -> tuple[str, list[Any]]:
        """The SQL condition on ``c`` (a chunk): the caller's filter AND the permission check.

        Each part is a separate, parenthesised condition built from parsed values, with every
        value a bound parameter: no text of a filter can reach into the permission check.
        """
        conditions, params = [], []
        if filter_expr is not None:
            sql, values = self._filter_sql(filter_expr)
            conditions.append(sql)
            params += values
        allowed, principals = self._permission_sql(access)
        if allowed:
            conditions.append(allowed)
            params += principals
        return " AND ".join(conditions) or "1", params

    def _filter_sql(self, filter_expr: Expr) -> tuple[str, list[Any]]:
        """A filter as a condition on ``c``, reading each field where it is stored.

        A filter on fields its files share only (``files.fields``) is evaluated once per
        file, not once per chunk: a long document's many chunks never re-read its fields.
        """
        chunk_level, document_level = self._field_levels()
        levels: set[str] = set()

        def column(path: str) -> str:
            head = path.split("/")[0]
            shared, own = head in document_level, head in chunk_level or head not in document_level
            level = "both" if shared and own else "document" if shared else "chunk"
            levels.update(("chunk", "document") if level == "both" else (level,))
            return metadata_column(path, level)

        sql, values = to_sql(filter_expr, column)
        if "document" not in levels:
            return f"({sql})", values
        if "chunk" not in levels:  # an uncorrelated subquery: SQLite runs it once
            return f"(c.file_id IN (SELECT f.id FROM files f WHERE {sql}))", values
        return f"(EXISTS (SELECT 1 FROM files f WHERE f.id = c.file_id AND ({sql})))", values

    def _field_levels(self) -> tuple[frozenset[str], frozenset[str]]:
        """Names of the fields stored per chunk and per file (cached per write generation)."""
        generation = (self._health.epoch, self.generation())
        cached = getattr(self._local, "levels", None)
        if cached is None or cached[0] != generation:
            conn = self._connection()
            chunk = frozenset(r[0] for r in conn.execute("SELECT DISTINCT name FROM fields"))
            document = frozenset(
                r[0] for r in conn.execute("SELECT DISTINCT name FROM document_fields")
            )
            cached = (generation, (chunk, document))
            self._local.levels = cached
        levels: tuple[frozenset[str], frozenset[str]] = cached[1]
        return levels

    def _permission_sql(self, access: Access) -> tuple[str | None, list[str]]:
        """The permission condition for ``access`` (``None``: every chunk is visible).

        Raises:
            PermissionsNotEnforceableError: Enforced, and no document carries permissions.
        """
        if access.elevated:
            return None, []
        summary = self.access_summary()
        if access.enforce and not summary.has_permissions and summary.unmarked:
            # no file name, no command line: callers (sources, indexes) name themselves
            raise PermissionsNotEnforceableError(
                "the store holds no permission metadata (it was indexed without permissions), "
                "so it cannot be searched while permissions are enforced"
            )
        if not summary.restricted and not (access.enforce and summary.unmarked):
            return None, []
        # Unmarked documents count as visible unless enforced. The smaller of the visible
        # and the hidden set is materialised (once per query) and probed per candidate.
        unmarked_visible = not access.enforce
        visible = summary.public + (summary.unmarked if unmarked_visible else 0)
        hidden = summary.restricted + (0 if unmarked_visible else summary.unmarked)
        principals = access.principals()
        marks = ",".join("?" for _ in principals)
        matching = f"SELECT file_id FROM file_principals WHERE principal IN ({marks})"
        unmarked = "access IS NULL"
        if visible <= hidden:
            kinds = [f"access = '{PUBLIC}'"] + ([unmarked] if unmarked_visible else [])
            sql = f"SELECT id FROM files WHERE {' OR '.join(kinds)}"
            sql += f" UNION {matching}" if principals else ""
            return f"(c.file_id IN ({sql}))", principals
        kinds = [f"access = '{RESTRICTED}'"] + ([] if unmarked_visible else [unmarked])
        sql = f"SELECT id FROM files WHERE {' OR '.join(kinds)}"
        sql += f" EXCEPT {matching}" if principals else ""
        return f"(c.file_id NOT IN ({sql}))", principals

    def _lexical(
        self, text: str, depth: int, where: str, params: list[Any]
    ) -> list[tuple[int, float]] | None:
        match = fts_match_expression(text, segmented=self.segmented)
        if match is None:
            return None
        match = self._selective(match)
        rows = self._connection().execute(
            "SELECT c.rid, -chunks_fts.rank FROM chunks_fts "
            "JOIN chunks c ON c.rid = chunks_fts.rowid "
            f"WHERE chunks_fts MATCH ? AND {where} ORDER BY chunks_fts.rank LIMIT ?",
            [match, *params, depth],
        )
        return [(int(rid), float(score)) for rid, score in rows]

    def _selective(self, match: str) -> str:
        """Generate candidates from a large index with the query's distinctive terms only.

        BM25 cost grows with the posting lists of the query's terms, and a term found in a
        quarter or more of the chunks adds little to any score (its IDF is small) while
        costing the most to score. On indexes of ``SELECTIVE_MIN_CHUNKS`` chunks or more,
        such terms are left out of the MATCH when at least two rarer terms remain; the
        reranker still scores every candidate on all query terms. Measured on 122k chunks:
        half the query time, and the full query's top 10 always within the top 50.
        """
        count = self._chunk_count()
        terms = [term[1:-1] for term in match.split(" OR ")]
        if count < SELECTIVE_MIN_CHUNKS or len(terms) < 3:
            return match
        conn = self._connection()
        rare = []
        for term in terms:
            if " " in term:  # a CJK phrase: always kept (its bigrams are not single terms)
                rare.append(term)
                continue
            row = conn.execute("SELECT doc FROM chunks_vocab WHERE term = ?", (term,)).fetchone()
            if row is not None and row[0] <= SELECTIVE_MAX_SHARE * count:
                rare.append(term)
        if len(rare) < 2:
            return match
        return " OR ".join(f'"{term}"' for term in rare)

    def _chunk_count(self) -> int:
        """Chunks in the index, cached per write generation (and file, see ``_recover``)."""
        generation = (self._health.epoch, self.generation())
        cached = getattr(self._local, "count", None)
        if cached is None or cached[0] != generation:
            cached = (generation, self.count_chunks())
            self._local.count = cached
        return int(cached[1])

    def _recover(self) -> None:
        """Check a changed file on a fresh connection and drop what was cached from the old.

        Raises:
            sqlite3.Error: The file is still not a usable index.
        """
        conn = self._connection()
        verdict = conn.execute("PRAGMA quick_check(1)").fetchone()
        if not verdict or verdict[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {verdict[0] if verdict else 'no answer'}")
        conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        conn.execute("SELECT rid, file_id FROM chunks LIMIT 1").fetchone()
        trigger = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'chunks_ai'"
        ).fetchone()
        self.segmented = bool(trigger) and "fts_segment" in trigger[0]
        with self._vector_lock:
            self._vectors = _VectorCache()  # a restored file may repeat an old generation

    def _browse(self, top: int, where: str, params: list[Any]) -> list[tuple[int, float]]:
        rows = self._connection().execute(
            f"SELECT c.rid FROM chunks c WHERE {where} ORDER BY c.file_id, c.ordinal LIMIT ?",
            [*params, top],
        )
        return [(int(r[0]), 0.0) for r in rows]

    def _dense(
        self, query_vector: Sequence[float], depth: int, where: str, params: list[Any]
    ) -> list[tuple[int, float]]:
        cache = self._vector_matrix()
        if cache.matrix.shape[0] == 0:
            return []
        query = np.asarray(query_vector, dtype=np.float32)
        if query.shape != (cache.matrix.shape[1],):
            raise StoreError(
                f"query vector has dimension {query.shape} but the index has "
                f"{cache.matrix.shape[1]}: use the embedding model the index was built with"
            )
        norm = float(np.linalg.norm(query))
        similarities = cache.matrix @ (query / norm if norm else query)
        if where != "1":
            allowed = [
                r[0]
                for r in self._connection().execute(
                    f"SELECT c.rid FROM chunks c WHERE {where}", params
                )
            ]
            mask = np.isin(cache.rids, np.asarray(allowed, dtype=np.int64))
            similarities = np.where(mask, similarities, -np.inf)
        count = min(depth, similarities.shape[0])
        best = np.argpartition(-similarities, count - 1)[:count]
        best = best[np.argsort(-similarities[best], kind="stable")]
        return [
            (int(cache.rids[i]), float(similarities[i]))
            for i in best
            if np.isfinite(similarities[i])
        ]

    def _similarities(
        self, query_vector: Sequence[float], ranked: Sequence[tuple[int, float]]
    ) -> dict[int, float]:
        """The cosine of each ranked chunk's vector and the query's, by rid.

        Hybrid hits found by BM25 alone get theirs too, so a reranker can weigh meaning for
        every candidate without embedding the passages again. Chunks without a vector are left
        out.
        """
        cache = self._vector_matrix()
        if cache.matrix.shape[0] == 0 or not ranked:
            return {}
        query = np.asarray(query_vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        rids = np.asarray([rid for rid, _ in ranked], dtype=np.int64)
        rows = np.minimum(np.searchsorted(cache.rids, rids), len(cache.rids) - 1)
        present = cache.rids[rows] == rids
        cosines = cache.matrix[rows] @ (query / norm if norm else query)
        return {
            int(rid): float(cosine)
            for rid, cosine, ok in zip(rids, cosines, present, strict=True)
            if ok
        }

    def _vector_matrix(self) -> _VectorCache:
        generation = self.generation()
        with self._vector_lock:
            if self._vectors.generation == generation:
                return self._vectors
            rows = (
                self._connection()
                .execute("SELECT rid, vector FROM chunks WHERE vector IS NOT NULL ORDER BY rid")
                .fetchall()
            )
            if rows:
                matrix = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
            else:
                matrix = np.zeros((0, 0), dtype=np.float32)
            rids = np.asarray([r for r, _ in rows], dtype=np.int64)
            self._vectors = _VectorCache(generation, rids, matrix)
            return self._vectors

    def _fetch(
        self, ranked: Sequence[tuple[int, float]], similarities: Mapping[int, float] | None = None
    ) -> list[StoredHit]:
        if not ranked:
            return []
        conn = self._connection()
        marks = ",".join("?" for _ in ranked)
        rows = conn.execute(
            "SELECT rid, id, title, content, page, metadata, file_id FROM chunks "
            f"WHERE rid IN ({marks})",
            [rid for rid, _ in ranked],
        ).fetchall()
        by_rid = {row[0]: row for row in rows}
        shared = self._shared_fields(conn, {row[6] for row in rows})
        hits = []
        for rid, score in ranked:
            row = by_rid.get(rid)
            if row is not None:  # deleted between ranking and fetching
                similarity = (similarities or {}).get(rid)
                metadata = {**shared.get(row[6], {}), **json.loads(row[5])}
                hits.append(StoredHit(row[1], row[2], row[3], row[4], metadata, score, similarity))
        return hits

    @staticmethod
    def _shared_fields(conn: sqlite3.Connection, file_ids: set[int]) -> dict[int, dict[str, Any]]:
        """The fields each file's chunks share, read and parsed once per file."""
        if not file_ids:
            return {}
        marks = ",".join("?" for _ in file_ids)
        rows = conn.execute(
            f"SELECT id, fields FROM files WHERE id IN ({marks}) AND fields != '{{}}'",
            list(file_ids),
        )
        return {int(file_id): json.loads(fields) for file_id, fields in rows}


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[tuple[int, float]] | None], k: int = RRF_K
) -> list[tuple[int, float]]:
    """Fuse ranked lists: each item scores ``sum(1 / (k + rank))`` over the lists (rank from 1).

    Ties keep the order in which items were first seen.
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, (key, _) in enumerate(ranking or (), start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])


def _read_permissions(conn: sqlite3.Connection, path: str) -> Permissions | None:
    row = conn.execute("SELECT id, access FROM files WHERE path = ?", (path,)).fetchone()
    if row is None or row[1] is None:
        return None
    if row[1] == PUBLIC:
        return Permissions(public=True)
    principals = [
        r[0]
        for r in conn.execute(
            "SELECT principal FROM file_principals WHERE file_id = ? ORDER BY principal", (row[0],)
        )
    ]
    return Permissions(
        user_ids=tuple(p[2:] for p in principals if p.startswith("u:")),
        group_ids=tuple(p[2:] for p in principals if p.startswith("g:")),
    )


def _write_permissions(conn: sqlite3.Connection, file_id: int, permissions: Permissions) -> None:
    access = PUBLIC if permissions.public else RESTRICTED
    conn.execute("UPDATE files SET access = ? WHERE id = ?", (access, file_id))
    if not permissions.public:
        conn.executemany(
            "INSERT OR IGNORE INTO file_principals(file_id, principal) VALUES (?, ?)",
            [(file_id, principal) for principal in permissions.principals()],
        )


def _bump_generation(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")


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
