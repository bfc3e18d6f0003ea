"""What a store holds and how it changes: its files, records and chunks, their permissions.

:class:`StoreContents` is the bookkeeping half of
:class:`~agentic_retrieval.sources.local.store.local_store.LocalStore`: counts and pages of
files, stored metadata, writing a file's chunks (and vectors) in one transaction, permissions,
deletes, and the SQL condition a filter and the caller's access give (:meth:`_where`), which
searches and counts share. :class:`LocalStore` opens the file and adds searching.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agentic_retrieval.errors import StoreUnavailableError
from agentic_retrieval.odata import Expr
from agentic_retrieval.permissions import ANONYMOUS, Access, Permissions
from agentic_retrieval.sources.local.health import StoreHealth
from agentic_retrieval.sources.local.store import schema
from agentic_retrieval.sources.local.store.connections import StoreConnections, leased
from agentic_retrieval.sources.local.store.filters import filter_sql, read_field_levels
from agentic_retrieval.sources.local.store.lexical_index import LexicalIndex, text_query
from agentic_retrieval.sources.local.store.permissions import (
    AccessSummary,
    permission_sql,
    read_access_summary,
    read_permissions,
    write_permissions,
)
from agentic_retrieval.sources.local.store.rows import (
    RECORD_PREFIX,
    ChunkRecord,
    FileState,
    MetadataJson,
    json_default,
)
from agentic_retrieval.sources.local.store.vectors import (
    MADE_WITH_KEY,
    read_made_with,
    record_made_with,
    vector_blobs,
)

_EMBEDS = "chunks_get_vectors"
"""The ``meta`` key set when chunks are written to get their vectors later."""
_PLAIN_KEY = re.compile(r'[^"\\]+')
"""A metadata key a JSON path can name in double quotes."""


class StoreContents(StoreConnections):
    """The files, records and chunks of one store file, read and written in transactions.

    Opened by :class:`~agentic_retrieval.sources.local.store.local_store.LocalStore`, which
    sets the attributes declared here.
    """

    _lexical_index: LexicalIndex
    _health: StoreHealth
    vectors_made_with: str | None

    defers_vectors: Literal[True] = True
    """Chunks may be written before their vectors (:meth:`replace_file`'s ``vectors_pending``)
    and found by their words until :meth:`write_vectors` gives them theirs."""

    # ------------------------------------------------------------------ bookkeeping

    @leased
    def generation(self) -> int:
        """Return the counter bumped by every committed write."""
        return schema.read_generation(self._connection())

    @leased
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

    @leased
    def indexed_paths(self) -> list[str]:
        """Every indexed file path, sorted."""
        rows = self._connection().execute("SELECT path FROM files ORDER BY path")
        return [r[0] for r in rows]

    @leased
    def record_ids(self, origin: str | None = None) -> list[str]:
        """Ids of the indexed records (only those read from ``origin``, when given), sorted."""
        sql = "SELECT path FROM files WHERE substr(path, 1, ?) = ?"
        params: list[Any] = [len(RECORD_PREFIX), RECORD_PREFIX]
        if origin is not None:
            sql += " AND json_extract(metadata, '$.origin') = ?"
            params.append(origin)
        rows = self._connection().execute(sql + " ORDER BY path", params)
        return [r[0][len(RECORD_PREFIX) :] for r in rows]

    @leased
    def document_keys(self) -> set[str]:
        """Every document's key: a record's id, a file's slug (its chunk ids' prefix)."""
        rows = self._connection().execute("SELECT slug FROM files")
        return {r[0].removeprefix(RECORD_PREFIX) for r in rows}

    @leased
    def stored_metadata(
        self, path: str, fields: Sequence[str] | None = None
    ) -> dict[str, Any] | None:
        """The metadata stored with ``path`` when it was indexed, or ``None`` if it is not.

        Args:
            path: The indexed path.
            fields: Only these top-level fields (those present); ``None``: all of them. SQLite
                picks them out of the stored JSON, so a search selecting a document's key does
                not read its 15 MiB body into the process once per hit.
        """
        conn = self._connection()
        params: list[Any] = []
        if fields is not None:
            keys = conn.execute(
                "SELECT (SELECT json_group_array(key) FROM json_each(f.metadata)) FROM files f "
                "WHERE f.path = ?",
                (path,),
            ).fetchone()
            if not keys:
                return None
            wanted = set(fields)
            # json_remove keeps every other value's JSON text as stored (a real's digits, a
            # big integer, true); a key a path cannot quote stays, and the caller ignores it
            params = [
                f'$."{k}"'
                for k in json.loads(keys[0])
                if k not in wanted and _PLAIN_KEY.fullmatch(k)
            ]
        marks = ", ".join("?" * len(params))
        column = f"json_remove(metadata, {marks})" if params else "metadata"
        sql = f"SELECT {column} FROM files WHERE path = ?"
        row = conn.execute(sql, [*params, path]).fetchone()
        return json.loads(row[0]) if row else None

    @leased
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

    @leased
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

    @leased
    def count_matching_files(
        self, text: str, filter_expr: Expr | None = None, *, access: Access = ANONYMOUS
    ) -> int:
        """How many files the caller may see have a chunk matching ``text`` and ``filter_expr``.

        Text matches as in :meth:`search` (``*`` or empty: every chunk passing the filter).

        Raises:
            PermissionsNotEnforceableError: As for :meth:`search`.
        """
        query = text_query(text)
        if query is None and text.strip() not in ("", "*") and filter_expr is None:
            return 0
        try:
            self._lexical_index.flush(self._connection(), wait=False)
        except OSError:
            if not self.path.exists():
                raise StoreUnavailableError(self.path, "its index file is missing") from None
            raise
        with self._snapshot():
            where, params = self._where(filter_expr, access)
            conn = self._connection()
            if query is None:
                sql = f"SELECT count(DISTINCT c.file_id) FROM chunks c WHERE {where}"
                return int(conn.execute(sql, params).fetchone()[0])
            rids = self._lexical_index.matching_rids(conn, query)
            sql = (
                "SELECT count(DISTINCT c.file_id) FROM chunks c "
                f"WHERE c.rid IN (SELECT value FROM json_each(?)) AND {where}"
            )
            return int(conn.execute(sql, [json.dumps(rids), *params]).fetchone()[0])

    @leased
    def slug_owner(self, slug: str) -> str | None:
        """Return the path whose chunks use ``slug``, if any."""
        row = (
            self._connection().execute("SELECT path FROM files WHERE slug = ?", (slug,)).fetchone()
        )
        return row[0] if row else None

    @leased
    def chunk_ids(self) -> list[str]:
        """Every chunk id, in file then chunk order."""
        rows = self._connection().execute(
            "SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY f.path, c.ordinal"
        )
        return [r[0] for r in rows]

    @leased
    def document_chunks(self) -> dict[str, tuple[str, list[tuple[str, str]]]]:
        """Every document's key with its content hash and its chunks (id, text), in order.

        The key is a record's id or a file's slug (its chunk ids' prefix), as
        :meth:`document_keys` gives it: an entity graph's parent document id.
        """
        rows = self._connection().execute(
            "SELECT f.slug, f.content_hash, c.id, c.content FROM chunks c "
            "JOIN files f ON f.id = c.file_id ORDER BY f.path, c.ordinal"
        )
        documents: dict[str, tuple[str, list[tuple[str, str]]]] = {}
        for slug, content_hash, chunk_id, content in rows:
            key = slug.removeprefix(RECORD_PREFIX)
            documents.setdefault(key, (content_hash, []))[1].append((chunk_id, content))
        return documents

    @leased
    def visible_chunk_rids(self, ids: Sequence[str], access: Access) -> list[int]:
        """The rids of the chunks named ``ids`` that ``access`` may see, in ``ids`` order.

        The same permission condition as a search's (:meth:`_where`), so what a graph search
        hydrates is trimmed exactly as search results are.

        Raises:
            PermissionsNotEnforceableError: ``access`` enforces permissions and no document of
                this store has any.
        """
        if not ids:
            return []
        where, params = self._where(None, access)
        rows = self._connection().execute(
            f"SELECT c.rid, c.id FROM chunks c WHERE c.id IN (SELECT value FROM json_each(?)) "
            f"AND {where}",
            [json.dumps(list(ids)), *params],
        )
        by_id = {chunk_id: int(rid) for rid, chunk_id in rows}
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

    @leased
    def count_chunks(self) -> int:
        """Return the number of chunks in the index."""
        return int(self._connection().execute("SELECT count(*) FROM chunks").fetchone()[0])

    @leased
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

    @leased
    def has_vectors(self) -> bool:
        """Whether any chunk carries a vector."""
        row = (
            self._connection()
            .execute("SELECT 1 FROM chunks WHERE vector IS NOT NULL LIMIT 1")
            .fetchone()
        )
        return row is not None

    # ------------------------------------------------------------------ writes

    @leased
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

        Args:
            state: The file's new bookkeeping row (its ``chunk_count`` is ignored).
            metadata: The user metadata given at ingest time (stored for reference), or
                already serialised (:class:`MetadataJson`, stored as it is).
            chunks: The file's chunks, in order; each one's ``metadata`` holds the fields
                of that chunk alone.
            vectors: One vector per chunk, or ``None`` for a lexical-only index.
            permissions: Who may see the file. ``None`` keeps the permissions it had (a
                re-index that does not mention permissions never widens access); a new
                file without any is unmarked.
            fields: Filterable fields every chunk of the file shares, stored once (a
                chunk's own field of the same name wins). Searches and filters see each
                chunk with both.
            vectors_pending: The chunks get their vectors later (:meth:`write_vectors`):
                the store records that its chunks get vectors (and :attr:`vectors_made_with`)
                now, so it is known to rank by meaning while they are pending (see
                :meth:`embeds_chunks`).

        Raises:
            StoreError: When the vectors' dimension differs from the index's.

        """
        blobs = vector_blobs(vectors, len(chunks), None if vectors is None else self.dimension())
        meta_json = (
            metadata
            if isinstance(metadata, MetadataJson)
            else json.dumps(dict(metadata), default=json_default, sort_keys=True)
        )
        fields_json = json.dumps(dict(fields or {}), default=json_default, sort_keys=True)
        with self._write() as conn:
            if permissions is None:
                permissions = read_permissions(conn, state.path)
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
            first = schema.allocate_rids(conn, len(chunks))
            conn.executemany(
                "INSERT INTO chunks(rid, id, file_id, ordinal, title, content, page, metadata, "
                "vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        first + i,
                        c.id,
                        file_id,
                        c.ordinal,
                        c.title,
                        c.content,
                        c.page,
                        json.dumps(dict(c.metadata), default=json_default, sort_keys=True),
                        blob,
                    )
                    for i, (c, blob) in enumerate(zip(chunks, blobs, strict=True))
                ],
            )
            conn.execute(
                f"INSERT OR IGNORE INTO fields(name, kind) {schema.FIELDS_OF_CHUNKS} "
                "WHERE c.file_id = ?",
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
                if self.vectors_made_with:
                    record_made_with(conn, self.vectors_made_with)
            elif vectors_pending:
                conn.execute(f"INSERT OR IGNORE INTO meta(key, value) VALUES ('{_EMBEDS}', '1')")
                if self.vectors_made_with:
                    record_made_with(conn, self.vectors_made_with)
            if permissions is not None:
                write_permissions(conn, int(file_id or 0), permissions)
            schema.note_lexical_change(conn, state.path)
            schema.bump_generation(conn)

    @leased
    def embeds_chunks(self) -> bool:
        """Whether its chunks get vectors: it holds some, or was written to get them later."""
        row = (
            self._connection()
            .execute(
                "SELECT 1 FROM meta WHERE key IN ('dimension', ?, ?) LIMIT 1",
                (_EMBEDS, MADE_WITH_KEY),
            )
            .fetchone()
        )
        return row is not None

    def _vectors_pending(self) -> bool:
        """Whether chunks written to get their vectors later are still waiting for them."""
        conn = self._connection()
        if conn.execute("SELECT 1 FROM meta WHERE key = ?", (_EMBEDS,)).fetchone() is None:
            return False
        return (
            conn.execute("SELECT 1 FROM chunks WHERE vector IS NULL LIMIT 1").fetchone() is not None
        )

    @leased
    def chunks_without_vectors(self, limit: int) -> list[tuple[int, str, str]]:
        """Up to ``limit`` chunks that have no vector yet, oldest first: (rid, title, content)."""
        rows = self._connection().execute(
            "SELECT rid, title, content FROM chunks WHERE vector IS NULL ORDER BY rid LIMIT ?",
            (limit,),
        )
        return [(int(rid), str(title), str(content)) for rid, title, content in rows]

    @leased
    def vector_counts(self) -> tuple[int, int]:
        """How many chunks have no vector and how many have one: (without, with)."""
        conn = self._connection()
        with self._snapshot():
            (total,) = conn.execute("SELECT count(*) FROM chunks").fetchone()
            (without,) = conn.execute("SELECT count(*) FROM chunks WHERE vector IS NULL").fetchone()
        return int(without), int(total) - int(without)

    @leased
    def write_vectors(
        self, chunks: Sequence[tuple[int, str, str]], vectors: Sequence[Sequence[float]]
    ) -> int:
        """Give chunks read by :meth:`chunks_without_vectors` their vectors, in one transaction.

        A chunk deleted or replaced since it was read gets nothing: row ids are never
        reused, and the chunk must still have no vector and the same title and content, so
        a vector is never written for text the chunk no longer holds.

        Returns:
            How many chunks got their vector.

        Raises:
            StoreError: Not one vector per chunk, or a dimension other than the index's.
        """
        blobs = vector_blobs(vectors, len(chunks), self.dimension())
        written = 0
        with self._write() as conn:
            for (rid, title, content), blob in zip(chunks, blobs, strict=True):
                written += conn.execute(
                    "UPDATE chunks SET vector = ? WHERE rid = ? AND vector IS NULL "
                    "AND title = ? AND content = ?",
                    (blob, rid, title, content),
                ).rowcount
            if written:
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('dimension', ?)",
                    (str(len(vectors[0])),),
                )
                if self.vectors_made_with:
                    record_made_with(conn, self.vectors_made_with)
                schema.bump_generation(conn)
        return written

    @leased
    def permissions_of(self, path: str) -> Permissions | None:
        """Who may see the indexed ``path``; ``None`` when unmarked (or not indexed)."""
        return read_permissions(self._connection(), path)

    @leased
    def set_permissions(self, path: str, permissions: Permissions) -> bool:
        """Give the indexed ``path`` new permissions (its chunks stay as they are).

        Returns:
            Whether anything changed (``False`` also when ``path`` is not indexed).
        """
        with self._write() as conn:
            row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
            if row is None or read_permissions(conn, path) == permissions:
                return False
            conn.execute("DELETE FROM file_principals WHERE file_id = ?", (row[0],))
            write_permissions(conn, int(row[0]), permissions)
            schema.note_lexical_change(conn, path)
            schema.bump_generation(conn)
        return True

    @leased
    def access_summary(self) -> AccessSummary:
        """How many documents are public, restricted and unmarked (cached per generation)."""
        generation = self.generation()
        cached = getattr(self._local, "access", None)
        if cached is None or cached[0] != generation:
            cached = (generation, read_access_summary(self._connection()))
            self._local.access = cached
        result: AccessSummary = cached[1]
        return result

    @leased
    def touch_file(self, path: str, mtime: float) -> None:
        """Record a new mtime for an unchanged file (no generation bump: no content changed)."""
        with self._write() as conn:
            conn.execute("UPDATE files SET mtime = ? WHERE path = ?", (mtime, path))

    @leased
    def delete_file(self, path: str) -> int:
        """Remove a file and its chunks; returns the number of chunks removed."""
        with self._write() as conn:
            removed = self._delete_file_rows(conn, path)
            schema.note_lexical_change(conn, path)
            schema.bump_generation(conn)
        return removed

    def _delete_file_rows(self, conn: sqlite3.Connection, path: str) -> int:
        row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            return 0
        removed = conn.execute("DELETE FROM chunks WHERE file_id = ?", (row[0],)).rowcount
        conn.execute("DELETE FROM file_principals WHERE file_id = ?", (row[0],))
        conn.execute("DELETE FROM files WHERE id = ?", (row[0],))
        return int(removed)

    @leased
    def recorded_vectors_made_with(self) -> tuple[str, ...]:
        """How the index's vectors were made, every way recorded (``("local@bf16",)``)."""
        return read_made_with(self._connection())

    @leased
    def dimension(self) -> int | None:
        """The dimension of the index's vectors, once any were written."""
        row = (
            self._connection().execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
        )
        return int(row[0]) if row else None

    # ------------------------------------------------------------------ filters

    def _where(self, filter_expr: Expr | None, access: Access) -> tuple[str, list[Any]]:
        """The SQL condition on ``c`` (a chunk): the caller's filter AND the permission check.

        Each part is a separate, parenthesised condition built from parsed values, with every
        value a bound parameter: no text of a filter can reach into the permission check.
        """
        conditions, params = [], []
        if filter_expr is not None:
            sql, values = filter_sql(filter_expr, self._field_levels())
            conditions.append(sql)
            params += values
        allowed, principals = permission_sql(self.access_summary(), access)
        if allowed:
            conditions.append(allowed)
            params += principals
        return " AND ".join(conditions) or "1", params

    def _field_levels(self) -> tuple[frozenset[str], frozenset[str]]:
        """Names of the fields stored per chunk and per file (cached per write generation)."""
        generation = (self._epoch(), self.generation())
        cached = getattr(self._local, "levels", None)
        if cached is None or cached[0] != generation:
            cached = (generation, read_field_levels(self._connection()))
            self._local.levels = cached
        levels: tuple[frozenset[str], frozenset[str]] = cached[1]
        return levels

    def _epoch(self) -> int:
        return self._health.epoch if self._health is not None else 0
