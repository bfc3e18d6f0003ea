"""Relevance by default: paraphrased questions over ../shared/data, defaults vs no cut-off vs BM25.

The question set (``relevance_questions.jsonl``, written for issue 18) holds 52 answerable
questions that avoid the documents' wording ("see a doctor who isn't on the basic plan's
list", "rideshare to my appointment") and 14 the documents do not answer. Each answerable one
names the passages that answer it robustly: a file and a distinctive quote (a list of facts,
each a list of alternative quotes, so a question answered by either plan's booklet accepts
either). The set was split in two halves (``split``: ``tune``, ``test``) before anything was
measured: defaults are chosen on ``tune`` and reported on ``test``.

Both corpora (the six Northwind PDFs, the Earth-book pages) are indexed into one knowledge
base of two local sources, lexical (tantivy BM25, English word forms) and hybrid (what a
default ``index`` builds: the bundled all-MiniLM-L6-v2 through OpenVINO, vectors fused by
RRF). Every question runs at minimal effort (no model) in three configurations, in the same
run:

- ``defaults``: the knowledge base as a new user gets it (default reranker, default threshold);
- ``no cut-off``: the same with ``reranker_threshold=None``;
- ``BM25``: ``rank_bm25.BM25Okapi`` over the very chunks of the store (title + content,
  lowercase alphanumeric tokens), top 10 over both sources together.

Figures per configuration: evidence recall (share of a question's facts whose passage is
among the returned ones, averaged over answerable questions), how many answerable questions
come back with nothing, references per question, and for unanswerable questions how many
come back empty. With ``--signals`` it also prints, per question, the coverage/confidence
figures the semanticReranker record carries, to see what separates answerable from not.

Run: ``.venv/bin/python benchmarks/bench_relevance.py [--split test] [--cache DIR] [--data DIR]``
(skips with a note when ../shared/data is absent). ``bench_relevance_signals.py`` measures
question-level signals and the cost of embedding candidates over the same stores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rank_bm25 import BM25Okapi

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.embeddings import local_embeddings, local_embeddings_available
from agentic_retrieval.rerankers import (
    HybridReranker,
    LexicalReranker,
    PassthroughReranker,
    Reranker,
    reranker_by_name,
)
from agentic_retrieval.rerankers.hybrid import RELEVANCE_KNOT
from agentic_retrieval.rerankers.lexical import calibrate
from agentic_retrieval.sources.base import Hit, KnowledgeSource, SearchQuery
from agentic_retrieval.sources.local import LocalKnowledgeSource

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[0] / ".." / "shared" / "data"
QUESTIONS = HERE / "relevance_questions.jsonl"
TOP = 10
_TOKEN = re.compile(r"[^\W_]+")
CORPORA = {"northwind": ("northwind",), "earth": ("earth-book/pages",)}
"""Source name -> folders under ../shared/data (the Earth book as its text pages)."""


def normalize(text: str) -> str:
    """Whitespace collapsed, curly quotes straightened, casefolded: how quotes are matched."""
    straight = text.replace("\u2019", "'").replace("\u2018", "'")
    straight = straight.replace("\u201c", '"').replace("\u201d", '"')
    return " ".join(straight.split()).casefold()


@dataclass(frozen=True)
class Quote:
    """A passage that answers: a file under ../shared/data and a distinctive quote from it."""

    file: str
    text: str

    def found_in(self, path: str, content: str) -> bool:
        """Whether a returned passage of ``path`` holds this quote."""
        return path.endswith(self.file) and normalize(self.text) in normalize(content)


@dataclass(frozen=True)
class Question:
    """One question; ``facts`` is empty for an unanswerable one."""

    id: str
    split: str
    text: str
    facts: tuple[tuple[Quote, ...], ...] = ()
    kind: str = ""
    """For an unanswerable question: ``near-miss`` (the documents cover the subject, not the
    fact), ``absent`` (a subject of the knowledge base's domain it does not cover),
    ``off-domain``; empty for the first 14, written before the kinds were named."""

    @property
    def answerable(self) -> bool:
        return bool(self.facts)


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    """Read the question set."""
    questions = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        facts = tuple(
            tuple(Quote(q["file"], q["quote"]) for q in alternatives)
            for alternatives in row["evidence"]
        )
        questions.append(
            Question(row["id"], row["split"], row["question"], facts, row.get("kind", ""))
        )
    return questions


Passage = tuple[str, str]
"""(source path, content) of one returned passage."""


@dataclass(frozen=True)
class Retrieved:
    """What one retrieve returned: passages best first, their scores, the rerank record."""

    passages: list[Passage]
    scores: list[float]
    rerank: dict[str, Any]

    def relative(self, share: float) -> list[Passage]:
        """The passages scoring at least ``share`` of the best one (a relative cut-off)."""
        return self.at_least(share * max(self.scores, default=0.0))

    def at_least(self, threshold: float) -> list[Passage]:
        """The passages scoring at least ``threshold`` (what that threshold would keep)."""
        return [p for p, s in zip(self.passages, self.scores, strict=True) if s >= threshold]


@dataclass
class Tally:
    """Figures of one configuration over a set of questions."""

    recall: list[float] = field(default_factory=list)
    reciprocal_ranks: list[float] = field(default_factory=list)
    answerable_empty: int = 0
    unanswerable_empty: int = 0
    unanswerable: int = 0
    emptied_by_kind: dict[str, list[int]] = field(default_factory=dict)
    """Per kind of unanswerable question: [emptied, count]."""
    references: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    confidence: dict[bool, list[tuple[float, float]]] = field(
        default_factory=lambda: {True: [], False: []}
    )
    """(best score, termCoverage) of each question, by answerable."""

    def note(self, question: Question, retrieved: Retrieved) -> None:
        """Keep the confidence figures the response carries."""
        coverage = retrieved.rerank.get("termCoverage")
        if retrieved.scores and coverage is not None:
            self.confidence[question.answerable].append((retrieved.scores[0], coverage))

    def confidence_line(self, label: str) -> str:
        def median(values: list[float]) -> float:
            ordered = sorted(values)
            return ordered[len(ordered) // 2] if ordered else 0.0

        parts = []
        for answerable, name in ((True, "answerable"), (False, "unanswerable")):
            pairs = self.confidence[answerable]
            parts.append(
                f"{name}: best score {median([p[0] for p in pairs]):.2f}, "
                f"termCoverage {median([p[1] for p in pairs]):.2f}"
            )
        return f"{label}, medians: " + "; ".join(parts)

    def add(self, question: Question, passages: Sequence[Passage], seconds: float) -> None:
        self.references.append(len(passages))
        self.seconds.append(seconds)
        if not question.answerable:
            self.unanswerable += 1
            self.unanswerable_empty += not passages
            tally = self.emptied_by_kind.setdefault(question.kind or "first 14", [0, 0])
            tally[0] += not passages
            tally[1] += 1
            return
        self.answerable_empty += not passages
        found = sum(
            any(q.found_in(path, content) for q in fact for path, content in passages)
            for fact in question.facts
        )
        self.recall.append(found / len(question.facts))
        first = next(
            (
                rank
                for rank, passage in enumerate(passages, start=1)
                if any(q.found_in(*passage) for fact in question.facts for q in fact)
            ),
            None,
        )
        self.reciprocal_ranks.append(1 / first if first else 0.0)

    def kinds(self) -> str:
        """Unanswerable questions emptied, by kind."""
        return ", ".join(f"{k} {e}/{n}" for k, (e, n) in sorted(self.emptied_by_kind.items()))

    def row(self, label: str) -> str:
        n = len(self.recall)
        recall = sum(self.recall) / n if n else 0.0
        refs = sum(self.references) / len(self.references) if self.references else 0.0
        ms = sorted(self.seconds)[len(self.seconds) // 2] * 1000 if self.seconds else 0.0
        mrr = sum(self.reciprocal_ranks) / n if n else 0.0
        return (
            f"| {label} | {recall:.3f} | {mrr:.3f} | {self.answerable_empty}/{n} | "
            f"{self.unanswerable_empty}/{self.unanswerable} | {refs:.1f} | {ms:.0f} |"
        )


def build_sources(data: Path, root: Path, mode: str) -> list[LocalKnowledgeSource]:
    """Index (or reuse) the two corpora as local sources under ``root``."""
    embeddings = local_embeddings() if mode == "hybrid" else None
    sources = []
    for name, folders in CORPORA.items():
        path = root / f"{mode}-{name}.sqlite"
        fresh = not path.exists()
        source = LocalKnowledgeSource(
            name, path, embeddings=embeddings, create=True, description=f"{name} documents"
        )
        if fresh:
            source.index([data / folder for folder in folders])
        sources.append(source)
    return sources


class WithoutVectors:
    """A store's hits without their cosines: a source that holds no vectors, same candidates."""

    def __init__(self, source: LocalKnowledgeSource) -> None:
        self.source = source
        self.name, self.description, self.kind = source.name, source.description, source.kind

    async def search(self, query: SearchQuery) -> list[Hit]:
        hits = await self.source.search(query)
        return [hit.model_copy(update={"vector_similarity": None}) for hit in hits]


class Bm25Baseline:
    """Plain BM25 (rank_bm25, defaults) over the stores' chunks, title + content."""

    def __init__(self, sources: Sequence[LocalKnowledgeSource]) -> None:
        self.passages: list[Passage] = []
        documents: list[list[str]] = []
        for source in sources:
            with sqlite3.connect(source.path) as conn:
                # a document's shared fields (source_path among them) are stored once, on its
                # file row (schema 3); reading chunks.metadata alone found no path at all
                rows = conn.execute(
                    "SELECT c.title, c.content, f.fields, c.metadata "
                    "FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY c.rid"
                )
                for title, content, shared, metadata in rows:
                    fields = {**json.loads(shared), **json.loads(metadata)}
                    path = fields.get("source_path", "")
                    self.passages.append((path, content))
                    documents.append(tokens(f"{title}\n{content}"))
        self.bm25 = BM25Okapi(documents)

    def search(self, text: str) -> list[Passage]:
        scores = self.bm25.get_scores(tokens(text))
        best = sorted(range(len(scores)), key=lambda i: -scores[i])[:TOP]
        return [self.passages[i] for i in best if scores[i] > 0]


def tokens(text: str) -> list[str]:
    return [t.casefold() for t in _TOKEN.findall(text)]


async def retrieve(kb: KnowledgeBase, text: str) -> Retrieved:
    """The passages a minimal-effort retrieve returns, and its semanticReranker record."""
    response = await kb.aretrieve(
        {
            "intents": [{"search": text}],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": name, "includeReferenceSourceData": True}
                for name in kb.sources
            ],
        }
    )
    passages = [
        (
            str((ref.source_data or {}).get("source_path", "")),
            str((ref.source_data or {}).get("content", "")),
        )
        for ref in response.references
    ]
    rerank = next(
        (
            r.model_dump(by_alias=True)
            for r in response.activity or []
            if r.type == "semanticReranker"
        ),
        {},
    )
    scores = [ref.reranker_score or 0.0 for ref in response.references]
    return Retrieved(passages, scores, rerank)


