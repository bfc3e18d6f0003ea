"""File knowledge sources embed their uploads after storing them, in batches, and say how they rank.

The model here is a recording stand-in (hashed words), so the tests measure what the store
does with vectors, not the bundled model: an upload found by its words before its vectors
exist, batches a query can slip between, pending work kept in the store (never stale vectors
for a replaced file), one embedding process per store, the mode a store reads from what it
holds, and progress that goes to the server's log, never to stdout.
"""

from __future__ import annotations

import logging

import pytest
from filelock import FileLock

from agentic_retrieval.cli.commands import serve as serve_command
from agentic_retrieval.errors import ResourceConflictError
from agentic_retrieval.kb import background_embedding as embedding_module
from agentic_retrieval.kb.background_embedding import BackgroundEmbedder
from agentic_retrieval.kb.catalog import ServiceCatalog
from agentic_retrieval.kb.files import FileUpload, SourceFiles
from agentic_retrieval.kb.management import delete_knowledge_source, put_knowledge_source
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.sources.local.documents import (
    EMBED_BATCH,
    DocumentStore,
    EmbeddingProgress,
)
from agentic_retrieval.sources.local.store import LocalStore
from agentic_retrieval.testing import HashingEmbeddings


class Recording(HashingEmbeddings):
    """Hashed-word vectors, remembering how many texts each call embedded."""

    def __init__(self) -> None:
        super().__init__(size=64)
        self.calls: list[int] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return super().embed_documents(texts)


@pytest.fixture
def store(tmp_path):
    opened = LocalStore(tmp_path / "files.sqlite", create=True)
    yield opened
    opened.close()


def long_markdown(paragraphs: int) -> bytes:
    body = "\n\n".join(
        f"Paragraph {n} talks about tram number {n} and its depot." for n in range(paragraphs)
    )
    return f"# Trams\n\n{body}".encode()


def test_an_upload_is_found_by_its_words_at_once_and_embedded_afterwards_in_batches(store):
    model = Recording()
    documents = DocumentStore(store, chunk_size=120, overlap=0, embeddings=model)
    files = SourceFiles(documents, max_file_bytes=1_000_000, max_files=10)
    files.upload(FileUpload("trams.md", long_markdown(200), {}))
    assert model.calls == []  # the upload answered without waiting for the model
    total = store.count_chunks()
    assert documents.embedding_progress() == EmbeddingProgress(total, 0)
    mode = documents.retrieval_mode()
    assert mode.mode == "hybrid" and "partly lexical" in (mode.note or "")
    hits = documents.search("depot tram 7", top=3, vector=documents.query_vector("depot tram 7"))
    assert hits and "tram number 7 and" in hits[0].chunk.content  # by its words
    assert documents.embed_pending() == EMBED_BATCH
    assert documents.embedding_progress() == EmbeddingProgress(total - EMBED_BATCH, EMBED_BATCH)
    # half embedded: the chunks still pending are found by their words in the fused ranking
    vector = documents.query_vector("tram 190")
    hits = documents.search("tram 190", top=10, vector=vector, per_unit=False)
    assert any("tram number 190 and" in hit.chunk.content for hit in hits)
    while documents.embed_pending():
        pass
    assert sum(model.calls) == total > 2 * EMBED_BATCH
    assert max(model.calls) == EMBED_BATCH  # never the whole file in one call
    assert documents.embedding_progress() == EmbeddingProgress(0, total)
    mode = documents.retrieval_mode()
    assert (mode.mode, mode.note) == ("hybrid", None)  # nothing left to say
    hits = documents.search("depot tram 7", top=3, vector=documents.query_vector("depot tram 7"))
    assert hits and hits[0].chunk.similarity is not None  # searched with vectors


