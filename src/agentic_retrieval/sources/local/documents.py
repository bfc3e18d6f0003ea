"""Keyed documents in a :class:`LocalStore`: each stored whole, with its chunks, atomically.

The knowledge service keeps two kinds of keyed units in embedded stores: the documents of an
index (pushed with ``docs/index``) and the files of a ``file`` knowledge source. Both are
records in the store's sense (``files`` rows whose path is ``record:<key>``; chunk ids
``<key>#<n>``, see :mod:`agentic_retrieval.sources.local.records`): the unit's own JSON (the
document, or the file's description) is the row's stored metadata, and its text is chunked
like any file. :meth:`DocumentStore.put` replaces a unit and its chunks in one transaction,
so a process killed mid-batch leaves every unit either entirely old or entirely new.

Vectors: a store given an ``Embeddings`` (a file source of ``serve --data``, unless the server
runs with ``--no-embeddings``) searches hybrid. A unit's chunks are written without vectors
(:meth:`DocumentStore.put`: found by their words at once) and embedded afterwards
(:meth:`DocumentStore.embed_pending`, in batches of :data:`EMBED_BATCH`, each written in its own
transaction: a server does it in the background, see
:mod:`agentic_retrieval.kb.background_embedding`). The pending work is the store's chunks
without vectors, so a process killed meanwhile leaves nothing to remember: the next one embeds
them. Until a chunk has its vector, hybrid search fuses the vectors there are with the lexical
ranking of every chunk, so no chunk is ever unfindable.

The store records the model beside its vectors (``vectors_made_with``, written with the first
chunks even before their vectors), so which way a store ranks is read from it, never
remembered elsewhere (:meth:`DocumentStore.retrieval_mode`): a store that records a model keeps
embedding with it; an empty one follows the server; one holding chunks without vectors and no
model (written before file sources embedded, or by a server run with ``--no-embeddings``)
stays lexical, as ``index`` leaves a lexical source. A store recording a model takes no units
from a server that cannot embed them with it (:meth:`DocumentStore.write_refusal`): they would
be found by their words only, silently.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from langchain_core.embeddings import Embeddings

from agentic_retrieval.embeddings import NO_EMBEDDINGS_ENV_VAR, vectors_made_with
from agentic_retrieval.odata import Expr
from agentic_retrieval.permissions import ANONYMOUS, Access, Permissions
from agentic_retrieval.sources.local.chunking import DEFAULT_CHUNK_SIZE, DEFAULT_OVERLAP, chunks_of
from agentic_retrieval.sources.local.loaders import Section
from agentic_retrieval.sources.local.store import (
    RECORD_PREFIX,
    ChunkRecord,
    FileState,
    LocalStore,
    MetadataJson,
    StoredHit,
    json_default,
)
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

if TYPE_CHECKING:
    from agentic_retrieval.sources.postgres.store import PostgresStore

CHUNK_SEPARATOR = "#"
"""Between a unit's key and its chunk number in chunk ids (file chunk ids never hold it)."""
_SEARCH_DEPTH_ROUNDS = 4
EMBED_BATCH = 16
"""Chunks embedded per call and written per transaction: a query's embedding waits for at
most one batch of a large upload, and a writer for at most one batch's write."""
RetrievalMode = Literal["hybrid", "lexical"]
DocumentBackend: TypeAlias = "LocalStore | PostgresStore"
"""What keeps a :class:`DocumentStore`'s units: an embedded store, or a PostgreSQL one."""


@dataclass(frozen=True, slots=True)
class PreparedUnit:
    """A unit's chunks, computed before the write transaction, and whether to embed them."""

    chunks: list[ChunkRecord]
    embed: bool
    """Whether the chunks get vectors (afterwards: :meth:`DocumentStore.embed_pending`)."""
    vectors: list[list[float]] | None = None
    """Their vectors, made before the write (a PostgreSQL store: see :meth:`prepare`)."""


@dataclass(frozen=True, slots=True)
class EmbeddingProgress:
    """How far a store's chunks are embedded: chunks still without vectors, and with."""

    pending: int
    embedded: int


@dataclass(frozen=True, slots=True)
class RetrievalState:
    """How a store ranks: ``hybrid`` (with ``model``) or ``lexical``, and why, in words."""

    mode: RetrievalMode
    model: str | None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class DocumentHit:
    """A search result: the unit's key, its best chunk and that chunk's score."""

    key: str
    score: float
    chunk: StoredHit