async def measure_kb(
    kb: KnowledgeBase,
    questions: Sequence[Question],
    signals: bool = False,
    relative: Sequence[float] = (),
    absolute: Sequence[float] = (),
) -> tuple[Tally, dict[float, Tally]]:
    """Figures of ``kb``, and of each relative (then absolute) cut-off of its rankings."""
    tally = Tally()
    cut = {share: Tally() for share in relative}
    kept = {threshold: Tally() for threshold in absolute}
    for question in questions:
        started = time.perf_counter()
        retrieved = await retrieve(kb, question.text)
        seconds = time.perf_counter() - started
        tally.add(question, retrieved.passages, seconds)
        tally.note(question, retrieved)
        for share, other in cut.items():
            other.add(question, retrieved.relative(share), seconds)
        for threshold, other in kept.items():
            other.add(question, retrieved.at_least(threshold), seconds)
        if signals:
            found = tally.recall[-1] if question.answerable else None
            extra = {
                k: v
                for k, v in retrieved.rerank.items()
                if k not in ("type", "id", "startedAt", "completedAt")
            }
            print(f"  {question.id} found={found} refs={len(retrieved.passages)} {extra}")
    return tally, {**cut, **kept}


def measure_bm25(bm25: Bm25Baseline, questions: Sequence[Question]) -> Tally:
    tally = Tally()
    for question in questions:
        started = time.perf_counter()
        passages = bm25.search(question.text)
        tally.add(question, passages, time.perf_counter() - started)
    return tally


