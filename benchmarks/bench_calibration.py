"""Calibration of the lexical reranker, and what a 2.5 threshold does to its scores.

Azure's semantic ranker scores 0-4 and, by default, drops what scores under 2.5. The
lexical reranker orders candidates by a blend of query-term coverage and source rank
(``LexicalReranker.blend``); calibration maps the blend onto the 0-4 scale with one knot:
the blend that becomes 2.5 (``rerankers/lexical.py``). This script chooses that knot on
labelled *tuning* questions and reports what a threshold of 2.5 does on *held-out*
questions it never saw. Since issue 18 the default threshold no longer applies to lexical
scores (``bench_relevance.py`` measures why: paraphrased questions); the 2.5 here is an
explicit one, and the calibrated scale is what ``auto_min_top_score`` reads.

Labelled sets (answerable questions know which passages answer them; unanswerable questions
have no answer in the corpus):

- tuning: the sample corpus (``kb/sample_corpus``: the 14 demo questions with their
  answering files, and 12 unanswerable questions below), the odd-numbered Cranfield queries
  (graded judgements, ``../shared/collections/cranfield``) and, as unanswerable, the same
  Cranfield queries asked of the sample corpus (aeronautics asked of a transit handbook);
- held out: the shared documents (``../shared/data``: the 36 questions of
  ``bench_quality.py`` and 12 unanswerable questions below) and the even-numbered Cranfield
  queries.

The knot maximises, on the tuning sets, the mean over the two tuning collections of the
balanced accuracy of "the question keeps an answering passage / the question keeps nothing".
Held-out figures go through the whole pipeline (``KnowledgeBase.aretrieve``, minimal effort,
top 10), once with an explicit threshold of 2.5 and once without.

Run: ``.venv/bin/python benchmarks/bench_calibration.py`` (about two minutes; exits 0 with a
note when ``../shared`` is absent).
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench_quality import NORTHWIND_QUESTIONS, earth_check, phrase_check
from bench_rerankers import QUESTIONS as EARTH_QUESTIONS

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.kb.loader import sample_corpus_dir, sample_questions
from agentic_retrieval.rerankers.lexical import (
    CALIBRATED_THRESHOLD,
    CALIBRATION_KNOT,
    LexicalReranker,
    calibrate,
)
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.local import LocalKnowledgeSource

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
CRANFIELD = SHARED / "collections" / "cranfield"
DATA = SHARED / "data"
TOP = 10

# Written for this benchmark; checked absent from each corpus by searching for their key words.
SAMPLE_UNANSWERABLE = [
    "Is there free wifi on the trams?",
    "How much does parking cost at the park-and-ride?",
    "What is the starting salary of a tram driver?",
    "How many vacation days do tram drivers get?",
    "Which new tram lines will open in 2030?",
    "Can I pay my fare with Bitcoin?",
    "How do I apply for a job as a tram driver?",
    "What is the carbon footprint of a tram journey?",
    "Can I reserve a seat on the tram in advance?",
    "Who is the mayor of Port Calloway?",
    "Is there a maternity leave policy for staff?",
    "Can I hire a tram for a private party?",
]
SHARED_UNANSWERABLE = [
    "How many vacation days do I get?",
    "What is the 401(k) employer match?",
    "What is the dress code at the office?",
    "How many moons does Jupiter have?",
    "When was the Eiffel Tower built?",
    "How long is parental leave?",
    "How do I get a new company laptop?",
    "How tall is Mount Everest?",
    "What is the population of Tokyo?",
    "Is there free parking at the office?",
    "How big is the annual bonus?",
    "Can I work from home on Fridays?",
]

Judge = Callable[[Hit], int]
"""A passage's relevance grade for one question (0: not relevant)."""


@dataclass
class Question:
    text: str
    judge: Judge | None = None
    """``None`` for a question the corpus cannot answer."""
    relevant_docs: set[str] = field(default_factory=set)
    """Cranfield only: the documents judged relevant (for recall)."""


@dataclass
class Collection:
    name: str
    sources: list[LocalKnowledgeSource]
    questions: list[Question]


# --- the labelled sets -------------------------------------------------------------------


