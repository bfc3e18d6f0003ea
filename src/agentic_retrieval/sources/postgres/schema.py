"""The PostgreSQL store's tables, created and changed by versioned migrations run once.

Every process that opens a store calls :func:`migrate`. It takes a transaction-level advisory
lock (:data:`MIGRATION_LOCK`) before reading which migrations the database has applied, so
replicas starting together never race: one applies what is missing, the others wait for its
commit and then find nothing left to do. Each migration and its row in
``agentic_retrieval_migrations`` commit together. A database migrated by a newer version of
the library (a version this one does not know) is refused rather than written to.

Many stores (knowledge sources) share one database: every row names its ``store``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agentic_retrieval.errors import StoreError

if TYPE_CHECKING:
    import psycopg

MIGRATION_LOCK = 0x61677274_6D696772 & 0x7FFFFFFFFFFFFFFF
"""The advisory lock key every migration run takes (``agrtmigr`` in ASCII)."""
TEXT_CONFIG = "english"
"""The full-text configuration: English stemming and stop words, as the embedded store."""
STORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}\Z")
"""A store's name: safe to quote inside SQL (a partial index's predicate names it)."""

MIGRATIONS: tuple[str, ...] = (
    # 1: stores, files, their principals, chunks with terms and vectors, BM25 statistics
    """
    CREATE EXTENSION IF NOT EXISTS vector;
    CREATE FUNCTION agentic_retrieval_timestamp(value text) RETURNS timestamptz
    LANGUAGE plpgsql STABLE SET timezone = 'UTC' AS $$
    BEGIN
        IF value !~ '^[0-9]{4}-' THEN RETURN NULL; END IF;
        RETURN value::timestamptz;
    EXCEPTION WHEN others THEN RETURN NULL;
    END $$;
    CREATE TABLE ar_stores (
        name text PRIMARY KEY,
        generation bigint NOT NULL DEFAULT 0,
        dimension integer,
        made_with text[] NOT NULL DEFAULT '{}',
        chunk_count bigint NOT NULL DEFAULT 0,
        total_length bigint NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE ar_files (
        id bigserial PRIMARY KEY,
        store text NOT NULL REFERENCES ar_stores(name) ON DELETE CASCADE,
        path text NOT NULL,
        slug text NOT NULL,
        content_hash text NOT NULL,
        fingerprint text NOT NULL,
        mtime double precision NOT NULL,
        size bigint NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{}',
        fields jsonb NOT NULL DEFAULT '{}',
        chunk_count integer NOT NULL DEFAULT 0,
        access text,
        indexed_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (store, path)
    );
    CREATE INDEX ar_files_slug ON ar_files (store, slug);
    CREATE TABLE ar_file_principals (
        file_id bigint NOT NULL REFERENCES ar_files(id) ON DELETE CASCADE,
        principal text NOT NULL,
        PRIMARY KEY (file_id, principal)
    );
    CREATE INDEX ar_file_principals_principal ON ar_file_principals (principal, file_id);
    CREATE TABLE ar_chunks (
        rid bigserial PRIMARY KEY,
        store text NOT NULL,
        file_id bigint NOT NULL REFERENCES ar_files(id) ON DELETE CASCADE,
        id text NOT NULL,
        ordinal integer NOT NULL,
        title text NOT NULL,
        content text NOT NULL,
        page integer,
        metadata jsonb NOT NULL DEFAULT '{}',
        terms tsvector NOT NULL,
        length integer NOT NULL,
        embedding vector
    );
    CREATE INDEX ar_chunks_file ON ar_chunks (file_id, ordinal);
    CREATE INDEX ar_chunks_terms ON ar_chunks USING gin (terms);
    CREATE TABLE ar_postings (
        store text NOT NULL,
        term text NOT NULL,
        rid bigint NOT NULL REFERENCES ar_chunks(rid) ON DELETE CASCADE,
        tf integer NOT NULL,
        length integer NOT NULL,
        PRIMARY KEY (store, term, rid) INCLUDE (tf, length)
    );
    CREATE INDEX ar_postings_rid ON ar_postings (rid);
    CREATE TABLE ar_terms (
        store text NOT NULL,
        term text NOT NULL,
        df bigint NOT NULL,
        PRIMARY KEY (store, term)
    );
    CREATE TABLE ar_fields (
        store text NOT NULL,
        level text NOT NULL,
        name text NOT NULL,
        kind text NOT NULL,
        PRIMARY KEY (store, level, name, kind)
    );
    """,
)
"""Migration ``n`` is ``MIGRATIONS[n - 1]``; a released migration is never edited, only added to."""


def migrate(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """Apply the migrations this database lacks, once across every process; return its version.

    Raises:
        StoreError: The database was migrated by a newer version of the library.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS agentic_retrieval_migrations ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT max(version) FROM agentic_retrieval_migrations").fetchone()
        current = int(row[0]) if row and row[0] is not None else 0  # type: ignore[call-overload]
        if current > len(MIGRATIONS):
            raise StoreError(
                f"the database is at schema version {current}, newer than this library knows "
                f"({len(MIGRATIONS)}): upgrade agentic-retrieval; nothing was changed"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            conn.execute(MIGRATIONS[version - 1])
            conn.execute(
                "INSERT INTO agentic_retrieval_migrations (version) VALUES (%s)", (version,)
            )
    return len(MIGRATIONS)


def check_store_name(name: str) -> str:
    """``name``, checked to be letters, digits, ``-`` and ``_`` (it is quoted into SQL).

    Raises:
        StoreError: Any other name.
    """
    if not STORE_NAME.match(name):
        raise StoreError(
            f"invalid store name {name!r}: use letters, digits, '-' and '_' (at most 128)"
        )
    return name


def vector_index_sql(store: str, dimension: int) -> str:
    """The partial HNSW index (cosine) over one store's vectors of ``dimension``.

    pgvector indexes a column of one dimension; stores of different models share the column,
    so each store's vectors are indexed as ``vector(dimension)`` under ``WHERE store = ...``,
    and its searches use the same expression and predicate.
    """
    check_store_name(store)
    return (
        f'CREATE INDEX IF NOT EXISTS "{vector_index_name(store)}" ON ar_chunks USING hnsw '
        f"((embedding::vector({int(dimension)})) vector_cosine_ops) WHERE store = '{store}'"
    )


def vector_index_name(store: str) -> str:
    """The name of ``store``'s HNSW index (PostgreSQL names are at most 63 bytes)."""
    import hashlib

    return "ar_hnsw_" + hashlib.sha1(store.encode()).hexdigest()[:16]
