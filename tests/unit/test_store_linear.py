"""Storage linear in what was sent: a document's shared fields are stored once, not per chunk.

Issue 19 (2, 5): every chunk row carried the whole document's filterable fields, so one
document with a 0.5 MiB field (about 500 chunks) cost 232 MB of database, and a 200,000-value
collection 2.6 GB. Fields every chunk of a file or document shares now live once in
``files.fields``; filters read them there, once per document.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentic_retrieval.odata import parse_filter
from agentic_retrieval.sources.local import LocalStore
from agentic_retrieval.sources.local.documents import DocumentStore
from agentic_retrieval.sources.local.loaders import Section
from agentic_retrieval.sources.local.store import SCHEMA_VERSION, ChunkRecord, FileState

WORDS = "harbour tram ferry pass fare zone night bus ticket route".split()


def text(size: int, salt: int = 0) -> str:
    words = (f"{WORDS[(n * 7 + salt) % len(WORDS)]}{n % 97}" for n in range(size))
    return " ".join(words)[:size]


def stored_bytes(store: LocalStore) -> int:
    conn = store._connection()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def put_document(documents: DocumentStore, key: str, body: str, tags: list[str]) -> int:
    return documents.put(
        key,
        stored={"id": key, "content": body, "tags": tags},
        title=f"doc {key}",
        sections=[Section(body)],
        fields={"content": body, "tags": tags, "team": "ops" if key.endswith("1") else "hr"},
    )


def test_a_documents_shared_fields_are_stored_once(tmp_path):
    documents = DocumentStore(LocalStore(tmp_path / "s.sqlite", create=True))
    body = text(200_000)
    chunks = put_document(documents, "big1", body, [f"t{n}" for n in range(2000)])
    assert chunks > 150
    conn = documents.store._connection()
    per_chunk = conn.execute("SELECT max(length(metadata)) FROM chunks").fetchone()[0]
    assert per_chunk <= 2  # "{}": nothing of the document is repeated per chunk
    (fields,) = conn.execute("SELECT length(fields) FROM files").fetchone()
    assert body[:1000] and 200_000 < fields < 230_000


def test_store_size_grows_linearly_with_a_documents_size(tmp_path):
    sizes = {}
    for size in (50_000, 100_000, 200_000, 400_000):
        store = LocalStore(tmp_path / f"{size}.sqlite", create=True)
        put_document(DocumentStore(store), "d", text(size), [])
        sizes[size] = stored_bytes(store)
        store.close()
    # content, its copy in the stored document, its filterable copy, the FTS index: a
    # constant number of bytes per input byte, not one more copy per chunk
    per_byte = {size: stored / size for size, stored in sizes.items()}
    assert max(per_byte.values()) < 12
    assert per_byte[400_000] < per_byte[50_000] * 1.3


@pytest.fixture
def documents(tmp_path: Path) -> DocumentStore:
    documents = DocumentStore(LocalStore(tmp_path / "f.sqlite", create=True))
    for n in range(4):
        put_document(documents, f"d{n}", text(30_000, salt=n), [f"tag{n}", "all"])
    return documents


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("team eq 'ops'", ["d1"]),
        ("tags/any(t: t eq 'tag2')", ["d2"]),
        ("tags/any(t: t eq 'all') and team eq 'hr'", ["d0", "d2", "d3"]),
        ("not (team eq 'hr')", ["d1"]),
        ("page eq null and team eq 'ops'", ["d1"]),
    ],
)
def test_filters_read_the_shared_fields(documents, expression, expected):
    found = documents.search("*", top=100, filter_expr=parse_filter(expression))
    assert sorted(hit.key for hit in found) == expected


def test_hits_carry_the_shared_fields_with_their_own(tmp_path):
    documents = DocumentStore(LocalStore(tmp_path / "h.sqlite", create=True))
    documents.put(
        "paged",
        stored={"id": "paged"},
        title="Paged",
        sections=[Section("ferry timetable", page=3), Section("night bus", page=4)],
        fields={"team": "ops"},
    )
    hit = documents.search("night bus", top=1, per_unit=False)[0]
    assert hit.chunk.metadata == {"team": "ops", "page": 4}
    assert documents.search("*", top=5, filter_expr=parse_filter("page eq 3"))[0].key == "paged"


def test_a_store_written_before_shared_fields_keeps_filtering(tmp_path):
    """Chunks that carry every field (stores of schema 2) mix with ones that share them."""
    store = LocalStore(tmp_path / "old.sqlite", create=True)
    state = FileState("record:old", "record:old", "h", "f", 0.0, 1, 1)
    chunk = ChunkRecord("old#0", 0, "Old", "ferry pass", None, {"team": "ops", "chunk": 0})
    store.replace_file(state, {}, [chunk])  # the earlier writers' shape
    documents = DocumentStore(store)
    put_document(documents, "new1", "ferry pass too", [])
    found = documents.search("ferry", top=10, filter_expr=parse_filter("team eq 'ops'"))
    assert sorted(hit.key for hit in found) == ["new1", "old"]


def test_a_schema_2_store_is_migrated_in_place(tmp_path):
    path = tmp_path / "v2.sqlite"
    store = LocalStore(path, create=True)
    state = FileState("record:a", "record:a", "h", "f", 0.0, 1, 1)
    store.replace_file(state, {}, [ChunkRecord("a#0", 0, "A", "tram", None, {"team": "hr"})])
    store.close()
    conn = sqlite3.connect(path)  # turn it back into a schema 2 store
    conn.execute("ALTER TABLE files DROP COLUMN fields")
    conn.execute("DROP TABLE document_fields")
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    reopened = LocalStore(path)
    assert reopened._schema_version() == SCHEMA_VERSION
    hits = reopened.search("tram", filter_expr=parse_filter("team eq 'hr'"))
    assert [hit.id for hit in hits] == ["a#0"]
    assert hits[0].metadata == {"team": "hr"}