def test_a_file_replaced_or_deleted_while_being_embedded_gets_no_stale_vectors(store):
    documents = DocumentStore(store, embeddings=Recording())
    files = SourceFiles(documents, max_file_bytes=10_000, max_files=10)
    kept = files.upload(FileUpload("kept.md", b"# Kept\n\nthe tram depot", {})).file["fileId"]
    gone = files.upload(FileUpload("gone.md", b"# Gone\n\nthe bus depot", {})).file["fileId"]
    read = store.chunks_without_vectors(EMBED_BATCH)  # a batch read, being embedded...
    vectors = Recording().embed_documents([content for _, _, content in read])
    files.update(kept, FileUpload("kept.md", b"# Kept\n\nthe ferry pier", {}))
    files.delete(gone)
    assert store.write_vectors(read, vectors) == 0  # ...finds neither chunk it read
    assert documents.embedding_progress() == EmbeddingProgress(1, 0)  # the new text waits
    assert documents.embed_pending() == 1
    [hit] = documents.search("ferry", top=1, vector=documents.query_vector("ferry"))
    assert hit.chunk.similarity is not None and "ferry pier" in hit.chunk.content


@pytest.fixture
def service(tmp_path):
    directory = ServiceDirectory(tmp_path / "data")
    put_knowledge_source(directory, {"name": "docs", "kind": "file"})
    catalog = ServiceCatalog(directory, embeddings=Recording())
    yield directory, catalog
    directory.close()


def test_the_background_embedder_takes_pending_chunks_from_the_store_one_process_at_a_time(
    service,
):
    directory, catalog = service
    documents = catalog.file_documents("docs")
    assert documents is not None
    files = SourceFiles(documents, max_file_bytes=1_000_000, max_files=10)
    files.upload(FileUpload("trams.md", long_markdown(600), {}))
    pending = documents.embedding_progress().pending
    stored = directory.get("knowledgeSource", "docs")
    assert stored is not None and stored.store is not None and pending > EMBED_BATCH
    other_process = FileLock(directory.path / "embedding" / f"{stored.store}.lock")
    other_process.acquire()  # another worker embeds this store
    embedder = BackgroundEmbedder(directory, catalog, retry_seconds=0.05)
    try:
        embedder.start()  # scans every file source: nothing was told, the store says it
        assert not embedder.idle(timeout=0.5)  # waits for the lock, embeds nothing
        assert documents.embedding_progress().pending == pending
        other_process.release()  # that worker died: this one takes the work over
        assert embedder.idle(timeout=30)
        assert documents.embedding_progress() == EmbeddingProgress(0, pending)
        files.upload(FileUpload("more.md", long_markdown(3), {}))
        embedder.notify("docs")
        assert embedder.idle(timeout=30)
        assert documents.embedding_progress().pending == 0
    finally:
        embedder.close()


def test_a_deleted_source_leaves_no_embedding_lock_file_behind(service):
    directory, catalog = service
    put_knowledge_source(directory, {"name": "kept", "kind": "file"})
    embedder = BackgroundEmbedder(directory, catalog)
    locks = directory.path / "embedding"
    try:
        for name in ("docs", "kept"):
            documents = catalog.file_documents(name)
            assert documents is not None
            files = SourceFiles(documents, max_file_bytes=1_000_000, max_files=10)
            files.upload(FileUpload("trams.md", long_markdown(20), {}))
            embedder.notify(name)
            assert embedder.idle(timeout=30)
    finally:
        embedder.close()
    stores = {name: directory.get("knowledgeSource", name).store for name in ("docs", "kept")}
    assert sorted(p.name for p in locks.iterdir()) == sorted(f"{s}.lock" for s in stores.values())
    delete_knowledge_source(directory, "docs")
    assert [p.name for p in locks.iterdir()] == [f"{stores['kept']}.lock"]
    # one left by an older release (or re-created while its source was deleted) goes at start
    (locks / "knowledgeSource-gone-0a1b2c3d.sqlite.lock").touch()
    (directory.path / "graph-sync").mkdir()
    (directory.path / "graph-sync" / "knowledgeSource-gone-0a1b2c3d.sqlite.lock").touch()
    assert directory.remove_orphans() == [
        "embedding/knowledgeSource-gone-0a1b2c3d.sqlite.lock",
        "graph-sync/knowledgeSource-gone-0a1b2c3d.sqlite.lock",
    ]
    assert [p.name for p in locks.iterdir()] == [f"{stores['kept']}.lock"]


