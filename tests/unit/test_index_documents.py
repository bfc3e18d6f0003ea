"""The documents of a service index: searches read each found document once."""

from __future__ import annotations

import pytest

from agentic_retrieval.errors import InvalidRequestError
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

    def counted(key, fields=None):
        reads.append(key)
        return get(key, fields)

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


LONG_INDEX = {
    "name": "long",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "body", "type": "Edm.String", "filterable": False},
        {"name": "summary", "type": "Edm.String"},
        {"name": "tags", "type": "Collection(Edm.String)"},
        {"name": "words", "type": "Collection(Edm.String)", "filterable": False},
    ],
}


@pytest.fixture
def long_index(tmp_path):
    store = LocalStore(tmp_path / "long.sqlite", create=True)
    yield IndexDocuments(parse_index(LONG_INDEX), DocumentStore(store))
    store.close()


def test_a_selected_field_is_read_without_the_rest_and_exactly_as_stored(tmp_path):
    """A search or lookup selecting some fields reads only those out of the stored JSON (a
    15 MiB body is not parsed per hit), and every value comes back exactly as it went in."""
    store = LocalStore(tmp_path / "exact.sqlite", create=True)
    stored = DocumentStore(store)
    value = {
        "ratio": 0.30000000000000004,
        "big": 12345678901234567890,
        "flag": True,
        "none": None,
        "nested": {"x": [1, 0.1, {"deep": "é😀"}]},
        "body": "tram " * 1000,
        'odd"key': 1,
    }
    stored.put("u1", stored=value, title="u1", sections=[], fields={})
    wanted = ["ratio", "big", "flag", "none", "nested", "missing"]
    got = stored.get("u1", wanted)
    assert got is not None and "body" not in got
    assert {k: got[k] for k in wanted if k in got} == {k: value[k] for k in wanted if k in value}
    assert stored.get("u1") == value
    assert stored.get("nope", ["ratio"]) is None
    store.close()


@pytest.mark.parametrize(
    ("document", "where", "words"),
    [
        ({"summary": "é" * 16_384}, "value[1].summary", ["32768 bytes", "at most 32766"]),
        ({"tags": ["ok", "x" * 40_000]}, "value[1].tags[1]", ["40000 bytes", '"filterable"']),
        ({"tags": ["t"] * 3_001}, "value[1].tags", ["3001 values", "at most 3000"]),
        ({"words": ["w"] * 200_000}, "value[1].words", ["200000 values"]),
    ],
)
def test_values_beyond_azures_bounds_are_refused_naming_the_field(
    long_index, document, where, words
):
    batch = [{"id": "fine", "summary": "short"}, {"id": "big", **document}]
    with pytest.raises(InvalidRequestError) as refused:
        long_index.validate_batch(batch)
    message = str(refused.value)
    assert message.startswith(where + ":")
    assert all(word in message for word in words), message
    assert long_index.count() == 0  # the batch changed nothing


def test_values_within_the_bounds_are_accepted(long_index):
    batch = long_index.validate_batch(
        [
            {
                "id": "edge",
                "body": "tram " * 400_000,  # long text: searchable, not filterable
                "summary": "é" * 16_383,  # 32,766 bytes
                "tags": [f"t{n}" for n in range(3_000)],
                "words": ["w" * 40_000],
            }
        ]
    )
    assert [r.status_code for r in long_index.apply(batch)] == [201]
    found = long_index.search(
        SearchParameters(search="tram", filter="tags/any(t: t eq 't2999')"), access=ELEVATED
    )
    assert [hit["id"] for hit in found["value"]] == ["edge"]


HIDING = {
    "name": "memos",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "title", "type": "Edm.String", "retrievable": False},
        {"name": "body", "type": "Edm.String"},
        {"name": "notes", "type": "Edm.String", "retrievable": False},
        {"name": "vector", "type": "Collection(Edm.Single)", "dimensions": 2},
        {"name": "readers", "type": "Collection(Edm.String)", "permissionFilter": "userIds"},
    ],
    "semantic": {
        "configurations": [
            {"name": "c", "prioritizedFields": {"titleField": {"fieldName": "title"}}}
        ]
    },
}


def hiding(tmp_path, definition=HIDING) -> IndexDocuments:
    store = LocalStore(tmp_path / "memos.sqlite", create=True)
    return IndexDocuments(parse_index(definition), DocumentStore(store, chunk_size=120, overlap=0))


def test_a_view_names_the_readable_fields_only(tmp_path):
    view = hiding(tmp_path).view(["title", "body", "notes", "readers", "vector"])
    assert (view.title_field, view.text_fields) == (None, ("id", "body"))
    assert view.source_data_fields == ("body", "vector")  # chosen and readable
    assert view.chunks_may_hide
    assert hiding(tmp_path).view().source_data_fields == ("id", "body")  # no vectors by default
    plain = {**HIDING, "fields": [f for f in HIDING["fields"] if f.get("retrievable") is not False]}
    plain["fields"] = [f for f in plain["fields"] if "permissionFilter" not in f]
    assert not hiding(tmp_path, plain).view().chunks_may_hide


def test_a_passage_is_its_chunk_only_when_the_chunk_is_readable_text(tmp_path):
    view = hiding(tmp_path).view()
    short = {"id": "m1", "body": "Vacation:  30 days.", "notes": "secret", "readers": ["bob"]}
    assert view.passage(short, "m1\n\nVacation: 30 days.") == "m1\n\nVacation: 30 days."
    mixed = "m1\n\nVacation: 30 days.\n\nsecret\n\nbob"
    assert view.passage(short, mixed) == "m1\n\nVacation: 30 days."  # the readable text
    long = {
        "id": "m2",
        "body": " ".join(f"Rule {n} says the tram stops at {n} stations." for n in range(9)),
        "notes": "secret",
    }
    at_the_end = "Rule 8 says the tram stops at 8 stations.\n\nsecret"
    # the window where the chunk's readable words are, not the document's start
    assert view.passage(long, at_the_end) == "Rule 8 says the tram stops at 8 stations."
    assert view.passage(long, "secret").startswith("m2\n\nRule 0 says")  # none: the start
