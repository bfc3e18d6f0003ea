"""Lexical ranking in SQL: Okapi BM25 over ``tsvector`` statistics, or PostgreSQL's own.

Chunks are analysed by PostgreSQL's ``english`` configuration (Snowball English stemming,
stop words dropped) into ``ar_chunks.terms``, with ``length`` their number of indexed words.
A store keeps its chunk count and total length in ``ar_stores`` and each term's document
frequency in ``ar_terms``, all updated in the transaction that writes or deletes the chunks,
so BM25 reads them in one index lookup per query term instead of counting postings.

BM25 here is the embedded store's (tantivy's, Lucene's): ``idf = ln(1 + (N - df + 0.5) /
(df + 0.5))``, ``k1 = 1.2``, ``b = 0.75``; a term's frequency in a chunk is the number of its
positions in the ``tsvector``. ``ts_rank_cd`` (cover density) is kept as the alternative the
benchmark compares it with (benchmarks/README.md, "PostgreSQL lexical ranking"): it has no
IDF, so a query's common words weigh as much as its rare ones.

User text is never parsed as ``tsquery`` syntax: the store's own query terms
(:func:`~agentic_retrieval.sources.local.store.lexical.query_terms`) are analysed by
``to_tsvector`` and each resulting lexeme is quoted into an OR query.

``bm25_pruned`` finds the same top k without summing every posting of a query's common
words (:func:`bm25_top`, MaxScore's argument): a term adds at most ``idf * (k1 + 1)`` to a
chunk's score, so once ``k`` chunks are known to score ``θ``, a chunk holding only terms whose
bounds sum below ``θ`` cannot be among the best. The postings of the query's rarest terms are
scored first (over all its terms) to learn ``θ``; then only chunks holding an *essential* term
are scored, each by index lookups of the other terms. It returns the exhaustive ranking's top
``k``, scores included, but measured at 120k chunks it is no faster (benchmarks/README.md,
"PostgreSQL at 120k chunks": a posting looked up costs about three read in order, and the
bound leaves most postings essential), so the exhaustive sum stays the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from agentic_retrieval.sources.local.store.lexical import query_terms
from agentic_retrieval.sources.postgres.connections import Connection
from agentic_retrieval.sources.postgres.schema import TEXT_CONFIG

LexicalRanking = Literal["bm25", "bm25_pruned", "ts_rank_cd"]
K1 = 1.2
B = 0.75
SEED_POSTINGS = 500
"""Postings of a query's rarest terms scored first to learn the score a hit must beat."""
EXHAUSTIVE_SHARE = 0.1
"""Sum every posting instead when the essential terms hold more than this share of them:
looking each candidate's other terms up costs more than reading their postings in order
(500 and 0.1 were the fastest of three settings tried at 120k chunks; none beat the sum)."""

LEXEMES_SQL = (
    f"SELECT coalesce(array_agg(lexeme ORDER BY lexeme), '{{}}') "
    f"FROM unnest(to_tsvector('{TEXT_CONFIG}', %s))"
)
"""The distinct lexemes of one text (the query's words), as the index analyses words."""


def query_text(text: str) -> str | None:
    """The words of ``text`` a query looks up (``None``: it has no word at all)."""
    terms = query_terms(text, segmented=False)
    return " ".join(terms) if terms else None


