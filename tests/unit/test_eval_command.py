"""``agentic-retrieval eval`` and ``evaluate()`` end to end on tiny datasets with exact numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.fakes import NamedConcepts, write
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.errors import EvalConfigurationError
from agentic_retrieval.eval import Configuration, Progress, Question, evaluate
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.testing import ScriptedChatModel

runner = CliRunner()

CORPUS = [
    {"_id": "d1", "title": "Tram fares", "text": "A single tram ride costs two euros."},
    {"_id": "d2", "title": "Bike docking", "text": "Dock shared bikes within thirty minutes."},
    {"_id": "d3", "title": "Lost property", "text": "The lost property office keeps items."},
    {"_id": "d4", "title": "Ferry timetable", "text": "The harbour ferry sails every hour."},
    {"_id": "d5", "title": "Depot", "text": "Tram maintenance happens at night."},
]
QUERIES = [
    {"_id": "q1", "text": "tram fares"},
    {"_id": "q2", "text": "ferry harbour"},
    {"_id": "q3", "text": "lost umbrella office"},
    {"_id": "q4", "text": "zeppelin"},
    {"_id": "q5", "text": "never judged"},
]
QRELS = (
    "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td5\t1\nq2\td4\t1\nq3\td3\t1\nq3\td2\t1\nq4\td2\t1\n"
)

LOG3 = math.log2(3)
# q1 finds d1 then d5 (both relevant), q2 d4, q3 d3 (one of its two), q4 nothing
EXPECTED = {
    "nDCG@10": (1.0 + 1.0 + 1 / (1 + 1 / LOG3) + 0.0) / 4,
    "R@10": (1.0 + 1.0 + 0.5 + 0.0) / 4,
    "MRR@10": (1.0 + 1.0 + 1.0 + 0.0) / 4,
    "MAP": (1.0 + 1.0 + 0.5 + 0.0) / 4,
}
# with only the top chunk, q1 loses d5
TOP1_NDCG = (2 / (2 + 1 / LOG3) + 1.0 + 1 / (1 + 1 / LOG3) + 0.0) / 4


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.fixture
def dataset(tmp_path) -> Path:
    root = tmp_path / "toy"
    write(root / "corpus.jsonl", jsonl(CORPUS))
    write(root / "queries.jsonl", jsonl(QUERIES))
    write(root / "qrels" / "test.tsv", QRELS)
    return root


def test_eval_command_end_to_end_with_exact_numbers(tmp_path, dataset):
    out = tmp_path / "out"
    # lexical, so that the figures are BM25's exactly
    args = [
        "eval",
        "--dataset",
        str(dataset),
        "--cache",
        str(tmp_path / "cache"),
        "--no-embeddings",
    ]
    result = runner.invoke(app, [*args, "--top-n", "10,1", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "toy: 4 questions (4 with judged documents)" in result.stdout
    assert "note: 1 of 5 queries have no judgements" in result.stdout

    report = json.loads((out / "report.json").read_text())
    assert [q["id"] for q in report["questions"]] == ["q1", "q2", "q3", "q4"]
    assert report["questions"][0]["relevant"] == {"d1": 2, "d5": 1}
    baseline, top1 = report["configurations"]
    assert baseline["name"] == "minimal/lexical/default/top10"
    for metric, value in EXPECTED.items():
        assert baseline["summary"][metric] == pytest.approx(value), metric
    assert top1["summary"]["nDCG@10"] == pytest.approx(TOP1_NDCG)
    assert baseline["summary"]["source_queries"] == 1.0
    assert baseline["summary"]["model_calls"] == 0.0 and baseline["summary"]["errors"] == 0
    queries = {q["question_id"]: q for q in baseline["queries"]}
    assert queries["q1"]["documents"] == ["d1", "d5"] and queries["q4"]["documents"] == []
    assert queries["q3"]["metrics"]["R@10"] == 0.5

    runs = (out / "runs" / "minimal_lexical_default_top10.run").read_text().splitlines()
    assert runs[:2] == [
        "q1 Q0 d1 1 2 minimal_lexical_default_top10",
        "q1 Q0 d5 2 1 minimal_lexical_default_top10",
    ]
    assert "q1 0 d1 2" in (out / "qrels.txt").read_text().splitlines()
    comparison = next(c for c in report["comparisons"] if c["metric"] == "nDCG@10")
    assert comparison["delta"] == pytest.approx(TOP1_NDCG - EXPECTED["nDCG@10"])
    assert comparison["p_value"] == 1.0  # one question differs: every sign flip is as extreme
    assert (out / "quality-vs-cost.png").read_bytes()[:4] == b"\x89PNG"
    assert "| minimal/lexical/default/top1 |" in (out / "report.md").read_text()

    # the second run reuses the indexed corpus
    again = runner.invoke(app, [*args, "--top-n", "10"])
    assert again.exit_code == 0 and "0.653" in again.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--dataset", "{tmp}/nowhere"],
            "neither a BEIR dataset (corpus.jsonl) nor a knowledge base",
        ),
        (["--dataset", "{data}", "--kb", "{tmp}"], "give either --dataset DIR (BEIR) or --kb DIR"),
        (["--kb", "{tmp}"], "--kb needs --questions FILE"),
        (["--dataset", "{data}", "--effort", "low"], "needs a chat model"),
        # auto without a model would never escalate: minimal's figures under auto's name
        (["--dataset", "{data}", "--effort", "minimal,auto"], "would measure the model-free"),
        (["--dataset", "{data}", "--effort", "huge"], "effort must be one of minimal, low, medium"),
        (["--dataset", "{data}", "--top-n", "ten"], "--top-n: 'ten' is not an integer"),
        (["--dataset", "{data}", "--top-n", "500"], "top_n must be between 1 and 200"),
        (["--dataset", "{data}", "--split", "dev"], "no qrels for split 'dev'"),
        (["--dataset", "{data}", "--prices", "{tmp}/none.json"], "price table"),
        (["--dataset", "{data}", "--embeddings", "bogus", "--retrieval", "hybrid"], "use 'local'"),
        (["--dataset", "{data}", "--no-embeddings", "--retrieval", "hybrid"], "needs embeddings"),
        (["--dataset", "{data}", "--no-embeddings", "--embeddings", "local"], "contradict"),
    ],
)
def test_eval_mistakes_are_one_line_and_exit_2(tmp_path, dataset, monkeypatch, args, message):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    argv = [a.format(tmp=tmp_path, data=dataset) for a in args]
    result = runner.invoke(app, ["eval", *argv, "--cache", str(tmp_path / "cache")])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_malformed_qrels_stop_the_command_with_the_line(tmp_path, dataset):
    write(dataset / "qrels" / "test.tsv", QRELS + "q1\td404\t1\n")
    result = runner.invoke(app, ["eval", "--dataset", str(dataset), "--cache", str(tmp_path / "c")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: qrels/test.tsv names 1 documents not in corpus.jsonl: d404"
    )


@pytest.fixture
def kb_dir(tmp_path) -> Path:
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create(name="transit")
    directory.add_or_update_source("rules", description="Tram and ferry rules")
    directory.index_records("rules", write(tmp_path / "corpus.jsonl", jsonl(CORPUS)))
    docs = tmp_path / "guides"
    write(docs / "night.md", "# Night buses\n\nNight buses leave the central station hourly.\n")
    directory.add_or_update_source("guides")
    directory.index("guides", [docs])
    directory.close()
    return tmp_path / "kb"


QUESTIONS = [
    {"id": "fares", "question": "tram fares", "relevant": ["d1"], "evidence": ["two euros"]},
    {"id": "night", "question": "night buses", "relevant": ["guides/night.md"]},
    {"id": "ferry", "question": "ferry harbour", "evidence": ["every hour", "at noon"]},
    {"id": "huge", "question": "x" * 200_001, "relevant": ["d4"]},
]


def scripted_model() -> ScriptedChatModel:
    def plan(text: str) -> dict:
        return {"needs_retrieval": True, "queries": [{"query": text}]}

    enough = {"is_sufficient": True, "confidence": 0.9}
    texts = ["tram fares", "night buses", "ferry harbour"]
    return ScriptedChatModel(
        script={
            # the over-long question fails validation before any model call
            "QueryPlan": [plan(t) for t in texts] * 2,
            "EvidenceAssessment": [enough] * 3,
        }
    )


def test_evaluate_a_knowledge_base_at_each_effort(tmp_path, kb_dir):
    questions = write(tmp_path / "questions.jsonl", jsonl(QUESTIONS))
    model = scripted_model()
    seen: list[str] = []
    report = evaluate(
        kb_dir,
        [Configuration("minimal"), Configuration("low"), Configuration("medium")],
        questions=questions,
        chat_model=model,
        prices={"*": {"input": 1.0, "output": 2.0}},
        progress=Progress(question=lambda c, r: seen.append(f"{c.effort}:{r.question_id}")),
    )
    assert len(seen) == 12 and seen[0] == "minimal:fares"
    minimal, low, medium = report.results
    assert [q.question_id for q in minimal.queries] == ["fares", "night", "ferry", "huge"]
    # judged questions: fares, night, huge (an error scores 0, never skipped)
    assert minimal.metrics["MRR@10"] == {"fares": 1.0, "night": 1.0, "huge": 0.0}
    assert minimal.summary["errors"] == 1 and minimal.summary["judged"] == 3
    huge = minimal.queries[3]
    assert huge.error is not None and "200000" in huge.error and huge.documents == []
    assert [q.evidence for q in minimal.queries[:3]] == [[True], None, [True, False]]
    assert minimal.summary["evidence_recall"] == pytest.approx((1.0 + 0.5) / 2)
    assert minimal.summary["source_queries"] == pytest.approx(6 / 4)  # 2 sources x 3 questions
    assert minimal.summary["model_calls"] == 0 and minimal.summary["cost"] == 0.0

    assert [q.model_calls for q in low.queries] == [1, 1, 1, 0]
    assert [q.model_calls for q in medium.queries] == [2, 2, 2, 0]
    assert [q.input_tokens for q in medium.queries] == [240, 240, 240, 0]
    assert medium.summary["tokens"] == pytest.approx(3 * 300 / 4)
    assert medium.queries[0].cost == pytest.approx((240 * 1.0 + 60 * 2.0) / 1e6)
    assert low.metrics["nDCG@10"]["fares"] == 1.0
    assert model.script.remaining() == {"QueryPlan": 0, "EvidenceAssessment": 0}

    names = [c.configuration for c in report.comparisons if c.metric == "nDCG@10"]
    assert names == ["low/indexed/default/top100", "medium/indexed/default/top100"]
    assert "| minimal/indexed/default/top100 |" in report.markdown()


def test_judgements_must_name_documents_of_the_knowledge_base(tmp_path, kb_dir):
    questions = write(tmp_path / "q.jsonl", jsonl([{"id": 1, "question": "x", "relevant": ["d9"]}]))
    result = runner.invoke(app, ["eval", "--kb", str(kb_dir), "--questions", str(questions)])
    assert result.exit_code == 2
    assert "judge 1 documents the knowledge base does not hold: d9" in result.stderr


def test_hybrid_needs_vectors_and_objects_keep_their_own_sources(tmp_path, kb_dir):
    questions = write(tmp_path / "q.jsonl", jsonl(QUESTIONS[:1]))
    with pytest.raises(
        EvalConfigurationError, match="no source of 'transit' was indexed with vectors"
    ):
        evaluate(kb_dir, [Configuration(retrieval="hybrid")], questions=questions)
    from agentic_retrieval.kb.loader import open_knowledge_base

    kb = open_knowledge_base(kb_dir)
    report = evaluate(kb, [Configuration(top_n=5)], questions=questions)
    assert report.results[0].metrics["nDCG@10"] == {"fares": 1.0}
    with pytest.raises(EvalConfigurationError, match="evaluated with its own sources"):
        evaluate(kb, [Configuration(reranker="lexical")], questions=questions)
    assert isinstance(kb, KnowledgeBase)


def test_answer_synthesis_reports_citation_validity(tmp_path, kb_dir):
    questions = write(tmp_path / "q.jsonl", jsonl(QUESTIONS[:2]))
    model = ScriptedChatModel(
        script={
            "QueryPlan": [
                {"needs_retrieval": True, "queries": [{"query": "tram fares"}]},
                {"needs_retrieval": True, "queries": [{"query": "night buses"}]},
            ],
            "SynthesizedAnswer": [
                {"answer": "A ride costs two euros [ref_id:0]."},
                {"answer": "Night buses run hourly."},
            ],
        }
    )
    configuration = Configuration("low", output_mode="answerSynthesis", top_n=5)
    report = evaluate(kb_dir, [configuration], questions=questions, chat_model=model)
    result = report.results[0]
    fares, night = result.queries
    assert fares.answer == "A ride costs two euros [ref_id:0]."
    assert fares.citations == {"cited": ["0"], "invalid": [], "validity": 1.0}
    assert night.citations == {"cited": [], "invalid": [], "validity": None}
    assert result.summary["citation_validity"] == 1.0
    assert result.summary["answers_without_citations"] == 1
    assert [q.model_calls for q in result.queries] == [2, 2]  # plan + answer
    assert result.configuration.name == "low/indexed/default/top5/answer"


def test_hybrid_on_a_beir_corpus_embeds_once_and_rebuilds_for_another_model(
    tmp_path, dataset, monkeypatch
):
    import langchain.embeddings

    built: list[str] = []

    def init_embeddings(name: str, **kwargs):
        built.append(name)
        return NamedConcepts(name.partition(":")[2])

    monkeypatch.setattr(langchain.embeddings, "init_embeddings", init_embeddings)
    configurations = [Configuration(retrieval="lexical"), Configuration(retrieval="hybrid")]
    cache = tmp_path / "cache"
    first = evaluate(dataset, configurations, embeddings="fake:a", cache_dir=cache)
    assert [r.configuration.name for r in first.results] == [
        "minimal/lexical/default/top100",
        "minimal/hybrid/default/top100",
    ]
    assert first.results[1].metrics["MRR@10"]["q2"] == 1.0
    (kb_dir,) = cache.iterdir()
    manifest = json.loads((kb_dir / "knowledge-base.json").read_text())
    assert manifest["sources"][0]["embedding_model"] == "fake:a"
    assert built == ["fake:a", "fake:a"]  # indexing, then opening for hybrid
    evaluate(dataset, configurations, embeddings="fake:a", cache_dir=cache)
    assert built == ["fake:a", "fake:a", "fake:a"]  # cached: opened, not re-indexed
    evaluate(dataset, configurations, embeddings="fake:b", cache_dir=cache)
    manifest = json.loads((kb_dir / "knowledge-base.json").read_text())
    assert manifest["sources"][0]["embedding_model"] == "fake:b"


def test_concurrent_questions_give_the_same_results(tmp_path, dataset):
    one = evaluate(dataset, [Configuration(retrieval="lexical")], cache_dir=tmp_path)
    many = evaluate(
        dataset, [Configuration(retrieval="lexical")], cache_dir=tmp_path, concurrency=3
    )
    assert [q.documents for q in one.results[0].queries] == [
        q.documents for q in many.results[0].queries
    ]
    assert many.results[0].summary["nDCG@10"] == pytest.approx(EXPECTED["nDCG@10"])
    assert many.info["concurrency"] == 3


def test_failed_questions_are_listed_by_the_command(tmp_path, kb_dir):
    questions = write(tmp_path / "q.jsonl", jsonl(QUESTIONS))
    result = runner.invoke(app, ["eval", "--kb", str(kb_dir), "--questions", str(questions)])
    assert result.exit_code == 0, result.output
    assert "transit: 4 questions (3 with judged documents)" in result.stdout
    failure = next(line for line in result.stdout.splitlines() if "failed" in line)
    assert failure.startswith("minimal/indexed/default/top100: question huge failed: ")
    assert "200000" in failure


def test_report_md_lists_the_failed_questions_worst_first_and_bounded(tmp_path, kb_dir):
    missed = {"id": "missed", "question": "tram maintenance", "relevant": ["d3"]}
    unanswerable = [
        {"id": f"z{n:02}", "question": f"zeppelin mooring {n}", "relevant": ["d1"]}
        for n in range(12)
    ]
    questions = write(tmp_path / "q.jsonl", jsonl([*QUESTIONS, missed, *unanswerable]))
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["eval", "--kb", str(kb_dir), "--questions", str(questions), "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    markdown = (out / "report.md").read_text()
    section = markdown[markdown.index("## Questions that failed") :]
    assert "### minimal/indexed/default/top100: 14 of 17 failed" in section
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| question | asked | nDCG@10 | evidence | why |"
    assert rows[1].startswith("| huge | " + "x" * 59 + "… | 0.000 | - | error: ")
    assert rows[2] == (
        "| missed | tram maintenance | 0.000 | - | no relevant document in the top 10 |"
    )
    assert rows[3] == "| z00 | zeppelin mooring 0 | 0.000 | - | nothing retrieved |"
    assert [row.split(" | ")[0] for row in rows[3:]] == [f"| z{n:02}" for n in range(8)]
    assert "... and 4 more (report.json)." in section
    for passed in ("fares", "night", "ferry"):  # each found what it needed
        assert f"| {passed} |" not in section


def test_report_md_names_a_question_whose_evidence_was_not_found(tmp_path, kb_dir):
    questions = [Question("hours", (("user", "ferry harbour"),), evidence=("at noon",))]
    report = evaluate(kb_dir, [Configuration()], questions=questions)
    assert (
        "| hours | ferry harbour | - | 0.00 | none of the evidence found in the retrieved text |"
    ) in report.markdown()


def test_the_default_retrieval_label_is_a_retrieval_value(tmp_path, kb_dir):
    questions = write(tmp_path / "q.jsonl", jsonl(QUESTIONS[:2]))
    args = ["eval", "--kb", str(kb_dir), "--questions", str(questions)]
    result = runner.invoke(
        app, [*args, "--retrieval", "indexed,lexical", "--output", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    names = [c["name"] for c in report["configurations"]]
    assert names == ["minimal/indexed/default/top100", "minimal/lexical/default/top100"]
    assert Configuration(retrieval="indexed") == Configuration()  # the default, spelt out
    help_text = runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "200"}).stdout
    assert "lexical, hybrid, indexed" in help_text


PETS_CORPUS = [
    {"_id": "rules", "title": "House rules", "text": "Dogs are not allowed on the premises."},
    {
        "_id": "hours",
        "title": "Opening hours",
        "text": "The office opens at nine and closes at five.",
    },
    {"_id": "parking", "title": "Parking", "text": "Visitors park in the north lot."},
]


def test_a_dataset_is_evaluated_hybrid_by_default_and_the_report_says_so(tmp_path):
    root = tmp_path / "pets"
    write(root / "corpus.jsonl", jsonl(PETS_CORPUS))
    # shares no word (nor word form) with the rule it asks about: only vectors find it
    write(root / "queries.jsonl", jsonl([{"_id": "q1", "text": "Can I bring my pet?"}]))
    write(root / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\trules\t1\n")
    args = ["eval", "--dataset", str(root), "--cache", str(tmp_path / "cache")]

    hybrid = runner.invoke(app, [*args, "--output", str(tmp_path / "out")])
    assert hybrid.exit_code == 0, hybrid.output
    assert "minimal/hybrid/default/top100" in hybrid.stdout
    assert "note: retrieval: hybrid (hybrid: BM25 fused with vectors of 'local'" in hybrid.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["info"]["retrieval"] == {"minimal/hybrid/default/top100": "hybrid"}
    assert report["configurations"][0]["summary"]["R@10"] == 1.0
    assert "retrieval: hybrid" in (tmp_path / "out" / "report.md").read_text()

    lexical = runner.invoke(app, [*args, "--no-embeddings", "--output", str(tmp_path / "lex")])
    assert lexical.exit_code == 0, lexical.output
    assert "note: retrieval: lexical (BM25 only" in lexical.stdout
    report = json.loads((tmp_path / "lex" / "report.json").read_text())
    assert report["info"]["retrieval"] == {"minimal/lexical/default/top100": "lexical"}
    assert report["configurations"][0]["summary"]["R@10"] == 0.0  # words alone miss the rule
