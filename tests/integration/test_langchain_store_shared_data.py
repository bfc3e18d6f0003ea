"""LangChain vector stores (in-memory and Chroma) over the NASA Earth-book pages.

Uses a deterministic bag-of-words hashing embedding so the pages that share the query's words
rank first; expected page ids are exact. Skipped when ../shared/data is absent.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from agentic_retrieval.errors import FilterNotSupportedError
from agentic_retrieval.sources.base import SearchQuery
from agentic_retrieval.sources.langchain import LangChainKnowledgeSource
from agentic_retrieval.testing import HashingEmbeddings

PAGES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "earth-book" / "pages"

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.skipif(not PAGES.is_dir(), reason="../shared/data is absent"),
]


def load_pages() -> list[Document]:
    """One document per page: title and region from its first two lines, page from its name."""
    documents = []
    for path in sorted(PAGES.glob("page-*.txt")):
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
        lines = [line for line in lines if line]
        documents.append(
            Document(
                id=path.stem,
                page_content="\n".join(lines),
                metadata={
                    "title": lines[0],
                    "region": lines[1] if len(lines) > 1 else "",
                    "page": int(path.stem.split("-")[1]),
                },
            )
        )
    return documents


def in_memory_store(documents: list[Document]) -> VectorStore:
    store = InMemoryVectorStore(HashingEmbeddings())
    store.add_documents(documents)
    return store


def chroma_store(documents: list[Document]) -> VectorStore:
    chroma = pytest.importorskip("langchain_chroma", reason="needs the [chroma] extra")
    import chromadb

    store = chroma.Chroma(
        collection_name=f"earth-{uuid.uuid4().hex[:8]}",
        embedding_function=HashingEmbeddings(),
        client=chromadb.EphemeralClient(),
        collection_metadata={"hnsw:space": "cosine"},
    )
    store.add_documents(documents)
    return store


STORES: dict[str, Callable[[list[Document]], VectorStore]] = {
    "in-memory": in_memory_store,
    "chroma": chroma_store,
}


@pytest.fixture(scope="module")
def pages() -> list[Document]:
    return load_pages()


@pytest.fixture(scope="module", params=sorted(STORES))
def source(request, pages) -> LangChainKnowledgeSource:
    store = STORES[request.param](pages)
    return LangChainKnowledgeSource("earth-book", store, description="NASA Earth-book pages")


async def test_corpus_is_the_earth_book(pages):
    assert len(pages) == 85
    holuhraun = next(p for p in pages if p.id == "page-43")
    assert holuhraun.metadata == {"title": "Holuhraun Lava Field", "region": "Iceland", "page": 43}


async def test_relevant_page_ranks_first(source):
    hits = await source.search(SearchQuery(text="Holuhraun lava field eruption in Iceland", top=5))

    assert [h.doc_key for h in hits[:2]] == ["page-43", "page-123"]
    assert hits[0].title == "Holuhraun Lava Field"
    assert hits[0].source == "earth-book"
    assert hits[0].score > hits[1].score


async def test_numeric_filter_drops_the_best_unfiltered_page(source):
    hits = await source.search(
        SearchQuery(text="lava field volcano eruption", filter="page ge 100", top=5)
    )

    assert hits[0].doc_key == "page-123"
    assert hits[0].title == "Harratt Lunayyir Lava Field"
    assert len(hits) == 5 and all(h.metadata["page"] >= 100 for h in hits)


async def test_equality_filter_keeps_one_region(source):
    hits = await source.search(
        SearchQuery(text="sea ice melting", filter="region eq 'Canada'", top=4)
    )

    assert [h.doc_key for h in hits] == ["page-143", "page-151", "page-71", "page-165"]


async def test_search_in_filter(source):
    hits = await source.search(
        SearchQuery(
            text="red lake flamingos salt", filter="search.in(region, 'Namibia,Tanzania')", top=3
        )
    )

    assert [h.doc_key for h in hits] == ["page-89", "page-131", "page-121"]
    assert hits[0].title == "Scarlet Lake Natron"


async def test_compound_filter(source):
    hits = await source.search(
        SearchQuery(text="sand dunes desert", filter="page lt 100 and region ne 'Namibia'", top=3)
    )

    assert [h.doc_key for h in hits] == ["page-99", "page-59", "page-73"]


async def test_chroma_refuses_a_filter_it_cannot_express(pages):
    store = chroma_store(pages[:3])
    source = LangChainKnowledgeSource("earth-book", store)

    with pytest.raises(FilterNotSupportedError):
        await source.search(SearchQuery(text="lava", filter="region eq null"))
