"""One ranking whichever way documents come in: Markdown files, a records file (``index
--records``) and a BEIR corpus (``eval --dataset``) index the same title and body, so the same
questions rank the same passages with the same scores."""

from __future__ import annotations

import json

import pytest

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.eval.beir_cache import SOURCE, index_corpus
from agentic_retrieval.eval.datasets import load_beir
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.sources.local.chunking import body_without_title

DOCUMENTS = [
    ("ferries", "Ferries", "The harbour ferry to Gull Island leaves every 40 minutes from Pier 3."),
    ("parking", "Parking", "Park and ride at Saltmarsh costs 4 dollars a day, free on Sundays."),
    ("bikes", "Bike rental", "Bikes rent for 2 dollars an hour; a late return costs 1 dollar."),
    (
        "island",
        "Gull Island ferries",
        "Island ferries stop running at 22:00; the last ferry back leaves Gull Island at 21:40.",
    ),
    ("trams", "Trams", "Trams run every 10 minutes until midnight, and every 30 on Sundays."),
]
QUESTIONS = [
    "when does the last ferry leave the island",
    "how much is parking on sunday",
    "ferry bike tram",
    "late fee",
]


def ranking(kb: KnowledgeBase, question: str) -> list[tuple[str, float | None]]:
    response = kb.retrieve(
        {
            "intents": [{"search": question}],
            "knowledgeSourceParams": [
                {"knowledgeSourceName": name, "includeReferenceSourceData": True}
                for name in kb.sources
            ],
        }
    )
    return [(str((r.source_data or {})["title"]), r.reranker_score) for r in response.references]


@pytest.fixture
def three_ways(tmp_path) -> list[KnowledgeBase]:
    folder = tmp_path / "docs"
    folder.mkdir()
    for key, title, body in DOCUMENTS:
        (folder / f"{key}.md").write_text(f"# {title}\n\n{body}\n", encoding="utf-8")
    files = LocalKnowledgeSource("guides", tmp_path / "files.sqlite", create=True)
    files.index([folder])
    rows = [{"_id": key, "title": title, "text": body} for key, title, body in DOCUMENTS]
    corpus = tmp_path / "beir" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    records = LocalKnowledgeSource("guides", tmp_path / "records.sqlite", create=True)
    records.index_records(corpus)
    (corpus.parent / "queries.jsonl").write_text('{"_id": "q1", "text": "ferry"}\n')
    (corpus.parent / "qrels").mkdir()
    (corpus.parent / "qrels" / "test.tsv").write_text("q1\tferries\t1\n")
    cached = index_corpus(load_beir(corpus.parent), cache_dir=tmp_path / "cache")
    dataset = open_knowledge_base(cached.path, sources=[SOURCE])
    return [KnowledgeBase([files]), KnowledgeBase([records]), dataset]


@pytest.mark.parametrize("question", QUESTIONS)
def test_files_records_and_eval_datasets_rank_identically(three_ways, question):
    files, records, dataset = (ranking(kb, question) for kb in three_ways)
    assert files, question
    assert files == records == dataset


def test_a_file_opening_with_its_title_does_not_count_the_title_twice(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ferries.md").write_text("# Ferries\n\nThe ferry leaves from Pier 3.\n")
    source = LocalKnowledgeSource("guides", tmp_path / "files.sqlite", create=True)
    source.index([folder])
    (hit,) = source.search_sync("ferry")
    assert (hit.title, hit.content) == ("Ferries", "The ferry leaves from Pier 3.")


@pytest.mark.parametrize(
    ("title", "text", "body"),
    [
        ("Ferries", "# Ferries\n\nThe ferry leaves.", "\n\nThe ferry leaves."),
        ("Ferries", "  ## Ferries ##\nThe ferry.", "\nThe ferry."),
        ("Ferries", "Ferries", "Ferries"),  # nothing but the title: kept whole
        ("Ferry", "Ferries\n\nThe ferry.", "Ferries\n\nThe ferry."),  # another line
        (None, "# Ferries\n\nx", "# Ferries\n\nx"),
    ],
)
def test_body_without_title(title, text, body):
    assert body_without_title(title, text) == body
