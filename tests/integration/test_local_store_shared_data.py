"""Index the real shared documents (Northwind PDFs, NASA Earth pages) and answer questions."""

from __future__ import annotations

import pytest
from tests.fakes import SHARED_DATA

from agentic_retrieval.embeddings import local_embeddings_available
from agentic_retrieval.sources.base import SearchQuery
from agentic_retrieval.sources.local import IndexReport, LocalKnowledgeSource

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is not available"),
    # the hybrid fixture embeds every shared document on the CPU (about 1.5 min quietly),
    # which counts against its first test's limit
    pytest.mark.timeout(900),
]

# (question, chunk id of the answering passage, a phrase of the answer, page or None)
QUESTIONS = [
    (
        "How much can employees expense under PerksPlus for fitness programs?",
        "data-northwind-perksplus-pdf-2",
        "expense up to $1000",
        3,
    ),
    (
        "What is the calendar year deductible of the Northwind Standard plan?",
        "data-northwind-northwind-standard-benefits-details-pdf-30",
        "calendar year deductible of $2,000",
        13,
    ),
    (
        "How can an employee report a whistleblower incident anonymously?",
        "data-northwind-employee-handbook-pdf-15",
        "Compliance Hotline",
        9,
    ),
    (
        "What are the responsibilities of the Chief Executive Officer?",
        "data-northwind-role-library-pdf-2",
        "strategic direction and oversight",
        3,
    ),
    (
        "Which satellite captured the false-color image of volcanic plumes over the South "
        "Sandwich Islands?",
        "data-earth-book-pages-page-13-txt-0",
        "The Aqua satellite captured this false-color image",
        None,
    ),
]


@pytest.fixture(scope="module")
def lexical(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalKnowledgeSource, IndexReport]:
    source = LocalKnowledgeSource(
        "shared", tmp_path_factory.mktemp("lex") / "shared.sqlite", create=True
    )
    report = source.index([SHARED_DATA.resolve()])
    yield source, report
    source.close()


def test_every_shared_file_is_indexed(lexical: tuple[LocalKnowledgeSource, IndexReport]) -> None:
    source, report = lexical
    files = [p for p in SHARED_DATA.resolve().rglob("*") if p.is_file()]
    assert report.failed == []
    assert sorted(report.indexed) == sorted(str(p) for p in files if p.suffix in (".pdf", ".txt"))
    assert report.total_chunks == source.store.count_chunks() > len(files)
    again = source.index([SHARED_DATA.resolve()])
    assert again.indexed == [] and len(again.unchanged) == len(report.indexed)


@pytest.mark.parametrize(("question", "chunk_id", "phrase", "page"), QUESTIONS)
async def test_answer_passage_in_top_5_lexical(
    lexical: tuple[LocalKnowledgeSource, IndexReport],
    question: str,
    chunk_id: str,
    phrase: str,
    page: int | None,
) -> None:
    source, _ = lexical
    hits = await source.search(SearchQuery(text=question, top=5))
    by_key = {h.doc_key: h for h in hits}
    assert chunk_id in by_key, [h.doc_key for h in hits]
    assert phrase in by_key[chunk_id].content
    assert by_key[chunk_id].metadata.get("page") == page


async def test_filters_on_real_metadata(lexical: tuple[LocalKnowledgeSource, IndexReport]) -> None:
    source, _ = lexical
    query = SearchQuery(
        text="cloud streets satellite", top=10, filter="file_name eq 'page-11.pdf' or page gt 100"
    )
    hits = await source.search(query)
    assert hits and hits[0].doc_key == "data-earth-book-pdf-page-11-pdf-0"
    assert all(h.metadata["file_name"] == "page-11.pdf" or h.metadata["page"] > 100 for h in hits)


@pytest.mark.slow
@pytest.mark.skipif(not local_embeddings_available(), reason="the [local] extra is not installed")
@pytest.mark.parametrize(("question", "chunk_id", "phrase", "page"), QUESTIONS)
async def test_answer_passage_in_top_5_hybrid(
    hybrid: LocalKnowledgeSource,
    question: str,
    chunk_id: str,
    phrase: str,
    page: int | None,
) -> None:
    hits = await hybrid.search(SearchQuery(text=question, top=5))
    assert chunk_id in [h.doc_key for h in hits]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> LocalKnowledgeSource:
    from agentic_retrieval.embeddings import local_embeddings

    path = tmp_path_factory.mktemp("hyb") / "shared.sqlite"
    source = LocalKnowledgeSource("shared", path, embeddings=local_embeddings(), create=True)
    report = source.index([SHARED_DATA.resolve()])
    assert report.failed == []
    assert source.store.has_vectors()
    yield source
    source.close()


async def test_a_question_the_documents_do_not_answer_gets_no_confident_reference(
    lexical: tuple[LocalKnowledgeSource, IndexReport],
) -> None:
    from agentic_retrieval import Context, KnowledgeBase

    source, _ = lexical
    question = {"intents": [{"search": "How many vacation days do I get?"}]}  # the README's
    response = await KnowledgeBase([source]).aretrieve(question)
    # ranked, not judged: the record says no score is calibrated, and none scores confidently
    rerank = next(r for r in response.activity or [] if r.type == "semanticReranker")
    assert rerank.model_extra["calibratedCount"] == 0
    best = response.references[0]
    assert best.reranker_score is not None and 2.0 < best.reranker_score < 2.5
    # an explicit threshold is honoured whatever the reranker: nothing passes it
    strict = KnowledgeBase([source], defaults=Context(reranker_threshold=2.5))
    empty = await strict.aretrieve(question)
    assert empty.references == [] and empty.text == "[]"


@pytest.mark.parametrize(("question", "chunk_id", "phrase", "page"), QUESTIONS)
async def test_answer_passage_is_returned_at_defaults_and_scores_2_5_or_more(
    lexical: tuple[LocalKnowledgeSource, IndexReport],
    question: str,
    chunk_id: str,
    phrase: str,
    page: int | None,
) -> None:
    from agentic_retrieval import KnowledgeBase

    source, _ = lexical
    response = await KnowledgeBase([source]).aretrieve({"intents": [{"search": question}]})
    scores = {ref.doc_key: ref.reranker_score for ref in response.references}
    assert chunk_id in scores
    assert (scores[chunk_id] or 0.0) >= 2.5
