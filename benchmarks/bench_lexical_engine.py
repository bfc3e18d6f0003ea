"""Issue 21: the store's lexical engine before (FTS5 in the SQLite file) and after (tantivy).

Two worker processes answer the same queries over the same chunks, one running the code of
each version (``--before-src``/``--after-src``: the ``src`` directories of two checkouts),
each on its own copy of one knowledge base built by ``bench_scale_baseline.py`` (the
``after`` copy migrates to schema version 4 when it first opens: that build is timed). The
driver sends each query to both workers in turn (alternating which goes first), so the
machine's load falls on both alike.

Per query, each worker reports the whole retrieve (``KnowledgeBase.aretrieve``, minimal
effort, one source, ``reranker_threshold=None``) wall time, and the store's candidate query
(``LocalStore._lexical``, wrapped from here; nothing in ``src`` changes) as wall and CPU
time (CPU time is the figure the machine's load distorts least), plus the top-10 candidate
row ids so the two engines' agreement can be printed (overlap@10).

    .venv/bin/python benchmarks/bench_lexical_engine.py \\
        --kb /work/scratch/scale21/base120k/kb --queries /work/scratch/scale21/queries.jsonl \\
        --work /work/scratch/lex21/engine120k \\
        --before-src /work/scratch/lex21/before/src --after-src src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

TIME_LIMIT_S = 3600


def percentile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


# ---------------------------------------------------------------- worker


def worker(kb: Path) -> int:
    from agentic_retrieval import Context, KnowledgeBase
    from agentic_retrieval.sources.local import LocalKnowledgeSource
    from agentic_retrieval.sources.local.store import LocalStore

    timing: dict[str, Any] = {}
    lexical = LocalStore._lexical

    def timed(store: LocalStore, *args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        result = lexical(store, *args, **kwargs)
        timing["candidate_ms"] = (time.perf_counter() - wall) * 1000
        timing["candidate_cpu_ms"] = (time.thread_time() - cpu) * 1000
        timing["top10"] = [rid for rid, _ in (result or [])[:10]]
        return result

    LocalStore._lexical = timed  # type: ignore[method-assign]
    [database] = sorted(kb.glob("*.sqlite"))
    started, cpu = time.perf_counter(), time.process_time()
    source = LocalKnowledgeSource("wiki", database)
    opened_s, opened_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    base = KnowledgeBase(
        [source], defaults=Context(reasoning_effort="minimal", reranker_threshold=None)
    )
    loop = asyncio.new_event_loop()
    for warm in ("harbour trams", "history of the region", "river"):  # connections, caches
        loop.run_until_complete(base.aretrieve({"intents": [{"search": warm}]}))
    print(json.dumps({"ready": True, "open_s": opened_s, "open_cpu_s": opened_cpu_s}), flush=True)
    for line in sys.stdin:
        text = json.loads(line)["text"]
        timing.clear()
        wall = time.perf_counter()
        response = loop.run_until_complete(base.aretrieve({"intents": [{"search": text}]}))
        timing["retrieve_ms"] = (time.perf_counter() - wall) * 1000
        timing["references"] = len(response.references or [])
        print(json.dumps(timing), flush=True)
    source.close()
    return 0


# ---------------------------------------------------------------- driver


class Worker:
    def __init__(self, name: str, src: Path, kb: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(src.resolve())}
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(kb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} ended (exit {self.process.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, text: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"text": text}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def copy_kb(kb: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(kb, target, ignore=shutil.ignore_patterns("*.lock", "*-wal", "*-shm"))
    return target


def summarise(name: str, rows: list[dict[str, Any]], kinds: list[str]) -> None:
    def line(label: str, selected: list[dict[str, Any]]) -> str:
        cells = []
        for key in ("retrieve_ms", "candidate_ms", "candidate_cpu_ms"):
            values = [r[key] for r in selected if key in r]
            cells.append(f"{percentile(values, 50):7.1f} / {percentile(values, 95):7.1f}")
        return f"  {label:<12} " + "   ".join(cells)

    print(f"{name}: p50 / p95 ms      retrieve          candidate wall    candidate CPU")
    print(line("all", rows))
    for kind in sorted(set(kinds)):
        print(line(kind, [r for r, k in zip(rows, kinds, strict=True) if k == kind]))


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(Path(sys.argv[2]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--before-src", type=Path, required=True)
    parser.add_argument("--after-src", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=200)
    args = parser.parse_args()
    queries = [json.loads(line) for line in args.queries.read_text().splitlines() if line]
    queries = queries[: args.limit]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()}")
    before = Worker("before", args.before_src, copy_kb(args.kb, args.work / "before"))
    started = time.perf_counter()
    after = Worker("after", args.after_src, copy_kb(args.kb, args.work / "after"))
    print(
        f"after: first open (migration: tantivy built from the chunks) "
        f"{after.ready['open_s']:.1f} s wall, {after.ready['open_cpu_s']:.1f} s CPU "
        f"(driver saw {time.perf_counter() - started:.1f} s)"
    )
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    deadline = time.monotonic() + TIME_LIMIT_S
    for number, query in enumerate(queries):
        if time.monotonic() > deadline:
            print("time limit reached")
            break
        pair = (before, after) if number % 2 == 0 else (after, before)
        for engine in pair:
            results[engine.name].append(engine.ask(query["text"]))
    before.close()
    after.close()
    kinds = [q.get("kind", "all") for q in queries[: len(results["before"])]]
    for name in ("before", "after"):
        summarise(name, results[name], kinds)
    overlaps = [
        len(set(b.get("top10", [])) & set(a.get("top10", []))) / max(1, len(b.get("top10", [])))
        for b, a in zip(results["before"], results["after"], strict=True)
        if b.get("top10")
    ]
    print(f"top-10 candidate overlap before/after: mean {statistics.mean(overlaps):.3f}")
    empty = {n: sum(1 for r in rows if not r["references"]) for n, rows in results.items()}
    print(f"queries with no reference: {empty}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
