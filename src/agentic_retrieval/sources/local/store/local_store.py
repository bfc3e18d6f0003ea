"""The store itself: one SQLite file and its lexical index, BM25 optionally fused with vectors.

:class:`LocalStore` ties the concerns of this package together: its connections and
transactions (:mod:`.connections`), its tables (:mod:`.schema`), query terms (:mod:`.lexical`)
and the tantivy index beside the file (:mod:`.lexical_index`), vectors (:mod:`.vectors`),
filters (:mod:`.filters`), permission trimming (:mod:`.permissions`) and reading hits back
(:mod:`.search`, :mod:`.fusion`).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentic_retrieval.errors import LexicalIndexDamagedError as LexicalIndexDamaged
from agentic_retrieval.errors import StoreError, StoreNotFoundError, StoreUnavailableError
from agentic_retrieval.odata import Expr
from agentic_retrieval.permissions import ANONYMOUS, ELEVATED, Access, Permissions
from agentic_retrieval.sources.local.health import StoreHealth, is_damage
from agentic_retrieval.sources.local.store import ann, lexical, schema
from agentic_retrieval.sources.local.store.connections import StoreConnections, leased
from agentic_retrieval.sources.local.store.filters import filter_sql, read_field_levels
from agentic_retrieval.sources.local.store.fusion import reciprocal_rank_fusion
from agentic_retrieval.sources.local.store.lexical_index import SCHEMA as LEXICAL_SCHEMA
from agentic_retrieval.sources.local.store.lexical_index import LexicalIndex, text_query
from agentic_retrieval.sources.local.store.permissions import (
    AccessSummary,
    permission_sql,
    read_access_summary,
    read_permissions,
    write_permissions,
)
from agentic_retrieval.sources.local.store.restriction import RID_SET_MAX, Restriction
from agentic_retrieval.sources.local.store.rows import (
    RECORD_PREFIX,
    ChunkRecord,
    FileState,
    MetadataJson,
    StoredHit,
    json_default,
)
from agentic_retrieval.sources.local.store.search import (
    allowed_rids,
    browse,
    existing_rids,
    fetch_hits,
)
from agentic_retrieval.sources.local.store.tantivy_filters import (
    constraint_clauses,
    restrict,
    rid_set_query,
)
from agentic_retrieval.sources.local.store.vectors import (
    VectorIndex,
    read_made_with,
    record_made_with,
    vector_blobs,
)

logger = logging.getLogger(__name__)

_PLAIN_KEY = re.compile(r'[^"\\]+')
"""A metadata key a JSON path can name in double quotes."""
_CANCEL_CHECK_STEPS = 10_000
DENSE_PROBE_FACTOR = 4
"""A restricted dense search first takes this many times ``depth`` nearest chunks and keeps
those passing; most filters and permission checks keep enough of them."""


class LocalStore(StoreConnections):
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
        path = Path(path)
        if path.is_dir():
            raise StoreError(
                f"{path} is a directory: a local source is one SQLite file (e.g. "
                f"{path / 'handbook.sqlite'}); for a knowledge-base directory use "
                "KnowledgeBaseDirectory or kb.loader.open_knowledge_base"
            )
        if not path.exists():
            if not create:
                raise StoreNotFoundError(
                    f"no local source index at {path} (nothing was created): check the "
                    "path, or pass create=True to start a new one"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, create=create)
        self._vectors = VectorIndex(path)
        self.vectors_made_with: str | None = None
        """How the vectors this object writes were made (``local@bf16``; see
        :func:`~agentic_retrieval.embeddings.vectors_made_with`): recorded with them by
        :meth:`replace_file`. The source that embeds sets it."""
        if not create and not schema.is_store(self._connection()):
            raise StoreError(
                f"{self.path} is not a local source index (it has no chunks table); "
                "nothing was changed"
            )
        self._connection().executescript(schema.SCHEMA)
        self._connection().executescript(schema.VECTOR_LOG_SCHEMA)
        schema.migrate(self.path, self._connection(), self._write)
        rebuild = schema.drop_old_triggers(self._connection(), self._write)
        self._health = StoreHealth(self.path)
        with self._write() as conn:
            schema.record_fields_once(conn)
        store_id = schema.read_meta(self._connection(), "store_id") or ""
        self._lexical_index = LexicalIndex(self.path, store_id)
        try:
            self._lexical_index.ensure(self._connection(), rebuild=rebuild)
        except OSError as exc:
            if self.path.exists():
                self.close()
                raise StoreError(f"cannot open the lexical index of {self.path}: {exc}") from exc
            # deleted by another process while this one opened it: open as before, its
            # searches report the file missing (StoreHealth)
        self._creating = False  # from now on a missing file was deleted: never re-create it

    def _prepare(self, conn: sqlite3.Connection) -> None:
        # the FTS5 triggers of a store before schema version 4 call it until it migrates
        conn.create_function("fts_segment", 1, lexical.fts_segment, deterministic=True)

    def _committed(self, conn: sqlite3.Connection) -> None:
        """Bring the lexical index up to the write just committed (one commit per batch)."""
        index = getattr(self, "_lexical_index", None)
        if index is None:  # still opening: ensure() applies the outbox once migrations ran
            return
        try:
            index.flush(conn)
        except (OSError, ValueError, sqlite3.Error) as exc:
            # committed in SQLite and named in the outbox: the next flush or open applies it
            logger.warning("could not update the lexical index of %s yet: %s", self.path, exc)

    def _close_connections(self) -> None:
        """Close the connections, the lexical index and a graph build, once no lease is out."""
        super()._close_connections()
        index = getattr(self, "_lexical_index", None)
        if index is not None:
            index.close()
        self._vectors.close()  # a graph being built in the background stops, saving nothing

    def _schema_version(self) -> int:
        return schema.schema_version(self._connection())

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
            if permissions is not None:
                write_permissions(conn, int(file_id or 0), permissions)
            schema.note_lexical_change(conn, state.path)
            schema.bump_generation(conn)

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

    # ------------------------------------------------------------------ reads

    @leased
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
            Hits, best first. Scores are BM25 (higher is better) for lexical search and
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
        health = self._health
        assert health is not None  # set by __init__
        if not self._closed:  # closed (deleted) under this lease: not damage, finish reading
            health.check(self._recover)
        conn = self._connection()
        if cancel is not None:
            # SQLite calls this every few thousand steps; non-zero aborts the statement
            conn.set_progress_handler(cancel.is_set, _CANCEL_CHECK_STEPS)
        try:
            # normally a no-op: applies what a writer killed before its flush left in the outbox
            self._lexical_index.flush(conn, wait=False)
            try:
                return self._search(text, top, filter_expr, query_vector, access)
            except LexicalIndexDamaged as exc:
                # SQLite holds every chunk: build the index again from it, then answer
                logger.warning(
                    "the lexical index of %s is damaged (%s): rebuilding", self.path, exc
                )
                self._lexical_index.ensure(conn, rebuild=True)
                return self._search(text, top, filter_expr, query_vector, access)
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise health.damaged(exc) from None
            raise
        except OSError:
            if not self.path.exists():  # deleted under this search by another process
                raise StoreUnavailableError(self.path, "its index file is missing") from None
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
            restriction = self._restriction(filter_expr, access)
            where, params = restriction.where, restriction.params
            lexical_ranking = self._lexical(text, depth, restriction)
            if query_vector is not None and self.has_vectors():
                dense = self._dense(query_vector, depth, restriction)
                ranked = reciprocal_rank_fusion([lexical_ranking, dense])[:top]
                return self._fetch(ranked, self._similarities(query_vector, ranked))
            elif lexical_ranking is None:
                # "*" or "" (Azure's match-all) or a filter-only query browses; words that
                # are all punctuation ("^", "((( )))") match nothing rather than any chunk
                browse_all = text.strip() in ("", "*") or filter_expr is not None
                ranked = browse(self._connection(), top, where, params) if browse_all else []
            else:
                ranked = lexical_ranking[:top]
            return self._fetch(ranked)

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

    def _restriction(self, filter_expr: Expr | None, access: Access) -> Restriction:
        """What this search's candidates must pass, for its lexical and dense parts alike.

        Raises:
            PermissionsNotEnforceableError: ``access`` enforces permissions and no document of
                this store has any.
        """
        conn = self._connection()
        where, params = self._where(filter_expr, access)
        pending = schema.lexical_pending(conn)
        restriction = Restriction(conn, self._lexical_index, where, params, pending)
        if where != "1" and not pending:
            clauses, residual = constraint_clauses(
                LEXICAL_SCHEMA, filter_expr, access, self.access_summary()
            )
            restriction.clauses = clauses
            if residual is not None:
                # the whole filter, not just its residual: SQL reads every chunk either way,
                # and the allow-list is then the shortest it can be (measured at 120k: a
                # residual passing 51% against the filter's 7.6% cost 480 ms against 324);
                # no permission check here: the tantivy clauses hold it
                restriction.residual = self._where(filter_expr, ELEVATED)
        return restriction

    def _lexical(
        self, text: str, depth: int, restriction: Restriction
    ) -> list[tuple[int, float]] | None:
        """The ``depth`` best chunks for ``text`` that pass the restriction, from tantivy.

        A filter and the permission check restrict the candidates before top-k, never after:
        tantivy answers them from each chunk's indexed fields and principals
        (:mod:`.tantivy_filters`, checked equal to the SQL path); a filter with a part it has
        no exact equivalent for is also read the SQL way, as a set of row ids. When the rows
        passing the SQL way number more than :data:`~.restriction.RID_SET_MAX`, or when
        documents are still in the outbox (written, not yet in tantivy, whose indexed fields
        may be the previous ones: only after a crash or during a concurrent write), tantivy's
        best are checked against the SQL condition instead, paging deeper until ``depth``
        pass or no match is left.
        """
        query = text_query(text)
        if query is None:
            return None
        conn = self._connection()
        index = self._lexical_index
        if restriction.unrestricted and not restriction.pending:
            return index.search(conn, query, depth)
        passing: set[int] | frozenset[int] | None
        if not restriction.pending:
            query = restriction.restrict(query)
            if restriction.residual is None:
                return index.search(conn, query, depth)
            # what tantivy cannot answer exactly: the rows passing it, this snapshot's own
            allowed = restriction.residual_rids()
            if len(allowed) <= RID_SET_MAX:
                if not allowed:
                    return []
                allowed_query = restrict(query, [rid_set_query(LEXICAL_SCHEMA, allowed)])
                return index.search(conn, allowed_query, depth)
            passing = frozenset(allowed)
        else:
            rids = allowed_rids(conn, restriction.where, restriction.params)
            passing = set(rids) if rids is not None else None
        limit = depth
        while True:
            ranked = index.search(conn, query, limit)
            present = passing if passing is not None else existing_rids(conn, ranked)
            kept = [hit for hit in ranked if hit[0] in present]
            if len(kept) >= depth or len(ranked) < limit:
                return kept[:depth]
            limit *= 4

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
        self._vectors.reset()  # a restored file may repeat an old generation
        self._lexical_index.close()
        self._lexical_index.ensure(conn)  # a restored file needs the index of its own chunks

    def _dense(
        self, query_vector: Sequence[float], depth: int, restriction: Restriction
    ) -> list[tuple[int, float]]:
        """The ``depth`` chunks nearest the query that pass the restriction, nearest first.

        The restriction applies before the top ``depth`` are taken, never after, without
        reading every chunk the SQL way: the nearest chunks are searched first and kept when
        they pass (checked in tantivy, or SQL for the residual, for just those rids); when
        too few pass, tantivy counts the chunks that do. At most
        :data:`~.ann.EXACT_MAX_ALLOWED` are collected and searched exactly; more are a broad
        share, searched for deeper (as deep as that share predicts, then 4 times deeper
        each round) until ``depth`` pass or every vector has been seen. Only while the outbox
        holds documents is the whole condition read the SQL way first, as before.
        """
        conn = self._connection()
        generation = self.generation()

        def nearest(limit: int, allowed: Sequence[int] | None = None) -> list[tuple[int, float]]:
            return self._vectors.search(conn, generation, query_vector, limit, allowed)

        if restriction.unrestricted:
            return nearest(depth)
        if restriction.pending:
            return nearest(depth, allowed_rids(conn, restriction.where, restriction.params))
        limit = depth * DENSE_PROBE_FACTOR
        ranked = nearest(limit)
        kept = _kept(ranked, restriction)
        if len(kept) >= depth or len(ranked) < limit:
            return kept[:depth]
        count, subset = restriction.subset(ann.EXACT_MAX_ALLOWED)
        if subset is not None:
            return nearest(depth, subset) if subset else []
        total = max(self._lexical_index.size(conn), 1)
        limit = max(4 * limit, int(depth * total / max(count, 1) * 2))
        while True:
            ranked = nearest(limit)
            kept = _kept(ranked, restriction)
            if len(kept) >= depth or len(ranked) < limit:
                return kept[:depth]
            limit *= 4

    @leased
    def refresh_vectors(self) -> None:
        """Bring the in-memory vectors up to date and save their graph, if they have one.

        Called after indexing, so that the next process to open the store loads the graph
        instead of building it on its first query. Does nothing where search stays exact (no
        faiss, or fewer chunks than :data:`~.ann.ANN_MIN_VECTORS`).
        """
        if not ann.faiss_available() or self.count_chunks() < ann.ANN_MIN_VECTORS:
            return
        with self._snapshot():
            self._vectors.refresh(self._connection(), self.generation())

    @leased
    def load_vectors(self) -> None:
        """Read the vectors (and the saved graph) into memory now, not on the first search.

        A hybrid source calls it in the background when it opens, so that the first dense
        search of a large store does not wait for the load (a million vectors: ~1.8 GB of
        graph). A search meanwhile waits for the load rather than starting another.

        Raises:
            StoreClosedError: The store was closed.
            StoreUnavailableError: The index file is damaged or missing.
        """
        if self.has_vectors():
            with self._snapshot():
                self._vectors.load(self._connection(), self.generation())

    def _similarities(
        self, query_vector: Sequence[float], ranked: Sequence[tuple[int, float]]
    ) -> dict[int, float]:
        return self._vectors.similarities(
            self._connection(), self.generation(), query_vector, ranked
        )

    def _fetch(
        self, ranked: Sequence[tuple[int, float]], similarities: Mapping[int, float] | None = None
    ) -> list[StoredHit]:
        return fetch_hits(self._connection(), ranked, similarities)


def _kept(ranked: list[tuple[int, float]], restriction: Restriction) -> list[tuple[int, float]]:
    """The ranked chunks that pass ``restriction``, in rank order."""
    passing = restriction.passing([rid for rid, _ in ranked])
    return [hit for hit in ranked if hit[0] in passing]
