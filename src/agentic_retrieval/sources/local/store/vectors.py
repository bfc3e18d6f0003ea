"""Dense vectors: checked on the way in, kept in memory, searched by cosine.

:class:`VectorIndex` holds every chunk vector in a :class:`~.ann.VectorRows` (exact search,
and a faiss HNSW graph once they are many: see :mod:`.ann`), shared by the store's threads and
kept current from the store's ``vector_log``: a trigger appends a chunk's rid there whenever a
chunk with a vector is written or deleted, so a reader applies only what changed since the
write generation it holds, whichever process wrote it. (Row ids are never reused, so new
chunks could be found by rid range, but deleted ones could not without reading every rid.)

Building a graph costs a few tenths of a millisecond of CPU per vector, so it never runs on
the query path: indexing builds it (:meth:`VectorIndex.refresh`, next to the ~40 ms per
chunk of embedding), and a reader that finds none (or one due for a rebuild: many deletes,
a long exact tail) builds a new one on a background thread from a copy of the rows, answering
exactly meanwhile. The graph is saved next to the store (``<store>-vectors``) with the log
position it covers and the store's ``store_id``; on open it is loaded and the rest of the log
applied. A missing, damaged or foreign file (another store's, or ahead of this one's log, as
after restoring an older copy of the store) is rebuilt from SQLite, the source of truth.
Saving trims the log up to what the file covers.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agentic_retrieval.errors import StoreError
from agentic_retrieval.sources.local.store import ann
from agentic_retrieval.sources.local.store.ann import VectorRows

logger = logging.getLogger(__name__)

VECTOR_FILE_SUFFIX = "-vectors"
"""The saved graph sits beside the store as ``<store file><suffix>``, like SQLite's ``-wal``."""
_READ_BATCH = 20_000
_FETCH_BATCH = 500


def vector_blobs(
    vectors: Sequence[Sequence[float]] | None, count: int, expected: int | None
) -> list[bytes | None]:
    """One float32 blob per chunk (``None`` each without vectors), checked against the index.

    Raises:
        StoreError: Not one vector per chunk, ragged vectors, or a dimension other than
            ``expected`` (the index's, once it has any).
    """
    if vectors is None:
        return [None] * count
    if len(vectors) != count:
        raise StoreError(f"{len(vectors)} vectors for {count} chunks")
    array = np.asarray(vectors, dtype=np.float32)
    if count and array.ndim != 2:
        raise StoreError("vectors must all have the same dimension")
    if count and expected is not None and array.shape[1] != expected:
        raise StoreError(
            f"embedding dimension {array.shape[1]} differs from the index's {expected}; "
            "re-create the index to change embedding models"
        )
    return [row.tobytes() for row in array]


MADE_WITH_KEY = "vectors_made_with"
"""The ``meta`` key listing how the index's vectors were made (a JSON list, sorted)."""


def record_made_with(conn: sqlite3.Connection, made_with: str) -> None:
    """Add ``made_with`` (``local@bf16``...) to what the index records (in a write txn).

    A list, not one value: vectors of one model made in bf16 and fp32 may share an index
    (measured equivalent), and the record says so rather than naming only the last.
    """
    known = read_made_with(conn)
    if made_with not in known:
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
            (MADE_WITH_KEY, json.dumps(sorted({*known, made_with}))),
        )