def tsquery(lexemes: list[str]) -> str:
    """Lexemes as a ``to_tsquery('simple', ...)`` text: each quoted, joined by OR."""
    return " | ".join("'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes)


@dataclass(frozen=True)
class Weights:
    """A query's terms that the store holds, weakest first, with what BM25 needs of them."""

    terms: list[str]
    idf: list[float]
    df: list[int]
    avgdl: float

    def bound(self, index: int) -> float:
        """The most term ``index`` adds to any chunk's score (``tf / (tf + x) < 1``)."""
        return self.idf[index] * (K1 + 1)


def weights(conn: Connection, store: str, lexemes: list[str]) -> Weights:
    """The store's statistics for ``lexemes`` (terms no chunk holds are left out)."""
    rows = conn.execute(
        "SELECT st.chunk_count, st.total_length, t.term, t.df FROM ar_stores st "
        "LEFT JOIN ar_terms t ON t.store = st.name AND t.term = ANY(%s::text[]) AND t.df > 0 "
        "WHERE st.name = %s",
        (lexemes, store),
    ).fetchall()
    if not rows:
        return Weights([], [], [], 1.0)
    n = float(max(int(rows[0][0]), 1))
    avgdl = max(float(rows[0][1]) / n, 1.0)
    found = sorted(
        (math.log(1 + (n - int(df) + 0.5) / (int(df) + 0.5)), str(term), int(df))
        for _, _, term, df in rows
        if term is not None
    )
    return Weights(
        [t for _, t, _ in found], [i for i, _, _ in found], [d for _, _, d in found], avgdl
    )


def _score_sql() -> str:
    """One posting's BM25 (``w.idf``, ``p.tf``, ``p.length``; the average length a parameter).

    In ``float8`` throughout: a literal such as ``2.2`` is ``numeric`` in PostgreSQL, whose
    arithmetic is many times slower on every posting summed.
    """
    return (
        f"w.idf * (p.tf * {K1 + 1}::float8) / (p.tf + {K1}::float8 * "
        f"(1 - {B}::float8 + {B}::float8 * p.length / %s::float8))"
    )


def _exhaustive(
    conn: Connection, store: str, w: Weights, where: tuple[str, list[Any]], limit: int
) -> list[tuple[int, float]]:
    """Every posting of the query's terms, summed by chunk (one range scan per term)."""
    condition, values = where
    chunks = (
        f"JOIN ar_chunks c ON c.rid = p.rid JOIN ar_files f ON f.id = c.file_id WHERE {condition} "
        if condition != "TRUE"
        else ""
    )
    sql = (
        f"SELECT p.rid, sum({_score_sql()}) AS score "
        "FROM unnest(%s::text[], %s::float8[]) AS w(term, idf) "
        f"JOIN ar_postings p ON p.store = %s AND p.term = w.term {chunks}"
        "GROUP BY p.rid ORDER BY score DESC, p.rid LIMIT %s"
    )
    rows = conn.execute(sql, [w.avgdl, w.terms, w.idf, store, *values, limit])
    return [(int(r[0]), float(r[1])) for r in rows]


def _candidates(
    conn: Connection, store: str, terms: list[str], where: tuple[str, list[Any]]
) -> list[int]:
    """The chunks passing ``where`` that hold any of ``terms``, in ``rid`` order."""
    condition, values = where
    chunks = (
        "JOIN ar_chunks c ON c.rid = p.rid JOIN ar_files f ON f.id = c.file_id "
        if condition != "TRUE"
        else ""
    )
    rows = conn.execute(
        f"SELECT DISTINCT p.rid FROM ar_postings p {chunks}"
        f"WHERE p.store = %s AND p.term = ANY(%s::text[]) AND {condition} ORDER BY p.rid",
        [store, terms, *values],
    )
    return [int(r[0]) for r in rows]


def _score(
    conn: Connection, store: str, w: Weights, rids: list[int], limit: int
) -> list[tuple[int, float]]:
    """The best ``limit`` of ``rids`` by their full score (each term looked up per chunk)."""
    if not rids:
        return []
    # per term, one index scan for the candidates (OFFSET 0 keeps it a nested loop): left to
    # itself the planner read every posting of every candidate (a skip scan over all terms)
    sql = (
        f"SELECT p.rid, sum({_score_sql()}) AS score "
        "FROM unnest(%s::text[], %s::float8[]) AS w(term, idf) "
        "CROSS JOIN LATERAL (SELECT q.rid, q.tf, q.length FROM ar_postings q "
        "WHERE q.store = %s AND q.term = w.term AND q.rid = ANY(%s::bigint[]) OFFSET 0) p "
        "GROUP BY p.rid ORDER BY score DESC, p.rid LIMIT %s"
    )
    rows = conn.execute(sql, [w.avgdl, w.terms, w.idf, store, rids, limit])
    return [(int(r[0]), float(r[1])) for r in rows]


def _seed(w: Weights) -> int:
    """Where the rarest terms start whose postings together stay within :data:`SEED_POSTINGS`."""
    start, total = len(w.terms), 0
    while start > 0 and (start == len(w.terms) or total + w.df[start - 1] <= SEED_POSTINGS):
        start -= 1
        total += w.df[start]
    return start


def _essential(w: Weights, threshold: float) -> int:
    """Where the essential terms start: the weaker ones cannot lift a chunk to ``threshold``."""
    start, bound = 0, 0.0
    while start < len(w.terms) and (bound + w.bound(start)) * (1 + 1e-9) < threshold:
        bound += w.bound(start)
        start += 1
    return start


def bm25_top(
    conn: Connection,
    store: str,
    lexemes: list[str],
    where: tuple[str, list[Any]],
    limit: int,
    *,
    exhaustive: bool = True,
) -> list[tuple[int, float]]:
    """The ``limit`` best chunks passing ``where`` (a condition on ``c``, ``f``) by BM25.

    Ties are broken by ``rid``. ``exhaustive`` (the default) sums every posting of the query's
    terms; otherwise the top k is pruned (MaxScore, see the module's docstring), same result.
    """
    w = weights(conn, store, lexemes)
    if not w.terms:
        return []
    seed = _seed(w)
    if exhaustive or seed == 0:
        return _exhaustive(conn, store, w, where, limit)
    ranked = _score(conn, store, w, _candidates(conn, store, w.terms[seed:], where), limit)
    threshold = ranked[-1][1] if len(ranked) >= limit else 0.0
    essential = _essential(w, threshold)
    if essential >= seed:  # every chunk the seed missed scores under the threshold
        return ranked
    if sum(w.df[essential:]) > EXHAUSTIVE_SHARE * sum(w.df):
        return _exhaustive(conn, store, w, where, limit)
    return _score(conn, store, w, _candidates(conn, store, w.terms[essential:], where), limit)


def rank(
    conn: Connection,
    ranking: LexicalRanking,
    store: str,
    lexemes: list[str],
    where: tuple[str, list[Any]],
    limit: int,
) -> list[tuple[int, float]]:
    """One store's ``limit`` best chunks for ``lexemes`` that pass ``where``, by ``ranking``."""
    if ranking != "ts_rank_cd":
        return bm25_top(conn, store, lexemes, where, limit, exhaustive=ranking == "bm25")
    condition, values = where
    query = tsquery(lexemes)
    sql = (
        "SELECT c.rid, ts_rank_cd(c.terms, to_tsquery('simple', %s)) AS score "
        "FROM ar_chunks c JOIN ar_files f ON f.id = c.file_id "
        f"WHERE c.store = %s AND c.terms @@ to_tsquery('simple', %s) AND {condition} "
        "ORDER BY score DESC, c.rid LIMIT %s"
    )
    rows = conn.execute(sql, [query, store, query, *values, limit])
    return [(int(r[0]), float(r[1])) for r in rows]
