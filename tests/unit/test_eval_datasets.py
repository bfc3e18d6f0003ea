"""Loading BEIR directories and questions files, including every kind of malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fakes import write

from agentic_retrieval.errors import DatasetError, EvalConfigurationError
from agentic_retrieval.eval.configurations import Configuration, configuration_grid, parse_list
from agentic_retrieval.eval.datasets import load_beir, load_questions

CORPUS = [
    {"_id": "d1", "title": "Tram fares", "text": "A single tram ride costs two euros."},
    {"_id": "d2", "title": "Bike docking", "text": "Dock bikes within thirty minutes."},
    {"_id": "d3", "title": "Lost property", "text": "The lost property office keeps items."},
]
QUERIES = [
    {"_id": "q1", "text": "tram fares"},
    {"_id": "q2", "text": "lost umbrella office"},
    {"_id": "q3", "text": "never judged"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\td3\t1\nq2\td2\t0\n"


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def beir(
    root: Path, corpus: str | None = None, queries: str | None = None, qrels: str | None = None
) -> Path:
    write(root / "corpus.jsonl", jsonl(CORPUS) if corpus is None else corpus)
    write(root / "queries.jsonl", jsonl(QUERIES) if queries is None else queries)
    write(root / "qrels" / "test.tsv", QRELS if qrels is None else qrels)
    return root


def test_beir_layout_loads_judged_queries(tmp_path):
    dataset = load_beir(beir(tmp_path / "toy"))
    assert dataset.name == "toy" and dataset.split == "test"
    assert [q.id for q in dataset.questions] == ["q1", "q2"]
    assert dataset.questions[1].relevant == {"d3": 1, "d2": 0}
    assert dataset.questions[1].text == "lost umbrella office"
    assert dataset.document_keys == {"d1", "d2", "d3"}
    assert dataset.corpus == tmp_path / "toy" / "corpus.jsonl"
    assert dataset.notes == [
        "1 of 3 queries have no judgements in qrels/test.tsv and were not asked"
    ]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"corpus": jsonl(CORPUS) + "{broken\n"}, "corpus.jsonl:4: invalid JSON"),
        (
            {"corpus": jsonl([*CORPUS, {"title": "x"}])},
            'corpus.jsonl:4: expected an object with an "_id"',
        ),
        ({"corpus": jsonl([*CORPUS, CORPUS[0]])}, "corpus.jsonl:4: duplicate _id 'd1'"),
        ({"corpus": ""}, "the corpus is empty"),
        ({"queries": jsonl([{"_id": "q1"}])}, "queries.jsonl:1: query 'q1' has no \"text\""),
        (
            {"qrels": "q1\td1\n"},
            "qrels/test.tsv:1: expected query-id, corpus-id, score (3 columns)",
        ),
        ({"qrels": "q1\td1\thigh\n"}, "qrels/test.tsv:1: score 'high' is not an integer"),
        (
            {"qrels": QRELS + "q9\td1\t1\nq8\td1\t1\n"},
            "names 2 queries not in queries.jsonl: q9, q8",
        ),
        ({"qrels": QRELS + "q1\tdx\t1\n"}, "names 1 documents not in corpus.jsonl: dx"),
        ({"qrels": "query-id\tcorpus-id\tscore\n"}, "no judgements"),
    ],
)
def test_malformed_beir_inputs_name_the_file_and_line(tmp_path, files, message):
    root = beir(tmp_path / "bad", **files)
    with pytest.raises(DatasetError) as raised:
        load_beir(root)
    assert message in str(raised.value)


def test_missing_beir_parts(tmp_path):
    with pytest.raises(DatasetError, match="no such dataset directory"):
        load_beir(tmp_path / "nowhere")
    root = beir(tmp_path / "toy")
    with pytest.raises(
        DatasetError, match=r"no qrels for split 'dev' \(qrels/dev.tsv\); splits: test"
    ):
        load_beir(root, split="dev")
    (root / "queries.jsonl").unlink()
    with pytest.raises(DatasetError, match=r"not in BEIR layout: queries\.jsonl is missing"):
        load_beir(root)


def test_questions_file_forms(tmp_path):
    path = write(
        tmp_path / "questions.jsonl",
        jsonl(
            [
                {"id": 1, "question": " How much is a tram ride? ", "relevant": ["d1"]},
                {
                    "id": "conv",
                    "messages": [
                        {"role": "user", "content": "I lost my umbrella."},
                        {"role": "assistant", "content": "Where?"},
                        {"role": "user", "content": [{"type": "text", "text": "On the tram"}]},
                    ],
                    "relevant": {"d3": 2, "d2": 0},
                    "evidence": ["lost property office"],
                    "answer": "Ask the lost property office.",
                },
            ]
        )
        + "\n",
    )
    first, second = load_questions(path)
    assert (first.id, first.text, dict(first.relevant)) == (
        "1",
        "How much is a tram ride?",
        {"d1": 1},
    )
    assert second.text == "On the tram" and len(second.messages) == 3
    assert dict(second.relevant) == {"d3": 2, "d2": 0} and second.judged
    assert second.evidence == ("lost property office",) and second.answer.startswith("Ask")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{oops", "q.jsonl:1: Expecting property name"),
        ('{"question": "x"}', 'q.jsonl:1: expected an "id"'),
        ('{"id": 1}', 'expected "question" (text) or "messages" (a list)'),
        (
            '{"id": 1, "messages": [{"role": "assistant", "content": "hi"}]}',
            "messages hold no user text",
        ),
        ('{"id": 1, "question": "x", "relevant": "d1"}', '"relevant" must be a list'),
        (
            '{"id": 1, "question": "x", "relevant": {"d1": "high"}}',
            "grade of 'd1' must be an integer",
        ),
        ('{"id": 1, "question": "x", "evidence": [""]}', '"evidence" must be a list of non-empty'),
        ('{"id": 1, "question": "x"}\n{"id": 1, "question": "y"}', "q.jsonl:2: duplicate id '1'"),
        ("", "no questions"),
    ],
)
def test_malformed_questions(tmp_path, line, message):
    with pytest.raises(DatasetError) as raised:
        load_questions(write(tmp_path / "q.jsonl", line + "\n"))
    assert message in str(raised.value)


def test_configuration_grid_and_names():
    configurations, skipped = configuration_grid(
        efforts=["minimal", "low"],
        retrievals=["lexical", "hybrid"],
        top_ns=[10],
        output_modes=["extractiveData", "answerSynthesis"],
    )
    assert [c.name for c in configurations] == [
        "minimal/lexical/default/top10",
        "minimal/hybrid/default/top10",
        "low/lexical/default/top10",
        "low/hybrid/default/top10",
        "low/lexical/default/top10/answer",
        "low/hybrid/default/top10/answer",
    ]
    assert skipped == ["minimal effort with answerSynthesis cannot run (no model): left out"]
    assert Configuration(effort="medium", top_n=5).context().search_top == 50
    assert Configuration(top_n=200).context().search_top == 200
    assert Configuration(label="my run").slug == "my_run"
    for bad, message in (
        ({"effort": "high"}, "effort must be one of"),
        ({"retrieval": "dense"}, "retrieval must be one of"),
        ({"top_n": 0}, "between 1 and 200"),
        ({"output_mode": "answerSynthesis"}, "cannot run at minimal effort"),
    ):
        with pytest.raises(EvalConfigurationError, match=message):
            Configuration(**bad)
    with pytest.raises(EvalConfigurationError, match="empty item"):
        parse_list("minimal,,low", "--effort")
