"""Index files and folders into a :class:`LocalStore`, incrementally.

For every file: read it, hash it, and compare a fingerprint (content hash + ingest metadata +
chunking settings + whether vectors are computed) with what the store holds. Unchanged files
are skipped; new or changed files are loaded, chunked, embedded (when the store has an
embedding model) and written in one transaction that replaces the file's previous chunks;
indexed files that disappeared from an indexed folder are removed. A file that cannot be read
is reported with the reason and skipped; the run goes on.

Permissions (who may see a file; see :mod:`agentic_retrieval.permissions`) come from the
run's ``permissions`` argument (``--allow-user``, ``--allow-group``, ``--public``) or, per
file, from a *sidecar*: ``report.pdf.permissions.json`` next to ``report.pdf`` holding
``{"userIds": [...], "groupIds": [...]}`` (``"all"`` in either list makes the file public).
A sidecar wins over the run's permissions; sidecars themselves are never indexed. A run that
gives no permissions keeps each file's earlier ones, so re-indexing never widens access; a
changed sidecar or run permission updates the file without re-reading it.

Chunk ids are ``<slug>-<ordinal>``: the slug is the file's path relative to the folder given
to :func:`index_paths` *including that folder's own name* (just the file name when a file is
given directly), lower-cased with every run of non-alphanumerics turned into ``-``; e.g.
``docs/HR/Leave Policy.md`` indexed through the folder ``docs`` gives ``docs-hr-leave-policy-md-0``,
``-1``... A file keeps the slug it was first indexed with; if another file already owns a slug,
the new one gets ``-<6 hex digits of the path's SHA-1>`` appended.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.embeddings import Embeddings

from agentic_retrieval.errors import LoaderError, StoreError
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local.chunking import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_OVERLAP,
    body_without_title,
    chunk_text,
)
from agentic_retrieval.sources.local.loaders import SUPPORTED_EXTENSIONS, LoadedDocument, load_file
from agentic_retrieval.sources.local.store import ChunkRecord, FileState, json_default
from agentic_retrieval.sources.local.store.target import IndexTarget

logger = logging.getLogger(__name__)

RESERVED_METADATA = frozenset({"source_path", "file_name", "title", "chunk", "page", "record_id"})
"""Metadata names the store sets itself (on file chunks, and on record chunks)."""
MAX_FILE_BYTES = 256 * 1024 * 1024
"""Larger files are reported as failed rather than read into memory."""
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SIDECAR_SUFFIX = ".permissions.json"
"""A file ``NAME`` + this suffix holds ``NAME``'s permissions (and is never indexed itself)."""
_SIDECAR_KEYS = frozenset({"userIds", "groupIds"})
_SLUG_JUNK = re.compile(r"[^a-z0-9]+")

FileStatus = Literal["indexed", "unchanged", "failed", "deleted"]


@dataclass(frozen=True, slots=True)
class FileFailure:
    """A file that was skipped, and why."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Reported to the progress callback after each file (or record)."""

    done: int
    total: int
    """How many the run will handle in all; while a records file is read, an estimate from
    the share of its bytes read so far (the file is never counted ahead)."""
    path: str
    status: FileStatus


ProgressCallback = Callable[[IndexProgress], None]


