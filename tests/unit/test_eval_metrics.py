"""Evaluation metrics, folding, significance, TREC files, prices and the LangSmith evaluator."""

from __future__ import annotations

import math

import ir_measures
import pytest
from langsmith.schemas import Example, Run

from agentic_retrieval.errors import PriceTableError
from agentic_retrieval.eval.folding import document_key, fold
from agentic_retrieval.eval.langsmith import langsmith_evaluator
from agentic_retrieval.eval.metrics import (
    citation_check,
    evidence_found,
    ir_metrics,
    mean,
    percentile,
    trec_scores,
)
from agentic_retrieval.eval.pricing import cost, load_prices
from agentic_retrieval.eval.significance import paired_comparison
from agentic_retrieval.eval.trec import run_lines, trec_id, write_qrels
from agentic_retrieval.eval.usage import ModelCall
from agentic_retrieval.wire.models import Reference

QRELS = {
    "q1": {"d1": 2, "d2": 1, "d7": 0},
    "q2": {"d3": 1},
    "q3": {"d4": 0},  # judged, nothing relevant: not scored
}
RUNS = {"q1": ["d2", "d9", "d1"], "q2": [], "q3": ["d4"]}

# trec_eval's nDCG: linear gains, log2(rank + 1) discounts
Q1_NDCG = (1 / math.log2(2) + 2 / math.log2(4)) / (2 / math.log2(2) + 1 / math.log2(3))


def test_metrics_by_hand():
    values = ir_metrics(QRELS, RUNS)
    assert set(values) == {"nDCG@10", "R@10", "R@50", "R@100", "MRR@10", "MAP"}
    assert values["nDCG@10"] == pytest.approx({"q1": Q1_NDCG, "q2": 0.0})
    assert Q1_NDCG == pytest.approx(0.760188, abs=1e-6)
    assert values["R@10"] == {"q1": 1.0, "q2": 0.0}
    assert values["MRR@10"] == {"q1": 1.0, "q2": 0.0}
    assert values["MAP"] == pytest.approx({"q1": (1 / 1 + 2 / 3) / 2, "q2": 0.0})
    # the empty run counts as 0 instead of being left out of the mean
    assert mean(values["nDCG@10"].values()) == pytest.approx(Q1_NDCG / 2)


def test_metrics_match_the_library_on_the_queries_it_scores():
    run = {q: trec_scores(docs) for q, docs in RUNS.items() if docs}
    measures = [ir_measures.parse_measure(m) for m in ("nDCG@10", "R@10", "RR@10", "AP")]
    library = {
        (m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(measures, QRELS, run)
    }
    ours = ir_metrics(QRELS, RUNS)
    for name, measure in (
        ("nDCG@10", "nDCG@10"),
        ("R@10", "R@10"),
        ("MRR@10", "RR@10"),
        ("MAP", "AP"),
    ):
        assert ours[name]["q1"] == pytest.approx(library[("q1", measure)])


def test_rank_order_survives_trec_sorting():
    # ids sorting the other way round must not change the ranking
    values = ir_metrics({"q": {"a": 1}}, {"q": ["z", "y", "a"]})
    assert values["MRR@10"]["q"] == pytest.approx(1 / 3)
    assert trec_scores(["z", "y", "a"]) == {"z": 3.0, "y": 2.0, "a": 1.0}


def test_latency_percentiles_and_means():
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 95) == pytest.approx(38.5)
    assert percentile([], 50) is None
    assert mean([1.0, None, 3.0]) == 2.0 and mean([None]) is None


def reference(key: str, **data) -> Reference:
    return Reference(
        type="searchIndex", id="0", activity_source=0, doc_key=key, source_data=data or None
    )


def test_chunks_fold_to_documents_at_their_first_rank():
    references = [
        reference("r-1#2", record_id="r-1", chunk=2),
        reference("docs-guide-md-3", source_path="/x/guide.md", chunk=3),
        reference("r-1#0", record_id="r-1", chunk=0),
        reference("docs-guide-md-0", source_path="/x/guide.md", chunk=0),
        reference("plain"),
        reference("docs-guide-md-12-0", source_path="/y/guide.md", chunk=0),
    ]
    assert fold(references) == ["r-1", "docs-guide-md", "plain", "docs-guide-md-12"]
    assert document_key("faq#row=1#0", {"record_id": "faq#row=1"}) == "faq#row=1"
    assert document_key("odd-5", {"source_path": "/p", "chunk": 4}) == "odd-5"


