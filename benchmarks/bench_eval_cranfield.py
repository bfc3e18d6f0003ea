"""Cranfield (1,400 abstracts, 225 queries, graded judgements) at minimal effort.

The embedded store through ``evaluate`` - lexical (FTS5 BM25) and hybrid (BM25 + all-MiniLM-L6-v2
fused by RRF), default reranker, top 100 - next to a plain BM25 reference computed in the same
run: ``rank_bm25.BM25Okapi`` with its defaults over lowercase alphanumeric tokens of title +
text, scored by the same metric code (``ir-measures``). Nothing in the library was tuned on
Cranfield.

Run: ``.venv/bin/python benchmarks/bench_eval_cranfield.py`` (``--no-hybrid`` to skip the
embedding of 1,885 chunks, about a minute on a 2-core CPU). Skips when the collection is
absent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from agentic_retrieval.embeddings import local_embeddings_available
from agentic_retrieval.eval import Configuration, evaluate, load_beir
from agentic_retrieval.eval.metrics import ir_metrics, mean
from agentic_retrieval.eval.significance import paired_comparison

CRANFIELD = Path(__file__).resolve().parents[1] / ".." / "shared" / "collections" / "cranfield"
TOKEN = re.compile(r"[a-z0-9]+")


def bm25_reference(root: Path, questions: list) -> tuple[dict[str, dict[str, float]], float]:
    from rank_bm25 import BM25Okapi

    ids, texts = [], []
    with (root / "corpus.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            ids.append(row["_id"])
            texts.append(TOKEN.findall(f"{row.get('title', '')} {row.get('text', '')}".lower()))
    started = time.perf_counter()
    bm25 = BM25Okapi(texts)
    runs = {}
    for question in questions:
        scores = bm25.get_scores(TOKEN.findall(question.text.lower()))
        best = sorted(range(len(ids)), key=lambda i: -scores[i])[:100]
        runs[question.id] = [ids[i] for i in best]
    per_query_ms = (time.perf_counter() - started) / len(questions) * 1000
    qrels = {q.id: dict(q.relevant) for q in questions}
    return ir_metrics(qrels, runs), per_query_ms


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-hybrid", action="store_true")
    parser.add_argument("--collection", type=Path, default=CRANFIELD, help="its BEIR directory")
    args = parser.parse_args()
    collection = args.collection
    if not (collection / "corpus.jsonl").is_file():
        print(f"{collection} is absent: nothing to measure")
        return 0
    dataset = load_beir(collection)
    reference, bm25_ms = bm25_reference(collection, dataset.questions)
    retrievals = ["lexical"]
    if not args.no_hybrid and local_embeddings_available():
        retrievals.append("hybrid")
    # at the knowledge base's default threshold rule (no cut-off on the default reranker's
    # uncalibrated scores), as a new user retrieves
    configurations = [
        Configuration(retrieval=r, top_n=100, reranker_threshold="default") for r in retrievals
    ]
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-cranfield-") as cache:
        started = time.perf_counter()
        report = evaluate(collection, configurations, cache_dir=cache)
        elapsed = time.perf_counter() - started
    print(
        f"Cranfield: {len(report.questions)} queries, minimal effort, top 100 "
        f"(evaluate incl. indexing {elapsed:.0f} s; load average {load:.2f})\n"
    )
    print("| system | nDCG@10 | R@100 | MRR@10 | MAP | ms/query |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(
        f"| rank_bm25 BM25Okapi (reference) | {mean(reference['nDCG@10'].values()):.3f} "
        f"| {mean(reference['R@100'].values()):.3f} | {mean(reference['MRR@10'].values()):.3f} "
        f"| {mean(reference['MAP'].values()):.3f} | {bm25_ms:.0f} |"
    )
    for result in report.results:
        s = result.summary
        print(
            f"| store, {result.configuration.retrieval} | {s['nDCG@10']:.3f} | {s['R@100']:.3f} "
            f"| {s['MRR@10']:.3f} | {s['MAP']:.3f} | {s['latency_p50_ms']:.0f} (p50) |"
        )
    print()
    for result in report.results:
        for metric in ("nDCG@10", "R@100"):
            ids = list(reference[metric])
            c = paired_comparison(
                [reference[metric][i] for i in ids],
                [result.metrics[metric][i] for i in ids],
                names=("bm25", result.configuration.name, metric),
            )
            print(
                f"{result.configuration.retrieval} vs reference BM25, {metric}: {c.delta:+.3f} "
                f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {c.p_value:.3f}"
            )
    for c in report.comparisons:
        if c.metric in ("nDCG@10", "R@100"):
            print(
                f"hybrid vs lexical, {c.metric}: {c.delta:+.3f} "
                f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {c.p_value:.3f}"
            )
    for note in report.notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
