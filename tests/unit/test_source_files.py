"""The files of a file knowledge source: names stay unique and capacity holds under races."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentic_retrieval.errors import ResourceConflictError
from agentic_retrieval.kb import files as files_module
from agentic_retrieval.kb.files import FileUpload, SourceFiles
from agentic_retrieval.sources.local.documents import DocumentStore
from agentic_retrieval.sources.local.store import LocalStore


@pytest.fixture
def store(tmp_path):
    opened = LocalStore(tmp_path / "files.sqlite", create=True)
    yield opened
    opened.close()


def converting_together(monkeypatch, parties: int) -> None:
    """Make ``parties`` uploads convert at the same moment (the slow step of a real upload)."""
    barrier = threading.Barrier(parties, timeout=10)
    convert = files_module.convert

    def slow_convert(upload):
        barrier.wait()
        return convert(upload)

    monkeypatch.setattr(files_module, "convert", slow_convert)


def race(action, arguments):
    with ThreadPoolExecutor(len(arguments)) as pool:
        futures = [pool.submit(action, argument) for argument in arguments]
    outcomes = []
    for future in futures:
        try:
            outcomes.append(future.result().file["fileName"])
        except ResourceConflictError:
            outcomes.append("conflict")
    return sorted(outcomes)


def test_two_uploads_of_one_name_at_once_store_one_file(store, monkeypatch):
    files = SourceFiles(DocumentStore(store), max_file_bytes=10_000, max_files=100)
    converting_together(monkeypatch, 2)
    uploads = [FileUpload("notes/a.md", f"# A\n\nversion {n}".encode(), {}) for n in (1, 2)]
    assert race(files.upload, uploads) == ["conflict", "notes/a.md"]
    assert [f["fileName"] for f in files.all()] == ["notes/a.md"]


def test_uploads_at_once_never_exceed_the_capacity(store, monkeypatch):
    files = SourceFiles(DocumentStore(store), max_file_bytes=10_000, max_files=1)
    converting_together(monkeypatch, 2)
    uploads = [FileUpload(f"{name}.md", b"# Note\n\ntext", {}) for name in ("a", "b")]
    assert race(files.upload, uploads).count("conflict") == 1
    assert len(files.all()) == 1


def test_an_update_of_a_file_deleted_meanwhile_does_not_bring_it_back(store, monkeypatch):
    files = SourceFiles(DocumentStore(store), max_file_bytes=10_000, max_files=100)
    file_id = files.upload(FileUpload("a.md", b"# A\n\nfirst", {})).file["fileId"]
    convert = files_module.convert

    def delete_while_converting(upload):
        files.delete(file_id)
        return convert(upload)

    monkeypatch.setattr(files_module, "convert", delete_while_converting)
    with pytest.raises(files_module.ResourceNotFoundError):
        files.update(file_id, FileUpload("a.md", b"# A\n\nsecond", {}))
    assert files.all() == []


async def test_a_file_chunk_is_keyed_by_its_file_name_not_its_id(store):
    from agentic_retrieval.sources.base import SearchQuery
    from agentic_retrieval.sources.local.document_source import DocumentKnowledgeSource

    files = SourceFiles(DocumentStore(store), max_file_bytes=10_000, max_files=100)
    uploaded = files.upload(FileUpload("notes/ferry.md", b"# Ferry\n\nHourly to Gull Island.", {}))
    file_id = uploaded.file["fileId"]
    source = DocumentKnowledgeSource("docs", DocumentStore(store), kind="file")
    (hit,) = await source.search(SearchQuery(text="ferry gull island", top=5))
    assert hit.doc_key == "notes/ferry.md#0"
    assert hit.metadata["file_id"] == file_id  # the API handle, as metadata
    files.update(file_id, FileUpload("notes/boat.md", b"# Boat\n\nGull Island.", {}))
    (renamed,) = await source.search(SearchQuery(text="gull island", top=5))
    assert renamed.doc_key == "notes/boat.md#0"
