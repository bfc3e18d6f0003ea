"""Topic graph sampling on broad questions: distinct topics in the top 10, and relevance.

The question set (``topic_questions.jsonl``, written for issue 29 item 4) holds 32 broad
"what kinds of ... / what themes ..." questions, 18 over the Earth-book pages and 14 over the
Northwind PDFs, split in two halves (``split``: ``calibration``, ``heldout``) before anything
was measured. Each corpus is indexed as a hybrid local source (the bundled model), its topic
index built from the stored vectors (:meth:`LocalKnowledgeSource.refresh_topics`), and every
question searched (top 10, the default pool of 1,000 candidates) with ``topicGraph`` ``none``,
``diverse`` at several factors and ``balanced``.

Figures per setting (mean over a split's questions):

- ``topics``: distinct broad topics of the store's topic index among the top 10;
- ``docs``: distinct documents (Earth-book pages, Northwind PDFs) among the top 10, a
  measure of spread that does not depend on the topic index;
- ``cosine``: mean cosine of the top 10 to the question (the bundled model's), and
  ``kept``: that mean relative to ``none``'s; ``top-1``: share of questions whose best hit
  is unchanged.

``--split calibration`` chooses the factor (the most topics with ``kept`` >= 0.95);
``--split heldout`` (the default) reports. Run:
``.venv/bin/python benchmarks/bench_topic_graph.py [--split heldout] [--cache DIR] [--data DIR]``
(skips with a note when the shared data is absent).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentic_retrieval.embeddings import local_embeddings, local_embeddings_available
from agentic_retrieval.permissions import ANONYMOUS
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.sources.local.store import topics
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

HERE = Path(__file__).parent
QUESTIONS = HERE / "topic_questions.jsonl"
CORPORA = {"earth": "earth-book/pages", "northwind": "northwind"}
SETTINGS = {
    "none": TopicGraphSetting(kind="none"),
    "diverse 0.1": TopicGraphSetting(kind="diverse", diversity_factor=0.1),
    "diverse 0.2": TopicGraphSetting(kind="diverse", diversity_factor=0.2),
    "diverse 0.3": TopicGraphSetting(kind="diverse", diversity_factor=0.3),
    "diverse 0.5": TopicGraphSetting(kind="diverse", diversity_factor=0.5),
    "balanced": TopicGraphSetting(kind="balanced"),
}
TOP = 10


@dataclass
class Row:
    topics: float = 0.0
    docs: float = 0.0
    cosine: float = 0.0
    top1: float = 0.0


def measure(source: LocalKnowledgeSource, question: str, setting: TopicGraphSetting) -> Row:
    hits = source.search_sync(question, TOP, None, None, ANONYMOUS, setting)
    conn = source.store._connection()
    rows = conn.execute(
        "SELECT rid, file_id FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([h.doc_key for h in hits]),),
    ).fetchall()
    assigned = topics.topics_of(conn, [int(rid) for rid, _ in rows])
    return Row(
        topics=len({broad for broad, _ in assigned.values()}),
        docs=len({file_id for _, file_id in rows}),
        cosine=float(np.mean([h.vector_similarity or 0.0 for h in hits])) if hits else 0.0,
        top1=0.0,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="heldout", choices=["calibration", "heldout", "all"])
    parser.add_argument("--data", type=Path, default=HERE.parent.parent.parent / "shared" / "data")
    parser.add_argument("--cache", type=Path, default=None, help="keep the stores here")
    args = parser.parse_args()
    if not all((args.data / folder).exists() for folder in CORPORA.values()):
        print(f"skipped: {args.data} does not hold {', '.join(CORPORA.values())}")
        return 0
    if not local_embeddings_available():
        print("skipped: the bundled embedding model is not available")
        return 0
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line]
    if args.split != "all":
        questions = [q for q in questions if q["split"] == args.split]
    root = args.cache or Path(tempfile.mkdtemp(prefix="topic-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    embeddings = local_embeddings()
    sources = {}
    for name, folder in CORPORA.items():
        path = root / f"{name}.sqlite"
        fresh = not path.exists()
        source = LocalKnowledgeSource(name, path, embeddings=embeddings, create=True)
        if fresh:
            started = time.perf_counter()
            source.index([args.data / folder])
            print(f"indexed {name} in {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        state = source.refresh_topics()
        print(
            f"{name}: {state.vectors} vectors, {state.broad_topics} broad / "
            f"{state.fine_topics} fine topics, built in {time.perf_counter() - started:.2f} s"
        )
        sources[name] = source
    results = {label: Row() for label in SETTINGS}
    best_of_none: dict[str, str] = {}
    latency = {label: 0.0 for label in SETTINGS}
    for q in questions:
        source = sources[q["corpus"]]
        for label, setting in SETTINGS.items():
            started = time.perf_counter()
            row = measure(source, q["question"], setting)
            latency[label] += time.perf_counter() - started
            first = source.search_sync(q["question"], 1, None, None, ANONYMOUS, setting)
            key = first[0].doc_key if first else ""
            if label == "none":
                best_of_none[q["id"]] = key
            total = results[label]
            total.topics += row.topics
            total.docs += row.docs
            total.cosine += row.cosine
            total.top1 += key == best_of_none[q["id"]]
    count = max(len(questions), 1)
    base = results["none"].cosine / count
    print(f"\n{len(questions)} questions ({args.split}), top {TOP}")
    header = ("topics", "docs", "cosine", "kept", "top-1", "ms")
    print(f"{'setting':<12} " + " ".join(f"{h:>6}" for h in header))
    for label, total in results.items():
        cosine = total.cosine / count
        print(
            f"{label:<12} {total.topics / count:6.2f} {total.docs / count:6.2f} {cosine:7.3f} "
            f"{cosine / base:6.3f} {total.top1 / count:6.2f} {1000 * latency[label] / count:6.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
