"""Time to the first streamed event, and to the end of the stream, for a minimal request.

Runs uvicorn on 127.0.0.1 in this process (a thread) over a KB of ../shared/data (or the
bundled sample corpus when it is absent) and sends N sequential ``Accept: text/event-stream``
retrieve requests at minimal effort, one at a time, timing on the client side: from sending
the request to the first complete ``retrieval.started`` frame, to the first ``activity.*``
frame, and to the terminal ``response.completed``. The same is measured in-process on
``KnowledgeBase.astream`` (no HTTP). Target: first event ≤ 20 ms.

    .venv/bin/python benchmarks/bench_stream.py [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.server_harness import corpus_questions, real_docs_kb_dir, running_server

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.server import ServerSettings, create_app

QUESTIONS = corpus_questions()
TIME_LIMIT_SECONDS = 300


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def body(i: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": QUESTIONS[i % len(QUESTIONS)]}]}
        ],
        "retrievalReasoningEffort": {"kind": "minimal"},
    }


async def over_http(url: str, n: int) -> list[tuple[float, float, float]]:
    """(first event, first activity event, last event) in ms, per request."""
    timings = []
    headers = {"api-key": "k", "accept": "text/event-stream"}
    deadline = time.monotonic() + TIME_LIMIT_SECONDS
    async with httpx.AsyncClient(timeout=30) as client:
        for i in range(n):
            if time.monotonic() > deadline:
                break
            first = activity = last = None
            started = time.perf_counter()
            async with client.stream("POST", url, json=body(i), headers=headers) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("event: "):
                        continue
                    now = (time.perf_counter() - started) * 1000
                    name = line.removeprefix("event: ")
                    first = first if first is not None else now
                    if activity is None and name.startswith("activity."):
                        activity = now
                    if name in ("response.completed", "error"):
                        last = now
            assert first is not None and activity is not None and last is not None, i
            timings.append((first, activity, last))
    return timings


async def in_process(kb: KnowledgeBase, n: int) -> list[tuple[float, float]]:
    """(first event, last event) in ms of ``KnowledgeBase.astream``, per request."""
    timings = []
    for i in range(n):
        started = time.perf_counter()
        first = None
        async for _event in kb.astream(body(i)):
            first = first if first is not None else (time.perf_counter() - started) * 1000
        timings.append((first or 0.0, (time.perf_counter() - started) * 1000))
    return timings


def describe(label: str, values: list[float]) -> str:
    p50, p95 = statistics.median(values), percentile(values, 0.95)
    return f"{label:<28} p50 {p50:7.2f} ms   p95 {p95:7.2f} ms   max {max(values):7.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kb = open_knowledge_base(real_docs_kb_dir(Path(tmp)))
        chunks = sum(
            s.store.count_chunks() if hasattr(s, "store") else 0 for s in kb.sources.values()
        )
        asyncio.run(in_process(kb, 10))  # warm-up
        local = asyncio.run(in_process(kb, args.requests))
        app = create_app(kb, settings=ServerSettings(api_keys=["k"], read_env_keys=False))
        with running_server(app) as base:
            url = f"{base}/knowledgebases/{kb.name}/retrieve?api-version=2026-10-01"
            asyncio.run(over_http(url, 10))  # warm-up
            remote = asyncio.run(over_http(url, args.requests))
    print(f"knowledge base: {kb.name}, {chunks} chunks; {len(remote)} requests, minimal effort")
    print("over HTTP (uvicorn, 127.0.0.1, one request at a time):")
    print(describe("  first event", [t[0] for t in remote]))
    print(describe("  first activity event", [t[1] for t in remote]))
    print(describe("  response.completed", [t[2] for t in remote]))
    print("in process (KnowledgeBase.astream):")
    print(describe("  first event", [t[0] for t in local]))
    print(describe("  last event", [t[1] for t in local]))
    target = statistics.median(t[0] for t in remote)
    print(
        f"time to first event over HTTP: p50 {target:.2f} ms (target <= 20 ms): "
        + ("met" if target <= 20 else "NOT met")
    )


if __name__ == "__main__":
    main()
