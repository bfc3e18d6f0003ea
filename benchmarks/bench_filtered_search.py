"""Issue 21: filtered top 10, lexical and hybrid, with compiled tantivy clauses vs SQL allow-lists.

Opens a store file (``--db``; a copy: opening migrates it and builds its tantivy index) and
runs the wiki-like queries (``--queries``, from ``corpus_wiki_like.py``) with each filter
through ``LocalStore.search``, the two ways alternating query by query in the same run:

- **compiled** (the store as it is): the filter and the permission check as tantivy clauses
  (``store/tantivy_filters.py``) restricting the lexical candidates before top-k, and the
  dense ranking restricted without a SQL scan (``store/restriction.py``: the nearest chunks
  checked in tantivy, or the passing chunks counted and collected there when they are few);
- **allow-list** (the store before issue 21's wiring, and what a filter without a tantivy
  equivalent still costs): the rows passing the filter read the SQL way (every chunk's
  JSON), handed to tantivy as row ids, and read again for the dense ranking.

With ``--vectors`` every chunk gets a vector first (written into the copy, once; a graph is
built since the store is past ``ann.ANN_MIN_VECTORS``): perturbed copies of real embeddings
(``--doc-vectors``/``--query-vectors``, ``.npy`` of normalised rows, e.g. bench_ann.py's
cached wiki set) or, without them, seeded clustered Gaussian vectors (timing only: their
neighbourhoods are not those of text). Hybrid searches then time the whole search and its
dense part.

Every filtered lexical top 10 of the first ``--check`` queries is compared with brute force
(all matches of the unfiltered query kept if the filter's SQL selects them, best 10); hybrid
top 10s are compared with exact fusion (brute-force lexical and exact cosine rankings of the
passing chunks, 50 deep, fused): the share of the exact top 10 found, which must be 1 with
``--exact`` (vectors searched exactly, no graph) and is the graph's recall otherwise.

    cp WORK/kb/wiki.sqlite /tmp/wiki.sqlite
    nice -n 10 .venv/bin/python benchmarks/bench_filtered_search.py --db /tmp/wiki.sqlite \\
        --queries WORK/queries.jsonl --vectors
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from agentic_retrieval.odata import Expr, parse_filter, to_sql
from agentic_retrieval.permissions import ELEVATED
from agentic_retrieval.sources.local.store import LocalStore, ann, metadata_column
from agentic_retrieval.sources.local.store import local_store as local_store_module
from agentic_retrieval.sources.local.store.fusion import reciprocal_rank_fusion
from agentic_retrieval.sources.local.store.search import allowed_rids
from agentic_retrieval.sources.local.store.tantivy_filters import constraint_clauses

FILTERS = [
    "tags/any(t: t eq 'featured')",  # 49%
    "category eq 'physics'",  # 12%
    "search.in(category, 'film,music,art')",  # 5%
    "groups/any(g: search.in(g, 'g0081,g0186,g0007'))",  # 3.3%
    "category eq 'zoology' and year lt 1880",  # 0.1%
    "category gt 'w'",  # a string range: no tantivy equivalent, SQL answers it
    "year ge 2000 and tags/all(t: t ne 'featured')",  # half compiles, half SQL
]
TOP = 10
DEPTH = 50  # each ranking's depth before fusion: max(top, 50)


ORIGINAL_DENSE = local_store_module.LocalStore._dense


def allow_list_only(schema, filter_expr, access, summary):  # type: ignore[no-untyped-def]
    """``constraint_clauses`` as if no filter compiled: the whole filter goes to SQL."""
    clauses, _ = constraint_clauses(schema, None, access, summary)
    return clauses, filter_expr


def allow_list_dense(self, query_vector, depth, restriction):  # type: ignore[no-untyped-def]
    """The dense ranking as before the wiring: every passing rid read the SQL way first."""
    conn = self._connection()
    allowed = allowed_rids(conn, restriction.where, restriction.params)
    return self._vectors.search(conn, self.generation(), query_vector, depth, allowed)


def selected(db: Path, expr: Expr) -> set[str]:
    where, params = to_sql(expr, lambda p: metadata_column(p, "both"))
    conn = sqlite3.connect(db)
    try:
        sql = f"SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE {where}"
        return {str(r[0]) for r in conn.execute(sql, params)}
    finally:
        conn.close()


def scaled(docs: np.ndarray, count: int, seed: int) -> np.ndarray:
    """``count`` rows: ``docs`` and perturbed copies of them (bench_ann.py's ``--scaled``)."""
    rng = np.random.default_rng(seed)
    spread = docs.std(axis=0) * 0.35
    rows = [docs]
    while sum(len(r) for r in rows) < count:
        rows.append(ann.normalised(docs + rng.normal(size=docs.shape).astype(np.float32) * spread))
    return np.vstack(rows)[:count]


def clustered(count: int, dimension: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((2_000, dimension)).astype(np.float32)
    picks = rng.integers(0, len(centres), count)
    noise = rng.standard_normal((count, dimension)).astype(np.float32) * 0.6
    return ann.normalised(centres[picks] + noise)


def write_vectors(db: Path, args: argparse.Namespace) -> None:
    """Give every chunk of the copy a vector (once: a store with vectors is left alone)."""
    conn = sqlite3.connect(db)
    try:
        if conn.execute("SELECT 1 FROM chunks WHERE vector IS NOT NULL LIMIT 1").fetchone():
            return
        rids = [r for (r,) in conn.execute("SELECT rid FROM chunks ORDER BY rid")]
        if args.doc_vectors:
            vectors = scaled(np.load(args.doc_vectors).astype(np.float32), len(rids), 21)
        else:
            vectors = clustered(len(rids), 384, 21)
        started = time.perf_counter()
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('dimension', ?)",
            (str(vectors.shape[1]),),
        )
        conn.executemany(
            "UPDATE chunks SET vector = ? WHERE rid = ?",
            ((vectors[i].tobytes(), rid) for i, rid in enumerate(rids)),
        )
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        conn.commit()
        print(f"vectors written to {len(rids):,} chunks in {time.perf_counter() - started:.0f} s")
    finally:
        conn.close()


def query_vectors(args: argparse.Namespace, step: int, count: int, dimension: int) -> np.ndarray:
    """The query's real embedding (row ``i`` of the file for query ``i``), or a synthetic one."""
    if args.query_vectors:
        loaded: np.ndarray = ann.normalised(np.load(args.query_vectors).astype(np.float32))
        return loaded[::step][:count]
    rng = np.random.default_rng(4021)
    centres = np.random.default_rng(21).standard_normal((2_000, dimension)).astype(np.float32)
    picks = rng.integers(0, len(centres), count)
    noisy = centres[picks] + rng.standard_normal((count, dimension)).astype(np.float32) * 0.6
    return ann.normalised(noisy)


class Exact:
    """Every chunk's vector in memory, for the exact cosine ranking of the passing chunks."""

    def __init__(self, db: Path) -> None:
        conn = sqlite3.connect(db)
        try:
            rows = conn.execute("SELECT id, vector FROM chunks WHERE vector IS NOT NULL")
            ids, blobs = zip(*rows, strict=True)
        finally:
            conn.close()
        self.ids = list(ids)
        self.matrix = ann.normalised(
            np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)
        )

    def ranking(self, vector: np.ndarray, passing: set[str], depth: int) -> list[str]:
        mask = np.fromiter((i in passing for i in self.ids), dtype=bool, count=len(self.ids))
        rows = np.flatnonzero(mask)
        cosines = self.matrix[rows] @ vector
        best = rows[np.argsort(-cosines, kind="stable")[:depth]]
        return [self.ids[r] for r in best]


