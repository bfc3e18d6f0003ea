"""Issue 21: approximate nearest-neighbour search for hybrid retrieval at up to 1M vectors.

Vectors: ``--real`` chunks of the benchmark corpus embedded with the real all-MiniLM-L6-v2
(384 dimensions; bf16 autocast, cosine 0.99998 to fp32, to save time), then ``--size``
vectors synthesized from them, because embedding 1M chunks takes about a day of CPU here:
each synthetic vector mixes two real ones (``0.75 a + 0.25 b``, ``b`` drawn among ``a``'s
20 nearest real neighbours) plus isotropic Gaussian noise, normalized. The queries are the
benchmark's 200 queries embedded with the same model. The script prints how close each
query's neighbours are in the real subset and in the synthetic set, to show how realistic
the neighbourhoods are.

For each library (one at a time, memory freed in between): build time, memory, recall@10
against exact search (numpy, what the store does today), single-query latency on one thread
at the smallest search breadth reaching recall 0.95, incremental add and delete, and filtered
search ("filters before top-k") at 10% and 1% of the vectors allowed: the library's own
pre-filter where it has one (faiss ``IDSelectorBitmap`` inside HNSW, hnswlib's filter
callback), else exact search over the allowed subset.

    .venv/bin/python benchmarks/bench_scale_ann.py --db WORK/kb/wiki.sqlite \\
        --queries queries.jsonl --work /work/scratch/scale21/ann --size 1000000
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

DIM = 384
K = 10
TARGET_RECALL = 0.95


def percentile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def embed(texts: list[str]) -> np.ndarray:
    import torch

    from agentic_retrieval.embeddings import _load_model

    torch.set_num_threads(2)
    model = _load_model("cpu")
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        vectors = model.encode(texts, batch_size=32, convert_to_numpy=False)
    out = torch.stack([v.float() for v in vectors]).numpy()
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def real_vectors(db: Path, queries: Path, count: int, work: Path) -> tuple[np.ndarray, np.ndarray]:
    cache = work / f"real_{count}.npy"
    qcache = work / "queries.npy"
    if cache.exists() and qcache.exists():
        return np.load(cache), np.load(qcache)
    conn = sqlite3.connect(db)
    total = conn.execute("SELECT max(rid) FROM chunks").fetchone()[0]
    rids = sorted(random.Random(21).sample(range(1, total + 1), count))
    texts = []
    for start in range(0, len(rids), 500):
        part = rids[start : start + 500]
        rows = conn.execute(
            f"SELECT title, content FROM chunks WHERE rid IN ({','.join('?' * len(part))})", part
        )
        texts += [f"{t}\n{c}" if t else c for t, c in rows]
    conn.close()
    started = time.perf_counter()
    vectors = embed(texts)
    query_texts = [json.loads(line)["text"] for line in queries.read_text().splitlines() if line]
    query_vectors = embed(query_texts)
    print(
        f"embedded {len(texts)} chunks and {len(query_texts)} queries in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    np.save(cache, vectors)
    np.save(qcache, query_vectors)
    return vectors, query_vectors


def synthesize(
    real: np.ndarray, size: int, noise: float, seed: int = 21, shape: str = "pca"
) -> np.ndarray:
    """Mixtures of real vectors plus noise.

    ``shape="pca"`` draws the noise in the real vectors' own principal directions, scaled by
    their spread (the embedding's anisotropy, hence its low intrinsic dimension, is kept);
    ``"iso"`` draws isotropic noise, which flattens every neighbourhood (a much harder and
    less realistic set: no library reached recall 0.95 at 200k on it).
    """
    rng = np.random.default_rng(seed)
    similarity = real @ real.T
    neighbours = np.argsort(-similarity, axis=1)[:, 1:21]
    centred = real - real.mean(axis=0)
    _, spread, basis = np.linalg.svd(centred, full_matrices=False)
    scale = spread / np.sqrt(len(real))  # standard deviation along each principal direction
    out = np.empty((size, DIM), dtype=np.float32)
    for start in range(0, size, 100_000):
        n = min(100_000, size - start)
        a = rng.integers(0, len(real), n)
        b = neighbours[a, rng.integers(0, neighbours.shape[1], n)]
        mixed = 0.75 * real[a] + 0.25 * real[b]
        if shape == "pca":
            z = rng.normal(0, 1, (n, len(scale))).astype(np.float32) * scale.astype(np.float32)
            mixed += noise * (z @ basis.astype(np.float32))
        else:
            mixed += rng.normal(0, noise / np.sqrt(DIM), (n, DIM)).astype(np.float32)
        out[start : start + n] = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
    return out


def exact(
    vectors: np.ndarray, queries: np.ndarray, allowed: np.ndarray | None = None
) -> np.ndarray:
    out = np.empty((len(queries), K), dtype=np.int64)
    for start in range(0, len(queries), 20):
        sims = queries[start : start + 20] @ vectors.T
        if allowed is not None:
            sims[:, ~allowed] = -np.inf
        best = np.argpartition(-sims, K, axis=1)[:, :K]
        order = np.take_along_axis(sims, best, axis=1).argsort(axis=1)[:, ::-1]
        out[start : start + 20] = np.take_along_axis(best, order, axis=1)
    return out


def recall(found: list[np.ndarray], truth: np.ndarray) -> float:
    return float(np.mean([len(set(f[:K]) & set(t)) / K for f, t in zip(found, truth, strict=True)]))


def timed_queries(search: Callable[[np.ndarray], np.ndarray], queries: np.ndarray):
    found, ms = [], []
    for q in queries:
        started = time.perf_counter()
        found.append(np.asarray(search(q)))
        ms.append((time.perf_counter() - started) * 1000)
    return found, ms


# ---------------------------------------------------------------- libraries


class Usearch:
    name = "usearch HNSW"

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.name = f"usearch HNSW ({dtype}, M=16)"

    def build(self, vectors: np.ndarray) -> None:
        from usearch.index import Index

        self.index = Index(
            ndim=DIM, metric="cos", dtype=self.dtype, connectivity=16, expansion_add=128
        )
        self.index.add(np.arange(len(vectors)), vectors, threads=2)

    def set_breadth(self, ef: int) -> None:
        self.index.expansion_search = ef

    def search(self, q: np.ndarray) -> np.ndarray:
        return self.index.search(q, K, threads=1).keys

    def memory_mb(self) -> float:
        return self.index.memory_usage / 1e6

    def add_delete(self, vectors: np.ndarray, start: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        self.index.add(np.arange(start, start + len(vectors)), vectors, threads=1)
        t1 = time.perf_counter()
        self.index.remove(np.arange(start, start + len(vectors)))
        return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000

    filtered = None


class Faiss:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"faiss {kind} (M=32)"

    def build(self, vectors: np.ndarray) -> None:
        import faiss

        faiss.omp_set_num_threads(2)
        if self.kind == "HNSWFlat":
            self.index = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT)
        else:
            self.index = faiss.IndexHNSWSQ(
                DIM, faiss.ScalarQuantizer.QT_8bit, 32, faiss.METRIC_INNER_PRODUCT
            )
            self.index.train(vectors[:100_000])
        self.index.hnsw.efConstruction = 128
        self.index.add(vectors)
        faiss.omp_set_num_threads(1)

    def set_breadth(self, ef: int) -> None:
        self.ef = ef
        self.index.hnsw.efSearch = ef

    def search(self, q: np.ndarray) -> np.ndarray:
        return self.index.search(q[None, :], K)[1][0]

    def memory_mb(self) -> float:
        import faiss

        return len(faiss.serialize_index(self.index)) / 1e6

    def add_delete(self, vectors: np.ndarray, start: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        self.index.add(vectors)
        # HNSW in faiss cannot remove: deleted ids are excluded by the same selector as filters
        return (time.perf_counter() - t0) * 1000, float("nan")

    def filtered(self, allowed: np.ndarray, ef: int) -> Callable[[np.ndarray], np.ndarray]:
        import faiss

        bits = np.packbits(allowed, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
        params = faiss.SearchParametersHNSW(sel=selector, efSearch=ef)
        self._keep = (bits, selector, params)  # the bitmap must outlive the searches

        def search(q: np.ndarray) -> np.ndarray:
            labels = self.index.search(q[None, :], K, params=params)[1][0]
            return labels[labels >= 0]

        return search


class Hnswlib:
    name = "hnswlib HNSW (M=16; sdist build, no wheel)"

    def build(self, vectors: np.ndarray) -> None:
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=DIM)
        self.index.init_index(
            max_elements=len(vectors) + 2000, ef_construction=128, M=16, allow_replace_deleted=True
        )
        self.index.add_items(vectors, np.arange(len(vectors)), num_threads=2)

    def set_breadth(self, ef: int) -> None:
        self.index.set_ef(ef)

    def search(self, q: np.ndarray) -> np.ndarray:
        return self.index.knn_query(q, K, num_threads=1)[0][0]

    def memory_mb(self) -> float:
        return self.index.get_current_count() * (DIM * 4 + 16 * 2 * 4 + 16) / 1e6

    def add_delete(self, vectors: np.ndarray, start: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        labels = np.arange(start, start + len(vectors))
        self.index.add_items(vectors, labels, num_threads=1)
        t1 = time.perf_counter()
        for label in labels:
            self.index.mark_deleted(int(label))
        return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000

    def filtered(self, allowed: np.ndarray, ef: int) -> Callable[[np.ndarray], np.ndarray]:
        self.index.set_ef(ef)

        def search(q: np.ndarray) -> np.ndarray:
            return self.index.knn_query(
                q, K, num_threads=1, filter=lambda label: bool(allowed[label])
            )[0][0]

        return search


def sqlite_vec(vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray) -> None:
    import sqlite_vec as sv

    conn = sqlite3.connect(":memory:")
    if not hasattr(conn, "enable_load_extension"):
        # CPython built without loadable-extension support (as this machine's pyenv 3.11.7):
        # sqlite-vec cannot be loaded at all
        print(
            "| sqlite-vec | not loadable: this Python's sqlite3 has no enable_load_extension "
            "| - | - | - | - | - | - |"
        )
        return
    conn.enable_load_extension(True)
    sv.load(conn)
    conn.execute(f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{DIM}])")
    started = time.perf_counter()
    for start in range(0, len(vectors), 10_000):
        conn.executemany(
            "INSERT INTO v(rowid, embedding) VALUES (?, ?)",
            [
                (start + i + 1, row.tobytes())
                for i, row in enumerate(vectors[start : start + 10_000])
            ],
        )
    build = time.perf_counter() - started
    found, ms = timed_queries(
        lambda q: np.asarray(
            [
                r[0] - 1
                for r in conn.execute(
                    "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ? ORDER BY distance",
                    (q.tobytes(), K),
                )
            ]
        ),
        queries[:50],
    )
    print(
        f"| sqlite-vec vec0 (exact scan, float32) | {build:.0f} s insert | - | - | "
        f"{recall(found, truth[:50]):.3f} | {percentile(ms, 50):.1f} / {percentile(ms, 95):.1f}"
        f" | - | - |",
        flush=True,
    )
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--real", type=int, default=1000)
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--noise-shape", choices=("pca", "iso"), default="pca")
    parser.add_argument(
        "--libs", default="usearch-f32,usearch-i8,faiss-flat,faiss-sq8,hnswlib,sqlite-vec,exact"
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    # one BLAS thread: a single query is timed on one core (idle BLAS threads spinning on a
    # shared 2-core machine made a 20k-vector product take 30 ms)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    libs = args.libs.split(",")
    real, queries = real_vectors(args.db, args.queries, args.real, args.work)
    vectors = synthesize(real, args.size, args.noise, shape=args.noise_shape)
    print(
        f"{len(real)} real vectors, {len(vectors):,} synthetic ({vectors.nbytes / 1e6:,.0f} MB "
        f"float32); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    real_top = np.sort(queries @ real.T, axis=1)[:, -K:]
    synth_top = np.sort(queries @ vectors[:200_000].T, axis=1)[:, -K:]
    print(
        f"queries' top-10 cosine: real subset mean {real_top.mean():.3f} (top-1 "
        f"{real_top[:, -1].mean():.3f}); synthetic (first 200k) mean {synth_top.mean():.3f} "
        f"(top-1 {synth_top[:, -1].mean():.3f})"
    )
    started = time.perf_counter()
    truth = exact(vectors, queries)
    exact_ms = (time.perf_counter() - started) * 1000 / len(queries)
    rng = np.random.default_rng(5)
    allowed = {share: rng.random(len(vectors)) < share for share in (0.10, 0.01)}
    truth_filtered = {share: exact(vectors, queries, mask) for share, mask in allowed.items()}
    print(
        "\n| library | build | memory | breadth (ef) for recall >= 0.95 | recall@10 "
        "| query p50 / p95 ms | add 1,000 / delete 1,000 ms | filtered 10% / 1%: recall, p50 ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    if "exact" in libs:

        def single(q: np.ndarray) -> np.ndarray:
            sims = vectors @ q
            best = np.argpartition(-sims, K)[:K]
            return best[np.argsort(-sims[best])]

        found, ms = timed_queries(single, queries[:50])
        cells = []
        for share, mask in allowed.items():
            subset = np.flatnonzero(mask)
            sub = vectors[subset]  # materialised once per filter, as a cached bitmap would be

            def over_subset(q: np.ndarray, sub=sub, subset=subset) -> np.ndarray:
                sims = sub @ q
                best = np.argpartition(-sims, K)[:K]
                return subset[best[np.argsort(-sims[best])]]

            f, m = timed_queries(over_subset, queries[:50])
            cells.append(f"{recall(f, truth_filtered[share][:50]):.2f}, {percentile(m, 50):.1f}")
        print(
            f"| exact numpy (today's store; one thread: {exact_ms:.0f} ms/query batched) | - "
            f"| {vectors.nbytes / 1e6:,.0f} MB | - | {recall(found, truth[:50]):.3f} "
            f"| {percentile(ms, 50):.1f} / {percentile(ms, 95):.1f} | - | exact over the "
            f"allowed subset: {' / '.join(cells)} |",
            flush=True,
        )
    if "sqlite-vec" in libs:
        sqlite_vec(vectors, queries, truth)
    candidates: dict[str, Any] = {
        "usearch-f32": lambda: Usearch("f32"),
        "usearch-i8": lambda: Usearch("i8"),
        "faiss-flat": lambda: Faiss("HNSWFlat"),
        "faiss-sq8": lambda: Faiss("HNSWSQ8"),
        "hnswlib": Hnswlib,
    }
    extra = synthesize(real, 1000, args.noise, seed=99, shape=args.noise_shape)
    for key, make in candidates.items():
        if key not in libs:
            continue
        module = {"usearch": "usearch", "faiss": "faiss", "hnswlib": "hnswlib"}[key.split("-")[0]]
        if importlib.util.find_spec(module) is None:
            print(f"| {key} | not installed (hnswlib has no wheel: pip builds it from source) |")
            continue
        lib = make()
        gc.collect()
        before = rss_mb()
        started = time.perf_counter()
        lib.build(vectors)
        build_s = time.perf_counter() - started
        grown = rss_mb() - before
        chosen, found, ms = None, [], []
        for ef in (16, 32, 64, 128, 256, 512):
            lib.set_breadth(ef)
            found, ms = timed_queries(lib.search, queries)
            if recall(found, truth) >= TARGET_RECALL:
                chosen = ef
                break
        cells = []
        for share, mask in allowed.items():
            ef = chosen or 512
            if getattr(lib, "filtered", None) is not None:
                search = lib.filtered(mask, max(ef, int(ef / share**0.5)))
                f, m = timed_queries(search, queries[:50])
                cells.append(
                    f"{recall(f, truth_filtered[share][:50]):.2f}, {percentile(m, 50):.1f}"
                )
            else:
                cells.append("no pre-filter in the Python API")
        add_ms, delete_ms = lib.add_delete(extra, len(vectors) + 10)
        print(
            f"| {lib.name} | {build_s:.0f} s | {lib.memory_mb():,.0f} MB index (RSS +{grown:,.0f}"
            f" MB) | {chosen or '> 512'} | {recall(found, truth):.3f} | {percentile(ms, 50):.2f} "
            f"/ {percentile(ms, 95):.2f} | {add_ms:.0f} / {delete_ms:.0f} | {' / '.join(cells)} |",
            flush=True,
        )
        del lib
        gc.collect()
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
