"""Issue 21: OData filters as tantivy queries vs the store's SQL, on the same chunks, same run.

Reads a store file (``--db``; e.g. the 120k or 1M store of ``bench_scale_baseline.py``),
indexes each chunk's filterable fields the way the store's tantivy engine does
(``tantivy_filters.add_filter_values`` over ``chunks.metadata`` and ``files.fields``), then for
each filter:

- checks that tantivy selects exactly the chunks the store's SQL selects (``to_sql`` with
  the store's ``coalesce(chunk, file)`` column, the full row-id sets compared);
- times the SQL selection (every chunk's JSON read: what a filter costs the SQL path) and
  tantivy's (compile the filter, count its matches), alternating filter by filter.

Also prints the encoding's cost (chunks per CPU second) and the filter fields' index size.

    nice -n 10 .venv/bin/python benchmarks/bench_tantivy_filters.py \\
        --db /work/scratch/scale21/base120k/kb/wiki.sqlite --work /work/scratch/filter21/b120k
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import time
from pathlib import Path

import tantivy
from tantivy import Query

from agentic_retrieval.odata import parse_filter, to_sql
from agentic_retrieval.sources.local.store import metadata_column
from agentic_retrieval.sources.local.store.tantivy_filters import (
    RID_FIELD,
    add_filter_fields,
    add_filter_values,
    compile_filter,
    restrict,
)

FILTERS = [
    "category eq 'physics'",
    "year ge 2000",
    "tags/any(t: t eq 'featured')",
    "category eq 'zoology' and year lt 1880",
    "search.in(category, 'film,music,art')",
    "not (category eq 'geography')",
    "groups/any(g: search.in(g, 'g0081,g0186,g0007'))",
    "year ge 1900 and year lt 1950 and tags/any()",
    "category ne null and year gt 2020.5",
    "(category eq 'physics' or category eq 'music') and not (year lt 1990)",
]
REPEATS = 5


def has_file_fields(db: Path) -> bool:
    """Whether the store keeps shared fields in ``files.fields`` (schema 3; older: per chunk)."""
    conn = sqlite3.connect(db)
    try:
        return any(r[1] == "fields" for r in conn.execute("PRAGMA table_info(files)"))
    finally:
        conn.close()


def rows(db: Path) -> list[tuple[int, str, str]]:
    conn = sqlite3.connect(db)
    try:
        shared = "f.fields" if has_file_fields(db) else "'{}'"
        return conn.execute(
            f"SELECT c.rid, c.metadata, {shared} FROM chunks c JOIN files f ON f.id = c.file_id"
        ).fetchall()
    finally:
        conn.close()


def build(work: Path, chunks: list[tuple[int, str, str]]) -> tuple[tantivy.Index, float]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field(RID_FIELD, stored=True, indexed=True, fast=True)
    add_filter_fields(builder)
    index = tantivy.Index(builder.build(), path=str(work))
    writer = index.writer(200_000_000, 1)
    encode = 0.0
    for rid, metadata, shared in chunks:
        document = tantivy.Document()
        document.add_unsigned(RID_FIELD, rid)
        started = time.process_time()
        add_filter_values(document, metadata, shared)
        encode += time.process_time() - started
        writer.add_document(document)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index, encode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    chunks = rows(args.db)
    started = time.process_time()
    index, encode = build(args.work, chunks)
    build_cpu = time.process_time() - started
    size = sum(f.stat().st_size for f in args.work.rglob("*") if f.is_file())
    print(
        f"{len(chunks):,} chunks: encoding {len(chunks) / encode:,.0f} chunks/CPU-s, "
        f"build {build_cpu:.1f} s CPU (encoding included), filter fields {size / 1e6:.1f} MB"
    )
    schema, searcher = index.schema, index.searcher()
    conn = sqlite3.connect(args.db)
    level = "both" if has_file_fields(args.db) else "chunk"
    print("| filter | share | SQL p50 ms | tantivy p50 ms (compile + count) | same rows |")
    print("| --- | --- | --- | --- | --- |")
    for text in FILTERS:
        expr = parse_filter(text)
        where, params = to_sql(expr, lambda p: metadata_column(p, level))
        sql = f"SELECT c.rid FROM chunks c JOIN files f ON f.id = c.file_id WHERE {where}"
        sql_ms, engine_ms = [], []
        for _ in range(REPEATS):
            started = time.perf_counter()
            expected = {int(r[0]) for r in conn.execute(sql, params)}
            sql_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            query = compile_filter(schema, expr)
            count = searcher.search(query, 1, count=True).count
            engine_ms.append((time.perf_counter() - started) * 1000)
        hits = searcher.search(restrict(Query.all_query(), [query]), max(count, 1)).hits
        got = {int(searcher.doc(address)[RID_FIELD][0]) for _, address in hits}
        print(
            f"| `{text}` | {len(expected) / len(chunks):.1%} | {statistics.median(sql_ms):,.1f} "
            f"| {statistics.median(engine_ms):,.2f} | {got == expected} ({len(got):,}) |"
        )
    conn.close()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
