"""Issue 21: the local model in bf16 (autocast) against fp32 - speed per core and quality.

Both precisions run through the product's own class, ``LocalEmbeddings(precision=...)``, in
the same process, so machine load falls on both alike.

Speed: ``--passages`` texts of about 256 tokens (two chunks of ``--db``, a store of the
scale corpus, joined so that each fills the model's window; without ``--db``, pairs of
Cranfield abstracts), one torch thread (chunks per second per core), batch 32, after a
warm-up batch; the precisions alternate over ``--rounds`` rounds and both the best and the
median round are printed (the best is the least disturbed by other work on the machine).

Quality, dense retrieval alone (cosine ranking of the vectors, no BM25, no reranker), for
each pairing of document and query precision (fp32/fp32 is today's, bf16/bf16 the new
default on this CPU, the mixed ones what an index holding both meets):

- Cranfield (1,400 abstracts, 225 queries): nDCG@10 and R@100;
- the paraphrase set (``relevance_questions.jsonl``, held-out ``test`` half, answerable
  questions) over the chunks of ../shared/data (Northwind PDFs and the Earth-book pages as
  the store chunks them): a chunk is relevant when it holds one of the question's quotes;
  nDCG@10, R@100 and fact recall@10 (share of a question's facts with a quote in the top 10).

Plus the cosine of each passage's bf16 vector to its fp32 vector (mean and minimum).

    nice -n 10 .venv/bin/python benchmarks/bench_embedding_precision.py \\
        [--db /work/scratch/scale21/base120k/kb/wiki.sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from agentic_retrieval.embeddings import LocalEmbeddings, bf16_supported
from agentic_retrieval.eval import load_beir
from agentic_retrieval.eval.metrics import ir_metrics, mean

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[0] / ".." / "shared"
PRECISIONS = ("fp32", "bf16")


def embed(model: LocalEmbeddings, texts: list[str]) -> np.ndarray:
    return np.asarray(model.embed_documents(texts), dtype=np.float32)


def speed_passages(db: Path | None, count: int, cranfield: list[str]) -> list[str]:
    """Texts of about 256 tokens: two chunks (or two abstracts) joined."""
    if db is None:
        texts = cranfield
    else:
        conn = sqlite3.connect(db)
        total = conn.execute("SELECT max(rid) FROM chunks").fetchone()[0]
        rids = sorted(random.Random(21).sample(range(1, total + 1), count * 2))
        rows = conn.execute(
            f"SELECT title, content FROM chunks WHERE rid IN ({','.join('?' * len(rids))})", rids
        ).fetchall()
        conn.close()
        texts = [f"{t}\n{c}" if t else c for t, c in rows]
    return [f"{a} {b}" for a, b in zip(texts[0::2], texts[1::2], strict=False)][:count]


def measure_speed(
    models: dict[str, LocalEmbeddings], texts: list[str], rounds: int
) -> dict[str, list[float]]:
    """Chunks per CPU-second of each model, per round (the precisions alternate)."""
    rates: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():
        embed(model, texts[:32])  # warm-up
    for number in range(rounds):
        for name, model in models.items():
            started, cpu = time.perf_counter(), time.process_time()
            embed(model, texts)
            wall, used = time.perf_counter() - started, time.process_time() - cpu
            rates[name].append(len(texts) / used)
            print(
                f"  round {number + 1} {name}: {len(texts) / used:.1f} chunks per CPU-second "
                f"({len(texts) / wall:.1f} wall), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return rates


def ranked(docs: np.ndarray, queries: np.ndarray, keys: list[str], depth: int) -> list[list[str]]:
    similarity = queries @ docs.T
    order = np.argsort(-similarity, axis=1, kind="stable")[:, :depth]
    return [[keys[i] for i in row] for row in order]


def cranfield_corpus() -> tuple[list[str], list[str], list[str], dict[str, dict[str, int]]]:
    root = SHARED / "collections" / "cranfield"
    rows = [json.loads(line) for line in (root / "corpus.jsonl").read_text().splitlines()]
    rows = [r for r in rows if (r.get("title") or r.get("text"))]
    texts = [f"{r.get('title', '')}\n{r.get('text', '')}".strip() for r in rows]
    dataset = load_beir(root)
    qrels = {q.id: dict(q.relevant) for q in dataset.questions}
    queries = [q.text for q in dataset.questions]
    return [r["_id"] for r in rows], texts, queries, qrels


def paraphrase_corpus(
    work: Path,
    split: str = "test",
) -> tuple[list[str], list[str], list[str], dict[str, dict[str, int]], list[object]]:
    """Chunks of ../shared/data as the store makes them, and the test half's judgements."""
    sys.path.insert(0, str(HERE))
    from bench_relevance import CORPORA, load_questions

    from agentic_retrieval.sources.local import LocalKnowledgeSource

    keys: list[str] = []
    texts: list[str] = []
    places: list[tuple[str, str]] = []
    for name, folders in CORPORA.items():
        source = LocalKnowledgeSource(name, work / f"{name}.sqlite", create=True)
        source.index([SHARED / "data" / folder for folder in folders])
        source.close()
        with sqlite3.connect(work / f"{name}.sqlite") as conn:
            for cid, title, content, meta, shared in conn.execute(
                "SELECT c.id, c.title, c.content, c.metadata, f.fields FROM chunks c "
                "JOIN files f ON f.id = c.file_id ORDER BY c.rid"
            ):
                keys.append(f"{name}/{cid}")
                texts.append(f"{title}\n{content}" if title else content)
                fields = {**json.loads(shared), **json.loads(meta)}  # as the store merges them
                places.append((str(fields.get("source_path", "")), content))
    questions = [q for q in load_questions() if q.split == split and q.answerable]
    qrels = {
        q.id: {
            keys[i]: 1
            for i, (path, content) in enumerate(places)
            if any(quote.found_in(path, content) for fact in q.facts for quote in fact)
        }
        for q in questions
    }
    return keys, texts, [q.text for q in questions], qrels, [(q, places) for q in questions]


