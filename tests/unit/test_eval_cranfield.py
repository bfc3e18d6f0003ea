"""The Cranfield collection (../shared/collections/cranfield; skipped when absent).

The embedded store's lexical ranking at minimal effort is checked against a plain BM25
reference (rank_bm25) computed here, scored by the same metric code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fakes import stemmed_words

from agentic_retrieval.eval import Configuration, evaluate, load_beir
from agentic_retrieval.eval.metrics import ir_metrics, mean

CRANFIELD = Path(__file__).resolve().parents[2].parent / "shared" / "collections" / "cranfield"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CRANFIELD / "corpus.jsonl").is_file(), reason="Cranfield collection absent"
    ),
]


def test_cranfield_loads_in_beir_layout():
    dataset = load_beir(CRANFIELD)
    assert len(dataset.questions) == 225 and len(dataset.document_keys) == 1400
    assert sum(len(q.relevant) for q in dataset.questions) == 1837
    assert all(q.judged for q in dataset.questions) and dataset.notes == []


def bm25_runs(questions) -> dict[str, list[str]]:
    from rank_bm25 import BM25Okapi

    # the store's own analysis (English word forms folded), so that the reference checks the
    # BM25 ranking, not the analyzer: a plain-token BM25 scores ~0.03 nDCG@10 under it
    rows = [json.loads(line) for line in (CRANFIELD / "corpus.jsonl").open()]
    bm25 = BM25Okapi([stemmed_words(f"{r['title']} {r['text']}") for r in rows])
    runs = {}
    for question in questions:
        scores = bm25.get_scores(stemmed_words(question.text))
        best = sorted(range(len(rows)), key=lambda i: -scores[i])[:100]
        runs[question.id] = [rows[i]["_id"] for i in best]
    return runs


def test_lexical_store_is_on_par_with_a_reference_bm25(tmp_path):
    report = evaluate(CRANFIELD, [Configuration(retrieval="lexical")], cache_dir=tmp_path)
    result = report.results[0]
    assert result.summary["questions"] == 225 and result.summary["errors"] == 0
    assert all(50 <= len(q.documents) <= 100 for q in result.queries)  # 100 chunks, folded
    assert report.notes == [
        "2 corpus documents could not be indexed and can never be retrieved: corpus.jsonl:471 "
        "(record '471' has no text (text or content)), corpus.jsonl:995 (record '995' has no "
        "text (text or content))",
        "retrieval: lexical (BM25 only; without --no-embeddings a corpus is evaluated hybrid, "
        "with vectors of the bundled model)",
    ]
    reference = ir_metrics(
        {q.id: dict(q.relevant) for q in report.questions}, bm25_runs(report.questions)
    )
    for metric, tolerance in (("nDCG@10", 0.03), ("R@100", 0.04)):
        ours, theirs = result.summary[metric], mean(reference[metric].values())
        assert abs(ours - theirs) <= tolerance, (metric, ours, theirs)
