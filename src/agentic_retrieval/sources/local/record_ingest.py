"""Index records into a :class:`LocalStore`, incrementally by record id and content hash.

Each record is chunked like a file's text (title on every chunk) and written all-or-nothing
(a savepoint of the batch it is committed with, see
:class:`~agentic_retrieval.sources.local.ingest.BatchWriter`), replacing what was indexed
under the same id; a record whose content, ingest metadata and chunking settings are
unchanged is skipped. Chunk ids are ``<record id>#<n>``
(file chunk ids never contain ``#``), and every chunk carries ``record_id``, ``title`` and
``chunk`` next to the record's own fields, all filterable with OData.

Records read from a file remember it: indexing the same file again removes the records it no
longer holds, like files deleted from an indexed folder.

Permissions: a record's own permission fields (see
:mod:`~agentic_retrieval.sources.local.records`) win over the run's ``permissions``; a record
with neither keeps the permissions it had (a new one is unmarked). A change of permissions
alone updates the record without re-chunking or re-embedding it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local.chunking import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_OVERLAP,
    body_without_title,
    chunk_text,
)
from agentic_retrieval.sources.local.ingest import (
    BatchWriter,
    FileFailure,
    IndexProgress,
    IndexReport,
    ProgressCallback,
    pending_size,
    validate_metadata,
)
from agentic_retrieval.sources.local.records import (
    Record,
    RecordError,
    RecordFailure,
    RecordFields,
    RecordsFile,
    to_record,
)
from agentic_retrieval.sources.local.store import RECORD_PREFIX, ChunkRecord, FileState
from agentic_retrieval.sources.local.store.target import IndexTarget

logger = logging.getLogger(__name__)

EMBED_BATCH = 64
"""Records whose chunks are embedded in one call (embedding models are fastest in batches)."""

RecordInput = Mapping[str, Any] | Document | Record


@dataclass(frozen=True, slots=True)
class _Prepared:
    record: Record
    state: FileState
    chunks: list[ChunkRecord]
    origin: str | None
    permissions: Permissions | None


def index_records(
    store: IndexTarget,
    records: Iterable[RecordInput],
    *,
    fields: RecordFields | None = None,
    metadata: Mapping[str, Any] | None = None,
    embeddings: Embeddings | None = None,
    progress: ProgressCallback | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    permissions: Permissions | None = None,
) -> IndexReport:
    """Add or update records (dicts, LangChain ``Document``s or :class:`Record`s).

    Args:
        store: The destination.
        records: The records; an unreadable one is reported in ``failed`` and skipped.
        fields: Which fields hold the id, title, text and permissions (default:
            :class:`RecordFields`).
        metadata: Fields stored on every chunk of these records (like ``--meta``).
        embeddings: When given, chunks are embedded for hybrid search.
        progress: Called after each record.
        chunk_size: Maximum chunk length in characters.
        overlap: Characters of whole sentences repeated between consecutive chunks.
        permissions: Who may see records that name no permissions of their own.

    Returns:
        The report; ``indexed``, ``unchanged`` and ``failed`` name record ids (or, for a
        record without a readable id, its position).

    Raises:
        ValueError: Invalid ``metadata`` names or values.
        StoreBusyError: Another run is writing to ``store`` (one writer at a time).
    """
    items = ((f"record {n}", item) for n, item in enumerate(records, start=1))
    known = len(records) if isinstance(records, Sized) else None
    indexer = _Indexer(store, fields, metadata, embeddings, chunk_size, overlap, permissions)
    with store.exclusive_writer():
        return indexer.run(items, progress, origin=None, expected=lambda done: known or done)


def index_records_file(
    store: IndexTarget,
    path: str | Path,
    *,
    fields: RecordFields | None = None,
    metadata: Mapping[str, Any] | None = None,
    embeddings: Embeddings | None = None,
    progress: ProgressCallback | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    permissions: Permissions | None = None,
) -> IndexReport:
    """Index a JSONL / JSON / CSV / TSV file of records and drop the ones it no longer holds.

    The file is read as it is indexed (see :class:`RecordsFile`): memory holds a batch of
    records, never the file. Records indexed earlier from the same file (by absolute path)
    that are absent now are deleted; records added from elsewhere are never touched.
    Malformed lines are reported in ``failed`` as ``FILE:LINE``; the records they held (if
    indexed before) are kept.

    Raises:
        RecordError: The file is missing, of an unknown format, or unreadable as a whole.
        ValueError: Invalid ``metadata`` names or values.
        StoreBusyError: Another run is writing to ``store`` (one writer at a time).
    """
    origin = str(Path(path).expanduser().resolve())
    fields = fields or RecordFields()
    records = RecordsFile(origin, fields)  # read as it is indexed: memory stays flat

    def expected(done: int) -> int:
        """The records the file holds, estimated from the share of its bytes read so far."""
        read = records.bytes_read
        if read <= 0 or read >= records.size:
            return done
        return max(done, round(done * records.size / read))

    indexer = _Indexer(store, fields, metadata, embeddings, chunk_size, overlap, permissions)
    with store.exclusive_writer():
        return indexer.run(iter(records), progress, origin=origin, expected=expected)


def delete_records(store: IndexTarget, ids: Iterable[str]) -> IndexReport:
    """Remove records by id; ids that are not indexed are reported in ``failed``."""
    with store.exclusive_writer():
        return _delete_records(store, ids)


def _delete_records(store: IndexTarget, ids: Iterable[str]) -> IndexReport:
    started = time.perf_counter()
    report = IndexReport()
    with store.transaction():  # one commit for them all
        for identifier in dict.fromkeys(str(i) for i in ids):
            if store.file_state(RECORD_PREFIX + identifier) is None:
                report.failed.append(FileFailure(identifier, "no record with this id"))
                continue
            report.chunks_deleted += store.delete_file(RECORD_PREFIX + identifier)
            report.deleted.append(identifier)
    report.total_chunks = store.count_chunks()
    report.elapsed_seconds = time.perf_counter() - started
    return report


class _Indexer:
    """Prepares, embeds (in batches) and writes records."""

    def __init__(
        self,
        store: IndexTarget,
        fields: RecordFields | None,
        metadata: Mapping[str, Any] | None,
        embeddings: Embeddings | None,
        chunk_size: int,
        overlap: int,
        permissions: Permissions | None = None,
    ) -> None:
        self.store = store
        self.permissions = permissions
        self.fields = fields or RecordFields()
        self.metadata = validate_metadata(metadata or {})
        self.embeddings = embeddings
        self.chunk_size = chunk_size
        self.overlap = overlap
        settings = {
            "metadata": self.metadata,
            "chunk_size": chunk_size,
            "overlap": overlap,
            "vectors": embeddings is not None,
        }
        self.settings_json = json.dumps(settings, sort_keys=True)

    def run(
        self,
        items: Iterator[tuple[str, Any]],
        progress: ProgressCallback | None,
        origin: str | None,
        expected: Callable[[int], int],
    ) -> IndexReport:
        """Index ``items`` as they come (``(where, record)`` pairs, never held all at once).

        Args:
            items: The records, each with where it came from (for failures).
            progress: Called after each record.
            origin: The records file they were read from, if any (see ``_drop_stale``).
            expected: How many records the run will see in all, given how many are done
                (the progress total: an estimate while a file is being read).
        """
        started = time.perf_counter()
        report = IndexReport()
        seen: set[str] = set()
        batch: list[_Prepared] = []
        writes = BatchWriter(self.store, report)
        for done, (where, item) in enumerate(items, start=1):
            status, prepared = self._prepare(where, item, origin, seen, report)
            if prepared is not None:
                batch.append(prepared)
                if len(batch) >= EMBED_BATCH:
                    self._queue(batch, writes, report)
                    batch = []
            if progress is not None:
                progress(IndexProgress(done, expected(done), where, status))
        self._queue(batch, writes, report)
        writes.flush()
        if origin is not None:
            self._drop_stale(origin, seen, report)
        report.total_chunks = self.store.count_chunks()
        report.elapsed_seconds = time.perf_counter() - started
        logger.info("indexed records into %s: %s", self.store.label, report.summary())
        return report

    def _drop_stale(self, origin: str, seen: set[str], report: IndexReport) -> None:
        """Delete the records ``origin`` held before and holds no more.

        A line that could not be read may be one of them (its id is unknown), so after any
        failure they are kept (``report.kept``) until the file reads cleanly.
        """
        stale = sorted(set(self.store.record_ids(origin)) - seen)
        if report.failed:
            report.kept.extend(stale)
            return
        with self.store.transaction():
            for key in stale:
                report.chunks_deleted += self.store.delete_file(RECORD_PREFIX + key)
                report.deleted.append(key)

    def _prepare(
        self,
        where: str,
        item: Any,
        origin: str | None,
        seen: set[str],
        report: IndexReport,
    ) -> tuple[Any, _Prepared | None]:
        if isinstance(item, RecordFailure):
            return self._fail(report, item.where or where, item.reason), None
        try:
            record = item if isinstance(item, Record) else to_record(item, self.fields)
        except RecordError as exc:
            return self._fail(report, where, str(exc)), None
        if record.id in seen:
            return self._fail(report, where, f"duplicate id {record.id!r}"), None
        seen.add(record.id)
        content_hash = hashlib.sha256(record.canonical().encode()).hexdigest()
        fingerprint = hashlib.sha256(f"{content_hash}\n{self.settings_json}".encode()).hexdigest()
        key = RECORD_PREFIX + record.id
        previous = self.store.file_state(key)
        permissions = record.permissions or self.permissions
        if previous is not None and previous.fingerprint == fingerprint:
            if permissions is not None and self.store.set_permissions(key, permissions):
                report.indexed.append(record.id)
                return "indexed", None
            report.unchanged.append(record.id)
            return "unchanged", None
        chunks = self._chunks(record)
        size = len(record.text.encode())
        state = FileState(key, key, content_hash, fingerprint, 0.0, size, len(chunks))
        return "indexed", _Prepared(record, state, chunks, origin, permissions)

    def _chunks(self, record: Record) -> list[ChunkRecord]:
        body = body_without_title(record.title, record.text)  # a title counts once, as a file's
        texts = chunk_text(body, self.chunk_size, self.overlap) or [record.text]
        return [
            ChunkRecord(
                f"{record.id}#{ordinal}", ordinal, record.title, text, None, {"chunk": ordinal}
            )
            for ordinal, text in enumerate(texts)
        ]

    def _shared_fields(self, record: Record) -> dict[str, Any]:
        """The fields every chunk of the record has (stored once, see ``replace_file``)."""
        return {
            **self.metadata,
            **record.metadata,
            "record_id": record.id,
            "title": record.title,
        }

    def _queue(self, batch: list[_Prepared], writes: BatchWriter, report: IndexReport) -> None:
        """Embed a batch's chunks in one call; queue each record's write (see BatchWriter)."""
        if not batch:
            return
        vectors = self._embed([c for item in batch for c in item.chunks])
        offset = 0
        for item in batch:
            count = len(item.chunks)
            mine = vectors[offset : offset + count] if vectors is not None else None
            offset += count
            writes.add(
                item.record.id, self._writer(item, mine, report), pending_size(item.chunks, mine)
            )

    def _writer(
        self, item: _Prepared, vectors: list[list[float]] | None, report: IndexReport
    ) -> Callable[[], None]:
        def write() -> None:
            self.store.replace_file(
                item.state,
                {"origin": item.origin} if item.origin is not None else {},
                item.chunks,
                vectors,
                item.permissions,
                fields=self._shared_fields(item.record),
            )
            report.indexed.append(item.record.id)
            report.chunks_written += len(item.chunks)

        return write

    def _embed(self, chunks: list[ChunkRecord]) -> list[list[float]] | None:
        if self.embeddings is None:
            return None
        texts = [f"{c.title}\n{c.content}" if c.title else c.content for c in chunks]
        return self.embeddings.embed_documents(texts)

    def _fail(self, report: IndexReport, where: str, reason: str) -> str:
        logger.warning("skipping %s: %s", where, reason)
        report.failed.append(FileFailure(where, reason))
        return "failed"
