"""Question-level relevance signals: which ones tell an answerable question from one that is not?

Research for issue 28, item 5: the default hybrid blend empties the unanswerable questions far
from the documents but not the near-misses (``benchmarks/README.md``, "Calibrated
relevance"). This script computes, for every question of ``relevance_questions.jsonl``, the
candidates a minimal-effort retrieve scores (both hybrid sources, ``search_top`` 50 each, the
default ``HybridReranker`` blend) and several question-level signals over them:

- ``best_blend``: the best candidate's blend (what the default threshold reads today);
- ``best_cosine``: the best cosine of the question to a candidate (the store's vectors);
- ``cosine_margin``: the best cosine minus the tenth best;
- ``cov_top1`` / ``cov_max3`` / ``cov_union3``: IDF-weighted coverage of the question's
  content terms (Porter2-stemmed, stop words out, IDF over every chunk of both stores) by the
  best passage, the best of the top three, and the top three together;
- ``rank_overlap``: share of the top 10 by lexical coverage that is in the top 10 by cosine,
  over the same candidates (agreement of the two rankings);
- ``store_overlap``: the same between the lexical store's own BM25 top 10 and the dense top 10,
  per source, the larger of the two sources;
- ``sentence_cosine``: the best cosine of the question to one sentence of the top three
  passages (the sentences embedded at query time with the bundled model; the cost is timed);
- ``logistic``: a logistic model over the standardised signals, fitted on ``tune``.

For each signal: ROC AUC (answerable = positive) on each half, and a question-level gate
fitted on ``tune`` by the rule the knot was fitted with (the largest cut-off that keeps the
answerable questions' evidence recall within 2% of no cut-off), then applied to ``test``:
how many unanswerable questions it empties and how much recall it keeps.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_relevance_signals.py --cache DIR``
(the stores of ``bench_relevance.py --cache DIR`` are reused, or built).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import Stemmer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_relevance import (
    DATA,
    TOP,
    Question,
    build_sources,
    load_questions,
)

from agentic_retrieval.rerankers.embedding import cosine_similarities
from agentic_retrieval.rerankers.hybrid import HybridReranker
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.text.analysis import STOPWORDS

_STEMMER = Stemmer.Stemmer("english")
_WORD = re.compile(r"[^\W_]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
SEARCH_TOP = 50


def stems(text: str) -> set[str]:
    """Porter2 stems of the content words of ``text`` (stop words out)."""
    words = [w.casefold() for w in _WORD.findall(text)]
    return {_STEMMER.stemWord(w) for w in words if w not in STOPWORDS}


def corpus_idf(sources: Sequence[LocalKnowledgeSource]) -> Callable[[str], float]:
    """IDF of a stem over every chunk of the stores (title + content)."""
    df: dict[str, int] = {}
    n = 0
    for source in sources:
        with sqlite3.connect(source.path) as conn:
            for title, content in conn.execute("SELECT title, content FROM chunks"):
                n += 1
                for stem in stems(f"{title or ''}\n{content}"):
                    df[stem] = df.get(stem, 0) + 1
    return lambda stem: math.log(1 + (n + 1) / (df.get(stem, 0) + 0.5))


def coverage(terms: set[str], text_stems: set[str], idf: Callable[[str], float]) -> float:
    total = sum(idf(t) for t in terms)
    return sum(idf(t) for t in terms if t in text_stems) / total if total else 0.0


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if len(s.split()) >= 4]


@dataclass
class Row:
    question: Question
    recall: float
    """Evidence recall of the no-cut-off top 10 (0 for an unanswerable question)."""
    features: dict[str, float] = field(default_factory=dict)


async def search_all(sources: Sequence[LocalKnowledgeSource], text: str) -> list[Hit]:
    hits: list[Hit] = []
    for source in sources:
        found = await source.search(SearchQuery(text=text, top=SEARCH_TOP))
        hits += [h.model_copy(update={"source": source.name}) for h in found]
    return hits


def recall_of(question: Question, hits: Sequence[Hit]) -> float:
    if not question.answerable:
        return 0.0
    found = sum(
        any(
            q.found_in(str((h.metadata or {}).get("source_path", "")), h.content)
            for q in fact
            for h in hits
        )
        for fact in question.facts
    )
    return found / len(question.facts)


async def measure(
    question: Question,
    hybrid: Sequence[LocalKnowledgeSource],
    lexical: Sequence[LocalKnowledgeSource],
    idf: Callable[[str], float],
    embed: bool,
    timings: list[float],
) -> Row:
    hits = await search_all(hybrid, question.text)
    reranker = HybridReranker()
    blends = [b or 0.0 for b in reranker.blend(question.text, hits)]
    order = sorted(range(len(hits)), key=lambda i: (-blends[i], -hits[i].score))
    top = [hits[i] for i in order[:TOP]]
    row = Row(question, recall_of(question, top))
    f = row.features
    f["best_blend"] = blends[order[0]] if order else 0.0
    cosines = sorted((h.vector_similarity or 0.0 for h in hits), reverse=True)
    f["best_cosine"] = cosines[0] if cosines else 0.0
    f["cosine_margin"] = cosines[0] - cosines[min(9, len(cosines) - 1)] if cosines else 0.0
    terms = stems(question.text)
    passage_stems = [stems(f"{h.title or ''}\n{h.content}") for h in top[:3]]
    covs = [coverage(terms, s, idf) for s in passage_stems]
    f["cov_top1"] = covs[0] if covs else 0.0
    f["cov_max3"] = max(covs, default=0.0)
    f["cov_union3"] = coverage(terms, set().union(*passage_stems), idf) if covs else 0.0
    lexical_scores = LexicalReranker().coverage(question.text, hits)
    by_lexical = sorted(range(len(hits)), key=lambda i: -lexical_scores[i])[:TOP]
    by_cosine = sorted(range(len(hits)), key=lambda i: -(hits[i].vector_similarity or 0.0))[:TOP]
    f["rank_overlap"] = len(set(by_lexical) & set(by_cosine)) / TOP
    overlaps = []
    for h_source, l_source in zip(hybrid, lexical, strict=True):
        mine = [h for h in hits if h.source == h_source.name]
        dense = {h.doc_key for h in sorted(mine, key=lambda h: -(h.vector_similarity or 0))[:TOP]}
        bm25 = await l_source.search(SearchQuery(text=question.text, top=TOP))
        overlaps.append(len(dense & {h.doc_key for h in bm25}) / TOP)
    f["store_overlap"] = max(overlaps, default=0.0)
    if embed:
        started = time.perf_counter()
        parts = [s for h in top[:3] for s in sentences(h.content)]
        embeddings = hybrid[0].embeddings
        assert embeddings is not None
        vectors = await embeddings.aembed_documents(parts) if parts else []
        query = await embeddings.aembed_query(question.text)
        f["sentence_cosine"] = max(cosine_similarities(query, vectors), default=0.0)
        timings.append(time.perf_counter() - started)
    return row


def auc(rows: Sequence[Row], name: str) -> float:
    """ROC AUC of ``name`` with answerable questions as positives (ties count half)."""
    pos = [r.features[name] for r in rows if r.question.answerable]
    neg = [r.features[name] for r in rows if not r.question.answerable]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def gate(rows: Sequence[Row], name: str, cut: float) -> tuple[float, int, int, int]:
    """Recall kept, unanswerable emptied, of how many, answerable emptied, when questions
    whose ``name`` falls under ``cut`` come back empty."""
    answerable = [r for r in rows if r.question.answerable]
    kept = sum(r.recall for r in answerable if r.features[name] >= cut)
    unanswerable = [r for r in rows if not r.question.answerable]
    emptied = sum(r.features[name] < cut for r in unanswerable)
    lost = sum(r.features[name] < cut for r in answerable)
    return kept / len(answerable), emptied, len(unanswerable), lost


def fit_gate(rows: Sequence[Row], name: str) -> float:
    """The largest cut-off that keeps recall within 2% of no cut-off's (on ``rows``)."""
    full = sum(r.recall for r in rows if r.question.answerable) / sum(
        r.question.answerable for r in rows
    )
    best = -math.inf
    for cut in sorted({r.features[name] for r in rows}):
        # a cut exactly at a question's value keeps it; nudge past it to empty it
        if gate(rows, name, cut)[0] >= 0.98 * full:
            best = max(best, cut)
    return best


