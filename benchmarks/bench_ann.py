"""Issue 21: the store's HNSW index (faiss) against exact search, on real embeddings.

Vector sets (all embedded by the local model, bf16, as the store embeds them):

- ``wiki``: ``--chunks`` chunks sampled from a store of the scale corpus (``--db``, e.g. the
  120k store of ``bench_scale_baseline.py``) and the 200 scale queries (``--queries``),
  embedded once and cached in ``--work``;
- ``cranfield``: the 1,400 Cranfield abstracts and 225 queries;
- ``wiki x4`` (``--scaled``): the wiki vectors plus three perturbed copies of each (Gaussian
  noise of the real vectors' per-dimension spread, renormalised): a 4x larger set whose
  neighbourhoods stay those of real text.

For each set, :class:`VectorRows` (the store's own class) is built with its graph forced on
(whatever the size), and every query is answered exactly and through the graph:

- recall@10 (share of the exact top 10 the graph returns) at several ``efSearch``;
- filtered: random allowed subsets of 50%, 10% and 3% of the rows (as a filter or permission
  trimming gives the store), recall@10 against exact search over the subset;
- CPU milliseconds per query (median) of exact and graph search, build time, the graph's
  bytes per vector and the process's RSS growth.

    nice -n 10 .venv/bin/python benchmarks/bench_ann.py --db WIKI.sqlite \\
        --queries /work/scratch/scale21/queries.jsonl --work /work/scratch/vec21/ann
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from agentic_retrieval.sources.local.store import ann
from agentic_retrieval.sources.local.store.ann import VectorRows

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[0] / ".." / "shared"


def embedder():
    import torch

    from agentic_retrieval.embeddings import local_embeddings

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    return local_embeddings()


def cached(path: Path, texts: list[str]) -> np.ndarray:
    if path.exists():
        return np.load(path)
    model = embedder()
    out = []
    started = time.perf_counter()
    for start in range(0, len(texts), 256):
        out.append(np.asarray(model.embed_documents(texts[start : start + 256]), dtype=np.float32))
        done = start + len(out[-1])
        print(f"  embedded {done}/{len(texts)} ({time.perf_counter() - started:.0f} s)", flush=True)
    vectors = np.vstack(out)
    np.save(path, vectors)
    return vectors


def wiki_set(db: Path, queries: Path, count: int, work: Path) -> tuple[np.ndarray, np.ndarray]:
    conn = sqlite3.connect(db)
    total = conn.execute("SELECT max(rid) FROM chunks").fetchone()[0]
    rids = sorted(random.Random(21).sample(range(1, total + 1), count))
    texts = []
    for start in range(0, len(rids), 500):
        part = rids[start : start + 500]
        rows = conn.execute(
            f"SELECT title, content FROM chunks WHERE rid IN ({','.join('?' * len(part))})", part
        ).fetchall()
        texts += [f"{t}\n{c}" if t else c for t, c in rows]
    conn.close()
    docs = cached(work / f"wiki_{count}.npy", texts)
    asked = [json.loads(line)["text"] for line in queries.read_text().splitlines() if line.strip()]
    return docs, cached(work / "wiki_queries.npy", asked)


def cranfield_set(work: Path) -> tuple[np.ndarray, np.ndarray] | None:
    root = SHARED / "collections" / "cranfield"
    if not (root / "corpus.jsonl").is_file():
        return None
    rows = [json.loads(line) for line in (root / "corpus.jsonl").read_text().splitlines()]
    texts = [f"{r.get('title', '')}\n{r.get('text', '')}".strip() for r in rows]
    queries = [
        json.loads(line)["text"] for line in (root / "queries.jsonl").read_text().splitlines()
    ]
    return cached(work / "cranfield.npy", texts), cached(work / "cranfield_queries.npy", queries)


def scaled(docs: np.ndarray, copies: int) -> np.ndarray:
    rng = np.random.default_rng(21)
    spread = docs.std(axis=0) * 0.35
    out = [docs]
    for _ in range(copies - 1):
        noisy = docs + rng.normal(size=docs.shape).astype(np.float32) * spread
        out.append(ann.normalised(noisy))
    return np.vstack(out)


def cpu_ms(function, *args):
    started = time.process_time()
    result = function(*args)
    return result, (time.process_time() - started) * 1000


def measure(name: str, docs: np.ndarray, queries: np.ndarray, efs: list[int]) -> list[str]:
    rows_out = []
    default_ef = ann.EF_SEARCH
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ann.ANN_MIN_VECTORS = 0  # the graph is forced on: recall is what is measured
    ann.EXACT_MAX_ALLOWED = 0
    exact_rows = VectorRows(docs.shape[1], use_ann=False)
    exact_rows.add(np.arange(1, len(docs) + 1), docs)
    started, cpu = time.perf_counter(), time.process_time()
    graph_rows = VectorRows(docs.shape[1], use_ann=True)
    graph_rows.add(np.arange(1, len(docs) + 1), docs)
    graph_rows.build()
    build_wall, build_cpu = time.perf_counter() - started, time.process_time() - cpu
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    graph_bytes = graph_rows.graph.ntotal * (docs.shape[1] * 4 + ann.HNSW_M * 2 * 4 * 1.05)
    print(
        f"{name}: {len(docs)} vectors, {len(queries)} queries; build {build_wall:.1f} s wall, "
        f"{build_cpu:.1f} s CPU ({1000 * build_cpu / len(docs):.2f} ms per vector); peak RSS "
        f"+{grown:.0f} MB; graph about {graph_bytes / len(docs):.0f} bytes per vector",
        flush=True,
    )
    truth = []
    exact_ms = []
    for q in queries:
        hits, ms = cpu_ms(exact_rows.search, q, 10)
        truth.append({rid for rid, _ in hits})
        exact_ms.append(ms)
    for ef in efs:
        ann.EF_SEARCH = ef
        recalls, times = [], []
        for q, want in zip(queries, truth, strict=True):
            hits, ms = cpu_ms(graph_rows._graph_search, q, 10, None, graph_rows.live)
            recalls.append(len(want & {rid for rid, _ in hits}) / 10)
            times.append(ms)
        rows_out.append(
            f"| {name} | {len(docs):,} | all | {ef} | {np.mean(recalls):.3f} | "
            f"{min(recalls):.1f} | {statistics.median(times):.2f} | "
            f"{statistics.median(exact_ms):.2f} |"
        )
        print(rows_out[-1], flush=True)
    ann.EF_SEARCH = default_ef
    rng = np.random.default_rng(7)
    for share in (0.5, 0.1, 0.03):
        allowed = np.flatnonzero(rng.random(len(docs)) < share) + 1
        recalls, times, exact_times = [], [], []
        for q in queries:
            want, ms_exact = cpu_ms(exact_rows.search, q, 10, allowed)
            got, ms = cpu_ms(graph_rows.search, q, 10, allowed)
            assert all(rid in set(allowed.tolist()) for rid, _ in got)
            recalls.append(len({r for r, _ in want} & {r for r, _ in got}) / 10)
            times.append(ms)
            exact_times.append(ms_exact)
        rows_out.append(
            f"| {name} | {len(docs):,} | {share:.0%} allowed | {ann.EF_SEARCH} x share^-1/2 | "
            f"{np.mean(recalls):.3f} | {min(recalls):.1f} | {statistics.median(times):.2f} | "
            f"{statistics.median(exact_times):.2f} |"
        )
        print(rows_out[-1], flush=True)
    return rows_out


def store_mode(args: argparse.Namespace, docs: np.ndarray, queries: np.ndarray) -> None:
    """Hybrid search through the store: a copy of ``--db`` whose every chunk gets a vector.

    The vectors are the wiki set's real ones and perturbed copies of them (as ``--scaled``),
    one per chunk; the queries are the scale queries (their text for BM25, their real
    embedding for the vectors). Exact and HNSW stores answer the same queries in one run.
    """
    import shutil

    from agentic_retrieval.sources.local import LocalStore

    copy = args.work / "hybrid.sqlite"
    if not copy.exists():
        shutil.copy(args.db, copy)
        conn = sqlite3.connect(copy)
        rids = [r for (r,) in conn.execute("SELECT rid FROM chunks ORDER BY rid")]
        vectors = scaled(docs, -(-len(rids) // len(docs)))[: len(rids)]
        started = time.perf_counter()
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('dimension', ?)",
            (str(docs.shape[1]),),
        )
        conn.executemany(
            "UPDATE chunks SET vector = ? WHERE rid = ?",
            ((vectors[i].tobytes(), rid) for i, rid in enumerate(rids)),
        )
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        conn.commit()
        conn.close()
        print(f"vectors written to {len(rids)} chunks in {time.perf_counter() - started:.0f} s")
    texts = [
        json.loads(line)["text"] for line in args.queries.read_text().splitlines() if line.strip()
    ]
    saved = Path(f"{copy}-vectors")
    saved.unlink(missing_ok=True)
    stores = {}
    for mode in ("exact", "hnsw"):
        ann.ANN_MIN_VECTORS = 10**12 if mode == "exact" else 50_000
        ann.EXACT_MAX_ALLOWED = 20_000
        ann.EF_SEARCH = args.ef
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        store = LocalStore(copy)
        started, cpu = time.perf_counter(), time.process_time()
        store.search(texts[0], top=10, query_vector=queries[0].tolist())
        if mode == "hnsw":
            store.refresh_vectors()
        what = "reads every vector" + (", builds and saves the graph" if mode == "hnsw" else "")
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
        print(
            f"{mode}: first search ({what}) {time.perf_counter() - started:.1f} s wall, "
            f"{time.process_time() - cpu:.1f} s CPU; peak RSS +{grown:.0f} MB; "
            f"{store._vectors.state}",
            flush=True,
        )
        stores[mode] = store
    if saved.exists():
        started = time.perf_counter()
        reopened = LocalStore(copy)
        reopened.search(texts[0], top=10, query_vector=queries[0].tolist())
        print(
            f"saved graph {saved.stat().st_size / 1e6:.0f} MB; a new store object loads it "
            f"and answers in {time.perf_counter() - started:.1f} s ({reopened._vectors.state})"
        )
        reopened.close()
    timings: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": []} for m in stores}
    overlap = []
    for _ in range(args.rounds):
        for text, query in zip(texts, queries, strict=True):
            found = {}
            for mode, store in stores.items():
                ann.ANN_MIN_VECTORS = 10**12 if mode == "exact" else 50_000
                started, cpu = time.perf_counter(), time.process_time()
                hits = store.search(text, top=10, query_vector=query.tolist())
                timings[mode]["wall"].append((time.perf_counter() - started) * 1000)
                timings[mode]["cpu"].append((time.process_time() - cpu) * 1000)
                found[mode] = [h.id for h in hits]
            overlap.append(
                len(set(found["exact"]) & set(found["hnsw"])) / max(1, len(found["exact"]))
            )
    print(
        f"\nload average {os.getloadavg()[0]:.2f}; "
        f"top-10 overlap hybrid HNSW vs exact {np.mean(overlap):.3f}"
    )
    print("| store search, hybrid, top 10 | wall ms p50 | p95 | CPU ms p50 | p95 |")
    print("| --- | --- | --- | --- | --- |")
    for mode, values in timings.items():
        wall, used = sorted(values["wall"]), sorted(values["cpu"])
        p95 = int(0.95 * len(wall))
        print(
            f"| {mode} | {statistics.median(wall):.1f} | {wall[p95]:.1f} "
            f"| {statistics.median(used):.1f} | {used[p95]:.1f} |"
        )
    for store in stores.values():
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path)
    parser.add_argument("--queries", type=Path)
    parser.add_argument("--chunks", type=int, default=30_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--efs", default="32,64,128,256")
    parser.add_argument("--scaled", type=int, default=0, help="copies for the scaled set")
    parser.add_argument("--sets", default="cranfield,wiki,scaled", help="which sets to measure")
    parser.add_argument("--embed-only", action="store_true")
    parser.add_argument("--store", action="store_true", help="hybrid search through a store")
    parser.add_argument("--ef", type=int, default=ann.EF_SEARCH)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-queries", type=int, default=0, help="use only the first N")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    import faiss

    faiss.omp_set_num_threads(1)
    print(f"faiss {faiss.__version__}; load average {os.getloadavg()[0]:.2f}", flush=True)
    sets = {}
    cranfield = cranfield_set(args.work)
    if cranfield is not None:
        sets["cranfield"] = cranfield
    if args.db and args.queries:
        sets["wiki"] = wiki_set(args.db, args.queries, args.chunks, args.work)
        if args.scaled:
            sets[f"wiki x{args.scaled}"] = (scaled(sets["wiki"][0], args.scaled), sets["wiki"][1])
    if args.embed_only:
        return 0
    if args.store:
        store_mode(args, *sets["wiki"])
        return 0
    efs = [int(e) for e in args.efs.split(",")]
    table = []
    if args.max_queries:
        sets = {name: (docs, asked[: args.max_queries]) for name, (docs, asked) in sets.items()}
    wanted = args.sets.split(",")
    for name, (docs, queries) in sets.items():
        if name.split(" ")[0] in wanted or (" x" in name and "scaled" in wanted):
            table += measure(name, docs, queries, efs)
    print(f"\nload average {os.getloadavg()[0]:.2f}\n")
    print(
        "| set | vectors | searched | efSearch | recall@10 | worst query | graph CPU ms p50 "
        "| exact CPU ms p50 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