def cranfield(work: Path) -> tuple[LocalKnowledgeSource, list[tuple[str, Question]]]:
    folder = work / "cranfield"
    folder.mkdir()
    for line in (CRANFIELD / "corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        (folder / f"{doc['_id']}.txt").write_text(doc["text"] or doc["title"] or "(empty)")
    source = LocalKnowledgeSource("cranfield", work / "cranfield.sqlite", create=True)
    source.index([folder])
    grades: dict[str, dict[str, int]] = {}
    with (CRANFIELD / "qrels" / "test.tsv").open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            grades.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    questions = []
    for line in (CRANFIELD / "queries.jsonl").open(encoding="utf-8"):
        query = json.loads(line)
        judged = grades.get(query["_id"], {})
        relevant = {doc for doc, grade in judged.items() if grade > 0}
        judge = _cranfield_judge(judged)
        questions.append((query["_id"], Question(query["text"], judge, relevant)))
    return source, questions


def _cranfield_judge(judged: dict[str, int]) -> Judge:
    return lambda hit: judged.get(cranfield_doc(hit.doc_key), 0)


def cranfield_doc(doc_key: str) -> str:
    """``cranfield-123-txt-0`` -> ``123`` (chunks fold to their document)."""
    return doc_key.split("-")[1]


def sample(work: Path) -> Collection:
    sources = []
    for entry in json.loads((sample_corpus_dir() / "sources.json").read_text(encoding="utf-8")):
        source = LocalKnowledgeSource(entry["name"], work / f"{entry['name']}.sqlite", create=True)
        source.index([sample_corpus_dir() / entry["folder"]])
        sources.append(source)
    questions = [Question(q["question"], _file_judge(q["files"])) for q in sample_questions()]
    questions += [Question(text) for text in SAMPLE_UNANSWERABLE]
    return Collection("sample corpus", sources, questions)


def _file_judge(files: list[str]) -> Judge:
    slugs = [re.sub(r"[^a-z0-9]+", "-", f.lower()).strip("-") + "-" for f in files]
    return lambda hit: int(any(hit.doc_key.startswith(slug) for slug in slugs))


def shared(work: Path) -> Collection:
    source = LocalKnowledgeSource("shared", work / "shared.sqlite", create=True)
    source.index([DATA / "earth-book" / "pages", DATA / "northwind"])
    questions = [Question(q, _ref_judge(earth_check(page))) for q, page in EARTH_QUESTIONS]
    questions += [Question(q, _ref_judge(phrase_check(p))) for q, p in NORTHWIND_QUESTIONS]
    questions += [Question(text) for text in SHARED_UNANSWERABLE]
    return Collection("shared documents", [source], questions)


def _ref_judge(check: Callable[[dict], bool]) -> Judge:
    return lambda hit: int(check({"docKey": hit.doc_key, "content": hit.content}))


# --- tuning: the knot ---------------------------------------------------------------------


@dataclass
class Scored:
    blends: list[float]
    grades: list[int] | None
    """``None`` for an unanswerable question."""


async def blends(collection: Collection, questions: Sequence[Question]) -> list[Scored]:
    """The top-``TOP`` blends per question, as the pipeline's minimal effort computes them."""
    reranker = LexicalReranker()
    out = []
    for question in questions:
        hits: list[Hit] = []
        for source in collection.sources:
            found = await source.search(SearchQuery(text=question.text))
            hits += [hit.model_copy(update={"source": source.name}) for hit in found]
        ranked = sorted(zip(reranker.blend(question.text, hits), hits, strict=True), key=_first)
        top = ranked[:TOP]
        grades = None if question.judge is None else [question.judge(h) for _, h in top]
        out.append(Scored([b for b, _ in top], grades))
    return out


def _first(pair: tuple[float, Hit]) -> float:
    return -pair[0]


def balanced_accuracy(scored: list[Scored], knot: float) -> float:
    """Mean of: share of answerable questions keeping an answering passage, share of
    unanswerable questions keeping nothing (kept = blend at or above ``knot``)."""
    answerable = [s for s in scored if s.grades is not None]
    unanswerable = [s for s in scored if s.grades is None]
    kept = [
        any(b >= knot and g for b, g in zip(s.blends, s.grades or [], strict=True))
        for s in answerable
    ]
    silent = [not any(b >= knot for b in s.blends) for s in unanswerable]
    return (sum(kept) / len(kept) + sum(silent) / len(silent)) / 2


async def tune(work: Path, source: LocalKnowledgeSource, cran: list[tuple[str, Question]]) -> float:
    sample_kb = sample(work)
    odd = [q for qid, q in cran if int(qid) % 2 == 1]
    cran_collection = Collection("cranfield", [source], odd)
    sets = [
        await blends(sample_kb, sample_kb.questions),
        await blends(cran_collection, odd)
        + await blends(sample_kb, [Question(q.text) for q in odd]),
    ]
    print("Tuning: sample corpus (14 answerable, 12 unanswerable); Cranfield odd queries")
    print(f"({len(odd)} answerable; the same queries asked of the sample corpus as unanswerable)\n")
    print("| knot (blend) | sample corpus BA | Cranfield BA | mean |")
    print("| --- | --- | --- | --- |")
    best, best_score = 0.0, -1.0
    for step in range(30, 61, 2):
        knot = step / 20
        scores = [balanced_accuracy(s, knot) for s in sets]
        mean = sum(scores) / len(scores)
        if mean > best_score + 1e-9:
            best, best_score = knot, mean
        print(f"| {knot:.2f} | {scores[0]:.3f} | {scores[1]:.3f} | {mean:.3f} |")
    print(
        f"\nbest knot {best:.2f} (mean balanced accuracy {best_score:.3f}); "
        f"the library uses CALIBRATION_KNOT = {CALIBRATION_KNOT:.2f}\n"
    )
    return best


# --- held out: the whole pipeline ---------------------------------------------------------


@dataclass
class Outcome:
    answer_kept: int = 0
    answerable: int = 0
    silent: int = 0
    unanswerable: int = 0
    references: int = 0
    answer_scores: list[float] = field(default_factory=list)
    unanswerable_best: list[float] = field(default_factory=list)
    other_scores: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)


