"""Issue 21's baseline: today's store at 120k and 1M chunks of the Wikipedia-like corpus.

For each records file (``corpus_wiki_like.py``), in one run:

1. ``agentic-retrieval index --records FILE --no-embeddings`` in a child process: wall time,
   peak RSS and bytes written (the child's ``ru_maxrss`` and ``ru_oublock`` from ``wait4``,
   and ``/proc/PID/io`` ``write_bytes`` polled every 0.2 s), and the database's size.
2. The 200 queries through ``KnowledgeBase.aretrieve`` (minimal effort, one source,
   ``reranker_threshold=None``): whole retrieve p50/p95, and the store's candidate query
   (``LocalStore._lexical``: the FTS5 ``MATCH ... ORDER BY rank LIMIT 50``) timed by wrapping
   it from here (nothing in ``src`` is changed), overall and per query kind.

    .venv/bin/python benchmarks/bench_scale_baseline.py \\
        --records /work/scratch/scale21/corpus/records_120000.jsonl \\
        --queries /work/scratch/scale21/corpus/queries.jsonl --work /work/scratch/scale21/base

``--skip-index`` reuses a knowledge base indexed before. The indexing child runs under
``nice -n 10`` (on a shared machine its wall time then depends on the others' load: its CPU
time is printed beside it); the queries run at normal priority, one at a time.
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
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.sources.local.store import LocalStore

BIN = Path(sys.executable).parent
TIME_LIMIT_S = 3600


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (inclusive method), ``nan`` for no values."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def git_commit() -> str:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def run_measured(command: list[str], poll_s: float = 0.2) -> dict[str, float]:
    """Run ``command``; its wall time, peak RSS and bytes written (wait4 and /proc/PID/io)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    polled_write = 0
    done = threading.Event()

    def poll() -> None:
        nonlocal polled_write
        while not done.wait(poll_s):
            try:
                text = Path(f"/proc/{process.pid}/io").read_text()
            except OSError:
                return
            for line in text.splitlines():
                if line.startswith("write_bytes:"):
                    polled_write = max(polled_write, int(line.split()[1]))

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        done.set()
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode() if process.stderr else ""
    if process.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({process.returncode}): {stderr[-2000:]}")
    return {
        "wall_s": time.perf_counter() - started,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "written_mb_rusage": usage.ru_oublock * 512 / 1e6,
        "written_mb_proc": polled_write / 1e6,
    }


def index(records: Path, kb: Path) -> dict[str, float]:
    if kb.exists():
        shutil.rmtree(kb)
    command = [
        "nice",
        "-n",
        "10",
        str(BIN / "agentic-retrieval"),
        "index",
        "--kb",
        str(kb),
        "--source",
        "wiki",
        "--records",
        str(records),
        "--no-embeddings",
    ]
    figures = run_measured(command)
    database = kb / "wiki.sqlite"
    figures["db_mb"] = sum(
        p.stat().st_size / 1e6 for p in kb.glob("wiki.sqlite*") if not p.name.endswith(".lock")
    )
    figures["db_main_mb"] = database.stat().st_size / 1e6
    figures["chunks"] = LocalStore(database).count_chunks()
    return figures


class CandidateTimer:
    """Wraps ``LocalStore._lexical`` (the FTS5 candidate query) and records its wall time."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.cpu: list[float] = []
        self.original = LocalStore._lexical

    def __enter__(self) -> CandidateTimer:
        timer = self
        original = self.original

        def timed(store: LocalStore, *args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(store, *args, **kwargs)
            finally:
                timer.samples.append((time.perf_counter() - started) * 1000)
                timer.cpu.append((time.thread_time() - cpu) * 1000)

        LocalStore._lexical = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        LocalStore._lexical = self.original  # type: ignore[method-assign]


async def query_latencies(database: Path, queries: list[dict[str, str]]) -> dict[str, Any]:
    source = LocalKnowledgeSource("wiki", database)
    kb = KnowledgeBase(
        [source], defaults=Context(reasoning_effort="minimal", reranker_threshold=None)
    )
    for query in queries[:10]:  # warm the page cache and the connection
        await kb.aretrieve({"intents": [{"search": query["text"]}]})
    retrieve: dict[str, list[float]] = defaultdict(list)
    candidate: dict[str, list[float]] = defaultdict(list)
    candidate_cpu: dict[str, list[float]] = defaultdict(list)
    empty = 0
    deadline = time.monotonic() + TIME_LIMIT_S
    with CandidateTimer() as timer:
        for query in queries:
            if time.monotonic() > deadline:
                break
            before = len(timer.samples)
            started = time.perf_counter()
            response = await kb.aretrieve({"intents": [{"search": query["text"]}]})
            elapsed = (time.perf_counter() - started) * 1000
            retrieve[query["kind"]].append(elapsed)
            retrieve["all"].append(elapsed)
            spent = sum(timer.samples[before:])
            candidate[query["kind"]].append(spent)
            candidate["all"].append(spent)
            cpu = sum(timer.cpu[before:])
            candidate_cpu[query["kind"]].append(cpu)
            candidate_cpu["all"].append(cpu)
            empty += not response.references
    return {
        "retrieve": dict(retrieve),
        "candidate": dict(candidate),
        "candidate_cpu": dict(candidate_cpu),
        "empty": empty,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--skip-index", action="store_true")
    args = parser.parse_args()
    queries = [json.loads(line) for line in args.queries.read_text().splitlines() if line]
    kb = args.work / "kb"
    print(
        f"commit {git_commit()}; load average {os.getloadavg()[0]:.2f}; "
        f"records {args.records.name} ({args.records.stat().st_size / 1e6:,.0f} MB)",
        flush=True,
    )
    if not args.skip_index:
        figures = index(args.records, kb)
        print(
            f"index: {figures['chunks']:,} chunks in {figures['wall_s']:.0f} s "
            f"({figures['chunks'] / figures['wall_s']:,.0f} chunks/s, "
            f"CPU {figures['cpu_s']:.0f} s); "
            f"peak RSS {figures['peak_rss_mb']:,.0f} MB; written "
            f"{figures['written_mb_rusage']:,.0f} MB (rusage) / "
            f"{figures['written_mb_proc']:,.0f} MB (/proc io); "
            f"database {figures['db_main_mb']:,.0f} MB (+WAL: {figures['db_mb']:,.0f} MB); "
            f"written / database {figures['written_mb_rusage'] / figures['db_main_mb']:.1f}x; "
            f"load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    result = asyncio.run(query_latencies(kb / "wiki.sqlite", queries))
    print(f"queries (load average {os.getloadavg()[0]:.2f}; {result['empty']} with no reference):")
    print(
        "| kind | n | retrieve p50 | p95 | max | candidate query p50 | p95 | CPU p50 "
        "| share of retrieve |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in ("all", "fragment", "entity", "technical", "common"):
        r, c = result["retrieve"].get(kind, []), result["candidate"].get(kind, [])
        cpu = result["candidate_cpu"].get(kind, [])
        if not r:
            continue
        print(
            f"| {kind} | {len(r)} | {percentile(r, 50):.1f} | {percentile(r, 95):.1f} "
            f"| {max(r):.0f} | {percentile(c, 50):.1f} | {percentile(c, 95):.1f} "
            f"| {percentile(cpu, 50):.1f} "
            f"| {sum(c) / sum(r):.0%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
