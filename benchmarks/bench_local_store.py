"""Benchmark the embedded local store: indexing throughput and query latency by corpus size.

Corpora are built from the real text in ../shared/data/earth-book/pages (sentences shuffled and
tagged per document so every chunk is distinct), or from generated text when that folder is
absent. Each document is a .txt file of about ten 1,200-character chunks, indexed through the
full pipeline (read, hash, chunk, insert, FTS5). Queries are single-source, top-50 searches
(what the graph's minimal effort does per source).

    python benchmarks/bench_local_store.py            # 1k, 10k, 100k chunks; hybrid at 1k
    python benchmarks/bench_local_store.py --quick    # 1k and 5k chunks
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from langchain_core.embeddings import Embeddings

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.embeddings import local_embeddings, local_embeddings_available
from agentic_retrieval.sources.local import LocalKnowledgeSource

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
SHARED_PAGES = SHARED_DATA / "earth-book" / "pages"
CHUNKS_PER_FILE = 10
QUERY_COUNT = 200
TIME_LIMIT_S = 900


def source_sentences() -> list[str]:
    if SHARED_PAGES.is_dir():
        text = " ".join(p.read_text(encoding="utf-8") for p in sorted(SHARED_PAGES.glob("*.txt")))
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split()))]
        return [s for s in sentences if 40 <= len(s) <= 400]
    rng = random.Random(7)
    words = [
        f"{a}{b}"
        for a in ("sol", "lun", "mar", "ter", "aqu", "ign")
        for b in ("a", "is", "or", "um", "ex", "ia", "on", "ar")
    ]
    return [" ".join(rng.choice(words) for _ in range(14)).capitalize() + "." for _ in range(3000)]


def write_corpus(root: Path, chunks: int, sentences: list[str], seed: int = 1) -> int:
    rng = random.Random(seed)
    files = max(1, chunks // CHUNKS_PER_FILE)
    for i in range(files):
        paragraphs = []
        for p in range(CHUNKS_PER_FILE * 2):
            body = " ".join(rng.choice(sentences) for _ in range(4))
            paragraphs.append(f"Doc{i} part{p}. {body}")
        folder = root / f"batch{i // 1000:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc{i:06d}.txt").write_text(f"Document {i}\n\n" + "\n\n".join(paragraphs))
    return files


def queries(sentences: list[str], count: int, seed: int = 2) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = [w for w in re.findall(r"[A-Za-z]{4,}", rng.choice(sentences))]
        out.append(" ".join(rng.sample(words, min(len(words), rng.randint(3, 8)))))
    return out


class TimedEmbeddings(Embeddings):
    """Measures how long the wrapped model spends embedding."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.document_seconds = 0.0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.document_seconds += time.perf_counter() - started

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def full_retrieve_latencies(source: LocalKnowledgeSource, texts: list[str]) -> list[float]:
    """End-to-end minimal-effort retrieve (graph, rerank, grounding string), in ms."""
    kb = KnowledgeBase([source], defaults=Context(reasoning_effort="minimal"))
    latencies = []
    for text in texts:
        t0 = time.perf_counter()
        await kb.aretrieve({"intents": [{"search": text}]})
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


def run(size: int, work: Path, sentences: list[str], embeddings: TimedEmbeddings | None) -> dict:
    mode = "hybrid" if embeddings else "lexical"
    corpus = work / f"corpus{size}"
    if not corpus.exists():
        write_corpus(corpus, size, sentences)
    source = LocalKnowledgeSource(
        mode, work / f"{mode}{size}.sqlite", embeddings=embeddings, create=True
    )
    started = time.perf_counter()
    report = source.index([corpus])
    index_seconds = time.perf_counter() - started
    latencies = []
    for text in queries(sentences, QUERY_COUNT):
        t0 = time.perf_counter()
        source.search_sync(text, top=50)
        latencies.append((time.perf_counter() - t0) * 1000)
    retrieve_ms = asyncio.run(full_retrieve_latencies(source, queries(sentences, QUERY_COUNT)))
    reindex_started = time.perf_counter()
    source.index([corpus])
    reindex_seconds = time.perf_counter() - reindex_started
    source.close()
    embed_seconds = embeddings.document_seconds if embeddings else 0.0
    return {
        "mode": mode,
        "chunks": report.total_chunks,
        "files": len(report.indexed),
        "index_s": index_seconds,
        "embed_s": embed_seconds,
        "chunks_per_s": report.total_chunks / index_seconds,
        "chunks_per_s_no_embed": report.total_chunks / max(index_seconds - embed_seconds, 1e-9),
        "reindex_unchanged_s": reindex_seconds,
        "p50_ms": statistics.median(latencies),
        "p95_ms": percentile(latencies, 95),
        "retrieve_p50_ms": statistics.median(retrieve_ms),
        "retrieve_p95_ms": percentile(retrieve_ms, 95),
        "db_mb": (work / f"{mode}{size}.sqlite").stat().st_size / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k and 5k chunks only")
    parser.add_argument("--sizes", type=int, nargs="*", help="chunk counts (overrides defaults)")
    parser.add_argument(
        "--hybrid-sizes",
        type=int,
        nargs="*",
        default=[1000],
        help="sizes also run hybrid when the [local] extra is installed",
    )
    args = parser.parse_args()
    sizes = args.sizes or ([1000, 5000] if args.quick else [1000, 10_000, 100_000])
    sentences = source_sentences()
    print(
        f"# {platform.platform()}, Python {platform.python_version()}, "
        f"SQLite {__import__('sqlite3').sqlite_version}, text from "
        f"{'shared earth-book pages' if SHARED_PAGES.is_dir() else 'generator'}"
    )
    header = (
        "mode",
        "chunks",
        "files",
        "index_s",
        "embed_s",
        "chunks_per_s",
        "chunks_per_s_no_embed",
        "reindex_unchanged_s",
        "p50_ms",
        "p95_ms",
        "retrieve_p50_ms",
        "retrieve_p95_ms",
        "db_mb",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    deadline = time.monotonic() + TIME_LIMIT_S
    model = local_embeddings() if local_embeddings_available() else None
    with tempfile.TemporaryDirectory(prefix="bench-local-store-") as tmp:
        for size in sizes:
            plans = [None]
            if model is not None and size in args.hybrid_sizes:
                plans.append(TimedEmbeddings(model))
            for embeddings in plans:
                if time.monotonic() > deadline:
                    print(f"time limit reached before {size} chunks", file=sys.stderr)
                    return
                row = run(size, Path(tmp), sentences, embeddings)
                print(
                    "| "
                    + " | ".join(
                        f"{row[k]:.2f}" if isinstance(row[k], float) else str(row[k])
                        for k in header
                    )
                    + " |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