@dataclass
class IndexReport:
    """What one indexing run did."""

    indexed: list[str] = field(default_factory=list)
    """Files (re)written: new, changed, or indexed with different metadata."""
    unchanged: list[str] = field(default_factory=list)
    failed: list[FileFailure] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    """Files inside indexed folders with an unsupported extension (not errors)."""
    skipped: list[FileFailure] = field(default_factory=list)
    """Entries of indexed folders deliberately not read, and why: links leading out of the
    folder (or to folders), FIFOs, sockets, devices, folders that cannot be listed."""
    kept: list[str] = field(default_factory=list)
    """Records a records file no longer holds, kept because some of its lines could not be
    read (one of them may be such a record); removed once the file reads cleanly."""
    chunks_written: int = 0
    chunks_deleted: int = 0
    total_chunks: int = 0
    """Chunks in the store after the run."""
    elapsed_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every file was read."""
        return not self.failed

    def summary(self) -> str:
        """Return a one-line human summary."""
        return (
            f"{len(self.indexed)} indexed, {len(self.unchanged)} unchanged, "
            f"{len(self.deleted)} deleted, {len(self.failed)} failed; "
            f"{self.chunks_written} chunks written, {self.total_chunks} in the index "
            f"({self.elapsed_seconds:.1f}s)"
        )


@dataclass(frozen=True, slots=True)
class _Candidate:
    path: Path
    slug_hint: str
    explicit: bool


def index_paths(
    store: IndexTarget,
    paths: Iterable[str | Path],
    *,
    metadata: Mapping[str, Any] | None = None,
    embeddings: Embeddings | None = None,
    progress: ProgressCallback | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    permissions: Permissions | None = None,
) -> IndexReport:
    """Index files and folders (recursively) into ``store``.

    Args:
        store: The destination.
        paths: Files and folders. Hidden files and folders (``.name``) are not walked.
        metadata: Fields stored on every chunk of these files and filterable with OData
            (names must be identifiers and not one of ``source_path``, ``file_name``,
            ``title``, ``chunk``, ``page``, ``record_id``).
        embeddings: When given, each chunk's ``title + content`` is embedded for hybrid search.
        progress: Called after each file.
        chunk_size: Maximum chunk length in characters.
        overlap: Characters of whole sentences repeated between consecutive chunks.
        permissions: Who may see these files (a file's sidecar overrides it); ``None``
            keeps each file's earlier permissions (new files are unmarked).

    Returns:
        The report; unreadable files are listed in ``failed`` rather than raised.

    Raises:
        ValueError: Invalid metadata names or values.
        StoreBusyError: Another run is indexing into ``store`` (one writer at a time).
    """
    user_metadata = validate_metadata(metadata or {})
    with store.exclusive_writer():
        return _index(
            store, paths, user_metadata, embeddings, progress, chunk_size, overlap, permissions
        )


def _index(
    store: IndexTarget,
    paths: Iterable[str | Path],
    user_metadata: dict[str, Any],
    embeddings: Embeddings | None,
    progress: ProgressCallback | None,
    chunk_size: int,
    overlap: int,
    permissions: Permissions | None,
) -> IndexReport:
    started = time.perf_counter()
    report = IndexReport()
    candidates, roots = _collect(paths, report)
    settings = {
        "metadata": user_metadata,
        "chunk_size": chunk_size,
        "overlap": overlap,
        "vectors": embeddings is not None,
    }
    writes = BatchWriter(store, report)
    indexer = _FileIndexer(
        store, user_metadata, embeddings, settings, chunk_size, overlap, permissions, writes
    )
    seen: set[str] = set()
    total = len(candidates)
    for done, candidate in enumerate(candidates, start=1):
        key = str(candidate.path)
        seen.add(key)
        status = indexer.index(candidate, report)
        if progress is not None:
            progress(IndexProgress(done, total, key, status))
    writes.flush()
    _remove_missing(store, roots, seen, report)
    report.total_chunks = store.count_chunks()
    report.elapsed_seconds = time.perf_counter() - started
    logger.info("indexed %s: %s", store.label, report.summary())
    return report


def slugify(relative_path: str) -> str:
    """``docs/HR/Leave Policy.md`` -> ``docs-hr-leave-policy-md``."""
    return _SLUG_JUNK.sub("-", relative_path.lower()).strip("-") or "file"


def validate_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Check ingest metadata names and values; return them as plain JSON values.

    Raises:
        ValueError: A name that is not an OData identifier or is reserved, or a value JSON
            cannot hold.
    """
    for name in metadata:
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise ValueError(f"metadata field {name!r} is not a valid OData field name")
        if name in RESERVED_METADATA:
            raise ValueError(f"metadata field {name!r} is reserved for the store")
    try:
        plain: dict[str, Any] = json.loads(
            json.dumps(dict(metadata), default=json_default, sort_keys=True)
        )
    except TypeError as exc:
        raise ValueError(str(exc)) from exc
    return plain


def read_sidecar(path: Path, *, follow_links: bool = True) -> Permissions | None:
    """The permissions in ``path``'s sidecar (``NAME.permissions.json``), if it has one.

    The sidecar is read like an indexed file (:func:`read_regular_file`): a FIFO, socket or
    device in its place, or (``follow_links=False``, a file found by walking a folder) a link,
    is an error rather than "no sidecar", because its file would otherwise be indexed with
    the run's permissions (perhaps public) when its owner meant to restrict it.

    Raises:
        ValueError: The sidecar is not a regular file, or not ``{"userIds": [...],
            "groupIds": [...]}``.
        OSError: It exists but cannot be read.
    """
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    try:
        mode = sidecar.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode) and not follow_links:
        raise ValueError(
            f"{sidecar.name}: a link (a sidecar found in a folder must be a regular file); "
            f"{path.name} is not indexed"
        )
    try:
        raw, _ = read_regular_file(sidecar, follow_links=follow_links)
    except FileNotFoundError:  # a link to nothing
        raise ValueError(f"{sidecar.name}: a link to a missing file") from None
    except LoaderError as exc:
        raise ValueError(f"{sidecar.name}: {exc}; {path.name} is not indexed") from exc
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except ValueError as exc:
        raise ValueError(f"{sidecar.name}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or not data or set(data) - _SIDECAR_KEYS:
        raise ValueError(
            f'{sidecar.name}: expected {{"userIds": [...], "groupIds": [...]}}, got {data!r:.80}'
        )
    try:
        return Permissions.from_lists(data.get("userIds"), data.get("groupIds"))
    except ValueError as exc:
        raise ValueError(f"{sidecar.name}: {exc}") from exc


def _collect(
    paths: Iterable[str | Path], report: IndexReport
) -> tuple[list[_Candidate], list[Path]]:
    candidates: dict[Path, _Candidate] = {}
    roots: list[Path] = []
    for raw in paths:
        # a path named on the command line is the user's choice: a link there is followed
        path = Path(raw).expanduser().resolve()
        if not path.exists():
            # a deleted folder: whatever was indexed under it goes (a deleted file is
            # handled as a candidate below)
            roots.append(path)
        if path.is_dir():
            roots.append(path)
            for file in _walk(path, report):
                if file.name.lower().endswith(SIDECAR_SUFFIX):
                    continue  # a sidecar: read with the file it describes
                if file.suffix.lower() not in SUPPORTED_EXTENSIONS:
                    report.ignored.append(str(file))
                    continue
                relative = Path(path.name) / file.relative_to(path)
                candidates.setdefault(file, _Candidate(file, slugify(relative.as_posix()), False))
        elif path.name.lower().endswith(SIDECAR_SUFFIX):
            report.ignored.append(str(path))  # never index who may see a file as content
        else:
            # A missing explicit file is handled per file (deleted if it was indexed).
            candidates.setdefault(path, _Candidate(path, slugify(path.name), True))
    return list(candidates.values()), roots


def _walk(root: Path, report: IndexReport) -> list[Path]:
    """The regular files under ``root``; everything else is reported as skipped.

    Links are not followed: a link to a file inside ``root`` counts as that file (found
    under its own name as well), a link leading out of ``root`` or to a folder is skipped,
    so a folder cannot smuggle ``/etc/passwd`` into an index. FIFOs, sockets and devices
    are skipped (reading a FIFO would wait forever for a writer).
    """
    files: list[Path] = []

    def unlisted(error: OSError) -> None:
        reason = f"cannot list this folder: {error.strerror or error}"
        report.skipped.append(FileFailure(str(error.filename), reason))

    for directory, subdirs, names in os.walk(root, onerror=unlisted):
        for name in [d for d in subdirs if not d.startswith(".")]:
            if os.path.islink(os.path.join(directory, name)):
                link = os.path.join(directory, name)
                report.skipped.append(FileFailure(link, "a link to a folder is not followed"))
        subdirs[:] = sorted(
            d
            for d in subdirs
            if not d.startswith(".") and not os.path.islink(os.path.join(directory, d))
        )
        for name in sorted(n for n in names if not n.startswith(".")):
            file = _regular_file(Path(directory) / name, root, report)
            if file is not None:
                files.append(file)
    return files


def _regular_file(path: Path, root: Path, report: IndexReport) -> Path | None:
    """``path`` (or, for a link staying inside ``root``, its target) if it is a regular file."""
    try:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            target = path.resolve()
            if not target.is_relative_to(root):
                report.skipped.append(FileFailure(str(path), f"a link leading out of {root}"))
                return None
            path, mode = target, target.stat().st_mode
    except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop
        reason = f"cannot read: {getattr(exc, 'strerror', None) or 'a loop of links'}"
        report.skipped.append(FileFailure(str(path), reason))
        return None
    if not stat.S_ISREG(mode):
        report.skipped.append(FileFailure(str(path), f"not a regular file ({_kind(mode)})"))
        return None
    return path


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISDIR: "a folder",
    }
    return next((name for test, name in kinds.items() if test(mode)), "a special file")