def read_made_with(conn: sqlite3.Connection) -> tuple[str, ...]:
    """How the index's vectors were made (empty when nothing was recorded)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (MADE_WITH_KEY,)).fetchone()
    if row is None:
        return ()
    try:
        value = json.loads(row[0])
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


class VectorIndex:
    """Every chunk vector of one store in memory, kept current from its ``vector_log``.

    Args:
        path: The store file; the graph is saved beside it (``None``: never saved).
    """

    def __init__(self, path: Path | None = None) -> None:
        self.database = path
        self.file = None if path is None else path.with_name(path.name + VECTOR_FILE_SUFFIX)
        self._rows: VectorRows | None = None
        self._generation = -1
        self._seq = 0
        """The last ``vector_log`` entry the rows include."""
        self._store_id: str | None = None
        self._unsaved = 0
        """Vectors changed since the file was written or read."""
        self._saved_builds = 0
        """The rows' ``builds`` when the file was written or read (another: a new graph)."""
        self._lock = threading.Lock()
        self._builder: threading.Thread | None = None
        self._cancel = threading.Event()
        self._built: tuple[VectorRows, int, str] | None = None
        """A graph built in the background, with the log position and store it covers."""

    def reset(self) -> None:
        """Forget the rows (a restored file may repeat an old generation)."""
        with self._lock:
            self._rows, self._generation = None, -1

    def search(
        self,
        conn: sqlite3.Connection,
        generation: int,
        query_vector: Sequence[float],
        depth: int,
        allowed: Sequence[int] | None,
    ) -> list[tuple[int, float]]:
        """The ``depth`` chunks most similar to the query, as (rid, cosine), best first.

        Args:
            conn: A connection in the read transaction of the search (the log and the
                vectors are read in the same view as the rest of the search).
            generation: The store's write generation the read sees.
            query_vector: The embedded query.
            depth: How many to return at most.
            allowed: The rids that may be returned (``None``: every chunk); applied before
                the top ``depth`` are taken, whichever way the search runs.

        Raises:
            StoreError: The query's dimension is not the index's.
        """
        with self._lock:
            rows = self._current(conn, generation)
            if rows is None or not rows.live:
                return []
            query = _query(query_vector, rows.dimension)
            wanted = None if allowed is None else np.asarray(allowed, dtype=np.int64)
            return rows.search(query, depth, wanted)

    def load(self, conn: sqlite3.Connection, generation: int) -> None:
        """Bring the rows into memory now (the saved graph, or every vector from SQLite).

        What the first search would otherwise do while its caller waits: at a million chunks
        that is reading ~1.8 GB of graph. A search meanwhile waits for it (one lock).
        """
        with self._lock:
            self._current(conn, generation)

    def similarities(
        self,
        conn: sqlite3.Connection,
        generation: int,
        query_vector: Sequence[float],
        ranked: Sequence[tuple[int, float]],
    ) -> dict[int, float]:
        """The cosine of each ranked chunk's vector and the query's, by rid.

        Hybrid hits found by BM25 alone get theirs too, so a reranker can weigh meaning for
        every candidate without embedding the passages again. Chunks without a vector are left
        out.
        """
        with self._lock:
            rows = self._current(conn, generation)
            if rows is None or not rows.live or not ranked:
                return {}
            query = _query(query_vector, rows.dimension)
            return rows.similarities(query, np.asarray([rid for rid, _ in ranked], np.int64))

    def refresh(self, conn: sqlite3.Connection, generation: int) -> None:
        """Bring the rows and their graph up to date here and now, and save the graph.

        Called after indexing (the indexing run pays for the graph, a few ms per vector next
        to the ~40 ms of embedding it): the next process to open the store loads the graph
        instead of building it.
        """
        self.wait()
        with self._lock:
            rows = self._current(conn, generation, maintain=False)
            if rows is None:
                return
            if rows.wants_graph and (rows.graph is None or rows.size > rows.live):
                rows.build()
            rows.merge()
            self._save()

    def close(self) -> None:
        """Stop a background build (it saves nothing) and drop the rows."""
        self._cancel.set()
        with self._lock:
            self._rows, self._built, self._generation = None, None, -1

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a graph being built in the background (benchmarks, tests, refresh)."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)

    @property
    def state(self) -> dict[str, int | bool]:
        """What is in memory (for benchmarks and diagnostics)."""
        rows = self._rows
        return {
            "live": rows.live if rows else 0,
            "rows": rows.size if rows else 0,
            "graph": bool(rows is not None and rows.graph is not None),
            "seq": self._seq,
        }

    # ------------------------------------------------------------------ keeping current

    def _current(
        self, conn: sqlite3.Connection, generation: int, *, maintain: bool = True
    ) -> VectorRows | None:
        if self._built is not None:  # a graph finished in the background: take it over
            built, seq, built_for = self._built
            self._built = None
            if built_for == self._store_id:
                self._rows, self._seq, self._generation = built, seq, -1
                self._unsaved, self._saved_builds = 0, built.builds
        if self._rows is not None and self._generation == generation:
            return self._rows
        store_id, top, low = _log_state(conn)
        dimension = _dimension(conn)
        if dimension is None:
            self._rows, self._seq, self._store_id = None, top, store_id
        elif (
            self._rows is not None
            and self._store_id == store_id
            and _continues(self._seq, top, low)
        ):
            self._apply(conn, top)
        elif not self._load(store_id, dimension, top, low) or not self._apply(conn, top):
            self._build(conn, dimension, store_id, top)
        self._generation = generation
        if maintain:
            self._maintain()
        return self._rows

    def _maintain(self) -> None:
        """Start building the graph in the background when it is due (one build at a time).

        Queries meanwhile run on the rows they have (exact search, or the old graph plus
        the exact tail); the new graph is taken over by the first query after it is done.
        """
        rows = self._rows
        if rows is None or not rows.wants_graph or self._builder is not None:
            return
        if self._cancel.is_set():
            return
        snapshot = rows.snapshot()  # under the lock: a copy the build may read freely
        builder = threading.Thread(
            target=self._build_in_background,
            args=(snapshot, self._seq, self._store_id or ""),
            name="vector-graph",
            daemon=True,
        )
        self._builder = builder
        builder.start()

    def _build_in_background(self, snapshot: VectorRows, seq: int, store_id: str) -> None:
        try:
            started = time.perf_counter()
            built = snapshot.build(self._cancel)
            if built is None:
                logger.info("vector graph build stopped: the store was closed")
                return
            logger.info(
                "built the vector graph of %d chunks in %.0f s",
                built.live,
                time.perf_counter() - started,
            )
            if self.file is not None and not self._cancel.is_set():
                try:
                    ann.save(built, self.file, {"store_id": store_id, "seq": seq})
                    _trim_log(self.database, seq)
                except OSError as exc:
                    logger.warning("could not save the vector graph %s: %s", self.file, exc)
            with self._lock:
                self._built = (built, seq, store_id)
        except Exception:  # the store keeps answering exactly; the next write retries
            logger.exception("building the vector graph failed")
        finally:
            self._builder = None

    def _apply(self, conn: sqlite3.Connection, top: int) -> bool:
        """Apply the log entries after the rows' position up to ``top``."""
        rows = self._rows
        if rows is None:
            return False
        if top > self._seq:
            changed = np.fromiter(
                (
                    r[0]
                    for r in conn.execute(
                        "SELECT DISTINCT rid FROM vector_log WHERE seq > ? AND seq <= ?",
                        (self._seq, top),
                    )
                ),
                dtype=np.int64,
            )
            rows.remove(changed)
            for start in range(0, len(changed), _FETCH_BATCH):
                part = [int(r) for r in changed[start : start + _FETCH_BATCH]]
                found = conn.execute(
                    f"SELECT rid, vector FROM chunks WHERE rid IN ({','.join('?' * len(part))}) "
                    "AND vector IS NOT NULL",
                    part,
                ).fetchall()
                if found:
                    rows.add([r for r, _ in found], _matrix([b for _, b in found], rows.dimension))
            self._unsaved += len(changed)
        self._seq = top
        return True

    def _build(self, conn: sqlite3.Connection, dimension: int, store_id: str, top: int) -> None:
        """Read every vector from SQLite (the read sees the log up to ``top``)."""
        rows = VectorRows(dimension)
        cursor = conn.execute("SELECT rid, vector FROM chunks WHERE vector IS NOT NULL")
        while batch := cursor.fetchmany(_READ_BATCH):
            rows.add([r for r, _ in batch], _matrix([b for _, b in batch], dimension))
        self._rows, self._seq, self._store_id = rows, top, store_id
        self._unsaved, self._saved_builds = 0, 0

    def _load(self, store_id: str, dimension: int, top: int, low: int | None) -> bool:
        """Take the saved graph when it is this store's and the log continues from it."""
        if self.file is None or not ann.faiss_available() or not self.file.exists():
            return False
        loaded = ann.load(self.file)
        if loaded is None:
            return False
        rows, header = loaded
        seq = header.get("seq")
        if not isinstance(seq, int):
            seq = top + 1  # unusable: fails the checks below
        fits = (
            header.get("store_id") == store_id
            and rows.dimension == dimension
            and seq <= top  # a file ahead of the log belongs to a newer copy of the store
            and _continues(seq, top, low)
        )
        if not fits:
            logger.info("the vector graph %s does not fit its store: rebuilding it", self.file)
            return False
        self._rows, self._seq, self._store_id = rows, seq, store_id
        self._unsaved, self._saved_builds = 0, rows.builds
        return True

    def _save(self) -> None:
        """Write the graph (merged, after indexing) unless the file has it already."""
        rows = self._rows
        if self.file is None or rows is None or rows.graph is None or rows.fresh:
            return
        if rows.builds == self._saved_builds and self._unsaved == 0:
            return
        try:
            ann.save(rows, self.file, {"store_id": self._store_id, "seq": self._seq})
        except OSError as exc:  # a cache: the store works without it, the next run rebuilds
            logger.warning("could not save the vector graph %s: %s", self.file, exc)
            return
        self._unsaved, self._saved_builds = 0, rows.builds
        _trim_log(self.database, self._seq)