class DenseTimer:
    """Stands in for ``LocalStore._dense``, one way or the other, and keeps its CPU time."""

    def __init__(self) -> None:
        self.last = 0.0
        timer = self

        def compiled(store, query_vector, depth, restriction):  # type: ignore[no-untyped-def]
            ranked, _, timer.last = timed(
                lambda: ORIGINAL_DENSE(store, query_vector, depth, restriction)
            )
            return ranked

        def allow_list(store, query_vector, depth, restriction):  # type: ignore[no-untyped-def]
            ranked, _, timer.last = timed(
                lambda: allow_list_dense(store, query_vector, depth, restriction)
            )
            return ranked

        self.compiled, self.allow_list = compiled, allow_list


def timed(function: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return result, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def p50_p95(values: Sequence[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:,.1f}" if values else "-"
    return f"{statistics.median(values):,.1f} / {statistics.quantiles(values, n=20)[18]:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=40, help="queries per filter")
    parser.add_argument("--check", type=int, default=10, help="queries checked per filter")
    parser.add_argument("--vectors", action="store_true", help="hybrid too (writes vectors)")
    parser.add_argument("--doc-vectors", type=Path, help=".npy of real chunk embeddings")
    parser.add_argument("--query-vectors", type=Path, help=".npy of real query embeddings")
    parser.add_argument(
        "--exact",
        action="store_true",
        help="search vectors exactly (no graph), so hybrid top 10s must equal exact fusion",
    )
    args = parser.parse_args()
    if args.exact:
        ann.faiss_available = lambda: False  # type: ignore[assignment]
    queries = [json.loads(line)["text"] for line in args.queries.read_text().splitlines()]
    step = max(1, len(queries) // args.limit)
    queries = queries[::step][: args.limit]
    if args.vectors:
        write_vectors(args.db, args)
    started = time.perf_counter()
    store = LocalStore(args.db)  # migrates and builds the lexical index on first open
    store.search("warm up", top=TOP)
    print(f"opened in {time.perf_counter() - started:.1f} s; {store.count_chunks():,} chunks")
    vectors: np.ndarray | None = None
    exact: Exact | None = None
    if args.vectors:
        started = time.perf_counter()
        store.refresh_vectors()  # the graph, built and saved here rather than in a query
        print(f"vectors ready in {time.perf_counter() - started:.1f} s: {store._vectors.state}")
        exact = Exact(args.db)
        vectors = query_vectors(args, step, len(queries), exact.matrix.shape[1])
    print(f"load average at start: {os.getloadavg()}")
    # every match of each checked query, best first (the brute force, once per query)
    everything = {
        query: [h.id for h in store.search(query, top=1_000_000, access=ELEVATED)]
        for query in queries[: args.check]
    }
    dense = DenseTimer()
    lines = [
        "| filter | share | lexical CPU ms p50 / p95: compiled | allow-list | = brute force "
        "| hybrid CPU ms: compiled | allow-list | its dense part: compiled | allow-list "
        "| top-10 overlap with exact fusion: compiled | allow-list |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    total = store.count_chunks()
    for text in FILTERS:
        expr = parse_filter(text)
        chosen = selected(args.db, expr)
        cpu: dict[str, list[float]] = {}
        checked = equal = 0
        overlap: dict[str, list[float]] = {"compiled": [], "allow-list": []}
        for n, query in enumerate(queries):

            def search(
                vector: np.ndarray | None, query: str = query, expr: Expr = expr
            ) -> list[str]:
                found = store.search(query, top=TOP, filter_expr=expr, query_vector=vector)
                return [h.id for h in found]

            hits, _, ms = timed(lambda: search(None))
            cpu.setdefault("lexical", []).append(ms)
            with mock.patch.object(local_store_module, "constraint_clauses", allow_list_only):
                reference, _, ms = timed(lambda: search(None))
            cpu.setdefault("lexical_sql", []).append(ms)
            hybrid: dict[str, list[str]] = {}
            if vectors is not None:
                vector = vectors[n]
                with mock.patch.object(local_store_module.LocalStore, "_dense", dense.compiled):
                    hybrid["compiled"], _, ms = timed(lambda v=vector: search(v))
                cpu.setdefault("hybrid", []).append(ms)
                cpu.setdefault("dense", []).append(dense.last)
                with (
                    mock.patch.object(local_store_module, "constraint_clauses", allow_list_only),
                    mock.patch.object(local_store_module.LocalStore, "_dense", dense.allow_list),
                ):
                    hybrid["allow-list"], _, ms = timed(lambda v=vector: search(v))
                cpu.setdefault("hybrid_sql", []).append(ms)
                cpu.setdefault("dense_sql", []).append(dense.last)
            if n < args.check:
                lexical = [i for i in everything[query] if i in chosen]
                checked += 1
                equal += hits == lexical[:TOP] == reference
                if vectors is not None and exact is not None:
                    nearest = exact.ranking(vectors[n], chosen, DEPTH)
                    fused = reciprocal_rank_fusion(
                        [[(i, 0.0) for i in lexical[:DEPTH]], [(i, 0.0) for i in nearest]]
                    )
                    expected = {i for i, _ in fused[:TOP]}
                    for way, got in hybrid.items():
                        overlap[way].append(len(set(got) & expected) / max(len(expected), 1))
        hybrid_cells = (
            f"{p50_p95(cpu['hybrid'])} | {p50_p95(cpu['hybrid_sql'])} | "
            f"{p50_p95(cpu['dense'])} | {p50_p95(cpu['dense_sql'])} | "
            f"{statistics.mean(overlap['compiled']):.3f} | "
            f"{statistics.mean(overlap['allow-list']):.3f}"
            if vectors is not None
            else "- | - | - | - | - | -"
        )
        lines.append(
            f"| `{text}` | {len(chosen) / total:.1%} | {p50_p95(cpu['lexical'])} | "
            f"{p50_p95(cpu['lexical_sql'])} | {equal}/{checked} | {hybrid_cells} |"
        )
        print(lines[-1], flush=True)
    store.close()
    print(f"load average at end: {os.getloadavg()}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
