"""End-to-end retrieval quality on ../shared/data: lexical vs hybrid, and each reranker.

Builds a real local knowledge base (the embedded SQLite store, through the ingestion
pipeline) over the Earth-book pages and the Northwind PDFs, then asks questions written for
this benchmark through ``KnowledgeBase.aretrieve`` at minimal effort. An answer counts as
found at rank r when the r-th reference is a chunk of the answering page (Earth book: the 28
questions of ``bench_rerankers.py``) or contains the answering phrase (Northwind). Reports
hit@1, hit@5 and MRR per configuration:

- store ranking only (BM25, or BM25 + vectors fused by RRF for hybrid), no reranking
- lexical coverage alone (the default reranker before issue 18)
- the default reranker: lexical coverage blended with the vector similarity the hybrid store
  computed (the same as lexical coverage on the lexical store, which has none)
- the embedding reranker (all-MiniLM-L6-v2) when the ``[local]`` extra is installed

Run: ``.venv/bin/python benchmarks/bench_quality.py`` (skips with a note when ../shared/data
is absent; hybrid and embedding rows need the ``[local]`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench_rerankers import QUESTIONS as EARTH_QUESTIONS

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.embeddings import local_embeddings, local_embeddings_available
from agentic_retrieval.rerankers import (
    EmbeddingReranker,
    HybridReranker,
    LexicalReranker,
    Reranker,
)
from agentic_retrieval.sources.base import Hit
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.wire.models import RetrieveResponse

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"

# (question, phrase the answering chunk contains); written for this benchmark
NORTHWIND_QUESTIONS: list[tuple[str, str]] = [
    ("How much can employees expense for fitness programs with PerksPlus?", "$1000"),
    ("Are yoga classes reimbursed by the wellness program?", "Yoga and Pilates classes"),
    (
        "Which health plan also covers emergency care outside the network?",
        "emergency services, both in-network and out-of-network",
    ),
    (
        "What is the copay for a primary care office visit on Northwind Standard?",
        "primary care physician may be $20",
    ),
    (
        "What does the workplace violence prevention program aim to do?",
        "preventing violence, threats, and abuse",
    ),
    (
        "What safety training and protective equipment does the company provide?",
        "Personal Protective Equipment",
    ),
    (
        "Who gives strategic direction and oversight to Contoso Electronics?",
        "strategic direction and oversight",
    ),
    (
        "Does Northwind Standard cover mental health and substance abuse services?",
        "does not cover certain services",
    ),
]


class NoRerank:
    """Keeps the store's order: scores decrease with the store's rank."""

    name = "store order"

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        ordered = sorted(range(len(hits)), key=lambda i: -hits[i].score)
        scores = [0.0] * len(hits)
        for rank, index in enumerate(ordered):
            scores[index] = 4.0 * (1 - rank / max(len(hits), 1))
        return scores


def earth_check(page: str) -> Callable[[dict], bool]:
    pattern = re.compile(rf"-{re.escape(page)}-txt-\d+$")
    return lambda ref: bool(pattern.search(ref["docKey"]))


def phrase_check(phrase: str) -> Callable[[dict], bool]:
    wanted = " ".join(phrase.lower().split())
    return lambda ref: wanted in " ".join(str(ref["content"]).lower().split())


async def measure(kb: KnowledgeBase, cases: list[tuple[str, Callable[[dict], bool]]]) -> tuple:
    ranks: list[int | None] = []
    started = time.perf_counter()
    for question, check in cases:
        response: RetrieveResponse = await kb.aretrieve(
            {
                "intents": [{"search": question}],
                "knowledgeSourceParams": [
                    {"knowledgeSourceName": name, "includeReferenceSourceData": True}
                    for name in kb.sources
                ],
            }
        )
        refs = [
            {"docKey": r.doc_key, "content": (r.source_data or {}).get("content", "")}
            for r in response.references
        ]
        ranks.append(next((i + 1 for i, ref in enumerate(refs) if check(ref)), None))
    per_query = (time.perf_counter() - started) / len(cases) * 1000
    n = len(ranks)
    return (
        sum(r == 1 for r in ranks) / n,
        sum(1 for r in ranks if r and r <= 5) / n,
        sum(1 / r for r in ranks if r) / n,
        per_query,
    )


async def main() -> int:
    global DATA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="../shared/data elsewhere")
    parser.add_argument(
        "--no-embedding-reranker", action="store_true", help="skip the slow re-embedding rows"
    )
    args = parser.parse_args()
    DATA = args.data
    if not DATA.is_dir():
        print("../shared/data is absent: nothing to measure")
        return 0
    cases = [(q, earth_check(p)) for q, p in EARTH_QUESTIONS]
    cases += [(q, phrase_check(p)) for q, p in NORTHWIND_QUESTIONS]
    model = local_embeddings() if local_embeddings_available() else None
    rerankers: list[Reranker] = [NoRerank(), LexicalReranker(), HybridReranker()]
    if model is not None and not args.no_embedding_reranker:
        rerankers.append(EmbeddingReranker(model))
    print(
        f"{len(EARTH_QUESTIONS)} Earth-book + {len(NORTHWIND_QUESTIONS)} Northwind questions,"
        " minimal effort, top 10 references\n"
    )
    print("| store | reranker | hit@1 | hit@5 | MRR | ms/query |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        modes = [("lexical", None)] + ([("hybrid", model)] if model is not None else [])
        for mode, embeddings in modes:
            source = LocalKnowledgeSource(
                "shared", Path(tmp) / f"{mode}.sqlite", embeddings=embeddings, create=True
            )
            source.index([DATA / "earth-book" / "pages", DATA / "northwind"])
            for reranker in rerankers:
                kb = KnowledgeBase(
                    [source], reranker=reranker, defaults=Context(reasoning_effort="minimal")
                )
                hit1, hit5, mrr, ms = await measure(kb, cases)
                print(
                    f"| {mode} | {reranker.name} | {hit1:.2f} | {hit5:.2f} | {mrr:.3f} "
                    f"| {ms:.0f} |",
                    flush=True,
                )
            source.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
