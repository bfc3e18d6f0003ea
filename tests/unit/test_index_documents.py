"""The documents of a service index: searches read each found document once."""

from __future__ import annotations

import pytest

from agentic_retrieval.kb.definitions import parse_index
from agentic_retrieval.kb.index_documents import IndexDocuments, SearchParameters
from agentic_retrieval.permissions import ELEVATED
from agentic_retrieval.sources.local.documents import DocumentStore
from agentic_retrieval.sources.local.store import LocalStore

INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "title", "type": "Edm.String"},
        {"name": "content", "type": "Edm.String"},
        {"name": "year", "type": "Edm.Int32"},
        {"name": "tags", "type": "Collection(Edm.String)"},
    ],
}


@pytest.fixture
def documents(tmp_path):
    store = LocalStore(tmp_path / "guides.sqlite", create=True)
    indexed = IndexDocuments(parse_index(INDEX), DocumentStore(store))
    batch = indexed.validate_batch(
        [
            {"id": f"d{n}", "title": f"Tram guide {n}", "content": "trams", "year": 2020 + n}
            for n in range(5)
        ]
    )
    assert all(result.succeeded for result in indexed.apply(batch))
    yield indexed
    store.close()


def test_a_search_reads_each_document_it_returns_once(documents, monkeypatch):
    reads: list[str] = []
    get = documents.documents.get

    def counted(key):
        reads.append(key)
        return get(key)

    monkeypatch.setattr(documents.documents, "get", counted)
    body = documents.search(
        SearchParameters(search="*", top=3, filter="year ge 2021"), access=ELEVATED
    )
    assert [hit["id"] for hit in body["value"]] == ["d1", "d2", "d3"]
    assert body["value"][0] == {
        "@search.score": 1.0,
        "id": "d1",
        "title": "Tram guide 1",
        "content": "trams",
        "year": 2021,
        "tags": None,
    }
    assert sorted(reads) == ["d1", "d2", "d3"]