def read_regular_file(path: Path, *, follow_links: bool = True) -> tuple[bytes, os.stat_result]:
    """Read a regular file's bytes and status, never blocking on a FIFO or a device.

    The file is opened without waiting (``O_NONBLOCK``) and checked with ``fstat`` on the
    open descriptor, so a path swapped for a FIFO after it was listed cannot hang the run.

    Raises:
        OSError: The file cannot be opened or read, or (``follow_links=False``) is a link.
        LoaderError: It is not a regular file, or is larger than ``MAX_FILE_BYTES``.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(path, flags)
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise LoaderError(f"not a regular file ({_kind(status.st_mode)})")
        if status.st_size > MAX_FILE_BYTES:
            raise LoaderError(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        return file.read(MAX_FILE_BYTES + 1), status


def _remove_missing(
    store: IndexTarget, roots: list[Path], seen: set[str], report: IndexReport
) -> None:
    prefixes = [str(root) + os.sep for root in roots]
    with store.transaction():  # one commit for all of them
        for indexed in store.indexed_paths():
            if indexed in seen or not any(indexed.startswith(p) for p in prefixes):
                continue
            report.chunks_deleted += store.delete_file(indexed)
            report.deleted.append(indexed)


WRITE_BATCH_FILES = 1024
"""Files (or records) whose writes are committed together in one transaction."""
WRITE_BATCH_BYTES = 16 * 1024 * 1024
"""... or fewer, once what they hold in memory (text and vectors) reaches this size."""


class BatchWriter:
    """Commits the writes of several files in one transaction (issue 19, "write less").

    In WAL mode every commit appends each page it touched (FTS5 segments, b-tree pages) to
    the log, and a commit per file rewrote the same pages over and over: writing files in
    batches cut the bytes written per run from 13x to 2.6x the database's size at 122k
    chunks (``benchmarks/bench_store_writes.py``). Each file's write is still all-or-nothing (a
    savepoint inside the batch): a file that fails is reported alone, and a process killed
    mid-batch leaves every file either entirely old or entirely new.

    Args:
        store: The destination.
        report: Where a write that fails is reported (``failed``).
    """

    def __init__(self, store: IndexTarget, report: IndexReport) -> None:
        self.store = store
        self.report = report
        self._pending: list[tuple[str, Callable[[], None]]] = []
        self._bytes = 0

    def add(self, key: str, write: Callable[[], None], size: int = 0) -> None:
        """Queue ``write`` (for the file or record ``key``); commit when the batch is full.

        Args:
            key: What is written (reported when the write fails).
            write: Does the writes (a store method each, so each is all-or-nothing).
            size: Bytes ``write`` keeps in memory until it runs (see :func:`pending_size`).
        """
        self._pending.append((key, write))
        self._bytes += size
        if len(self._pending) >= WRITE_BATCH_FILES or self._bytes >= WRITE_BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Commit what is queued."""
        pending, self._pending, self._bytes = self._pending, [], 0
        if not pending:
            return
        with self.store.transaction():
            for key, write in pending:
                try:
                    write()
                except StoreError as exc:
                    logger.warning("skipping %s: %s", key, exc)
                    self.report.failed.append(FileFailure(key, str(exc)))


