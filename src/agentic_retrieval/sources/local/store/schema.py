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
- ``chunks_fts``: an FTS5 index over ``title`` and ``content`` (external content, kept in sync
  by triggers), ranked by ``bm25`` with the title weighted 3x;
- ``meta``: a ``generation`` counter bumped by every write, so readers know when their
  in-memory vector matrix is stale, plus the embedding dimension and the ``schema_version``;
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
MIGRATIONS = ((2, "access", _PERMISSIONS_SCHEMA), (3, "fields", _DOCUMENT_FIELDS_SCHEMA))
"""(version reached, the ``files`` column it adds, its statements), oldest first."""

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
    chunks' metadata, where filters keep finding them. Safe when several processes open
    one old store at once: each check and change runs in one write transaction.
    """
    if schema_version(conn) >= SCHEMA_VERSION:
        return
    for version, column, statements in MIGRATIONS:
        with write() as writing:
            columns = {row[1] for row in writing.execute("PRAGMA table_info(files)")}
            if column in columns:  # done before, or by another process meanwhile
                continue
            for statement in statements.strip().split(";\n"):
                writing.execute(statement)
        logger.info("migrated %s to schema version %d", path, version)


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
