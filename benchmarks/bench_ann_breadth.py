"""Issue 21: how wide the HNSW graph must search (``efSearch``) as a store grows, on real vectors.

A graph searched with a fixed breadth finds less of the exact top 10 as it holds more vectors
(the store's 512: recall@10 0.913 at 120k and 0.826 at 1M on composed vectors, see
"Hybrid retrieve at 1M chunks"). This script measures, on chunks embedded for real, the
breadth each size needs, and checks the breadth the store now uses (``ann.ef_search``).

1. **Vectors**: the first ``--count`` chunks of ``--db`` (a store of the wiki-like corpus,
   ``corpus_wiki_like.py``; the 1M store's first chunks are the 120k store's) embedded with
   the bundled model as the indexer embeds them (title, newline, content), and the
   benchmark's queries embedded as a search embeds them. Kept in ``--work`` in parts of
   4,096 (the run resumes where it stopped). ``--precision int8`` (the ``openvino`` extra)
   embeds ~2.8 times faster per core than fp32 for the same ranking (see "Embedding
   precision"): 200k chunks take ~55 minutes on this machine's two cores.
2. **Sweep**: for each ``--sizes`` prefix, the store's own graph (``VectorRows.build``: HNSW,
   M 32, efConstruction 128), the exact top 10 of every query (one product), and the graph's
   top 10 of a 50-deep search (the depth the store's fusion reads) at each breadth. The
   queries are split in two halves by position: **even positions calibrate** (the breadth
   each size needs for recall@10 >= ``--target``, and a power law through those), **odd
   positions are held out**.
   ``--composed CACHE`` instead composes each chunk's vector from real vectors of its parts
   (``bench_scale_hybrid.ComposedEmbeddings``, the parts embedded once into ``CACHE``):
   what the 1M hybrid benchmark indexes, where embedding a million chunks for real is out
   of reach. Composed sets are more concentrated than real ones (many chunks share
   sentences): a graph needs a wider search on them, as on a corpus of templated documents.
3. **The store's rule**: the held-out half (and, for reference, the calibration half)
   searched through ``VectorRows.search`` exactly as a store search runs, at the breadth
   ``ann.ef_search`` gives that size, with CPU per query.

    W=/work/scratch/$USER/breadth
    .venv/bin/python benchmarks/bench_ann_breadth.py \\
        --db /work/scratch/ingest21/lex_1000000/kb/wiki.sqlite \\
        --queries /work/scratch/scale21/corpus/queries.jsonl --work $W \\
        --count 200704 --sizes 25000,50000,100000,200704 --precision int8

    .venv/bin/python benchmarks/bench_ann_breadth.py --db ... --queries ... --work $W \
        --count 1000003 --sizes 120000,500000,1000003 --composed $W/parts-cache \
        --corpus /work/scratch/scale21/corpus

Results are printed as markdown and written to ``WORK/result-EFC.json`` (composed:
``result-composed-EFC.json``; EFC the graphs' efConstruction). Graphs are kept in ``WORK``.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentic_retrieval.sources.local.store import ann

K = 10
DEPTH = 50
PART = 4_096
BREADTHS = (128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)


def chunk_texts(db: Path, count: int) -> list[str]:
    """The first ``count`` chunks' texts as the indexer embeds them."""
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT title, content FROM chunks ORDER BY rid LIMIT ?", (count,)
        ).fetchall()
    finally:
        conn.close()
    return [f"{title}\n{content}" if title else content for title, content in rows]


def real_vectors(
    db: Path, queries: Path, count: int, work: Path, precision: str
) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' and the queries' vectors, embedded once (resumable, in ``work``)."""
    from agentic_retrieval.embeddings import LocalEmbeddings

    parts = work / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    texts = chunk_texts(db, count)
    embeddings: LocalEmbeddings | None = None
    query_file = work / "queries.npy"
    if not query_file.exists():
        embeddings = LocalEmbeddings(precision=precision)  # type: ignore[arg-type]
        lines = queries.read_text().splitlines()
        asked = [json.loads(line)["text"] for line in lines if line.strip()]
        np.save(query_file, np.asarray([embeddings.embed_query(q) for q in asked], np.float32))
    started, cpu = time.perf_counter(), time.process_time()
    for number, start in enumerate(range(0, len(texts), PART)):
        target = parts / f"{number:04d}.npy"
        if target.exists():
            continue
        embeddings = embeddings or LocalEmbeddings(precision=precision)  # type: ignore[arg-type]
        made = np.asarray(embeddings.embed_documents(texts[start : start + PART]), np.float32)
        temporary = parts / f"{number:04d}.tmp.npy"
        np.save(temporary, made)
        temporary.rename(target)
        print(
            f"embedded {start + len(made):,} chunks: {time.perf_counter() - started:.0f} s "
            f"wall, {time.process_time() - cpu:.0f} s CPU",
            flush=True,
        )
    count = len(texts)
    stored = [np.load(parts / f"{n:04d}.npy") for n in range(math.ceil(count / PART))]
    asked = np.load(query_file)
    return (np.vstack(stored)[:count] if stored else asked[:0]), asked


def composed_vectors(db: Path, count: int, cache: Path, corpus: Path) -> np.ndarray:
    """The chunks' vectors composed from real vectors of their parts (see ``--composed``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_scale_hybrid import VARIANTS, ComposedEmbeddings, prepare

    prepare(corpus, cache)
    composer = ComposedEmbeddings(cache, corpus, **VARIANTS["names"])
    texts = chunk_texts(db, count)
    out = np.empty((len(texts), composer.vectors["pool"].shape[1]), dtype=np.float32)
    for start in range(0, len(texts), PART):
        out[start : start + PART] = composer.embed_documents(texts[start : start + PART])
    return out


