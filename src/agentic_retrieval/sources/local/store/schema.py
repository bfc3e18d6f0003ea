"""The store's tables and the migrations that bring an older file to the current schema.

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
- ``lexical_outbox``: the paths of documents written since the lexical index (tantivy, beside
  the file: see :mod:`.lexical_index`) last took them in; emptied after each tantivy commit;
- ``meta``: a ``generation`` counter bumped by every write, so readers know when what they
  cached is stale, plus the embedding dimension, how the vectors were made
  (``vectors_made_with``), the ``schema_version``, ``next_rid`` (row ids are never reused: a
  rid always names the same chunk) and ``store_id`` (a random id the lexical index and the
  saved vector graph are built for);
- ``chunks_without_vector``: a partial index of the chunks that have no vector yet, so a store
  whose vectors are made after its chunks are written (a file source of ``serve --data``)
  finds and counts them without reading every chunk;
- ``vector_log``: the rid of every chunk with a vector written or deleted, in order (kept by
  triggers), so the in-memory vectors and their saved graph catch up with only what changed
  (see :mod:`.vectors`); trimmed once a saved graph covers it;
- ``file_principals``: the users (``u:<id>``) and groups (``g:<id>``) allowed to see each
  file or record whose ``files.access`` is ``restricted``; ``access`` is ``public``, or
  ``NULL`` for a document ingested without permissions (see :mod:`agentic_retrieval.permissions`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

logger = logging.getLogger(__name__)

SCHEMA = """
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
CREATE INDEX IF NOT EXISTS chunks_without_vector ON chunks(rid) WHERE vector IS NULL;
CREATE TABLE IF NOT EXISTS fields (
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (name, kind)
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta(key, value) VALUES ('generation', '0');
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
"""

VECTOR_LOG_SCHEMA = """
INSERT OR IGNORE INTO meta(key, value) VALUES ('store_id', lower(hex(randomblob(16))));
CREATE TABLE IF NOT EXISTS vector_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, rid INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS chunks_vector_ai AFTER INSERT ON chunks
WHEN new.vector IS NOT NULL BEGIN
    INSERT INTO vector_log(rid) VALUES (new.rid);
END;
CREATE TRIGGER IF NOT EXISTS chunks_vector_ad AFTER DELETE ON chunks
WHEN old.vector IS NOT NULL BEGIN
    INSERT INTO vector_log(rid) VALUES (old.rid);
END;
CREATE TRIGGER IF NOT EXISTS chunks_vector_au AFTER UPDATE OF vector ON chunks BEGIN
    INSERT INTO vector_log(rid) VALUES (new.rid);
END;
"""
"""The vector log (see :mod:`.vectors`): run on every open after :data:`SCHEMA`, additive (an
older file gains it as it is; the graph is then built from every vector once)."""

SCHEMA_VERSION = 4
"""Version 2 added permissions (``files.access`` and ``file_principals``), version 3 the
fields shared by a file's chunks (``files.fields``, ``document_fields``), version 4 moved the
lexical index from FTS5 (inside the file) to tantivy (beside it)."""
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
_TANTIVY_SCHEMA = """
DROP TRIGGER IF EXISTS chunks_ai;
DROP TRIGGER IF EXISTS chunks_ad;
DROP TRIGGER IF EXISTS chunks_au;
DROP TABLE IF EXISTS chunks_fts;
CREATE TABLE chunks_fts (moved TEXT);
INSERT INTO chunks_fts VALUES ('schema version 4: the lexical index is tantivy, beside the file');
CREATE TABLE IF NOT EXISTS lexical_outbox (seq INTEGER PRIMARY KEY, doc TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) SELECT 'next_rid', coalesce(max(rid), 0) + 1 FROM chunks;
INSERT OR IGNORE INTO meta(key, value) VALUES ('store_id', lower(hex(randomblob(16))));
UPDATE meta SET value = '4' WHERE key = 'schema_version';
UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
"""
MIGRATIONS = ((2, _PERMISSIONS_SCHEMA), (3, _DOCUMENT_FIELDS_SCHEMA), (4, _TANTIVY_SCHEMA))
"""(version reached, its statements), oldest first."""

FIELDS_OF_CHUNKS = "SELECT DISTINCT j.key, j.type FROM chunks c, json_each(c.metadata) j"
"""The (field, JSON type) pairs of chunk metadata; recorded in ``fields`` as chunks are written."""

Writer = Callable[[], AbstractContextManager[sqlite3.Connection]]
"""Opens one write transaction (``LocalStore._write``)."""


def is_store(conn: sqlite3.Connection) -> bool:
    """Whether the database behind ``conn`` is a local source index (it has a chunks table)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunks'"
    ).fetchone()
    return row is not None


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version the file was written with (1 before versions were recorded)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 1


