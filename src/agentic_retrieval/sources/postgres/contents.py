"""What a PostgreSQL store holds and how it changes: files, records, chunks, permissions.

:class:`PostgresContents` is the bookkeeping half of
:class:`~agentic_retrieval.sources.postgres.store.PostgresStore`, with the embedded store's
methods (:class:`~agentic_retrieval.sources.local.store.contents.StoreContents`), so the same
ingestion (files, folders, records) writes into either. Every write is one transaction: the
file row, its chunks with their terms and vectors, its principals, the store's BM25
statistics and its generation commit together or not at all, and a write inside
:meth:`transaction` is a savepoint of that batch.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from agentic_retrieval.errors import StoreBusyError, StoreError, StoreNotFoundError
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local.store.permissions import PUBLIC, RESTRICTED, AccessSummary
from agentic_retrieval.sources.local.store.rows import (
    RECORD_PREFIX,
    ChunkRecord,
    FileState,
    MetadataJson,
    json_default,
)
from agentic_retrieval.sources.postgres import schema
from agentic_retrieval.sources.postgres.connections import Connection, Database, connected

_KIND = (
    "CASE jsonb_typeof(value) WHEN 'number' THEN 'real' WHEN 'string' THEN 'text' "
    "WHEN 'boolean' THEN (CASE WHEN value = 'true'::jsonb THEN 'true' ELSE 'false' END) "
    "ELSE jsonb_typeof(value) END"
)
"""A JSON value's kind in SQLite's ``json_type`` words, which the sources map to OData's."""
_INSERT_CHUNK = (
    "INSERT INTO ar_chunks (store, file_id, id, ordinal, title, content, page, metadata, "
    "terms, length, embedding) "
    "SELECT %s, %s, %s, %s, %s, %s, %s, %s, t.v, "
    "(SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) FROM unnest(t.v) u), "
    "%s::vector "
    f"FROM (SELECT to_tsvector('{schema.TEXT_CONFIG}', %s) AS v) t"
)