def fit_knot(open_tally: Tally, by_knot: dict[float, Tally]) -> str:
    """Each knot's figures, and the largest that keeps recall within 2% of no cut-off's."""
    recall = sum(open_tally.recall) / len(open_tally.recall)
    kept = []
    for knot, tally in sorted(by_knot.items()):
        share = sum(tally.recall) / len(tally.recall) / recall if recall else 1.0
        print(tally.row(f"hybrid: knot {knot:g} ({share:.1%} of the recall)"), flush=True)
        if share >= 0.98:
            kept.append(knot)
    return f"hybrid: the largest knot within 2% of the no-cut-off recall: {max(kept, default=None)}"


def knowledge_base(
    sources: Sequence[KnowledgeSource], reranker: Reranker | None, **context: Any
) -> KnowledgeBase:
    return KnowledgeBase(
        list(sources), reranker=reranker, defaults=Context(reasoning_effort="minimal", **context)
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("tune", "test", "all"), default="test")
    parser.add_argument("--cache", type=Path, help="keep the indexed stores here")
    parser.add_argument("--modes", default="lexical,hybrid")
    parser.add_argument("--signals", action="store_true", help="print each question's record")
    parser.add_argument("--data", type=Path, default=DATA, help="../shared/data elsewhere")
    parser.add_argument(
        "--reranker", help="also measure this named reranker (lexical, embedding...)"
    )
    parser.add_argument(
        "--thresholds",
        default="",
        help="with --reranker: explicit thresholds to measure, e.g. 2,2.5",
    )
    parser.add_argument(
        "--weights", default="", help="hybrid: vector weights of the default blend to compare"
    )
    parser.add_argument(
        "--relative",
        default="",
        help="relative cut-offs to measure on the defaults' rankings: keep scores >= share "
        "x the best (e.g. 0.5,0.7)",
    )
    parser.add_argument(
        "--knots",
        default="",
        help="hybrid: calibration knots to measure on the no-cut-off rankings (the default "
        "threshold keeps a blend >= the knot), and the largest one within 2%% of its recall",
    )
    parser.add_argument(
        "--embed-candidates",
        action="store_true",
        help="hybrid: also measure the same candidates without cosines, embedded by the "
        "default reranker at query time",
    )
    args = parser.parse_args()
    data = args.data
    if not data.is_dir():
        print("../shared/data is absent: nothing to measure")
        return 0
    questions = [q for q in load_questions() if args.split in ("all", q.split)]
    answerable = sum(q.answerable for q in questions)
    print(
        f"{len(questions)} questions ({answerable} answerable, "
        f"{len(questions) - answerable} unanswerable), split {args.split}, minimal effort, "
        f"top {TOP}\n"
    )
    print(
        "| store / configuration | evidence recall | MRR | answerable with nothing | "
        "unanswerable with nothing | references per question | ms p50 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    modes = args.modes.split(",")
    if "hybrid" in modes and not local_embeddings_available():
        print("(hybrid skipped: the bundled model is not installed)")
        modes.remove("hybrid")
    with tempfile.TemporaryDirectory(prefix="bench-relevance-") as tmp:
        root = args.cache or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        notes: list[str] = []
        for mode in modes:
            sources = build_sources(data, root, mode)
            shares = [float(r) for r in args.relative.split(",") if r]
            defaults, cut = await measure_kb(
                knowledge_base(sources, None), questions, args.signals, shares
            )
            print(defaults.row(f"{mode}: defaults"), flush=True)
            notes.append(defaults.confidence_line(f"{mode}: defaults"))
            notes.append(f"{mode}: defaults, unanswerable emptied by kind: {defaults.kinds()}")
            open_kb = knowledge_base(sources, None, reranker_threshold=None)
            knots = [float(k) for k in args.knots.split(",") if k and mode == "hybrid"]
            # a knot k keeps what blends to k or more: what scores calibrate(k) or more now
            tally, by_knot = await measure_kb(
                open_kb, questions, absolute=[calibrate(k, RELEVANCE_KNOT) for k in knots]
            )
            print(tally.row(f"{mode}: no cut-off"), flush=True)
            if knots:
                notes.append(fit_knot(tally, dict(zip(knots, by_knot.values(), strict=True))))
            # the default before issue 18: lexical fallback, 2.5 on its scores
            former = knowledge_base(
                sources, PassthroughReranker(LexicalReranker()), reranker_threshold=2.5
            )
            tally, _ = await measure_kb(former, questions)
            print(tally.row(f"{mode}: former default (lexical, 2.5)"), flush=True)
            for share, other in cut.items():
                print(other.row(f"{mode}: defaults, relative cut-off {share:g} x best"))
            for weight in [float(w) for w in args.weights.split(",") if w and mode == "hybrid"]:
                blend = PassthroughReranker(HybridReranker(weight))
                kb = knowledge_base(sources, blend, reranker_threshold=None)
                tally, _ = await measure_kb(kb, questions)
                print(tally.row(f"{mode}: vector weight {weight:g}"), flush=True)
            if args.reranker:
                # one run without a cut-off; each threshold keeps what scores at least it
                named = reranker_by_name(args.reranker)
                kb = knowledge_base(sources, named, reranker_threshold=None)
                values = [float(t) for t in args.thresholds.split(",") if t]
                tally, kept = await measure_kb(kb, questions, args.signals, absolute=values)
                print(tally.row(f"{mode}: {named.name}, no cut-off"), flush=True)
                for value, other in kept.items():
                    print(other.row(f"{mode}: {named.name}, threshold {value:g}"), flush=True)
            if mode == "hybrid" and args.embed_candidates:
                # the same candidates from sources that hold no vectors, judged by embedding
                # them at query time (the cost per query is the ms p50 column)
                embedding = PassthroughReranker(HybridReranker(embeddings=local_embeddings()))
                blind = [WithoutVectors(source) for source in sources]
                tally, _ = await measure_kb(knowledge_base(blind, embedding), questions)
                print(tally.row(f"{mode}: no cosines, candidates embedded"), flush=True)
                notes.append(f"{mode}: candidates embedded, emptied by kind: {tally.kinds()}")
            if mode == "lexical":
                print(measure_bm25(Bm25Baseline(sources), questions).row("BM25 (rank_bm25)"))
            for source in sources:
                source.close()
    print("\nConfidence figures of the defaults (the semanticReranker record):")
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
