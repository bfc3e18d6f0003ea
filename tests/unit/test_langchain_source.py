"""LangChainKnowledgeSource over InMemoryVectorStore, retrievers, and the Chroma translation."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field

from agentic_retrieval.errors import FilterNotSupportedError
from agentic_retrieval.odata import ODataError, parse_filter
from agentic_retrieval.sources.base import Hit, KnowledgeSource, SearchQuery
from agentic_retrieval.sources.langchain import (
    LangChainKnowledgeSource,
    content_key,
    odata_to_chroma_where,
)
from agentic_retrieval.testing import HashingEmbeddings

DOCS = [
    Document(
        id="volcano",
        page_content="Volcano eruptions spread ash over the island.",
        metadata={"title": "Volcanoes", "topic": "geology", "year": 2019},
    ),
    Document(
        id="reef",
        page_content="Coral reef bleaching follows warm ocean water.",
        metadata={"title": "Reefs", "topic": "ocean", "year": 2021},
    ),
    Document(
        id="ocean-ash",
        page_content="Volcanic ash falls into the ocean near the island.",
        metadata={"title": "Ash at sea", "topic": "ocean", "year": 2016},
    ),
    Document(
        id="ice",
        page_content="Sea ice shrinks each summer in the Arctic ocean.",
        metadata={"title": "Arctic ice", "topic": "ice", "year": 2022},
    ),
]


@pytest.fixture
def store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(HashingEmbeddings(size=256))
    store.add_documents(DOCS)
    return store


async def test_vector_store_hits_are_ranked_with_relevance_scores(store):
    source = LangChainKnowledgeSource("earth", store, description="Earth facts")
    assert isinstance(source, KnowledgeSource)
    assert source.kind == "langchain"

    hits = await source.search(SearchQuery(text="volcano ash island", top=2))

    assert [h.doc_key for h in hits] == ["volcano", "ocean-ash"]
    assert hits[0] == Hit(
        doc_key="volcano",
        content=DOCS[0].page_content,
        title="Volcanoes",
        source="earth",
        score=hits[0].score,
        metadata=DOCS[0].metadata,
    )
    assert 0 < hits[1].score < hits[0].score <= 1


async def test_in_memory_store_applies_odata_filters(store):
    source = LangChainKnowledgeSource("earth", store)

    ocean = await source.search(SearchQuery(text="volcano ash island", filter="topic eq 'ocean'"))
    recent = await source.search(
        SearchQuery(text="ocean", filter="year ge 2020 and not (topic eq 'ice')")
    )
    listed = await source.search(
        SearchQuery(text="ocean", filter="search.in(topic, 'ice,geology')")
    )

    assert [h.doc_key for h in ocean] == ["ocean-ash", "reef"]
    assert [h.doc_key for h in recent] == ["reef"]
    assert [h.doc_key for h in listed] == ["ice", "volcano"]


async def test_top_bounds_the_hit_count(store):
    source = LangChainKnowledgeSource("earth", store, top=3)

    assert len(await source.search(SearchQuery(text="ocean", top=10))) == 3
    assert len(await source.search(SearchQuery(text="ocean", top=1))) == 1


async def test_invalid_filter_raises_odata_error(store):
    source = LangChainKnowledgeSource("earth", store)

    with pytest.raises(ODataError):
        await source.search(SearchQuery(text="ocean", filter="topic eq"))


class KeywordRetriever(BaseRetriever):
    """A sync-only retriever: documents containing any query word, in corpus order."""

    documents: list[Document]
    delay: float = 0.0
    seen_kwargs: list[dict[str, Any]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self.seen_kwargs.append(kwargs)
        time.sleep(self.delay)
        words = set(re.findall(r"\w+", query.lower()))
        documents = [
            d for d in self.documents if words & set(re.findall(r"\w+", d.page_content.lower()))
        ]
        predicate = kwargs.get("filter")
        return [d for d in documents if predicate is None or predicate(d.metadata)]


async def test_retriever_without_translator_rejects_filters():
    source = LangChainKnowledgeSource("kw", KeywordRetriever(documents=DOCS))

    with pytest.raises(FilterNotSupportedError) as info:
        await source.search(SearchQuery(text="ocean", filter="topic eq 'ocean'"))

    assert info.value.code == "FilterNotSupported"
    assert str(info.value).startswith("filters not supported by this source: KeywordRetriever")
    assert [h.doc_key for h in await source.search(SearchQuery(text="ocean"))] == [
        "reef",
        "ocean-ash",
        "ice",
    ]


async def test_retriever_with_translator_gets_the_translated_filter():
    retriever = KeywordRetriever(documents=DOCS)

    def translate(expr):
        return lambda metadata: metadata["year"] > 2020 if expr else True

    source = LangChainKnowledgeSource("kw", retriever, filter_translator=translate)

    hits = await source.search(SearchQuery(text="ocean", filter="year gt 2020"))

    assert [h.doc_key for h in hits] == ["reef", "ice"]
    assert [h.score for h in hits] == [2.0, 1.0]  # rank order when the retriever gives none
    assert list(retriever.seen_kwargs[0]) == ["filter"]


async def test_vector_store_retriever_gets_k_and_filter(store):
    source = LangChainKnowledgeSource("earth", store.as_retriever(), top=5)

    hits = await source.search(SearchQuery(text="volcano ash", filter="year lt 2020", top=1))

    assert [h.doc_key for h in hits] == ["volcano"]


async def test_sync_retrievers_run_in_parallel():
    sources = [
        LangChainKnowledgeSource(f"kw{i}", KeywordRetriever(documents=DOCS, delay=0.4))
        for i in range(3)
    ]

    started = time.monotonic()
    results = await asyncio.gather(*(s.search(SearchQuery(text="ocean")) for s in sources))
    elapsed = time.monotonic() - started

    assert all(len(r) == 3 for r in results)
    assert elapsed < 1.0  # three 0.4 s calls, run one after the other, would take 1.2 s


async def test_doc_key_from_metadata_field_id_or_content_hash():
    documents = [
        Document(page_content="alpha text", metadata={"chunk": "c-1"}),
        Document(id="doc-2", page_content="alpha more"),
        Document(page_content="alpha again"),
    ]
    retriever = KeywordRetriever(documents=documents)

    by_field = await LangChainKnowledgeSource("kw", retriever, key_metadata_field="chunk").search(
        SearchQuery(text="alpha")
    )

    assert [h.doc_key for h in by_field] == ["c-1", "doc-2", content_key("alpha again")]
    assert content_key("alpha again") == "sha1:" + hashlib.sha1(b"alpha again").hexdigest()[:16]


def test_rejects_objects_that_are_not_retrievers_or_stores():
    with pytest.raises(TypeError):
        LangChainKnowledgeSource("x", object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("odata", "where"),
    [
        ("topic eq 'ocean'", {"topic": {"$eq": "ocean"}}),
        ("year ge 2020", {"year": {"$gte": 2020}}),
        ("2020 lt year", {"year": {"$gt": 2020}}),
        (
            "topic ne 'ice' and year le 2021 and year gt 2000",
            {
                "$and": [
                    {"topic": {"$ne": "ice"}},
                    {"year": {"$lte": 2021}},
                    {"year": {"$gt": 2000}},
                ]
            },
        ),
        (
            "topic eq 'ice' or topic eq 'ocean'",
            {"$or": [{"topic": {"$eq": "ice"}}, {"topic": {"$eq": "ocean"}}]},
        ),
        ("search.in(topic, 'ice,ocean')", {"topic": {"$in": ["ice", "ocean"]}}),
        (
            "not (year gt 2020 or topic eq 'ice')",
            {"$and": [{"year": {"$lte": 2020}}, {"topic": {"$ne": "ice"}}]},
        ),
        ("not search.in(topic, 'ice')", {"topic": {"$nin": ["ice"]}}),
        ("reviewed", {"reviewed": {"$eq": True}}),
        (
            "(a eq 1 or b eq 2) and c eq 3",
            {"$and": [{"$or": [{"a": {"$eq": 1}}, {"b": {"$eq": 2}}]}, {"c": {"$eq": 3}}]},
        ),
    ],
)
def test_odata_to_chroma_where(odata, where):
    assert odata_to_chroma_where(parse_filter(odata)) == where


@pytest.mark.parametrize(
    "odata",
    [
        "tags/any(t: t eq 'x')",
        "topic eq null",
        "address/city eq 'Oslo'",
        "topic gt 'm'",
        "updated ge 2024-01-01T00:00:00Z",
        "true",
    ],
)
def test_chroma_rejects_what_it_cannot_express(odata):
    with pytest.raises(FilterNotSupportedError, match=r"^filters not supported by this source"):
        odata_to_chroma_where(parse_filter(odata))