async def held_out(
    collection: Collection, threshold: float | None, questions: Sequence[Question]
) -> Outcome:
    kb = KnowledgeBase(
        collection.sources, defaults=Context(reranker_threshold=threshold, top_n=TOP)
    )
    outcome = Outcome()
    for question in questions:
        response = await kb.aretrieve(
            {
                "intents": [{"search": question.text}],
                "knowledgeSourceParams": [
                    {"knowledgeSourceName": s.name, "includeReferenceSourceData": True}
                    for s in collection.sources
                ],
            }
        )
        hits = [
            Hit(doc_key=r.doc_key or "", content=(r.source_data or {}).get("content", ""))
            for r in response.references
        ]
        scores = [r.reranker_score or 0.0 for r in response.references]
        outcome.references += len(hits)
        if question.judge is None:
            outcome.unanswerable += 1
            outcome.silent += not hits
            outcome.unanswerable_best.extend(scores[:1])
            continue
        grades = [question.judge(h) for h in hits]
        outcome.answerable += 1
        outcome.answer_kept += any(grades)
        answering = [s for s, g in zip(scores, grades, strict=True) if g]
        outcome.answer_scores.extend(answering[:1])
        outcome.other_scores.extend(s for s, g in zip(scores, grades, strict=True) if not g)
        if question.relevant_docs:
            found = {cranfield_doc(h.doc_key) for h, g in zip(hits, grades, strict=True) if g}
            outcome.recall.append(len(found) / len(question.relevant_docs))
    return outcome


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


async def report(
    work: Path, cran_source: LocalKnowledgeSource, cran: list[tuple[str, Question]]
) -> None:
    held = shared(work)
    even = [q for qid, q in cran if int(qid) % 2 == 0]
    cran_collection = Collection("Cranfield even queries", [cran_source], even)
    print(f"Held out, whole pipeline (minimal effort, top {TOP}):\n")
    print(
        "| set | threshold | answerable: answer kept | unanswerable: nothing kept | "
        "references per question | recall of judged documents |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    rows = []
    for collection in (held, cran_collection):
        for threshold in (None, CALIBRATED_THRESHOLD):
            outcome = await held_out(collection, threshold, collection.questions)
            rows.append((collection.name, threshold, outcome))
            silent = f"{outcome.silent}/{outcome.unanswerable}" if outcome.unanswerable else "n/a"
            recall = f"{statistics.mean(outcome.recall):.3f}" if outcome.recall else "n/a"
            print(
                f"| {collection.name} | {threshold if threshold is not None else 'none'} | "
                f"{outcome.answer_kept}/{outcome.answerable} | {silent} | "
                f"{outcome.references / len(collection.questions):.1f} | {recall} |"
            )
    print("\nMedian calibrated score (no threshold), held out:\n")
    print(
        "| set | best answering passage | best candidate of an unanswerable question | "
        "other candidates |"
    )
    print("| --- | --- | --- | --- |")
    for name, threshold, outcome in rows:
        if threshold is None:
            print(
                f"| {name} | {_median(outcome.answer_scores)} | "
                f"{_median(outcome.unanswerable_best)} | {_median(outcome.other_scores)} |"
            )
    await vacation(held)


async def vacation(collection: Collection) -> None:
    """The README's example, asked of the shared documents, which do not answer it."""
    for threshold in (None, CALIBRATED_THRESHOLD):
        kb = KnowledgeBase(collection.sources, defaults=Context(reranker_threshold=threshold))
        response = await kb.aretrieve({"intents": [{"search": SHARED_UNANSWERABLE[0]}]})
        first = response.references[0] if response.references else None
        shown = f"{first.doc_key} at {first.reranker_score:.2f}" if first else "no reference"
        print(
            f"\n'{SHARED_UNANSWERABLE[0]}' with threshold {threshold}: "
            f"{len(response.references)} references; first: {shown}"
        )


async def main() -> int:
    if not (CRANFIELD.is_dir() and DATA.is_dir()):
        print("../shared/collections/cranfield or ../shared/data is absent: nothing to measure")
        return 0
    print(f"calibrate(knot) = {CALIBRATED_THRESHOLD}; e.g. calibrate(1.0) = {calibrate(1.0):.2f}\n")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source, cran = cranfield(work)
        await tune(work, source, cran)
        await report(work, source, cran)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
