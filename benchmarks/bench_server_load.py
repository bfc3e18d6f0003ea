"""Timed load on the REST server: throughput and latency percentiles at minimal effort.

Runs uvicorn on 127.0.0.1 in this process (a thread) over a KB of ../shared/data (or the
bundled sample corpus when it is absent), then sends N requests from C concurrent clients:

    .venv/bin/python benchmarks/bench_server_load.py [--requests 200] [--clients 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.server_harness import corpus_questions, load, real_docs_kb_dir, running_server

from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.server import ServerSettings, create_app

QUESTIONS = corpus_questions()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kb = open_knowledge_base(real_docs_kb_dir(Path(tmp)))
        chunks = sum(
            s.store.count_chunks() if hasattr(s, "store") else 0 for s in kb.sources.values()
        )
        bodies = [
            {
                "intents": [{"search": QUESTIONS[i % len(QUESTIONS)]}],
                "retrievalReasoningEffort": {"kind": "minimal"},
            }
            for i in range(args.requests)
        ]
        app = create_app(kb, settings=ServerSettings(api_keys=["k"], read_env_keys=False))
        with running_server(app) as base:
            url = f"{base}/knowledgebases/{kb.name}/retrieve?api-version=2026-04-01"
            asyncio.run(load(url, bodies[:20], clients=4, headers={"api-key": "k"}))  # warm-up
            started = time.perf_counter()
            results = asyncio.run(load(url, bodies, clients=args.clients, headers={"api-key": "k"}))
            wall = time.perf_counter() - started
    latencies = [seconds * 1000 for _, _, seconds in results]
    statuses = statistics.multimode(status for status, _, _ in results)
    errors = sum(status >= 500 for status, _, _ in results)
    print(f"knowledge base: {kb.name} ({', '.join(kb.sources)}; {chunks or '?'} chunks)")
    print(f"{len(results)} requests, {args.clients} concurrent clients, minimal effort")
    print(f"status: {statuses}, 5xx: {errors}")
    print(f"throughput: {len(results) / wall:.1f} req/s  (wall {wall:.2f} s)")
    print(
        f"latency ms: p50 {percentile(latencies, 0.50):.1f}  "
        f"p95 {percentile(latencies, 0.95):.1f}  p99 {percentile(latencies, 0.99):.1f}  "
        f"max {max(latencies):.1f}"
    )


if __name__ == "__main__":
    main()