def migrate(path: Path, conn: sqlite3.Connection, write: Writer) -> None:
    """Bring a store written by an earlier version to :data:`SCHEMA_VERSION`.

    Stores from before permissions existed open as they were: their documents are
    unmarked, hence hidden wherever permissions are enforced (fail closed) and visible
    elsewhere, as before. Stores from before ``files.fields`` keep every field in their
    chunks' metadata, where filters keep finding them. Stores from before tantivy lose their
    FTS5 table and triggers; the lexical index is then built from their chunks when the
    store opens (:meth:`.lexical_index.LexicalIndex.ensure`). Safe when several processes
    open one old store at once: each check and change runs in one write transaction.
    """
    if schema_version(conn) >= SCHEMA_VERSION:
        return
    for version, statements in MIGRATIONS:
        with write() as writing:
            if schema_version(writing) >= version:  # done before, or by another process
                continue
            for statement in statements.strip().split(";\n"):
                writing.execute(statement)
        logger.info("migrated %s to schema version %d", path, version)


OLD_TRIGGERS = ("chunks_ai", "chunks_ad", "chunks_au")
"""FTS5 triggers of schema 1-3: a version-4 file that has them was opened by an old release."""


def drop_old_triggers(conn: sqlite3.Connection, write: Writer) -> bool:
    """Drop FTS5 triggers an old release re-created in a version-4 file.

    Version 4 keeps a plain table named ``chunks_fts`` so that an older release opening the
    file fails at once (it finds no FTS5 configuration) instead of searching an empty index;
    before failing it has created its triggers, and they would write into that table.

    Returns:
        Whether there were any (the lexical index is then rebuilt, to be safe).
    """
    marks = ",".join("?" for _ in OLD_TRIGGERS)
    sql = f"SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN ({marks})"
    if not conn.execute(sql, OLD_TRIGGERS).fetchall():
        return False
    with write() as writing:
        for name in writing.execute(sql, OLD_TRIGGERS).fetchall():
            writing.execute(f"DROP TRIGGER IF EXISTS {name[0]}")
    return True


def record_fields_once(conn: sqlite3.Connection) -> None:
    """Fill ``fields`` for an index written before fields were recorded (in a write txn)."""
    scanned = conn.execute("SELECT 1 FROM meta WHERE key = 'fields_recorded'")
    if scanned.fetchone() is None:
        conn.execute(f"INSERT OR IGNORE INTO fields(name, kind) {FIELDS_OF_CHUNKS}")
        conn.execute("INSERT INTO meta(key, value) VALUES ('fields_recorded', '1')")


def bump_generation(conn: sqlite3.Connection) -> None:
    """Count one more committed write (readers drop what they cached of the older data)."""
    conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")


def read_generation(conn: sqlite3.Connection) -> int:
    """The counter :func:`bump_generation` raises."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return int(row[0])


def read_meta(conn: sqlite3.Connection, key: str) -> str | None:
    """One ``meta`` value, if set."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return str(row[0]) if row else None


def allocate_rids(conn: sqlite3.Connection, count: int) -> int:
    """Reserve ``count`` new row ids (inside a write transaction); returns the first.

    Row ids are never reused, so a row id the lexical index still holds after a delete
    names no chunk rather than another one. (An older release writing this file takes
    ``max(rid) + 1``: the larger of both is used.)
    """
    first = int(
        conn.execute(
            "SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM meta "
            "WHERE key = 'next_rid'), 1), (SELECT coalesce(max(rid), 0) + 1 FROM chunks))"
        ).fetchone()[0]
    )
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('next_rid', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (str(first + count),),
    )
    return first


def note_lexical_change(conn: sqlite3.Connection, path: str) -> None:
    """Name the document at ``path`` in the outbox: the lexical index takes it in next."""
    conn.execute("INSERT INTO lexical_outbox(doc) VALUES (?)", (path,))


def lexical_pending(conn: sqlite3.Connection) -> bool:
    """Whether some committed write is not in the lexical index yet."""
    return conn.execute("SELECT 1 FROM lexical_outbox LIMIT 1").fetchone() is not None