def _log_state(conn: sqlite3.Connection) -> tuple[str, int, int | None]:
    """The store's id, the last ``vector_log`` entry ever written, and the oldest one kept."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    top = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'vector_log'").fetchone()
    (low,) = conn.execute("SELECT min(seq) FROM vector_log").fetchone()
    return (str(row[0]) if row else ""), (int(top[0]) if top else 0), low


def _continues(seq: int, top: int, low: int | None) -> bool:
    """Whether the log still holds every entry after ``seq`` up to ``top``."""
    if top <= seq:
        return True
    return low is not None and low <= seq + 1


def _trim_log(database: Path | None, seq: int) -> None:
    """Drop log entries the saved file covers, if no writer holds the store right now."""
    if database is None:
        return
    try:
        # its own connection: the caller's is inside the search's read transaction
        # mode=rw: a store deleted meanwhile is not re-created as an empty file
        with sqlite3.connect(
            f"{database.resolve().as_uri()}?mode=rw", uri=True, timeout=0
        ) as trimmer:
            trimmer.execute("DELETE FROM vector_log WHERE seq <= ?", (seq,))
        trimmer.close()
    except sqlite3.Error as exc:  # busy: the next save trims
        logger.debug("vector_log not trimmed: %s", exc)


def _dimension(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
    return int(row[0]) if row else None


def _matrix(blobs: Sequence[bytes], dimension: int) -> np.ndarray:
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dimension)


def _query(query_vector: Sequence[float], dimension: int) -> np.ndarray:
    query = np.asarray(query_vector, dtype=np.float32)
    if query.shape != (dimension,):
        raise StoreError(
            f"query vector has dimension {query.shape} but the index has {dimension}: use the "
            "embedding model the index was built with"
        )
    norm = float(np.linalg.norm(query))
    return query / norm if norm else query