def test_evidence_and_citations():
    text = "The day pass costs 6 euros.\nIt is valid until 4 am."
    assert evidence_found(["day  PASS costs", "valid until 4\nam", "7 euros"], text) == [
        True,
        True,
        False,
    ]
    checked = citation_check("Six euros [ref_id:0], valid late [ref_id: 0, 3].", ["0", "1"])
    assert checked == {"cited": ["0", "3"], "invalid": ["3"], "validity": 0.5}
    assert citation_check("No citations.", ["0"])["validity"] is None


def test_paired_randomization_test_is_exact_on_few_questions():
    baseline = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    other = [0.6, 0.7, 0.8, 0.6, 0.7, 0.8]
    result = paired_comparison(baseline, other, names=("a", "b", "nDCG@10"))
    # 2^6 sign assignments; only all-plus and all-minus reach the observed |mean|
    assert result.p_value == pytest.approx(2 / 64)
    assert result.delta == pytest.approx(0.2) and result.significant
    assert 0.1 <= result.ci_low <= 0.2 <= result.ci_high <= 0.3
    same = paired_comparison([0.1, 0.4], [0.1, 0.4], names=("a", "b", "MAP"))
    assert (same.delta, same.ci_low, same.ci_high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    again = paired_comparison(baseline, other, names=("a", "b", "nDCG@10"))
    assert again == result  # seeded: reproducible


def test_trec_files(tmp_path):
    lines = list(run_lines({"q 1": ["d1", "d 2"], "q2": []}, "tag"))
    assert lines == ["q%201 Q0 d1 1 2 tag\n", "q%201 Q0 d%202 2 1 tag\n"]
    assert trec_id("a\tb") == "a%09b"
    write_qrels(tmp_path / "qrels.txt", {"q1": {"d1": 2, "d2": 0}})
    assert (tmp_path / "qrels.txt").read_text() == "q1 0 d1 2\nq1 0 d2 0\n"


def test_prices(tmp_path):
    prices = load_prices({"gpt-x": {"input": 1.0, "output": 4.0}})
    calls = [ModelCall("gpt-x", 1000, 500), ModelCall("gpt-x", 2000, 0)]
    assert cost(calls, prices) == (pytest.approx((3000 * 1.0 + 500 * 4.0) / 1e6), set())
    assert cost([ModelCall(None, 10, 10)], prices) == (None, {"(model without a name)"})
    assert (
        cost([ModelCall("other", 1_000_000, 0)], load_prices({"*": {"input": 2, "output": 3}}))[0]
        == 2.0
    )
    for bad in ({"m": {"input": 1}}, {"m": {"input": -1, "output": 1}}, {}):
        with pytest.raises(PriceTableError):
            load_prices(bad)
    (tmp_path / "p.json").write_text("{oops")
    with pytest.raises(PriceTableError, match="invalid JSON"):
        load_prices(tmp_path / "p.json")


def test_langsmith_evaluator_scores_runs_against_examples():
    response = {
        "response": [{"role": "assistant", "content": [{"type": "text", "text": "[]"}]}],
        "references": [
            {
                "type": "searchIndex",
                "id": "0",
                "activitySource": 1,
                "docKey": "d2#0",
                "sourceData": {"record_id": "d2", "content": "The ferry leaves at 9."},
            },
            {
                "type": "searchIndex",
                "id": "1",
                "activitySource": 1,
                "docKey": "d1#0",
                "sourceData": {"record_id": "d1", "content": "Tickets cost 3 euros."},
            },
        ],
    }
    run = Run(
        id="00000000-0000-0000-0000-000000000001",
        name="kb",
        run_type="retriever",
        inputs={},
        outputs=response,
        start_time="2026-01-01T00:00:00",
    )
    example = Example(
        id="00000000-0000-0000-0000-000000000002",
        dataset_id="00000000-0000-0000-0000-000000000003",
        inputs={},
        outputs={"relevant": {"d1": 2, "d2": 1}, "evidence": ["3 euros", "5 euros"]},
    )
    ndcg = langsmith_evaluator("nDCG@10")(run, example)
    expected = (1 / math.log2(2) + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert ndcg["key"] == "nDCG@10" and ndcg["score"] == pytest.approx(expected)
    assert langsmith_evaluator("MRR@10")(run, example)["score"] == 1.0
    assert langsmith_evaluator("evidence_recall")(run, example) == {
        "key": "evidence_recall",
        "score": 0.5,
    }
    # the retriever adapter's Documents, as plain dicts
    documents = {
        "documents": [{"page_content": "x", "metadata": {"doc_key": "d1#0", "record_id": "d1"}}]
    }
    assert langsmith_evaluator("R@10")({"outputs": documents}, example)["score"] == 0.5
    unjudged = langsmith_evaluator("nDCG@10")(run, {"outputs": {}})
    assert unjudged["score"] is None and "no relevant" in unjudged["comment"]
    with pytest.raises(ValueError, match="unknown metric"):
        langsmith_evaluator("P@5")