def fit_logistic(
    rows: Sequence[Row], names: Sequence[str], l2: float = 1.0
) -> Callable[[dict[str, float]], float]:
    """A logistic model (Newton's method, L2) over standardised ``names``, fitted on ``rows``."""
    x = np.array([[r.features[n] for n in names] for r in rows])
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([np.ones((len(rows), 1)), (x - mean) / std])
    y = np.array([float(r.question.answerable) for r in rows])
    w = np.zeros(z.shape[1])
    penalty = l2 * np.eye(z.shape[1])
    penalty[0, 0] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-z @ w))
        grad = z.T @ (p - y) + penalty @ w
        hess = z.T @ (z * (p * (1 - p))[:, None]) + penalty
        w -= np.linalg.solve(hess, grad)
    print(
        f"  logistic weights (standardised): {dict(zip(['bias', *names], w.round(2), strict=True))}"
    )

    def predict(features: dict[str, float]) -> float:
        v = (np.array([features[n] for n in names]) - mean) / std
        return float(1 / (1 + np.exp(-(w[0] + v @ w[1:]))))

    return predict


async def embedding_cost(
    questions: Sequence[Question], hybrid: Sequence[LocalKnowledgeSource], precisions: str
) -> None:
    """Wall and CPU time of judging a question's candidates by embedding them at query time."""
    from agentic_retrieval.embeddings import LocalEmbeddings

    for precision in precisions.split(","):
        model = LocalEmbeddings(precision=precision)  # type: ignore[arg-type]
        model.embed_query("warm up")
        reranker = HybridReranker(embeddings=model)
        walls, cpus, counts = [], [], []
        for question in questions:
            hits = await search_all(hybrid, question.text)
            blind = [h.model_copy(update={"vector_similarity": None}) for h in hits]
            wall, cpu = time.perf_counter(), time.process_time()
            await reranker.ascore(question.text, blind)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            counts.append(len(blind))
        walls.sort()
        cpus.sort()
        print(
            f"candidates embedded, {model.runtime} {model.precision}: "
            f"{statistics.mean(counts):.0f} candidates per question, wall p50 "
            f"{walls[len(walls) // 2] * 1000:.0f} ms "
            f"(p90 {walls[int(len(walls) * 0.9)] * 1000:.0f}),"
            f" CPU p50 {cpus[len(cpus) // 2] * 1000:.0f} ms, over {len(walls)} questions"
        )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--no-sentences", action="store_true")
    parser.add_argument(
        "--cost",
        default="",
        help="only time embedding the candidates at query time, in these precisions "
        "(e.g. fp32,int8), over the first N questions of --cost-questions",
    )
    parser.add_argument("--cost-questions", type=int, default=20)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    hybrid = build_sources(args.data, args.cache, "hybrid")
    lexical = build_sources(args.data, args.cache, "lexical")
    embeddings = hybrid[0].embeddings
    print(
        f"embeddings: {type(embeddings).__name__} {getattr(embeddings, 'runtime', '')} "
        f"{getattr(embeddings, 'precision', '')}"
    )
    if args.cost:
        await embedding_cost(load_questions()[: args.cost_questions], hybrid, args.cost)
        return 0
    idf = corpus_idf(hybrid)
    timings: list[float] = []
    rows = [
        await measure(q, hybrid, lexical, idf, not args.no_sentences, timings)
        for q in load_questions()
    ]
    if timings:
        ordered = sorted(timings)
        print(
            f"sentence embedding per question: p50 {ordered[len(ordered) // 2] * 1000:.0f} ms, "
            f"p90 {ordered[int(len(ordered) * 0.9)] * 1000:.0f} ms, "
            f"mean {statistics.mean(timings) * 1000:.0f} ms"
        )
    halves = {s: [r for r in rows if r.question.split == s] for s in ("tune", "test")}
    names = list(rows[0].features)
    predict = fit_logistic(halves["tune"], names)
    for r in rows:
        r.features["logistic"] = predict(r.features)
    small = [n for n in ("best_blend", "cov_union3", "sentence_cosine") if n in names]
    predict_small = fit_logistic(halves["tune"], small)
    for r in rows:
        r.features["logistic_small"] = predict_small(r.features)
    print(
        "\n| signal | AUC tune | AUC test | gate fitted on tune | tune: recall kept, "
        "unanswerable emptied | test: recall kept, unanswerable emptied, answerable emptied |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name in [*names, "logistic", "logistic_small"]:
        cut = fit_gate(halves["tune"], name)
        tune, test = gate(halves["tune"], name, cut), gate(halves["test"], name, cut)
        print(
            f"| {name} | {auc(halves['tune'], name):.3f} | {auc(halves['test'], name):.3f} "
            f"| {cut:.3f} | {tune[0]:.1%}, {tune[1]}/{tune[2]} "
            f"| {test[0]:.1%}, {test[1]}/{test[2]}, {test[3]} |"
        )
    print("\nper question (split, id, kind, recall, signals):")
    for r in rows:
        values = " ".join(f"{k}={v:.3f}" for k, v in r.features.items())
        kind = r.question.kind or ("answerable" if r.question.answerable else "first14")
        print(f"  {r.question.split} {r.question.id} {kind} {r.recall:.2f} {values}")
    for source in [*hybrid, *lexical]:
        source.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
