"""Replicas of ``serve --store postgresql://...`` against one PostgreSQL: throughput and p95.

Starts an embedded PostgreSQL (tests/postgres_harness.py) on 127.0.0.1, fills one index
through a first replica with records of the Wikipedia-like corpus (``corpus_wiki_like.py``),
then for each replica count starts that many ``serve`` processes (each with its own --data
directory, ``--no-embeddings``: lexical BM25 in SQL) and sends minimal-effort retrieve
requests round-robin across them from concurrent clients, after a warm-up. Prints requests/s,
p50 and p95 per replica count, and the indexing rate of the fill.

    .venv/bin/python benchmarks/bench_pg_replicas.py [--chunks 5000] [--requests 300]
        [--clients 16] [--replicas 1 2 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from corpus_wiki_like import queries, records, sentence_pool
from tests.integration.service_process import KEY, VERSION, serve_process
from tests.postgres_harness import new_database, start_postgres

INDEX = {
    "name": "wiki",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "title", "type": "Edm.String", "searchable": True},
        {"name": "text", "type": "Edm.String", "searchable": True},
        {"name": "category", "type": "Edm.String", "filterable": True},
    ],
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fill(url: str, chunks: int) -> tuple[list[str], int, float]:
    """Create the index, source and knowledge base; push records; (queries, chunks, s)."""
    pool = sentence_pool()
    batch: list[dict[str, Any]] = []
    first: list[dict[str, object]] = []
    total = 0
    headers = {"api-key": KEY}
    with httpx.Client(base_url=url, headers=headers, params=VERSION, timeout=300) as http:
        assert http.put("/indexes('wiki')", json=INDEX).status_code == 201
        source = {"name": "ks", "kind": "searchIndex"}
        source["searchIndexParameters"] = {"searchIndexName": "wiki"}
        assert http.put("/knowledgesources('ks')", json=source).status_code == 201
        base = {"name": "kb", "knowledgeSources": [{"name": "ks"}]}
        assert http.put("/knowledgebases('kb')", json=base).status_code == 201
        started = time.perf_counter()
        for record, count in records(pool, chunks):
            total += count
            if len(first) < 400:
                first.append(record)
            batch.append({k: record[k] for k in ("id", "title", "text", "category")})
            if len(batch) == 100:
                assert http.post("/indexes('wiki')/docs/index", json={"value": batch}).is_success
                batch = []
        if batch:
            assert http.post("/indexes('wiki')/docs/index", json={"value": batch}).is_success
        seconds = time.perf_counter() - started
    return [q["text"] for q in queries(pool, first)], total, seconds


async def load(urls: list[str], texts: list[str], clients: int) -> list[tuple[int, float]]:
    """Send one minimal-effort retrieve per text, round-robin over ``urls``."""
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for n, text in enumerate(texts):
        queue.put_nowait((n, text))
    results: list[tuple[int, float]] = []

    async def worker() -> None:
        async with httpx.AsyncClient(timeout=60, headers={"api-key": KEY}) as http:
            while not queue.empty():
                n, text = queue.get_nowait()
                url = f"{urls[n % len(urls)]}/knowledgebases/kb/retrieve"
                body = {
                    "intents": [{"type": "semantic", "search": text}],
                    "retrievalReasoningEffort": {"kind": "minimal"},
                }
                started = time.perf_counter()
                response = await http.post(url, params=VERSION, json=body)
                results.append((response.status_code, time.perf_counter() - started))

    await asyncio.gather(*(worker() for _ in range(clients)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    server = start_postgres()
    try:
        url = new_database(server.url, "bench_replicas")
        extra = ("--store", url, "--no-embeddings", "--max-in-flight", "256")
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            with serve_process(root / "fill", extra=extra) as (first, _):
                texts, chunks, seconds = fill(first, args.chunks)
            print(f"indexed {chunks} chunks in {seconds:.1f} s ({chunks / seconds:.0f} chunks/s)")
            print(f"load average: {os.getloadavg()[0]:.2f} (2 cores)")
            print("| replicas | requests | clients | non-200 | req/s | p50 | p95 |")
            print("| --- | --- | --- | --- | --- | --- | --- |")
            for count in args.replicas:
                with ExitStack() as stack:
                    urls = [
                        stack.enter_context(serve_process(root / f"r{count}-{n}", extra=extra))[0]
                        for n in range(count)
                    ]
                    asyncio.run(load(urls, texts[:40], clients=4))  # warm-up
                    bodies = [texts[n % len(texts)] for n in range(args.requests)]
                    started = time.perf_counter()
                    results = asyncio.run(load(urls, bodies, clients=args.clients))
                    wall = time.perf_counter() - started
                latencies = [s * 1000 for _, s in results]
                failed = sum(status != 200 for status, _ in results)
                print(
                    f"| {count} | {len(results)} | {args.clients} | {failed} | "
                    f"{len(results) / wall:.1f} | {percentile(latencies, 0.5):.0f} ms | "
                    f"{percentile(latencies, 0.95):.0f} ms |",
                    flush=True,
                )
    finally:
        server.remove()


if __name__ == "__main__":
    main()