def fresh_queries(corpus: Path, seed: int, known: set[str]) -> list[str]:
    """Queries the generator draws with another seed (of the same kinds), minus ``known``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import corpus_wiki_like as wiki

    pool = (corpus / "sentences.txt").read_text(encoding="utf-8").splitlines()
    records = sorted(corpus.glob("records_*.jsonl"))[0]
    with records.open(encoding="utf-8") as handle:
        lines = zip(range(wiki.QUERY_SOURCE_RECORDS), handle, strict=False)
        first = [json.loads(line) for _, line in lines]
    wiki.SEED = seed - 2  # queries() draws from SEED + 2
    drawn = [q["text"] for q in wiki.queries(pool, first)]
    return [text for text in dict.fromkeys(drawn) if text not in known]


def fresh_vectors(args: argparse.Namespace) -> np.ndarray | None:
    """The fresh queries' vectors (``--fresh-seed``), embedded once."""
    if args.fresh_seed is None:
        return None
    target = args.work / f"fresh-{args.fresh_seed}.npy"
    if not target.exists():
        from agentic_retrieval.embeddings import LocalEmbeddings

        lines = args.queries.read_text().splitlines()
        known = {json.loads(line)["text"] for line in lines if line.strip()}
        texts = fresh_queries(args.corpus, args.fresh_seed, known)
        embeddings = LocalEmbeddings(precision=args.precision)
        np.save(target, np.asarray([embeddings.embed_query(t) for t in texts], np.float32))
    return ann.normalised(np.load(target))