class PostgresContents:
    """The files, records and chunks of one store (``name``) in a PostgreSQL database.

    Args:
        database: The database (its schema migrated).
        name: The store's name (letters, digits, ``-``, ``_``).
        create: Create the store when the database has none of that name.

    Raises:
        StoreError: An invalid name.
        StoreNotFoundError: No such store and ``create`` is false.
    """

    defers_vectors: Literal[False] = False
    """Never written before their vectors: replicas share no background embedder, so whoever
    writes embeds first (``vectors_pending`` of :meth:`replace_file` is refused)."""

    def __init__(self, database: Database, name: str, *, create: bool = False) -> None:
        self.database = database
        self._local = threading.local()  # this thread's pending statistics (transaction)
        self.name = schema.check_store_name(name)
        self.vectors_made_with: str | None = None
        """How the vectors this object writes were made (``local@bf16``): recorded by
        :meth:`replace_file`. The source that embeds sets it."""
        self._open(create)

    @connected
    def _open(self, conn: Connection, create: bool) -> None:
        if create:
            conn.execute(
                "INSERT INTO ar_stores (name) VALUES (%s) ON CONFLICT DO NOTHING", (self.name,)
            )
        elif (
            conn.execute("SELECT 1 FROM ar_stores WHERE name = %s", (self.name,)).fetchone() is None
        ):
            raise StoreNotFoundError(
                f"no store {self.name!r} in {self.database.label} (nothing was created)"
            )

    @property
    def label(self) -> str:
        """The database (without its password) and the store's name, for messages."""
        return f"{self.database.label}#{self.name}"

    @contextmanager
    def lease(self) -> Iterator[None]:
        """Nothing to hold: as :meth:`LocalStore.lease`, for callers of either store.

        An embedded store's file closes after its last reader; here every operation runs on
        its thread's connection, and a store deleted meanwhile reads as empty.
        """
        yield

    @connected
    def storage_size(self, conn: Connection) -> int:
        """Bytes this store's rows take in the database (chunks, vectors, files)."""
        row = conn.execute(
            "SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM ar_chunks c WHERE c.store = %s",
            (self.name,),
        ).fetchone()
        files = conn.execute(
            "SELECT coalesce(sum(pg_column_size(f.*)), 0) FROM ar_files f WHERE f.store = %s",
            (self.name,),
        ).fetchone()
        return int(row[0] if row else 0) + int(files[0] if files else 0)

    # ------------------------------------------------------------------ bookkeeping

    @connected
    def generation(self, conn: Connection) -> int:
        """The counter bumped by every committed write."""
        row = conn.execute("SELECT generation FROM ar_stores WHERE name = %s", (self.name,))
        found = row.fetchone()
        return int(found[0]) if found else 0

    @connected
    def file_state(self, conn: Connection, path: str) -> FileState | None:
        """What was indexed for ``path``, if anything."""
        row = conn.execute(
            "SELECT path, slug, content_hash, fingerprint, mtime, size, chunk_count "
            "FROM ar_files WHERE store = %s AND path = %s",
            (self.name, path),
        ).fetchone()
        return FileState(*row) if row else None

    @connected
    def indexed_paths(self, conn: Connection) -> list[str]:
        """Every indexed path, sorted (byte order, as the embedded store)."""
        rows = conn.execute(
            'SELECT path FROM ar_files WHERE store = %s ORDER BY path COLLATE "C"', (self.name,)
        )
        return [r[0] for r in rows]

    @connected
    def record_ids(self, conn: Connection, origin: str | None = None) -> list[str]:
        """Ids of the indexed records (only those read from ``origin``, when given), sorted."""
        sql = "SELECT path FROM ar_files WHERE store = %s AND starts_with(path, %s)"
        params: list[Any] = [self.name, RECORD_PREFIX]
        if origin is not None:
            sql += " AND metadata ->> 'origin' = %s"
            params.append(origin)
        rows = conn.execute(sql + ' ORDER BY path COLLATE "C"', params)
        return [r[0][len(RECORD_PREFIX) :] for r in rows]

    @connected
    def document_keys(self, conn: Connection) -> set[str]:
        """Every document's key: a record's id, a file's slug."""
        rows = conn.execute("SELECT slug FROM ar_files WHERE store = %s", (self.name,))
        return {r[0].removeprefix(RECORD_PREFIX) for r in rows}

    @connected
    def stored_metadata(
        self, conn: Connection, path: str, fields: Sequence[str] | None = None
    ) -> dict[str, Any] | None:
        """The metadata stored with ``path`` (only ``fields``, when given), or ``None``."""
        column = (
            "metadata"
            if fields is None
            else "(SELECT coalesce(jsonb_object_agg(key, value), '{}') "
            "FROM jsonb_each(metadata) WHERE key = ANY(%s))"
        )
        params: list[Any] = ([] if fields is None else [list(fields)]) + [self.name, path]
        row = conn.execute(
            f"SELECT {column} FROM ar_files WHERE store = %s AND path = %s", params
        ).fetchone()
        return dict(row[0]) if row else None

    @connected
    def count_files(self, conn: Connection, prefix: str = "") -> int:
        """How many indexed paths start with ``prefix``."""
        row = conn.execute(
            "SELECT count(*) FROM ar_files WHERE store = %s AND starts_with(path, %s)",
            (self.name, prefix),
        ).fetchone()
        return int(row[0]) if row else 0

    @connected
    def files_page(
        self, conn: Connection, prefix: str, after: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` (path, metadata) pairs under ``prefix``, in path order after ``after``.

        Only paths after ``after`` (byte order), so pages never repeat or skip one.
        """
        rows = conn.execute(
            "SELECT path, metadata FROM ar_files WHERE store = %s AND starts_with(path, %s) "
            'AND path COLLATE "C" > %s ORDER BY path COLLATE "C" LIMIT %s',
            (self.name, prefix, after or "", limit),
        )
        return [(r[0], dict(r[1])) for r in rows]

    @connected
    def slug_owner(self, conn: Connection, slug: str) -> str | None:
        """The path whose chunks use ``slug``, if any."""
        row = conn.execute(
            "SELECT path FROM ar_files WHERE store = %s AND slug = %s", (self.name, slug)
        ).fetchone()
        return str(row[0]) if row else None

    @connected
    def chunk_ids(self, conn: Connection) -> list[str]:
        """Every chunk id, in file then chunk order."""
        rows = conn.execute(
            "SELECT c.id FROM ar_chunks c JOIN ar_files f ON f.id = c.file_id "
            'WHERE f.store = %s ORDER BY f.path COLLATE "C", c.ordinal',
            (self.name,),
        )
        return [r[0] for r in rows]

    @connected
    def count_chunks(self, conn: Connection) -> int:
        """The number of chunks in the store."""
        row = conn.execute("SELECT chunk_count FROM ar_stores WHERE name = %s", (self.name,))
        found = row.fetchone()
        return int(found[0]) if found else 0

    @connected
    def metadata_kinds(self, conn: Connection) -> dict[str, frozenset[str]]:
        """Every top-level field written to the chunks or shared by a file, with its kinds."""
        kinds: dict[str, set[str]] = {}
        for name, kind in conn.execute(
            "SELECT name, kind FROM ar_fields WHERE store = %s", (self.name,)
        ):
            kinds.setdefault(str(name), set()).add(str(kind))
        return {name: frozenset(found) for name, found in kinds.items()}

    @connected
    def has_vectors(self, conn: Connection) -> bool:
        """Whether any chunk carries a vector."""
        return self._dimension(conn) is not None

    @connected
    def embeds_chunks(self, conn: Connection) -> bool:
        """Whether its chunks get vectors: it holds some (none is ever pending here)."""
        return self._dimension(conn) is not None

    @connected
    def dimension(self, conn: Connection) -> int | None:
        """The dimension of the store's vectors, once any were written."""
        return self._dimension(conn)

    def _dimension(self, conn: Connection) -> int | None:
        row = conn.execute("SELECT dimension FROM ar_stores WHERE name = %s", (self.name,))
        found = row.fetchone()
        return int(found[0]) if found and found[0] is not None else None

    @connected
    def recorded_vectors_made_with(self, conn: Connection) -> tuple[str, ...]:
        """How the store's vectors were made, every way recorded (``("local@bf16",)``)."""
        row = conn.execute("SELECT made_with FROM ar_stores WHERE name = %s", (self.name,))
        found = row.fetchone()
        return tuple(sorted(found[0])) if found else ()

    @connected
    def access_summary(self, conn: Connection) -> AccessSummary:
        """How many documents are public, restricted and unmarked."""
        return self._access_summary(conn)

    def _access_summary(self, conn: Connection) -> AccessSummary:
        counts: dict[str | None, int] = {
            access: int(n)
            for access, n in conn.execute(
                "SELECT access, count(*) FROM ar_files WHERE store = %s GROUP BY access",
                (self.name,),
            )
        }
        return AccessSummary(
            public=counts.get(PUBLIC, 0),
            restricted=counts.get(RESTRICTED, 0),
            unmarked=counts.get(None, 0),
        )

    @connected
    def permissions_of(self, conn: Connection, path: str) -> Permissions | None:
        """Who may see the indexed ``path``; ``None`` when unmarked (or not indexed)."""
        return self._permissions(conn, path)

    def _permissions(self, conn: Connection, path: str) -> Permissions | None:
        row = conn.execute(
            "SELECT id, access FROM ar_files WHERE store = %s AND path = %s", (self.name, path)
        ).fetchone()
        if row is None or row[1] is None:
            return None
        if row[1] == PUBLIC:
            return Permissions(public=True)
        principals = [
            r[0]
            for r in conn.execute(
                "SELECT principal FROM ar_file_principals WHERE file_id = %s "
                'ORDER BY principal COLLATE "C"',
                (row[0],),
            )
        ]
        return Permissions(
            user_ids=tuple(p[2:] for p in principals if p.startswith("u:")),
            group_ids=tuple(p[2:] for p in principals if p.startswith("g:")),
        )

    # ------------------------------------------------------------------ writes

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction around several writes of this thread (each one a savepoint).

        Other writers of the store wait until it ends, in every process (a transaction-level
        advisory lock), as the embedded store's writers wait for its one writer.

        The store's statistics (chunk count, total length, each term's document frequency)
        and its generation change once, as the outermost transaction commits: updating their
        rows once per file made every later update walk the chain of that row's versions the
        transaction had left (1,400 records took 234 s at load 9, most of it there).
        """
        with self.database.connection() as conn:
            if getattr(self._local, "pending", None) is not None:
                with conn.transaction():  # a savepoint of the batch
                    yield conn
                return
            pending = self._local.pending = _Pending()
            try:
                with conn.transaction():
                    # other writers of this store wait, as the embedded store's do, on every
                    # replica: a check inside the batch (a file name is unique, a merge reads
                    # the document it changes) cannot race another replica's write
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._write_key(),))
                    yield conn
                    self._apply(conn, pending)
            finally:
                self._local.pending = None

    def _write_key(self) -> int:
        """The transaction-level lock of this store's writers (not :meth:`exclusive_writer`'s)."""
        digest = hashlib.sha1(f"write:{self.name}".encode()).digest()[:8]
        return int.from_bytes(digest, "big", signed=True)

    def _pending(self) -> _Pending:
        pending: _Pending = self._local.pending
        return pending

    def _apply(self, conn: Connection, pending: _Pending) -> None:
        """Write what the transaction's writes changed of the store's statistics, in one go."""
        terms = sorted(t for t, n in pending.terms.items() if n)
        if terms:  # in term order: two writers of one store never deadlock on them
            conn.execute(
                "INSERT INTO ar_terms (store, term, df) SELECT %s, t, d FROM "
                "unnest(%s::text[], %s::bigint[]) AS x(t, d) ORDER BY t "
                "ON CONFLICT (store, term) DO UPDATE SET df = ar_terms.df + EXCLUDED.df",
                (self.name, terms, [pending.terms[t] for t in terms]),
            )
        if pending.changed:
            conn.execute(
                "UPDATE ar_stores SET chunk_count = chunk_count + %s, "
                "total_length = total_length + %s, generation = generation + 1 WHERE name = %s",
                (pending.chunks, pending.length, self.name),
            )

    @contextmanager
    def exclusive_writer(self) -> Iterator[None]:
        """Hold the store's writer lock (a PostgreSQL advisory lock) for the block.

        One indexing run per store at a time, across processes and hosts; a process that dies
        releases it with its session.

        Raises:
            StoreBusyError: Another run holds it (the caller is told at once).
        """
        key = int.from_bytes(hashlib.sha1(f"writer:{self.name}".encode()).digest()[:8], "big")
        key &= 0x7FFFFFFFFFFFFFFF
        session = self.database.session()
        try:
            row = session.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if not row or not row[0]:
                raise StoreBusyError(
                    f"{self.label} is being written by another indexing run; try again when "
                    "it finishes"
                )
            yield
        finally:
            session.close()

    def replace_file(
        self,
        state: FileState,
        metadata: Mapping[str, Any] | MetadataJson,
        chunks: Sequence[ChunkRecord],
        vectors: Sequence[Sequence[float]] | None = None,
        permissions: Permissions | None = None,
        *,
        fields: Mapping[str, Any] | None = None,
        vectors_pending: bool = False,
    ) -> None:
        """Replace everything indexed for ``state.path`` in one transaction.

        The arguments are :meth:`LocalStore.replace_file
        <agentic_retrieval.sources.local.store.contents.StoreContents.replace_file>`'s.

        Raises:
            StoreError: Not one vector per chunk, or a dimension other than the store's, or
                ``vectors_pending`` (see :attr:`defers_vectors`).
        """
        if vectors_pending:
            raise StoreError(
                f"store {self.name!r} takes chunks with their vectors, not before them"
            )
        texts = _vector_texts(vectors, len(chunks))
        meta_json = (
            str(metadata)
            if isinstance(metadata, MetadataJson)
            else json.dumps(dict(metadata), default=json_default, sort_keys=True)
        )
        fields_json = json.dumps(dict(fields or {}), default=json_default, sort_keys=True)
        with self.transaction() as conn:
            dimension = self._dimension(conn)
            if vectors and dimension is not None and len(vectors[0]) != dimension:
                raise StoreError(
                    f"embedding dimension {len(vectors[0])} differs from the index's "
                    f"{dimension}; re-create the index to change embedding models"
                )
            if permissions is None:
                permissions = self._permissions(conn, state.path)
            self._delete_rows(conn, state.path)
            row = conn.execute(
                "INSERT INTO ar_files (store, path, slug, content_hash, fingerprint, mtime, "
                "size, metadata, fields, chunk_count) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s) RETURNING id",
                (
                    self.name,
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
            ).fetchone()
            assert row is not None
            file_id = int(row[0])
            with conn.cursor() as cursor:
                cursor.executemany(
                    _INSERT_CHUNK,
                    [
                        (
                            self.name,
                            file_id,
                            c.id,
                            c.ordinal,
                            c.title,
                            c.content,
                            c.page,
                            json.dumps(dict(c.metadata), default=json_default, sort_keys=True),
                            text,
                            f"{c.title}\n{c.content}",
                        )
                        for c, text in zip(chunks, texts, strict=True)
                    ],
                )
            self._record_fields(conn, file_id, fields_json)
            if vectors:
                self._record_vectors(conn, len(vectors[0]), dimension)
            if permissions is not None:
                self._write_permissions(conn, file_id, permissions)
            conn.execute(
                "INSERT INTO ar_postings (store, term, rid, tf, length) "
                "SELECT c.store, u.lexeme, c.rid, coalesce(array_length(u.positions, 1), 1), "
                "c.length FROM ar_chunks c, unnest(c.terms) u WHERE c.file_id = %s",
                (file_id,),
            )
            self._count_terms(conn, file_id, +1)  # last: only once the file's write succeeded

    def _count_terms(self, conn: Connection, file_id: int, sign: int) -> None:
        """Add (``+1``) or remove (``-1``) a file's chunks from the pending statistics."""
        pending = self._pending()
        row = conn.execute(
            "SELECT count(*), coalesce(sum(length), 0) FROM ar_chunks WHERE file_id = %s",
            (file_id,),
        ).fetchone()
        terms = conn.execute(
            "SELECT u.lexeme, count(*) FROM ar_chunks c, unnest(c.terms) u "
            "WHERE c.file_id = %s GROUP BY u.lexeme",
            (file_id,),
        ).fetchall()
        pending.add(sign, int(row[0]) if row else 0, int(row[1]) if row else 0, terms)

    def _record_fields(self, conn: Connection, file_id: int, fields_json: str) -> None:
        conn.execute(
            "INSERT INTO ar_fields (store, level, name, kind) "
            f"SELECT DISTINCT %s, 'chunk', key, {_KIND} FROM ar_chunks c, "
            "jsonb_each(c.metadata) WHERE c.file_id = %s ON CONFLICT DO NOTHING",
            (self.name, file_id),
        )
        conn.execute(
            "INSERT INTO ar_fields (store, level, name, kind) "
            f"SELECT DISTINCT %s, 'document', key, {_KIND} FROM jsonb_each(%s::jsonb) "
            "ON CONFLICT DO NOTHING",
            (self.name, fields_json),
        )

    def _record_vectors(self, conn: Connection, dimension: int, recorded: int | None) -> None:
        if recorded is None:
            conn.execute(
                "UPDATE ar_stores SET dimension = %s WHERE name = %s", (dimension, self.name)
            )
            conn.execute(schema.vector_index_sql(self.name, dimension))
        if self.vectors_made_with:
            conn.execute(
                "UPDATE ar_stores SET made_with = array_append(made_with, %s) "
                "WHERE name = %s AND NOT (%s = ANY(made_with))",
                (self.vectors_made_with, self.name, self.vectors_made_with),
            )

    def _write_permissions(self, conn: Connection, file_id: int, permissions: Permissions) -> None:
        access = PUBLIC if permissions.public else RESTRICTED
        conn.execute("UPDATE ar_files SET access = %s WHERE id = %s", (access, file_id))
        if not permissions.public:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO ar_file_principals (file_id, principal) VALUES (%s, %s) "
                    "ON CONFLICT DO NOTHING",
                    [(file_id, principal) for principal in permissions.principals()],
                )

    def set_permissions(self, path: str, permissions: Permissions) -> bool:
        """Give the indexed ``path`` new permissions; whether anything changed."""
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT id FROM ar_files WHERE store = %s AND path = %s FOR UPDATE",
                (self.name, path),
            ).fetchone()
            if row is None or self._permissions(conn, path) == permissions:
                return False
            conn.execute("DELETE FROM ar_file_principals WHERE file_id = %s", (row[0],))
            self._write_permissions(conn, int(row[0]), permissions)
            self._pending().changed = True
        return True

    @connected
    def touch_file(self, conn: Connection, path: str, mtime: float) -> None:
        """Record a new mtime for an unchanged file."""
        conn.execute(
            "UPDATE ar_files SET mtime = %s WHERE store = %s AND path = %s",
            (mtime, self.name, path),
        )

    def delete_file(self, path: str) -> int:
        """Remove a file and its chunks; returns the number of chunks removed."""
        with self.transaction() as conn:
            removed = self._delete_rows(conn, path)
            self._pending().changed = True
        return removed

    def _delete_rows(self, conn: Connection, path: str) -> int:
        row = conn.execute(
            "SELECT id, chunk_count FROM ar_files WHERE store = %s AND path = %s FOR UPDATE",
            (self.name, path),
        ).fetchone()
        if row is None:
            return 0
        self._count_terms(conn, int(row[0]), -1)
        conn.execute("DELETE FROM ar_files WHERE id = %s", (row[0],))  # cascades
        return int(row[1])

    @connected
    def drop(self, conn: Connection) -> None:
        """Delete the store and everything it holds."""
        with conn.transaction():
            conn.execute("DELETE FROM ar_terms WHERE store = %s", (self.name,))
            conn.execute("DELETE FROM ar_fields WHERE store = %s", (self.name,))
            conn.execute("DELETE FROM ar_chunks WHERE store = %s", (self.name,))
            conn.execute("DELETE FROM ar_stores WHERE name = %s", (self.name,))
            conn.execute(f'DROP INDEX IF EXISTS "{schema.vector_index_name(self.name)}"')


class _Pending:
    """What one transaction's writes change of a store's statistics, applied as it commits."""

    def __init__(self) -> None:
        self.chunks = 0
        self.length = 0
        self.terms: Counter[str] = Counter()
        self.changed = False

    def add(self, sign: int, chunks: int, length: int, terms: Iterable[tuple[str, int]]) -> None:
        self.chunks += sign * chunks
        self.length += sign * length
        for term, count in terms:
            self.terms[term] += sign * int(count)
        self.changed = True


def _vector_texts(vectors: Sequence[Sequence[float]] | None, count: int) -> list[str | None]:
    """One pgvector text (``[0.1,0.2]``) per chunk (``None`` each without vectors).

    Raises:
        StoreError: Not one vector per chunk, or ragged vectors.
    """
    if vectors is None:
        return [None] * count
    if len(vectors) != count:
        raise StoreError(f"{len(vectors)} vectors for {count} chunks")
    if len({len(v) for v in vectors}) > 1:
        raise StoreError("vectors must all have the same dimension")
    return ["[" + ",".join(repr(float(x)) for x in vector) + "]" for vector in vectors]
