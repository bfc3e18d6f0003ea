"""Knowledge bases stored as a directory: manifest, sources, indexing, reopening."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fakes import ConceptEmbeddings, write

from agentic_retrieval.errors import KnowledgeBaseDirectoryError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.sources.base import SearchQuery


async def test_create_add_index_and_reload(tmp_path: Path) -> None:
    docs = tmp_path / "handbook"
    write(docs / "leave.md", "# Leave\n\nEmployees get 25 days of paid leave per year.")
    write(docs / "travel.txt", "Travel\n\nBook trains for trips under 500 km.")
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="company", description="HR")
    kb.add_or_update_source("handbook", description="The employee handbook")
    kb.add_or_update_source("empty")
    report = kb.index("handbook", [docs], metadata={"dept": "hr"})
    assert report.total_chunks == 2

    manifest = json.loads((tmp_path / "kb" / "knowledge-base.json").read_text())
    assert manifest == {
        "name": "company",
        "description": "HR",
        "sources": [
            {
                "name": "handbook",
                "description": "The employee handbook",
                "database": "handbook.sqlite",
                "embeddings": False,
                "kind": "local",
            },
            {
                "name": "empty",
                "description": "",
                "database": "empty.sqlite",
                "embeddings": False,
                "kind": "local",
            },
        ],
    }
    kb.close()

    reopened = KnowledgeBaseDirectory(tmp_path / "kb").load()
    assert reopened.name == "company"
    assert reopened.source_names == ["handbook", "empty"]
    sources = reopened.open_sources()
    assert sources is not reopened.open_sources()  # a new list...
    assert sources[0] is reopened.open_sources()[0]  # ...of the same opened sources
    assert [(s.name, s.kind, s.description) for s in sources] == [
        ("handbook", "local", "The employee handbook"),
        ("empty", "local", ""),
    ]
    hits = await sources[0].search(SearchQuery(text="paid leave days", filter="dept eq 'hr'"))
    assert [h.doc_key for h in hits] == ["handbook-leave-md-0"]
    assert await sources[1].search(SearchQuery(text="leave")) == []
    reopened.close()


def test_reindex_through_directory_is_incremental(tmp_path: Path) -> None:
    docs = tmp_path / "d"
    write(docs / "a.txt", "alpha")
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("s")
    assert len(kb.index("s", [docs]).indexed) == 1
    again = KnowledgeBaseDirectory(tmp_path / "kb")  # loads lazily
    assert len(again.index("s", [docs]).unchanged) == 1
    kb.close()
    again.close()


async def test_embeddings_setting_reopens_and_reembeds(tmp_path: Path) -> None:
    docs = tmp_path / "d"
    write(docs / "car.txt", "The car needs new tires.")
    write(docs / "fee.txt", "The late fee is five euros.")
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("s", description="vehicles")
    kb.index("s", [docs])
    lexical = kb.open_source("s")
    assert lexical.embeddings is None
    assert await lexical.search(SearchQuery(text="automobile")) == []

    entry = kb.add_or_update_source("s", embeddings=True)
    assert entry.description == "vehicles" and entry.embeddings
    fake = ConceptEmbeddings()
    report = kb.index("s", [docs], embeddings=fake)
    assert len(report.indexed) == 2  # vectors were added to unchanged files
    hybrid = kb.open_source("s", embeddings=fake)
    assert hybrid is not lexical and hybrid.embeddings is fake
    hits = await hybrid.search(SearchQuery(text="automobile", top=1))
    assert [h.doc_key for h in hits] == ["d-car-txt-0"]
    assert kb.open_sources(embeddings=False)[0] is hybrid  # already open: reused
    kb.close()
    plain = KnowledgeBaseDirectory(tmp_path / "kb").load().open_sources(embeddings=False)[0]
    assert plain.embeddings is None
    plain.close()


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeBaseDirectoryError, match="no knowledge base directory"):
        KnowledgeBaseDirectory(tmp_path / "nowhere").load()
    (tmp_path / "plain").mkdir()
    with pytest.raises(KnowledgeBaseDirectoryError, match=r"knowledge-base\.json is missing"):
        KnowledgeBaseDirectory(tmp_path / "plain").load()
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("known")
    with pytest.raises(KnowledgeBaseDirectoryError, match=r"no source 'other' \(sources: known\)"):
        kb.index("other", [tmp_path])
    with pytest.raises(KnowledgeBaseDirectoryError, match="already holds"):
        KnowledgeBaseDirectory(tmp_path / "kb").create(name="again")
    with pytest.raises(KnowledgeBaseDirectoryError, match="invalid source name"):
        kb.add_or_update_source("../escape")
    (tmp_path / "kb" / "knowledge-base.json").write_text('{"sources": [{"name": "x"}]}')
    with pytest.raises(KnowledgeBaseDirectoryError, match="invalid"):
        KnowledgeBaseDirectory(tmp_path / "kb").load()
    manifest = {"name": "kb", "sources": [{"name": "x", "database": "../../etc/x.sqlite"}]}
    (tmp_path / "kb" / "knowledge-base.json").write_text(json.dumps(manifest))
    with pytest.raises(KnowledgeBaseDirectoryError, match="inside the directory"):
        KnowledgeBaseDirectory(tmp_path / "kb").load()
    assert issubclass(KnowledgeBaseDirectoryError, ValueError)


# --- hostile places and manifests ------------------------------------------------------------


@pytest.mark.parametrize(
    "manifest",
    [
        "[1, 2, 3]",
        '{"name": "kb", "sources": [1]}',
        '{"name": "kb", "sources": ' + "[" * 5000 + "]" * 5000 + "}",
        "\xff\xfe not text",
    ],
    ids=["a-list", "a-source-that-is-a-number", "nested-too-deeply", "not-utf8"],
)
def test_a_broken_manifest_is_a_directory_error(tmp_path, manifest):
    (tmp_path / "knowledge-base.json").write_bytes(manifest.encode("latin-1"))
    with pytest.raises(KnowledgeBaseDirectoryError, match=r"invalid .*knowledge-base\.json"):
        KnowledgeBaseDirectory(tmp_path).load()


def test_an_oversized_manifest_is_not_read(tmp_path, monkeypatch):
    import agentic_retrieval.kb.directory as module

    monkeypatch.setattr(module, "MAX_MANIFEST_BYTES", 100)
    (tmp_path / "knowledge-base.json").write_text(
        '{"name": "kb", "description": "' + "x" * 200 + '"}'
    )
    with pytest.raises(KnowledgeBaseDirectoryError, match="larger than 100 bytes"):
        KnowledgeBaseDirectory(tmp_path).load()


def test_creating_over_a_file_or_where_nothing_can_be_created(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(KnowledgeBaseDirectoryError, match="exists and is not a directory"):
        KnowledgeBaseDirectory(tmp_path / "file").create(name="kb")
    with pytest.raises(KnowledgeBaseDirectoryError, match="cannot create a knowledge base at"):
        KnowledgeBaseDirectory(tmp_path / "file" / "below").create(name="kb")
