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
"""

from __future__ import annotations

from typing import Any, Literal

from agentic_retrieval.sources.local.store.lexical import query_terms
from agentic_retrieval.sources.postgres.schema import TEXT_CONFIG

LexicalRanking = Literal["bm25", "ts_rank_cd"]
K1 = 1.2
B = 0.75

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


def ranking_query(
    ranking: LexicalRanking,
    store: str,
    lexemes: list[str],
    where: tuple[str, list[Any]],
    limit: int,
) -> tuple[str, list[Any]]:
    """The query ranking one store's chunks that pass ``where`` (a condition on ``c``, ``f``).

    BM25 reads the postings of the query's terms (``ar_postings``: term, chunk, frequency and
    chunk length, an index-only range scan per term) and sums them by chunk; the filter and
    permission check join the matching chunks before the sum, so they hold before ``LIMIT``.
    Measured on Cranfield against reading each matching chunk's ``tsvector``
    (benchmarks/README.md, "PostgreSQL lexical ranking").
    """
    condition, values = where
    query = tsquery(lexemes)
    match = f"c.store = %s AND c.terms @@ to_tsquery('simple', %s) AND {condition}"
    tail = [store, query, *values, limit]
    if ranking == "ts_rank_cd":
        sql = (
            "SELECT c.rid, ts_rank_cd(c.terms, to_tsquery('simple', %s)) AS score "
            "FROM ar_chunks c JOIN ar_files f ON f.id = c.file_id "
            f"WHERE {match} ORDER BY score DESC, c.rid LIMIT %s"
        )
        return sql, [query, *tail]
    restricted = condition != "TRUE"
    chunks = (
        f"JOIN ar_chunks c ON c.rid = p.rid JOIN ar_files f ON f.id = c.file_id WHERE {condition} "
        if restricted
        else ""
    )
    sql = (
        "WITH s AS MATERIALIZED (SELECT greatest(st.chunk_count, 1)::float8 AS n, "
        "greatest(st.total_length::float8 / greatest(st.chunk_count, 1), 1) AS avgdl "
        "FROM ar_stores st WHERE st.name = %s), "
        "w AS MATERIALIZED (SELECT t.term, ln(1 + (s.n - t.df + 0.5) / (t.df + 0.5)) AS idf "
        "FROM ar_terms t, s WHERE t.store = %s AND t.term = ANY(%s::text[])) "
        f"SELECT p.rid, sum(w.idf * (p.tf * {K1 + 1}) / "
        f"(p.tf + {K1} * (1 - {B} + {B} * p.length / s.avgdl))) AS score "
        "FROM s, w JOIN ar_postings p ON p.store = %s AND p.term = w.term "
        f"{chunks}GROUP BY p.rid ORDER BY score DESC, p.rid LIMIT %s"
    )
    return sql, [store, store, lexemes, store, *values, limit]
