"""Graph benchmarks: parallel fan-out speed-up and orchestration overhead.

Run: ``.venv/bin/python benchmarks/bench_graph.py [--runs N]``. Prints figures; the recorded
results live in benchmarks/README.md.

- Fan-out: 3 subqueries x 3 sources, every search sleeping 100 ms. Sequential execution would
  take 900 ms; the target is >= 6x faster (the floor is one search plus overhead).
- Overhead: a ``minimal`` request over an in-memory source, minus the source's own time
  (measured inside the source), median and p95; target <= 5 ms median. The process CPU time
  per request is printed too: on a shared machine wall time includes waiting for a core,
  CPU time much less so.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from agentic_retrieval import Context, InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.testing import ScriptedChatModel

SLEEP = 0.100


class SleepySource:
    kind = "searchIndex"

    def __init__(self, name: str) -> None:
        self.name = name
        self.description = f"source {name}"

    async def search(self, query: SearchQuery) -> list[Hit]:
        await asyncio.sleep(SLEEP)
        return [
            Hit(doc_key=f"{self.name}-{i}", content=f"{query.text} passage {i}") for i in range(5)
        ]


class TimedSource:
    """Wraps a source and accumulates the time spent inside it."""

    def __init__(self, inner: InMemoryKnowledgeSource) -> None:
        self.inner, self.name, self.kind = inner, inner.name, inner.kind
        self.description = inner.description
        self.spent = 0.0

    async def search(self, query: SearchQuery) -> list[Hit]:
        started = time.perf_counter()
        try:
            return await self.inner.search(query)
        finally:
            self.spent += time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def fan_out(runs: int) -> None:
    plan = {"needs_retrieval": True, "queries": [{"query": f"aspect {i}"} for i in range(3)]}
    walls = []
    for _ in range(runs):
        model = ScriptedChatModel(script={"QueryPlan": [plan]})
        kb = KnowledgeBase([SleepySource(f"s{i}") for i in range(3)], chat_model=model)
        request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}
        started = time.perf_counter()
        response = await kb.aretrieve(request)
        walls.append(time.perf_counter() - started)
        searches = sum(1 for a in response.activity or [] if a.type == "searchIndex")
        assert searches == 9, searches
    sequential = 9 * SLEEP
    median = statistics.median(walls)
    print(
        f"fan-out 3x3 @ {SLEEP * 1000:.0f} ms/search: median wall {median * 1000:.1f} ms, "
        f"p95 {percentile(walls, 0.95) * 1000:.1f} ms; sequential {sequential * 1000:.0f} ms; "
        f"speed-up {sequential / median:.1f}x (target >= 6x)"
    )


async def overhead(runs: int) -> None:
    docs = [
        {"key": f"d{i}", "title": f"Doc {i}", "content": f"topic {i % 7} detail {i} tram fare"}
        for i in range(200)
    ]
    source = TimedSource(InMemoryKnowledgeSource("mem", docs))
    kb = KnowledgeBase([source], defaults=Context(reasoning_effort="minimal"))
    request = {"intents": [{"search": "tram fare topic 3"}]}
    for _ in range(20):  # warm-up
        await kb.aretrieve(request)
    totals, own, cpu = [], [], []
    for _ in range(runs):
        source.spent = 0.0
        started, cpu_started = time.perf_counter(), time.process_time()
        await kb.aretrieve(request)
        totals.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        own.append(source.spent)
    net = [t - s for t, s in zip(totals, own, strict=True)]
    print(
        f"minimal request over 200 in-memory docs ({runs} runs): total median "
        f"{statistics.median(totals) * 1000:.2f} ms; "
        f"source {statistics.median(own) * 1000:.2f} ms; "
        f"orchestration overhead median {statistics.median(net) * 1000:.2f} ms, "
        f"p95 {percentile(net, 0.95) * 1000:.2f} ms (target <= 5 ms median); "
        f"process CPU per request median {statistics.median(cpu) * 1000:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(fan_out(max(5, args.runs // 10)))
    asyncio.run(overhead(args.runs))


if __name__ == "__main__":
    main()