def pending_size(chunks: Sequence[ChunkRecord], vectors: Sequence[Sequence[float]] | None) -> int:
    """About how many bytes of memory ``chunks`` and their ``vectors`` hold until written."""
    text = sum(len(chunk.content) + len(chunk.title) for chunk in chunks)
    # a Python float in a list: an 8-byte pointer and a 24-byte object
    return text + 32 * sum(len(vector) for vector in vectors or ())


class _FileIndexer:
    """Indexes one candidate file at a time into the store."""

    def __init__(
        self,
        store: IndexTarget,
        metadata: dict[str, Any],
        embeddings: Embeddings | None,
        settings: dict[str, Any],
        chunk_size: int,
        overlap: int,
        permissions: Permissions | None,
        writes: BatchWriter,
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.embeddings = embeddings
        self.settings_json = json.dumps(settings, sort_keys=True)
        self.chunk_size = chunk_size
        self.overlap = overlap
        self.permissions = permissions
        self.writes = writes
        self.slugs: dict[str, str] = {}
        """Slugs given to files in this run (slug -> path)."""

    def index(self, candidate: _Candidate, report: IndexReport) -> FileStatus:
        key = str(candidate.path)
        previous = self.store.file_state(key)
        if candidate.explicit and not candidate.path.exists():
            if previous is not None:
                self.writes.add(key, lambda: self._delete(key, report))
                return "deleted"
            return self._fail(report, key, "file not found")
        if candidate.explicit and candidate.path.suffix.lower() not in SUPPORTED_EXTENSIONS:
            return self._fail(report, key, f"unsupported file type {candidate.path.suffix!r}")
        try:
            data, stat_result = read_regular_file(candidate.path, follow_links=candidate.explicit)
            sidecar = read_sidecar(candidate.path, follow_links=candidate.explicit)
            permissions = sidecar or self.permissions
        except OSError as exc:
            return self._fail(report, key, f"cannot read: {exc.strerror or exc}")
        except LoaderError as exc:
            return self._fail(report, key, str(exc))
        except ValueError as exc:  # a malformed sidecar: never index with a guess
            return self._fail(report, key, str(exc))
        if len(data) > MAX_FILE_BYTES:  # it grew while being read
            return self._fail(report, key, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        content_hash = hashlib.sha256(data).hexdigest()
        fingerprint = hashlib.sha256(f"{content_hash}\n{self.settings_json}".encode()).hexdigest()
        if previous is not None and previous.fingerprint == fingerprint:
            if permissions is not None and self.store.permissions_of(key) == permissions:
                permissions = None  # nothing to change
            if previous.mtime != stat_result.st_mtime or permissions is not None:
                mtime = stat_result.st_mtime
                self.writes.add(key, lambda: self._refresh(key, mtime, permissions, report))
            else:
                report.unchanged.append(key)
            return "unchanged" if permissions is None else "indexed"
        try:
            document = load_file(candidate.path, data)
            slug = previous.slug if previous else self._free_slug(candidate)
            chunks = self._chunks(candidate.path, slug, document)
            if not chunks:
                return self._fail(report, key, "no extractable text")
            vectors = self._embed(chunks)
        except (LoaderError, StoreError) as exc:
            return self._fail(report, key, str(exc))
        state = FileState(
            key,
            slug,
            content_hash,
            fingerprint,
            stat_result.st_mtime,
            stat_result.st_size,
            len(chunks),
        )
        shared = self._shared_fields(candidate.path, document)

        def write() -> None:
            self.store.replace_file(
                state, self.metadata, chunks, vectors, permissions, fields=shared
            )
            report.indexed.append(key)
            report.chunks_written += len(chunks)

        self.writes.add(key, write, pending_size(chunks, vectors))
        return "indexed"

    def _delete(self, key: str, report: IndexReport) -> None:
        report.chunks_deleted += self.store.delete_file(key)
        report.deleted.append(key)

    def _refresh(
        self, key: str, mtime: float, permissions: Permissions | None, report: IndexReport
    ) -> None:
        """An unchanged file: record its mtime, and its permissions (``None``: unchanged)."""
        self.store.touch_file(key, mtime)
        if permissions is not None and self.store.set_permissions(key, permissions):
            report.indexed.append(key)
        else:
            report.unchanged.append(key)

    def _fail(self, report: IndexReport, key: str, reason: str) -> FileStatus:
        logger.warning("skipping %s: %s", key, reason)
        report.failed.append(FileFailure(key, reason))
        return "failed"

    def _free_slug(self, candidate: _Candidate) -> str:
        path = str(candidate.path)
        # a file of this run may hold the slug without being written yet (see BatchWriter)
        owner = self.store.slug_owner(candidate.slug_hint) or self.slugs.get(candidate.slug_hint)
        if owner is None or owner == path:
            slug = candidate.slug_hint
        else:
            digest = hashlib.sha1(path.encode(), usedforsecurity=False).hexdigest()
            slug = f"{candidate.slug_hint}-{digest[:6]}"
        self.slugs[slug] = path
        return slug

    def _chunks(self, path: Path, slug: str, document: LoadedDocument) -> list[ChunkRecord]:
        records: list[ChunkRecord] = []
        for index, section in enumerate(document.sections):
            # the title line is the title's, not the body's (as a record's is)
            body = body_without_title(document.title, section.text) if index == 0 else section.text
            for text in chunk_text(body, self.chunk_size, self.overlap):
                ordinal = len(records)
                own: dict[str, Any] = {"chunk": ordinal}
                if section.page is not None:
                    own["page"] = section.page
                records.append(
                    ChunkRecord(
                        f"{slug}-{ordinal}", ordinal, document.title, text, section.page, own
                    )
                )
        return records

    def _shared_fields(self, path: Path, document: LoadedDocument) -> dict[str, Any]:
        """The fields every chunk of the file has (stored once, see ``replace_file``)."""
        return {
            **self.metadata,
            "source_path": str(path),
            "file_name": path.name,
            "title": document.title,
        }

    def _embed(self, chunks: list[ChunkRecord]) -> list[list[float]] | None:
        if self.embeddings is None:
            return None
        texts = [f"{c.title}\n{c.content}" if c.title else c.content for c in chunks]
        return self.embeddings.embed_documents(texts)
