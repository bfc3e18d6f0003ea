"""The store on PostgreSQL: BM25 in SQL, pgvector HNSW, fused as the embedded store fuses them.

:class:`PostgresStore` is :class:`~agentic_retrieval.sources.local.store.LocalStore`'s
contract on a database many processes share: the same writes (:mod:`.contents`), and the same
:meth:`~PostgresStore.search` — the lexical ranking (:mod:`.lexical`) and, when the store holds
vectors and the caller embeds the query, the nearest chunks by cosine (HNSW, searched
iteratively so that a filter keeps ``depth`` candidates), fused by reciprocal rank
(:func:`~agentic_retrieval.sources.local.store.fusion.reciprocal_rank_fusion`). Filters and
permissions are SQL conditions inside both rankings' queries, before ``LIMIT``
(:mod:`.conditions`). One search reads one snapshot (``REPEATABLE READ``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import pq

from agentic_retrieval.odata import Expr
from agentic_retrieval.permissions import ANONYMOUS, Access
from agentic_retrieval.sources.local.store.fusion import reciprocal_rank_fusion
from agentic_retrieval.sources.local.store.rows import StoredHit
from agentic_retrieval.sources.postgres import conditions, lexical
from agentic_retrieval.sources.postgres.connections import Connection, Database, connected
from agentic_retrieval.sources.postgres.contents import PostgresContents
from agentic_retrieval.sources.postgres.lexical import LexicalRanking
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

HNSW_EF_SEARCH_MIN = 100
"""Candidates the HNSW graph keeps while searching (pgvector's ``hnsw.ef_search``), at least."""


class PostgresStore(PostgresContents):
    """One knowledge source's chunks in a PostgreSQL database.

    Args:
        database: A :class:`Database`, or its URL (opened and migrated here).
        name: The store's name within the database.
        create: Create the store when the database has none of that name.
        lexical_ranking: ``bm25`` (the default, the embedded store's ranking),
            ``bm25_pruned`` (the same top k without summing every posting of common terms;
            no faster at 120k chunks, kept to measure against) or ``ts_rank_cd``
            (PostgreSQL's own; kept for comparison).

    Raises:
        StoreError: An invalid URL or name.
        StoreNotFoundError: No such store and ``create`` is false.
        StoreUnavailableError: The database cannot be reached.
    """

    def __init__(
        self,
        database: Database | str,
        name: str,
        *,
        create: bool = False,
        lexical_ranking: LexicalRanking = "bm25",
    ) -> None:
        self._owns_database = isinstance(database, str)
        super().__init__(
            Database(database) if isinstance(database, str) else database, name, create=create
        )
        self.lexical_ranking: LexicalRanking = lexical_ranking

    def close(self) -> None:
        """Close the database's connections when this store opened it (from a URL)."""
        if self._owns_database:
            self.database.close()

    @connected
    def search(
        self,
        conn: Connection,
        text: str,
        *,
        top: int = 50,
        filter_expr: Expr | None = None,
        query_vector: Sequence[float] | None = None,
        access: Access = ANONYMOUS,
        topic_graph: TopicGraphSetting | None = None,
    ) -> list[StoredHit]:
        """Search as :meth:`LocalStore.search <agentic_retrieval.sources.local.LocalStore.search>`.

        A PostgreSQL store keeps no topic index, so ``topic_graph`` is accepted and the
        results are ranked without topic sampling.

        Returns:
            Hits, best first: BM25 scores for lexical search, RRF sums for hybrid search
            (whose hits carry their cosine ``similarity``); for ``*``, empty text or a
            filter-only query the first chunks passing the filter (file order), scored 0; for
            text with no word, nothing.

        Raises:
            StoreUnavailableError: The database cannot be reached.
            PermissionsNotEnforceableError: Permissions are enforced and no document has any.
        """
        if top <= 0:
            return []
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return self._search(conn, text, top, filter_expr, query_vector, access)
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return self._search(conn, text, top, filter_expr, query_vector, access)

    def _search(
        self,
        conn: Connection,
        text: str,
        top: int,
        filter_expr: Expr | None,
        query_vector: Sequence[float] | None,
        access: Access,
    ) -> list[StoredHit]:
        depth = max(top, 50)
        where, params = conditions.where(filter_expr, self._access_summary(conn), access)
        ranked_lexically = self._lexical(conn, text, depth, where, params)
        dimension = self._dimension(conn)
        if query_vector is not None and dimension is not None:
            vector = _vector_text(query_vector)
            dense = self._dense(conn, vector, dimension, depth, where, params)
            fused = reciprocal_rank_fusion([ranked_lexically, dense])[:top]
            return self._fetch(conn, fused, (vector, dimension))
        if ranked_lexically is None:
            browse_all = text.strip() in ("", "*") or filter_expr is not None
            return self._fetch(conn, self._browse(conn, top, where, params) if browse_all else [])
        return self._fetch(conn, ranked_lexically[:top])

    def _lexical(
        self, conn: Connection, text: str, depth: int, where: str, params: list[Any]
    ) -> list[tuple[int, float]] | None:
        """The ``depth`` best chunks for ``text`` passing ``where`` (``None``: no word)."""
        words = lexical.query_text(text)
        if words is None:
            return None
        row = conn.execute(lexical.LEXEMES_SQL, (words,)).fetchone()
        lexemes: list[str] = list(row[0]) if row else []
        if not lexemes:
            return []
        return lexical.rank(conn, self.lexical_ranking, self.name, lexemes, (where, params), depth)

    def _dense(
        self,
        conn: Connection,
        vector: str,
        dimension: int,
        depth: int,
        where: str,
        params: list[Any],
    ) -> list[tuple[int, float]]:
        """The ``depth`` chunks nearest ``vector`` that pass ``where``, nearest first.

        The HNSW index is searched iteratively (pgvector's ``strict_order``): when a filter
        or the permission check rejects neighbours, the scan goes on past them until
        ``depth`` pass, instead of returning fewer.
        """
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
        conn.execute(
            "SELECT set_config('hnsw.ef_search', %s, true)",
            (str(max(HNSW_EF_SEARCH_MIN, 2 * depth)),),
        )
        # the expression and the store's name as the partial index has them (schema.py)
        cast = f"vector({int(dimension)})"
        sql = (
            f"SELECT c.rid, c.embedding::{cast} <=> %s::{cast} AS distance "
            "FROM ar_chunks c JOIN ar_files f ON f.id = c.file_id "
            f"WHERE c.store = '{self.name}' AND c.embedding IS NOT NULL AND {where} "
            "ORDER BY distance LIMIT %s"
        )
        rows = conn.execute(sql, [vector, *params, depth])
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows]

    def _browse(
        self, conn: Connection, top: int, where: str, params: list[Any]
    ) -> list[tuple[int, float]]:
        rows = conn.execute(
            "SELECT c.rid FROM ar_chunks c JOIN ar_files f ON f.id = c.file_id "
            f"WHERE c.store = %s AND {where} ORDER BY c.file_id, c.ordinal LIMIT %s",
            [self.name, *params, top],
        )
        return [(int(r[0]), 0.0) for r in rows]

    def _fetch(
        self,
        conn: Connection,
        ranked: Sequence[tuple[int, float]],
        query: tuple[str, int] | None = None,
    ) -> list[StoredHit]:
        """The ranked chunks as hits, in rank order (with their cosine for a hybrid search)."""
        if not ranked:
            return []
        similarity = "NULL"
        params: list[Any] = []
        if query is not None:
            cast = f"vector({int(query[1])})"
            similarity = f"1 - (c.embedding::{cast} <=> %s::{cast})"
            params.append(query[0])
        rows = conn.execute(
            f"SELECT c.rid, c.id, c.title, c.content, c.page, c.metadata, f.fields, {similarity} "
            "FROM ar_chunks c JOIN ar_files f ON f.id = c.file_id WHERE c.rid = ANY(%s)",
            [*params, [rid for rid, _ in ranked]],
        ).fetchall()
        by_rid = {int(row[0]): row for row in rows}
        hits = []
        for rid, score in ranked:
            row = by_rid.get(rid)
            if row is not None:
                metadata = {**dict(row[6] or {}), **dict(row[5] or {})}
                cosine = float(row[7]) if row[7] is not None else None
                hits.append(StoredHit(row[1], row[2], row[3], row[4], metadata, score, cosine))
        return hits

    @connected
    def count_matching_files(
        self,
        conn: Connection,
        text: str,
        filter_expr: Expr | None = None,
        *,
        access: Access = ANONYMOUS,
    ) -> int:
        """How many files the caller may see have a chunk matching ``text`` and the filter."""
        words = lexical.query_text(text)
        if words is None and text.strip() not in ("", "*") and filter_expr is None:
            return 0
        where, params = conditions.where(filter_expr, self._access_summary(conn), access)
        match, match_params = "TRUE", []
        if words is not None:
            row = conn.execute(lexical.LEXEMES_SQL, (words,)).fetchone()
            lexemes = list(row[0]) if row else []
            if not lexemes:
                return 0
            match, match_params = "c.terms @@ to_tsquery('simple', %s)", [lexical.tsquery(lexemes)]
        row = conn.execute(
            "SELECT count(DISTINCT c.file_id) FROM ar_chunks c JOIN ar_files f ON f.id = c.file_id "
            f"WHERE c.store = %s AND {match} AND {where}",
            [self.name, *match_params, *params],
        ).fetchone()
        return int(row[0]) if row else 0


def _vector_text(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"
