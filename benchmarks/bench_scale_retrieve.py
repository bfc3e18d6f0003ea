"""Issue 21 end to end: index N chunks, then the 200 queries through the whole minimal retrieve.

Usage (one size per run; scratch data outside the checkout; the ``bench`` extra for tantivy
and psutil)::

    pip install -e ".[dev,local,bench]"
    W=/work/scratch/$USER
    .venv/bin/python benchmarks/bench_scale_retrieve.py --chunks 120000 \\
        --corpus /work/scratch/scale21/corpus --work $W/r120k --label after
    .venv/bin/python benchmarks/bench_scale_retrieve.py --chunks 1000000 \\
        --corpus /work/scratch/scale21/corpus --work $W/r1m --label after

The indexing child runs under ``nice -n 10`` by itself (do not nice the harness too: the
child would run at 19 and crawl on a shared machine); the queries run at normal priority,
one at a time, as in ``bench_scale_baseline.py``. To measure another checkout's code with
this harness (e.g. a "before"), put its ``src`` first: ``PYTHONPATH=/path/to/src``.

``--corpus DIR`` holds ``records_N.jsonl`` and ``queries.jsonl``; missing ones are generated
there by ``corpus_wiki_like.py`` (deterministic: the same records and queries on every
machine with the same Python and torch). The corpus of 120k and 1M chunks generated for the
research phase is read-only at /work/scratch/scale21/corpus and can be given as ``--corpus``.
``--skip-index`` reuses ``WORK/kb`` (e.g. to re-run the queries after a quieter moment).
``--candidate MODULE:ATTR.PATH`` names the store's candidate query to time (default
``agentic_retrieval.sources.local.store:LocalStore._lexical``, FTS5's ``MATCH ... ORDER BY
rank LIMIT``): once the lexical engine changes, point it at the engine's top-k call; the
harness wraps it from outside (nothing in ``src`` changes). ``--no-candidate`` leaves the
share out. Results are printed as markdown and written to ``WORK/result.json``.

What one run measures, on one machine in one sitting:

1. **Indexing**: ``agentic-retrieval index --records FILE --no-embeddings`` in a child process
   (under ``nice -n 10``): wall and CPU time, chunks per CPU-second, peak RSS (``wait4``),
   bytes written (``ru_oublock`` and ``/proc/PID/io``, see ``bench_scale_baseline.py``), the
   knowledge base's size on disk (every file of the source: SQLite, WAL, any engine files)
   and written / size.
2. **The reference engine** over the same chunks: a tantivy index built from the store's
   ``chunks`` table (title and content fields, FTS5-like tokenizer, no boost; see
   ``bench_scale_engines.py``), its build time and size.
3. **Queries**: the 200 queries (50 fragments, 50 entity questions, 50 long technical, 50
   common words) through ``KnowledgeBase.aretrieve`` (minimal effort, one source,
   ``reranker_threshold=None``), and **in the same loop, query by query**, through tantivy
   (top 10 and top 50) so the machine's load falls on both alike. Wall and CPU per query
   (retrieve: the process's CPU, since the search runs in a worker thread; candidate query
   and tantivy: the calling thread's), p50/p95 overall and per kind, the candidate query's
   share of the retrieve's wall time, and the candidate query's CPU over tantivy's.

On a shared machine wall times follow the load; CPU per query is the steadier figure.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale_baseline import git_commit, index, percentile
from bench_scale_engines import TantivyEngine, build_tantivy

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.sources.local import LocalKnowledgeSource

HERE = Path(__file__).resolve().parent
DEFAULT_CANDIDATE = "agentic_retrieval.sources.local.store:LocalStore._lexical"
KINDS = ("all", "fragment", "entity", "technical", "common")
TIME_LIMIT_S = 3600
MAX_CHUNKS = 5_000_000


def corpus_files(corpus: Path, chunks: int) -> tuple[Path, Path]:
    """The records file of ``chunks`` chunks and the queries, generated when missing."""
    records, queries = corpus / f"records_{chunks}.jsonl", corpus / "queries.jsonl"
    if not (records.is_file() and queries.is_file()):
        corpus.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(HERE / "corpus_wiki_like.py"), "--chunks", str(chunks)]
        subprocess.run([*command, "--out", str(corpus)], check=True)
    return records, queries


def resolve(spec: str) -> tuple[Any, str]:
    """``module:Owner.attr`` -> (the object holding ``attr``, ``attr``)."""
    module_name, _, path = spec.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    if not callable(getattr(owner, name, None)):
        raise SystemExit(f"--candidate {spec}: no callable {name!r} on {owner!r}")
    return owner, name


@contextmanager
def timing(spec: str | None) -> Iterator[tuple[list[float], list[float]]]:
    """Wrap the candidate query named by ``spec``; yields its (wall ms, CPU ms) samples."""
    wall: list[float] = []
    cpu: list[float] = []
    if spec is None:
        yield wall, cpu
        return
    owner, name = resolve(spec)
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started, thread = time.perf_counter(), time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            wall.append((time.perf_counter() - started) * 1000)
            cpu.append((time.thread_time() - thread) * 1000)

    setattr(owner, name, timed)
    try:
        yield wall, cpu
    finally:
        setattr(owner, name, original)


def clocked(call: Callable[[], Any], clock: Callable[[], float]) -> tuple[Any, float, float]:
    started, cpu = time.perf_counter(), clock()
    result = call()
    return result, (time.perf_counter() - started) * 1000, (clock() - cpu) * 1000


async def run_queries(
    database: Path, engine: TantivyEngine, queries: list[dict[str, str]], candidate: str | None
) -> dict[str, dict[str, list[float]]]:
    """Every query through the retrieve and tantivy, alternating; samples by series and kind."""
    source = LocalKnowledgeSource("wiki", database)
    kb = KnowledgeBase(
        [source], defaults=Context(reasoning_effort="minimal", reranker_threshold=None)
    )
    series: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        for query in queries[:10]:  # warm the page cache, the connection and tantivy's searcher
            await kb.aretrieve({"intents": [{"search": query["text"]}]})
            engine.search(query["text"], 10, title_boost=False)
        deadline = time.monotonic() + TIME_LIMIT_S
        with timing(candidate) as (cand_wall, cand_cpu):
            for number, query in enumerate(queries):
                if time.monotonic() > deadline:
                    print("time limit reached: fewer queries measured", flush=True)
                    break
                text, before = query["text"], len(cand_wall)
                started, cpu = time.perf_counter(), time.process_time()
                response = await kb.aretrieve({"intents": [{"search": text}]})
                samples = {
                    "retrieve": (time.perf_counter() - started) * 1000,
                    "retrieve_cpu": (time.process_time() - cpu) * 1000,
                    "candidate": sum(cand_wall[before:]),
                    "candidate_cpu": sum(cand_cpu[before:]),
                    "empty": float(not response.references),
                }
                for top in (10, 50) if number % 2 else (50, 10):  # neither always warms the other
                    search = partial(engine.search, text, top, title_boost=False)
                    _, wall, thread = clocked(search, time.thread_time)
                    samples[f"tantivy{top}"], samples[f"tantivy{top}_cpu"] = wall, thread
                for name, value in samples.items():
                    series[name][query["kind"]].append(value)
                    series[name]["all"].append(value)
    finally:
        source.close()
    return {name: dict(kinds) for name, kinds in series.items()}


def kb_size_mb(kb: Path) -> float:
    """Every file of the knowledge base on disk (database, WAL, engine files), lock files aside."""
    files = (p for p in kb.rglob("*") if p.is_file() and not p.name.endswith(".lock"))
    return sum(p.stat().st_size for p in files) / 1e6


def print_indexing(figures: dict[str, float]) -> None:
    chunks, size = figures["chunks"], figures["kb_mb"]
    print(
        "| chunks | wall s | CPU s | chunks per CPU-s | peak RSS MB | written MB (rusage / "
        "proc) | knowledge base MB | written / size |\n| --- | --- | --- | --- | --- | --- "
        "| --- | --- |\n"
        f"| {chunks:,.0f} | {figures['wall_s']:,.0f} | {figures['cpu_s']:,.1f} "
        f"| {chunks / figures['cpu_s']:,.0f} | {figures['peak_rss_mb']:,.0f} "
        f"| {figures['written_mb_rusage']:,.0f} / {figures['written_mb_proc']:,.0f} "
        f"| {size:,.0f} | {figures['written_mb_rusage'] / size:.2f}x |",
        flush=True,
    )


def print_queries(series: dict[str, dict[str, list[float]]], load: float) -> None:
    empty = sum(series["empty"]["all"])
    print(f"\nqueries (load average {load:.2f} at the end; {empty:.0f} with no reference), ms:")
    print(
        "| kind | n | retrieve p50 / p95 wall | retrieve p50 / p95 CPU "
        "| candidate p50 / p95 wall | candidate p50 / p95 CPU | candidate share of retrieve "
        "| tantivy top 10 p50 / p95 CPU | tantivy top 50 p50 / p95 CPU "
        "| candidate CPU p50 / tantivy top 50 |"
    )
    print("| --- " * 10 + "|")
    for kind in KINDS:
        r = series["retrieve"].get(kind, [])
        if not r:
            continue

        def pair(name: str, kind: str = kind) -> str:
            values = series[name][kind]
            return f"{percentile(values, 50):.2f} / {percentile(values, 95):.2f}"

        c, c_cpu = series["candidate"][kind], series["candidate_cpu"][kind]
        t50 = percentile(series["tantivy50_cpu"][kind], 50)
        share = f"{sum(c) / sum(r):.0%}" if any(c) else "n/a"
        ratio = f"{percentile(c_cpu, 50) / t50:.1f}x" if any(c) and t50 > 0 else "n/a"
        print(
            f"| {kind} | {len(r)} | {pair('retrieve')} | {pair('retrieve_cpu')} "
            f"| {pair('candidate')} | {pair('candidate_cpu')} | {share} "
            f"| {pair('tantivy10_cpu')} | {pair('tantivy50_cpu')} | {ratio} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, required=True, help="corpus size in chunks")
    parser.add_argument("--corpus", type=Path, required=True, help="records and queries folder")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder of this run")
    parser.add_argument("--label", default="", help="a name for the run (before, after...)")
    parser.add_argument("--skip-index", action="store_true", help="reuse WORK/kb")
    parser.add_argument("--candidate", default=DEFAULT_CANDIDATE, help="MODULE:ATTR.PATH")
    parser.add_argument("--no-candidate", action="store_true")
    parser.add_argument("--queries", type=int, default=200, help="at most this many queries")
    args = parser.parse_args()
    if not 1 <= args.chunks <= MAX_CHUNKS:
        parser.error(f"--chunks must be between 1 and {MAX_CHUNKS:,}")
    candidate = None if args.no_candidate else args.candidate
    if candidate is not None:
        resolve(candidate)  # fail before indexing, not after
    records, queries_file = corpus_files(args.corpus, args.chunks)
    queries = [json.loads(line) for line in queries_file.read_text().splitlines() if line]
    queries = queries[: args.queries]
    args.work.mkdir(parents=True, exist_ok=True)
    kb = args.work / "kb"
    result: dict[str, Any] = {
        "label": args.label,
        "commit": git_commit(),
        "code": str(Path(importlib.import_module("agentic_retrieval").__file__ or "").parent),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "records": str(records),
        "records_mb": records.stat().st_size / 1e6,
    }
    print(
        f"{args.label or 'run'}: commit {result['commit']} (code {result['code']}); "
        f"{result['started']}; load average {os.getloadavg()[0]:.2f}; records {records.name} "
        f"({result['records_mb']:,.0f} MB)",
        flush=True,
    )
    if not args.skip_index:
        figures = index(records, kb)
        figures["kb_mb"] = kb_size_mb(kb)
        figures["load_after"] = os.getloadavg()[0]
        result["index"] = figures
        print(f"\nindexing (load average {figures['load_after']:.2f} at the end):")
        print_indexing(figures)
    reference = build_tantivy(kb / "wiki.sqlite", args.work / "tantivy", threads=1)
    result["reference_build"] = reference
    print(
        f"\nreference: tantivy over the same {reference['docs']:,} chunks, built in "
        f"{reference['cpu_s']:.0f} s CPU, {reference['disk_mb']:,.0f} MB",
        flush=True,
    )
    engine = TantivyEngine(args.work / "tantivy")
    series = asyncio.run(run_queries(kb / "wiki.sqlite", engine, queries, candidate))
    load = os.getloadavg()[0]
    result["queries"] = series
    result["load_after_queries"] = load
    print_queries(series, load)
    (args.work / "result.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