class DocumentStore:
    """Keyed units (documents, uploaded files) over one :class:`LocalStore`.

    Args:
        store: The embedded store (shared; this object holds no state of its own).
        chunk_size: Maximum chunk length in characters.
        overlap: Characters of whole sentences repeated between consecutive chunks.
        embeddings: The bundled model, to embed chunks and queries where the store ranks
            hybrid (see :meth:`retrieval_mode`); ``None``: lexical only, no model used.
        ingestion: The same model, to embed chunks with instead (a server's: an instance
            of its own on one thread, so queries never wait behind an upload); ``None``:
            ``embeddings``.
    """

    def __init__(
        self,
        store: DocumentBackend,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        overlap: int = DEFAULT_OVERLAP,
        embeddings: Embeddings | None = None,
        ingestion: Embeddings | None = None,
    ) -> None:
        self.store = store
        self.chunk_size = chunk_size
        self.overlap = overlap
        self.embeddings = embeddings
        self.ingestion = (ingestion or embeddings) if embeddings is not None else None
        if embeddings is not None:  # recorded beside the vectors this store writes
            store.vectors_made_with = vectors_made_with(embeddings)

    def retrieval_mode(self) -> RetrievalState:
        """How this store ranks, read from what it holds and the model it was given.

        Hybrid where it records a model (its vectors', or its pending chunks') and has that
        model, or holds nothing yet and has one; lexical otherwise, with a note saying why.
        While chunks wait for their vectors, hybrid with a note: those are found by their
        words until embedded.
        """
        ours = _model_name(self.embeddings)
        if self.store.embeds_chunks():  # it holds vectors, or its chunks wait for theirs
            made_with = self.store.recorded_vectors_made_with()
            model = made_with[0].partition("@")[0] if made_with else ours
            if self.embeddings is None:
                return RetrievalState(
                    "lexical",
                    model,
                    "lexical only while this server runs with --no-embeddings: its vectors "
                    "are kept, and files uploaded meanwhile are refused (they would get none)",
                )
            if model is not None and ours is not None and model != ours:
                note = f"its vectors were made with {model!r}, not this service's {ours!r}"
                return RetrievalState("lexical", model, f"lexical only: {note}")
            return RetrievalState("hybrid", model, _pending_note(self.embedding_progress()))
        if self.embeddings is None:
            return RetrievalState(
                "lexical", None, "lexical only: this server runs with --no-embeddings"
            )
        if self.store.count_chunks() == 0:
            return RetrievalState("hybrid", ours)
        return RetrievalState(
            "lexical",
            None,
            "lexical only: its files were stored without vectors (before file sources "
            "embedded them, or by a server run with --no-embeddings); to rank them by meaning, "
            "upload them to a new file knowledge source",
        )

    def embedding_progress(self) -> EmbeddingProgress:
        """Chunks waiting for their vectors and chunks that have one (0 pending: lexical)."""
        if not self.store.embeds_chunks():
            return EmbeddingProgress(0, 0)  # a lexical store: nothing is waiting
        if self.store.defers_vectors is False:  # embedded before the write: none waits
            return EmbeddingProgress(0, self.store.count_chunks())
        pending, embedded = self.store.vector_counts()
        return EmbeddingProgress(pending, embedded)

    def embed_pending(self, limit: int = EMBED_BATCH) -> int:
        """Embed up to ``limit`` chunks still without vectors and write them (one transaction).

        Only where the store ranks hybrid with this model (see :meth:`retrieval_mode`). A
        chunk replaced or deleted while being embedded gets no vector (see
        :meth:`LocalStore.write_vectors`).

        Returns:
            How many chunks were embedded (0: nothing is pending here).
        """
        model = self.ingestion or self.embeddings
        if self.store.defers_vectors is False:  # a store that never leaves chunks pending
            return 0
        if model is None or self.retrieval_mode().mode != "hybrid":
            return 0
        chunks = self.store.chunks_without_vectors(limit)
        if not chunks:
            return 0
        texts = [_embedded_text(title, content) for _, title, content in chunks]
        self.store.write_vectors(chunks, model.embed_documents(texts))
        return len(chunks)

    def write_refusal(self) -> str | None:
        """Why this server must not write units to the store, else ``None``.

        A store holding vectors this server cannot match (it runs with ``--no-embeddings``,
        or with another model) would take units without vectors, found by their words only
        while the store still says it ranks hybrid: such writes are refused instead.
        """
        if not self.store.embeds_chunks():
            return None
        state = self.retrieval_mode()
        if state.mode == "hybrid":
            return None
        if self.embeddings is None:
            return (
                f"it ranks by meaning with vectors of the model {state.model!r}, and this "
                "server runs with --no-embeddings (no model loaded), so a file written now "
                "would get no vectors; restart the server without --no-embeddings (and "
                f"without ${NO_EMBEDDINGS_ENV_VAR}) to write to it"
            )
        return (
            f"its vectors were made with the model {state.model!r}, not this service's "
            f"{_model_name(self.embeddings)!r}, so a file written now would get no vectors; "
            f"restart the server with {state.model!r}, or upload to a new source"
        )

    def prepare(
        self,
        key: str,
        *,
        title: str,
        sections: Sequence[Section],
        fields: Mapping[str, Any],
    ) -> PreparedUnit:
        """A unit's chunks (before any write) and whether they are to be embedded.

        Args:
            key: The unit's key.
            title: The title every chunk carries.
            sections: The unit's text.
            fields: Filterable metadata of every chunk.
        """
        chunks = self._chunks(key, title, sections, fields)
        embed = self.embeddings is not None and self.retrieval_mode().mode == "hybrid"
        if not embed or self.store.defers_vectors:
            return PreparedUnit(chunks, embed)
        # a store that takes no chunk before its vector (PostgreSQL: its replicas share no
        # background embedder): the vectors are made here, before the write
        model = self.ingestion or self.embeddings
        assert model is not None  # embed implies a model
        texts = [_embedded_text(c.title, c.content) for c in chunks]
        vectors: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH):
            vectors += model.embed_documents(texts[start : start + EMBED_BATCH])
        return PreparedUnit(chunks, False, vectors)

    def query_vector(self, text: str) -> list[float] | None:
        """The query's vector where the store holds vectors and has the model, else ``None``."""
        if self.embeddings is None or text.strip() in ("", "*") or self.store.dimension() is None:
            return None
        if self.retrieval_mode().mode != "hybrid":  # another model's vectors
            return None
        return self.embeddings.embed_query(text)

    def put(
        self,
        key: str,
        *,
        stored: Mapping[str, Any],
        title: str,
        sections: Sequence[Section],
        fields: Mapping[str, Any],
        vector: Sequence[float] | None = None,
        permissions: Permissions | None = None,
        prepared: PreparedUnit | None = None,
    ) -> int:
        """Add or replace a unit and its chunks in one transaction.

        Args:
            key: The unit's key.
            stored: What :meth:`get` returns for it (the document or file description).
            title: The title every chunk carries.
            sections: The unit's text; an empty text still gets one (empty) chunk, so the
                unit is found by filters and browsing.
            fields: Filterable metadata of every chunk (stored once for the unit).
            vector: One vector for every chunk (hybrid search), if any.
            permissions: Who may see the unit (``None``: unmarked, or the permissions it
                already had).
            prepared: Its chunks from :meth:`prepare` (``sections`` and ``vector`` are then
                not read), written without vectors and embedded afterwards where it says so
                (:meth:`embed_pending`).

        Returns:
            The number of chunks written.
        """
        vectors: list[list[float]] | None = None
        if prepared is not None:
            chunks, vectors = prepared.chunks, prepared.vectors
        else:
            chunks = self._chunks(key, title, sections, fields)
            vectors = [list(vector)] * len(chunks) if vector is not None else None
        body = json.dumps(stored, sort_keys=True, default=json_default)
        digest = hashlib.sha256(body.encode()).hexdigest()
        path = RECORD_PREFIX + key
        state = FileState(path, path, digest, digest, 0.0, len(body), len(chunks))
        self.store.replace_file(
            state,
            MetadataJson(body),
            chunks,
            vectors,
            permissions,
            fields=fields,
            vectors_pending=prepared is not None and prepared.embed,
        )
        return len(chunks)

    def permissions(self, key: str) -> Permissions | None:
        """Who may see the unit ``key`` (``None``: unmarked or absent)."""
        return self.store.permissions_of(RECORD_PREFIX + key)

    def set_permissions(self, key: str, permissions: Permissions) -> bool:
        """Give the unit ``key`` new permissions; whether anything changed."""
        return self.store.set_permissions(RECORD_PREFIX + key, permissions)

    def get(self, key: str, fields: Sequence[str] | None = None) -> dict[str, Any] | None:
        """The unit stored under ``key`` (only ``fields`` of it, when given)."""
        return self.store.stored_metadata(RECORD_PREFIX + key, fields)

    def delete(self, key: str) -> bool:
        """Remove a unit and its chunks; ``False`` when there was none."""
        path = RECORD_PREFIX + key
        if self.store.file_state(path) is None:
            return False
        self.store.delete_file(path)
        return True

    def count(self) -> int:
        """How many units the store holds."""
        return self.store.count_files(RECORD_PREFIX)

    def page(self, after: str | None, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` (key, unit) pairs in key order, after the key ``after``."""
        start = RECORD_PREFIX + after if after is not None else None
        rows = self.store.files_page(RECORD_PREFIX, start, limit)
        return [(path[len(RECORD_PREFIX) :], unit) for path, unit in rows]

    def search(
        self,
        text: str,
        *,
        top: int,
        skip: int = 0,
        filter_expr: Expr | None = None,
        vector: Sequence[float] | None = None,
        per_unit: bool = True,
        access: Access = ANONYMOUS,
        topic_graph: TopicGraphSetting | None = None,
    ) -> list[DocumentHit]:
        """Search the chunks; with ``per_unit``, each unit once (scored by its best chunk).

        Args:
            text: Search text (``*`` or empty: everything, in insertion order).
            top: Most results.
            skip: Results to skip first (paging).
            filter_expr: A parsed OData filter over the chunks' fields.
            vector: A query vector (hybrid search when the store has vectors).
            per_unit: Group chunks by unit (documents); otherwise every chunk is a result.
            access: Who is asking (see :meth:`LocalStore.search`).
            topic_graph: Sample the chunks across topics (see :meth:`LocalStore.search`).
        """
        wanted = skip + top
        if top <= 0:
            return []
        depth = max(wanted, 50)
        hits: list[DocumentHit] = []
        for _ in range(_SEARCH_DEPTH_ROUNDS):
            chunks = self.store.search(
                text,
                top=depth,
                filter_expr=filter_expr,
                query_vector=vector,
                access=access,
                topic_graph=topic_graph,
            )
            hits = _group(chunks) if per_unit else [_hit(c) for c in chunks]
            if len(hits) >= wanted or len(chunks) < depth:
                break
            depth *= 4
        return hits[skip:wanted]

    def count_matches(
        self, text: str, filter_expr: Expr | None = None, *, access: Access = ANONYMOUS
    ) -> int:
        """How many units ``access`` may see match ``text`` and ``filter_expr``."""
        return self.store.count_matching_files(text, filter_expr, access=access)

    def _chunks(
        self, key: str, title: str, sections: Sequence[Section], fields: Mapping[str, Any]
    ) -> list[ChunkRecord]:
        records: list[ChunkRecord] = []
        for section in sections:
            # only what differs per chunk is stored per chunk: ``fields`` are stored once
            own = (
                {"page": section.page} if section.page is not None and "page" not in fields else {}
            )
            for text in chunks_of(section.text, self.chunk_size, self.overlap, section.split):
                records.append(
                    ChunkRecord(
                        f"{key}{CHUNK_SEPARATOR}{len(records)}",
                        len(records),
                        title,
                        text,
                        section.page,
                        own,
                    )
                )
        if not records:
            records.append(ChunkRecord(f"{key}{CHUNK_SEPARATOR}0", 0, title, "", None, {}))
        return records


def _embedded_text(title: str, content: str) -> str:
    """What a chunk's vector is made from: its title, then its text."""
    return f"{title}\n{content}" if title else content


def _pending_note(progress: EmbeddingProgress) -> str | None:
    """What a hybrid store's status says while some of its chunks wait for their vectors."""
    if not progress.pending:
        return None
    total = progress.pending + progress.embedded
    return (
        f"ranking is partly lexical: {progress.pending} of {total} chunks are still being "
        "embedded in the background; until then they are found by their words only"
    )


def _model_name(embeddings: Embeddings | None) -> str | None:
    """The model's name as a store records it, without the precision (``local``)."""
    if embeddings is None:
        return None
    made_with = vectors_made_with(embeddings)
    return made_with.partition("@")[0] if made_with else None


def unit_key(chunk_id: str) -> str:
    """The key of the unit a chunk id belongs to."""
    return chunk_id.rpartition(CHUNK_SEPARATOR)[0] or chunk_id


def _hit(chunk: StoredHit) -> DocumentHit:
    return DocumentHit(unit_key(chunk.id), chunk.score, chunk)


def _group(chunks: list[StoredHit]) -> list[DocumentHit]:
    best: dict[str, DocumentHit] = {}
    for chunk in chunks:  # best first: the first chunk seen of a unit is its best
        key = unit_key(chunk.id)
        if key not in best:
            best[key] = DocumentHit(key, chunk.score, chunk)
    return list(best.values())