def fact_recall(runs: list[list[str]], keys: list[str], judged: list[object]) -> float:
    index = {key: i for i, key in enumerate(keys)}
    shares = []
    for run, item in zip(runs, judged, strict=True):
        question, places = item  # type: ignore[misc]
        top = [places[index[key]] for key in run[:10]]
        found = sum(
            any(q.found_in(path, content) for q in fact for path, content in top)
            for fact in question.facts
        )
        shares.append(found / len(question.facts))
    return float(np.mean(shares))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="a store of the scale corpus (speed passages)")
    parser.add_argument("--passages", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--sets", default="Cranfield,paraphrase", help="quality data sets")
    args = parser.parse_args()
    if not (SHARED / "collections" / "cranfield" / "corpus.jsonl").is_file():
        print("../shared/collections/cranfield is absent: nothing to measure")
        return 0
    print(
        f"torch {torch.__version__}; native bf16: {bf16_supported()}; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    models = {p: LocalEmbeddings(precision=p) for p in PRECISIONS}  # type: ignore[arg-type]
    cran_keys, cran_texts, cran_queries, cran_qrels = cranfield_corpus()

    torch.set_num_threads(1)
    texts = speed_passages(args.db, args.passages, cran_texts)
    tokenizer = models["fp32"].model.tokenizer
    lengths = [len(tokenizer(t, truncation=True, max_length=256)["input_ids"]) for t in texts]
    print(f"speed: {len(texts)} passages of {np.mean(lengths):.0f} tokens on average, 1 thread")
    rates = measure_speed(models, texts, args.rounds)
    if args.no_quality:
        quality_rows: list[str] = []
    else:
        torch.set_num_threads(2)  # quality does not depend on threads
        quality_rows = quality(
            models, cran_keys, cran_texts, cran_queries, cran_qrels, args.sets.split(",")
        )
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}\n")
    print("| precision | chunks/s per core, best round | median round | vs fp32 (best) |")
    print("| --- | --- | --- | --- |")
    base = max(rates["fp32"], default=float("nan"))  # --rounds 0: quality only
    for name in PRECISIONS if args.rounds else ():
        best, median = max(rates[name]), statistics.median(rates[name])
        print(f"| {name} | {best:.1f} | {median:.1f} | {best / base:.2f}x |")
    if quality_rows:
        print()
        print(
            "| data set | documents / queries | nDCG@10 | R@100 | fact recall@10 "
            "| ΔnDCG@10 vs fp32/fp32 |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for row in quality_rows:
            print(row)
    return 0


def retrieval_scores(
    docs: np.ndarray,
    queries: np.ndarray,
    keys: list[str],
    qrels: dict[str, dict[str, int]],
    judged: list[object] | None,
) -> tuple[float, float, str]:
    """nDCG@10 and R@100 of the cosine ranking, and fact recall@10 where facts are judged."""
    runs = ranked(docs, queries, keys, 100)
    metrics = ir_metrics(qrels, dict(zip(list(qrels), runs, strict=True)))
    ndcg = mean(metrics["nDCG@10"].values()) or 0.0
    recall = mean(metrics["R@100"].values()) or 0.0
    facts = f"{fact_recall(runs, keys, judged):.4f}" if judged is not None else "-"
    return ndcg, recall, facts


def quality(
    models: dict[str, LocalEmbeddings],
    cran_keys: list[str],
    cran_texts: list[str],
    cran_queries: list[str],
    cran_qrels: dict[str, dict[str, int]],
    wanted: list[str],
) -> list[str]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-precision-") as tmp:
        para = paraphrase_corpus(Path(tmp))
    sets = {
        "Cranfield": (cran_keys, cran_texts, cran_queries, cran_qrels, None),
        "paraphrase (test half)": para,
    }
    for label, (keys, texts, queries, qrels, judged) in sets.items():
        if label.split(" ")[0] not in wanted:
            continue
        started = time.perf_counter()
        docs = {p: embed(models[p], texts) for p in PRECISIONS}
        asked = {p: embed(models[p], queries) for p in PRECISIONS}
        cosines = np.sum(docs["fp32"] * docs["bf16"], axis=1)
        print(
            f"{label}: {len(texts)} passages, {len(queries)} queries, "
            f"{sum(bool(v) for v in qrels.values())} judged; cosine bf16 to fp32 mean "
            f"{cosines.mean():.5f}, min {cosines.min():.5f} "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        base = None
        for doc_p, query_p in (
            ("fp32", "fp32"),
            ("bf16", "bf16"),
            ("bf16", "fp32"),
            ("fp32", "bf16"),
        ):
            ndcg, recall, facts = retrieval_scores(docs[doc_p], asked[query_p], keys, qrels, judged)
            base = ndcg if base is None else base
            rows.append(
                f"| {label} | {doc_p} / {query_p} | {ndcg:.4f} | {recall:.4f} | {facts} "
                f"| {ndcg - base:+.4f} |"
            )
            print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