def test_a_store_of_chunks_without_vectors_stays_lexical_and_says_why(store):
    SourceFiles(DocumentStore(store), max_file_bytes=10_000, max_files=10).upload(
        FileUpload("old.md", b"# Old\n\nwritten before file sources embedded", {})
    )
    model = Recording()
    documents = DocumentStore(store, embeddings=model)
    mode = documents.retrieval_mode()
    assert (mode.mode, mode.model) == ("lexical", None)
    assert "stored without vectors" in (mode.note or "")
    SourceFiles(documents, max_file_bytes=10_000, max_files=10).upload(
        FileUpload("new.md", b"# New\n\nuploaded after the upgrade", {})
    )
    assert model.calls == [] and store.dimension() is None  # no half-embedded store
    assert documents.query_vector("upgrade") is None


class Named(Recording):
    """A recording model reporting a name, as a store records it beside its vectors."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model


def test_a_store_holding_vectors_refuses_writes_it_could_not_embed(store):
    hybrid = SourceFiles(
        DocumentStore(store, embeddings=Named("model-a")), max_file_bytes=10_000, max_files=10
    )
    file_id = hybrid.upload(FileUpload("a.md", b"# A\n\nembedded", {})).file["fileId"]
    chunks = store.count_chunks()
    lexical = SourceFiles(DocumentStore(store), max_file_bytes=10_000, max_files=10, name="s")
    with pytest.raises(ResourceConflictError, match=r"'s'.*'model-a'.*without --no-embeddings"):
        lexical.upload(FileUpload("b.md", b"# B\n\nwould get no vectors", {}))
    with pytest.raises(ResourceConflictError, match="--no-embeddings"):
        lexical.update(file_id, FileUpload("a.md", b"# A\n\nchanged", {}))
    other = Named("model-b")
    mismatched = SourceFiles(
        DocumentStore(store, embeddings=other), max_file_bytes=10_000, max_files=10, name="s"
    )
    with pytest.raises(ResourceConflictError, match="'model-a', not this service's 'model-b'"):
        mismatched.upload(FileUpload("b.md", b"# B\n\nwould get no vectors", {}))
    assert other.calls == [] and store.count_chunks() == chunks  # nothing written
    assert [f["fileName"] for f in hybrid.all()] == ["a.md"]


@pytest.fixture
def server_logging():
    """The server's logging of embedding progress, removed afterwards (it is process-wide)."""
    logger = logging.getLogger("agentic_retrieval.kb.background_embedding")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_embedding_progress_goes_to_the_servers_log_with_time_left_and_the_opt_out(
    monkeypatch, capsys, server_logging
):
    serve_command._log_ingestion_progress()  # what build_server_app sets up
    serve_command._log_ingestion_progress()  # once only, however many apps a process builds
    handlers = server_logging.handlers
    assert sum(isinstance(h, serve_command._ProgressHandler) for h in handlers) == 1
    now = [1000.0]
    monkeypatch.setattr(embedding_module.time, "monotonic", lambda: now[0])
    progress = embedding_module._Progress("docs", 3200)
    progress(32)  # a quick store says nothing
    now[0] += embedding_module.PROGRESS_AFTER_SECONDS
    progress(368)
    now[0] += 1.0
    progress(32)  # too soon after the last line
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [line for line in captured.err.splitlines() if "embedding" in line]
    assert lines == [
        "INFO:     embedding knowledge source 'docs': 400/3200 chunks, 5 s elapsed, about "
        "35 s left (found by their words meanwhile; serve --no-embeddings or "
        "$AGENTIC_RETRIEVAL_NO_EMBEDDINGS=1: lexical only)"
    ]