def exact_top(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    scores = queries @ vectors.T
    best = np.argpartition(-scores, K, axis=1)[:, :K]
    return best


def recall(found: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Each query's recall@10 (``found``: rows of ranked ids, -1 for none)."""
    return np.asarray(
        [len(set(f[:K].tolist()) & set(t.tolist())) / K for f, t in zip(found, truth, strict=True)]
    )


def sweep(rows: ann.VectorRows, queries: np.ndarray, truth: np.ndarray) -> dict[int, Any]:
    import faiss

    out: dict[int, Any] = {}
    for breadth in BREADTHS:
        params = faiss.SearchParametersHNSW(efSearch=breadth)
        found, cpu = [], []
        for query in queries:
            start = time.process_time()
            _, ids = rows.graph.search(query.reshape(1, -1), DEPTH, params=params)
            cpu.append(time.process_time() - start)
            found.append(ids[0])
        hits = recall(np.asarray(found), truth)
        out[breadth] = {
            "calibrate": float(hits[0::2].mean()),
            "held_out": float(hits[1::2].mean()),
            "cpu_ms_p50": 1000 * float(np.median(cpu)),
        }
    return out


def store_search(rows: ann.VectorRows, queries: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Each query through ``VectorRows.search`` (the store's path): ranked rows, CPU s."""
    found, cpu = [], []
    for query in queries:
        start = time.process_time()
        hits = rows.search(query, DEPTH)
        cpu.append(time.process_time() - start)
        found.append([rid for rid, _ in hits])  # labels are row numbers here
    return np.asarray(found), cpu


def store_rule(
    rows: ann.VectorRows, queries: np.ndarray, truth: np.ndarray, fresh: np.ndarray | None
) -> dict[str, Any]:
    """Recall and CPU of the store's search at its own breadth (and on fresh queries)."""
    found, cpu = store_search(rows, queries)
    each = recall(found, truth)
    figures: dict[str, Any] = {
        "ef_search": ann.ef_search(rows.graphed),
        "calibrate": float(each[0::2].mean()),
        "held_out": float(each[1::2].mean()),
        "held_out_worst": float(each[1::2].min()),
        "held_out_below_0.9": int((each[1::2] < 0.9).sum()),
        "cpu_ms_p50": 1000 * float(np.median(cpu)),
        "cpu_ms_p95": 1000 * float(np.percentile(cpu, 95)),
    }
    if fresh is not None:
        matrix = rows.vectors(np.arange(rows.size))
        found, _ = store_search(rows, fresh)
        figures["fresh"] = float(recall(found, exact_top(matrix, fresh)).mean())
        figures["fresh_queries"] = len(fresh)
    return figures


def fit(needed: dict[int, int]) -> tuple[float, float] | None:
    """``efSearch ~ a * size ** b`` through the breadths each size needed (least squares)."""
    if len(needed) < 2:
        return None
    sizes = np.log(np.asarray(list(needed), dtype=float))
    breadths = np.log(np.asarray(list(needed.values()), dtype=float))
    slope, intercept = np.polyfit(sizes, breadths, 1)
    return float(math.exp(intercept)), float(slope)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--count", type=int, default=200_704)
    parser.add_argument("--sizes", default="25000,50000,100000,200704")
    parser.add_argument("--precision", default="int8", choices=("int8", "bf16", "fp32"))
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--composed", type=Path, help="compose vectors (parts cached here)")
    parser.add_argument(
        "--corpus", type=Path, help="the corpus directory (with --composed or --fresh-seed)"
    )
    parser.add_argument(
        "--fresh-seed",
        type=int,
        help="also check the store's breadth on 200 queries drawn with this seed (unseen)",
    )
    parser.add_argument(
        "--ef-construction",
        type=int,
        default=ann.EF_CONSTRUCTION,
        help="build the graphs this way instead of the store's (what a change would give)",
    )
    args = parser.parse_args()
    ann.EF_CONSTRUCTION = args.ef_construction

    import faiss

    if (args.composed is not None or args.fresh_seed is not None) and args.corpus is None:
        parser.error("--composed and --fresh-seed need --corpus")
    if args.composed is not None:
        _, queries = real_vectors(args.db, args.queries, 0, args.work, args.precision)
        vectors = composed_vectors(args.db, args.count, args.composed, args.corpus)
        kind, output = "composed", args.work / f"result-composed-{args.ef_construction}.json"
    else:
        vectors, queries = real_vectors(
            args.db, args.queries, args.count, args.work, args.precision
        )
        kind = f"real ({args.precision})"
        output = args.work / f"result-{args.ef_construction}.json"
    queries = ann.normalised(queries)
    fresh = fresh_vectors(args)
    print(f"{len(vectors):,} chunk vectors, {kind}; {len(queries)} queries\n")
    result: dict[str, Any] = {"vectors": kind, "ef_construction": ann.EF_CONSTRUCTION, "sizes": {}}
    needed: dict[int, int] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        if size > len(vectors):
            print(f"skipping {size:,}: only {len(vectors):,} vectors")
            continue
        rows = ann.VectorRows(vectors.shape[1], use_ann=True)
        rows.add(np.arange(size), vectors[:size])
        faiss.omp_set_num_threads(2)
        started, cpu = time.perf_counter(), time.process_time()
        built_as = f"{ann.HNSW_M}-{ann.EF_CONSTRUCTION}"
        saved = args.work / f"graph-{kind.split(' ')[0]}-{size}-{built_as}.faiss"
        if saved.exists():  # built by an earlier run (a 1M graph takes ~1,000 s of CPU)
            rows.graph, rows._buffer = faiss.read_index(str(saved)), rows._buffer[:0]
        else:
            rows.build()
            faiss.write_index(rows.graph, str(saved))
        build = {"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu}
        faiss.omp_set_num_threads(1)  # one query, one thread, as the store searches
        truth = exact_top(vectors[:size], queries)
        by_breadth = sweep(rows, queries, truth)
        reached = [b for b in BREADTHS if by_breadth[b]["calibrate"] >= args.target]
        if reached:
            needed[size] = reached[0]
        rule = store_rule(rows, queries, truth, fresh)
        result["sizes"][size] = {"build": build, "sweep": by_breadth, "store": rule}
        print(f"### {size:,} vectors (graph built or read in {build['cpu_s']:.0f} s CPU)\n")
        print("| efSearch | recall@10, calibration half | held-out half | CPU ms p50 |")
        print("| --- | --- | --- | --- |")
        for breadth, seen in by_breadth.items():
            print(
                f"| {breadth} | {seen['calibrate']:.3f} | {seen['held_out']:.3f} | "
                f"{seen['cpu_ms_p50']:.2f} |"
            )
        print(
            f"\nneeded on the calibration half: {needed.get(size, 'more than the sweep')}; "
            f"the store (`ef_search` {rule['ef_search']}): held-out recall@10 "
            f"**{rule['held_out']:.3f}** (worst {rule['held_out_worst']:.1f}, "
            f"{rule['held_out_below_0.9']} below 0.9), calibration half {rule['calibrate']:.3f}, "
            f"CPU p50 / p95 {rule['cpu_ms_p50']:.1f} / {rule['cpu_ms_p95']:.1f} ms"
            + (
                f"; {rule['fresh_queries']} fresh queries: recall@10 **{rule['fresh']:.3f}**"
                if "fresh" in rule
                else ""
            )
            + "\n",
            flush=True,
        )
        del rows
    law = fit(needed)
    result["needed"] = needed
    result["fit"] = law
    if law is not None:
        a, b = law
        print(f"power law through the calibration half: efSearch ~ {a:.3g} * size^{b:.2f}")
        for size in (120_000, 500_000, 1_000_000):
            print(f"  {size:,}: {a * size**b:,.0f} (the store: {ann.ef_search(size):,})")
    output.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
