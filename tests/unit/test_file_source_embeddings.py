"""File knowledge sources embed their uploads in batches and say how they rank.

The model here is a recording stand-in (hashed words), so the tests measure what the store
does with vectors, not the bundled model: batches a query can slip between, the mode a store
reads from what it holds, and progress that goes to the server's log, never to stdout.
"""

from __future__ import annotations

import logging

import pytest

from agentic_retrieval.cli.commands import serve as serve_command
from agentic_retrieval.errors import ResourceConflictError
from agentic_retrieval.kb import files as files_module
from agentic_retrieval.kb.files import EmbeddingProgress, FileUpload, SourceFiles
from agentic_retrieval.sources.local.documents import EMBED_BATCH, DocumentStore
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


def test_a_large_file_is_embedded_in_batches_a_query_can_slip_between(store):
    model = Recording()
    documents = DocumentStore(store, chunk_size=120, overlap=0, embeddings=model)
    files = SourceFiles(documents, max_file_bytes=1_000_000, max_files=10)
    files.upload(FileUpload("trams.md", long_markdown(200), {}))
    assert sum(model.calls) == store.count_chunks() > 2 * EMBED_BATCH
    assert max(model.calls) == EMBED_BATCH  # never the whole file in one call
    assert documents.retrieval_mode().mode == "hybrid"
    hits = documents.search("depot tram 7", top=3, vector=documents.query_vector("depot tram 7"))
    assert hits and hits[0].chunk.similarity is not None  # searched with vectors


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
    """The server's logging of ingestion progress, removed afterwards (it is process-wide)."""
    logger = logging.getLogger("agentic_retrieval.kb.files")
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
    monkeypatch.setattr(files_module.time, "monotonic", lambda: now[0])
    progress = EmbeddingProgress("big.pdf")
    progress(32, 3200)  # a quick file says nothing
    now[0] += files_module.PROGRESS_AFTER_SECONDS
    progress(400, 3200)
    now[0] += 1.0
    progress(432, 3200)  # too soon after the last line
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [line for line in captured.err.splitlines() if "embedding" in line]
    assert lines == [
        "INFO:     embedding 'big.pdf': 400/3200 chunks, 5 s elapsed, about 35 s left "
        "(serve --no-embeddings or $AGENTIC_RETRIEVAL_NO_EMBEDDINGS=1: lexical only, faster)"
    ]
